"""The hot eager paths and a light import.

A reduction over one name and a named dot find their kernel in their call site's own index (one dictionary
read under a key of names, flags and the axis environment); those entries are bounded by the kernel table and
leave with their kernels. ``import namedarray`` imports what most programs never touch only when it is first
asked for, and makes the mirror's functions on first use, without changing what ``nx`` lists or returns.
"""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import namedarray as nx
from namedarray.core import kernels
from namedarray.ops import contract


def site_entries() -> int:
    return sum(len(index) for index in kernels._table.sites)


def test_a_second_call_builds_nothing_and_counts_one_dispatch(counts):
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["site_a", "site_b"])
    w = nx.wrap(jnp.ones((3, 4)), ["site_b", "site_c"])
    x.sum("site_b"), nx.dot(x, w, axis="site_b")  # first calls: built and filed
    counts.reset()
    s, d = x.sum("site_b"), nx.dot(x, w, axis="site_b")
    assert counts.kernels_built == 0 and counts.eager_calls == 2 and counts.compiles == 0
    np.testing.assert_array_equal(s.unwrap(["site_a"]), [3.0, 12.0])
    np.testing.assert_array_equal(d.unwrap(["site_a", "site_c"]), np.full((2, 4), [[3.0], [12.0]]))


def test_an_operator_on_two_named_values_finds_its_kernel_by_their_names(counts):
    x = nx.wrap(jnp.arange(6).reshape(2, 3), ["op_a", "op_b"])
    v = nx.wrap(jnp.arange(3), ["op_b"])
    x + v, x & v  # first calls: built and filed
    counts.reset()
    s, m = x + v, x & v
    assert counts.kernels_built == 0 and counts.eager_calls == 2 and counts.compiles == 0
    np.testing.assert_array_equal(s.unwrap(["op_a", "op_b"]), np.arange(6).reshape(2, 3) + np.arange(3))
    np.testing.assert_array_equal(m.unwrap(["op_a", "op_b"]), np.arange(6).reshape(2, 3) & np.arange(3))
    # the same names with operands the operation refuses: the error the general path gives, in nx's terms
    with pytest.raises(TypeError, match="^nx.bitwise_and: "):
        nx.wrap(jnp.ones((2, 3)), ["op_a", "op_b"]) & nx.wrap(jnp.ones(3), ["op_b"])


def test_entries_leave_with_their_kernels():
    old = kernels.resize(3)
    try:
        x = nx.wrap(jnp.ones((2, 3)), ["ev_a", "ev_b"])
        for _ in range(3):
            for f in (nx.sum, nx.max, nx.mean, nx.min):
                assert f(x, "ev_b").named_shape == {"ev_a": 2}
        held = sum(len(k.aliases) for k in kernels._table.kernels.values())
        assert kernels.size() <= 3 and site_entries() == held <= 3 * kernels.MAX_ALIASES
    finally:
        kernels.resize(old)
    nx.clear_caches()
    assert site_entries() == 0 and not contract._DOT_SITE


def test_the_environment_and_the_flags_are_part_of_the_key():
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["env_a", "env_b"])
    plain = x.sum("env_b")
    with nx.axis_rules({"env_a": None}):
        ruled = x.sum("env_b")
    assert plain.named_shape == ruled.named_shape == {"env_a": 2}
    envs = {k[-1] is None for index in kernels._table.sites for k in index if k[2] == ("env_a", "env_b")}
    assert envs == {True, False}
    for keepdims in (True, False, 1, 0, True):  # 1 and 0 take the general path, and agree
        assert x.sum("env_b", keepdims=keepdims).named_shape == {"env_a": 2}


def test_a_kernel_filed_for_one_rank_serves_another():
    w = nx.wrap(jnp.arange(12.0).reshape(3, 4), ["rk_k", "rk_o"])
    for shape in ((2, 3), (5, 2, 3), (2, 3)):
        raw = jnp.arange(float(np.prod(shape))).reshape(shape)
        x = nx.wrap(raw, [*([None] * (len(shape) - 2)), "rk_b", "rk_k"])
        got = nx.dot(x, w, axis="rk_k")
        want = raw @ jnp.arange(12.0).reshape(3, 4)
        np.testing.assert_allclose(got.unwrap([*([None] * (len(shape) - 2)), "rk_b", "rk_o"]), want)
        np.testing.assert_allclose(nx.sum(x, "rk_k").unwrap([*([None] * (len(shape) - 2)), "rk_b"]),
                                   raw.sum(-1))


def test_traced_calls_run_inline():
    x = nx.wrap(jnp.ones((2, 3)), ["tr_a", "tr_b"])
    w = nx.wrap(jnp.ones((3, 4)), ["tr_b", "tr_c"])
    x.sum("tr_b"), nx.dot(x, w, axis="tr_b")
    jaxpr = str(jax.make_jaxpr(lambda x, w: (x.sum("tr_b"), nx.dot(x, w, axis="tr_b")))(x, w))
    assert "pjit" not in jaxpr and "dot_general" in jaxpr and "reduce_sum" in jaxpr


def test_a_failing_call_files_nothing():
    x = nx.wrap(jnp.ones((2, 3)), ["fl_a", "fl_b"])
    before = site_entries()
    for _ in range(2):
        with pytest.raises(nx.errors.NamedAxisError):
            nx.dot(x, nx.wrap(jnp.ones((4, 5)), ["fl_b", "fl_c"]), axis="fl_b")  # fl_b: 3 and 4
    assert site_entries() == before


MODULES_ON_FIRST_USE = ["namedarray.parallel.plan", "namedarray.parallel.pipeline",
                        "namedarray.parallel.visualize", "namedarray.interop.formats",
                        "namedarray.adapter.xmap", "namedarray.maps", "namedarray.typing",
                        "namedarray.parallel.shard_map",
                        "namedarray.transforms.scan", "namedarray.transforms.along",
                        "namedarray.transforms.autodiff"]


def test_import_leaves_rarely_used_modules_for_later():
    code = ("import sys, namedarray as nx; from namedarray.ops import mirror\n"
            f"print([m for m in {MODULES_ON_FIRST_USE!r} if m in sys.modules])\n"
            "print(len(mirror.FUNCTIONS._made) < len(mirror.FUNCTIONS) // 4)\n"
            "nx.plan_sharding, nx.pipeline, nx.visualize_sharding, nx.to_xarray, nx.xmap, nx.maps\n"
            "nx.typing, nx.shard_map, nx.along, nx.grad\n"
            f"print([m for m in {MODULES_ON_FIRST_USE!r} if m not in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:3] == ["[]", "True", "[]"], out


def test_names_read_on_first_use_are_the_modules_own():
    from namedarray.engine import registry
    from namedarray.ops import mirror
    from namedarray.parallel import plan

    assert nx.plan_sharding is plan.plan_sharding and nx.maps is sys.modules["namedarray.maps"]
    assert nx.cumprod is mirror.FUNCTIONS["cumprod"] is registry.named(jnp.cumprod) is mirror.cumprod
    assert nx.trapezoid.__doc__.startswith("``nx.trapezoid`` acts along the axis")
    with pytest.raises(AttributeError, match="no attribute 'not_a_function'"):
        nx.not_a_function  # noqa: B018
