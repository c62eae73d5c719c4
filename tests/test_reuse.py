"""Correctness under reuse: jax's trace caches, nx's eager kernels and nx.xmap's compile caches.

Every test calls the same function (or the same kind of operation) twice or more under circumstances that
differ in something a cache could miss (an axis size bound by nx.xmap, the rules in context, the type or
sign of a static argument, operand sizes), and compares each result with NumPy / jax.numpy.
"""

import asyncio
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import namedarray as nx
from namedarray import errors
from namedarray.core import caches, kernels

SHARED = "nx.xmap compilations"
OWN = "nx.xmap compilations of configurations that are not keys"


def assert_same(actual, expected):
    """Equal values and dtype (a jax or NumPy array, or a NamedArray unwrapped first)."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected)


# ------------------------------------------------------------------------------------------------------
# 1. A function jax traced under one axis environment is not reused under another


@jax.jit
def total(w):
    return nx.psum(w, "i")


def _scan_body(carry, w):
    return carry + nx.psum(w, "i"), None


def scan_total(ws):
    return lax.scan(_scan_body, nx.wrap(jnp.zeros(ws.shape[1:])), ws)[0]


def _plus(w):
    return nx.psum(w, "i")


def _minus(w):
    return -nx.psum(w, "i")


def cond_total(pred, w):
    return lax.cond(pred, _plus, _minus, w)


@jax.checkpoint
def checkpointed(w):
    return nx.psum(w * w, "i")


@jax.jit
def plus_index(w):
    return w + nx.axis_index("i")


@jax.jit
def times_size(w):
    return w * nx.axis_size("i")


def over_i(body, out_axes=(...,)):
    """``body(w)`` inside an nx.xmap that binds ``i`` to the leading size of its first argument."""
    return nx.xmap(lambda x, w: body(w), in_axes=(["i", ...], [...]), out_axes=list(out_axes))


W = np.array([1.0, 2.0, -3.0], np.float32)


STALE_CASES = {
    # name: (body inside the xmap, out_axes, expected result for size n, the call outside any xmap)
    "jit": (total, (...,), lambda n: n * W, lambda: total(nx.wrap(jnp.asarray(W)))),
    "jit on a plain array": (total, (...,), lambda n: n * W, lambda: total(jnp.asarray(W))),
    "scan body": (lambda w: scan_total(nx.stack([w, 2 * w])), (...,), lambda n: 3 * n * W,
                  lambda: scan_total(jnp.stack([jnp.asarray(W)] * 2))),
    "cond branches": (lambda w: cond_total(True, w), (...,), lambda n: n * W,
                      lambda: cond_total(True, jnp.asarray(W))),
    "cond other branch": (lambda w: cond_total(False, w), (...,), lambda n: -n * W,
                          lambda: cond_total(False, jnp.asarray(W))),
    "checkpoint": (checkpointed, (...,), lambda n: n * W * W, lambda: checkpointed(jnp.asarray(W))),
    "grad of checkpoint": (jax.grad(lambda w: checkpointed(w).sum().unwrap()), (...,), lambda n: 2 * n * W,
                           lambda: jax.grad(lambda w: checkpointed(w).sum().unwrap())(jnp.asarray(W))),
    "axis_index": (plus_index, ("i", ...), lambda n: np.arange(n, dtype=np.float32)[:, None] + W,
                   lambda: plus_index(jnp.asarray(W))),
    "axis_size": (times_size, (...,), lambda n: n * W, lambda: times_size(jnp.asarray(W))),
}


@pytest.mark.parametrize("case", list(STALE_CASES))
def test_trace_is_not_reused_under_another_axis_size(case):
    body, out_axes, expected, outside = STALE_CASES[case]
    f = over_i(body, out_axes)
    for n in (2, 5, 2):  # a new size, then the first again: each gives its own result
        np.testing.assert_allclose(np.asarray(f(jnp.ones((n, 3)), W)), expected(n), rtol=1e-6)
    # outside any nx.xmap the name is unbound again: the traces made inside must not answer
    with pytest.raises(errors.UnboundAxisError):
        outside()
    # and inside again, after the failure outside
    np.testing.assert_allclose(np.asarray(f(jnp.ones((3, 3)), W)), expected(3), rtol=1e-6)


def test_trace_outside_first_then_inside():
    # the failing trace comes first; the xmap calls after it must still trace
    @jax.jit
    def local_total(w):
        return nx.psum(w, "i")

    with pytest.raises(errors.UnboundAxisError):
        local_total(jnp.asarray(W))
    f = over_i(local_total)
    np.testing.assert_allclose(np.asarray(f(jnp.ones((4, 3)), W)), 4 * W)
    with pytest.raises(errors.UnboundAxisError):
        local_total(jnp.asarray(W))


def test_same_size_other_name_is_not_reused():
    # the same size bound to another name: psum over "i" is unbound in an xmap that only binds "j"
    f_i = over_i(total)
    f_j = nx.xmap(lambda x, w: total(w), in_axes=(["j", ...], [...]), out_axes=[...])
    np.testing.assert_allclose(np.asarray(f_i(jnp.ones((2, 3)), W)), 2 * W)
    with pytest.raises(errors.UnboundAxisError):
        f_j(jnp.ones((2, 3)), W)


def test_eager_kernel_is_not_reused_under_another_axis_size():
    # eager named ops inside nx.xmap run traced; outside, the eager kernel of a name bound before is gone
    x = nx.wrap(jnp.asarray(W))
    for n in (2, 5):
        f = nx.xmap(lambda a, w: nx.psum(w, "i") + nx.axis_size("i"), in_axes=(["i", ...], [...]),
                    out_axes=[...])
        np.testing.assert_allclose(np.asarray(f(jnp.ones((n, 3)), W)), n * W + n)
    with pytest.raises(errors.UnboundAxisError):
        nx.psum(x, "i")


def _rule_factor():
    rules = nx.env.current().rules
    if rules is None:
        return 1.0
    return {"data": 2.0, "model": 3.0, ("data", "model"): 5.0}.get(rules.get("batch"), 7.0)


@jax.jit
def scaled_by_rules(w):
    return w * _rule_factor()


def test_axis_rules_change_between_calls_of_one_jitted_function():
    w = jnp.asarray(W)
    sequence = [(None, 1.0), ({"batch": "data"}, 2.0), ({"batch": "model"}, 3.0), (None, 1.0),
                ({"batch": ["data", "model"]}, 5.0), ({"batch": "data"}, 2.0), ({"embed": "data"}, 7.0),
                (None, 1.0)]
    for rules, factor in sequence:
        if rules is None:
            got = scaled_by_rules(w)
        else:
            with nx.env.axis_rules(rules):
                got = scaled_by_rules(w)
        np.testing.assert_allclose(np.asarray(got), W * factor)


def test_interleaved_asyncio_tasks_leave_no_environment_behind_for_jitted_calls():
    # Two tasks of one thread enter and leave their rules interleaved: each block's exit must leave JAX's
    # (per-thread) copy of the environment as the one in force, not the one it saw on entry (the other
    # task's), or a plain jax.jit call after both would trace without rules under the rules' cache key.
    async def task(rules, first):
        if not first:
            await asyncio.sleep(0)
        with nx.env.axis_rules(rules):
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    async def main():
        await asyncio.gather(task({"batch": "data"}, True), task({"batch": "model"}, False))

    asyncio.run(main())
    f = jax.jit(lambda w: w * _rule_factor())
    w = jnp.asarray(W)
    np.testing.assert_allclose(np.asarray(f(w)), W)  # traced outside every block: no rules
    for rules, factor in [({"batch": "data"}, 2.0), ({"batch": "model"}, 3.0)]:
        with nx.env.axis_rules(rules):
            np.testing.assert_allclose(np.asarray(f(w)), W * factor)
    np.testing.assert_allclose(np.asarray(f(w)), W)


def test_nested_axis_rules_and_xmap():
    f = nx.xmap(lambda x: x * _rule_factor(), in_axes=["i", ...], out_axes=["i", ...])
    x = jnp.ones((2, 3))
    with nx.env.axis_rules({"batch": "data"}):
        np.testing.assert_allclose(np.asarray(f(x)), 2.0)
        with nx.env.axis_rules({"batch": "model"}):
            np.testing.assert_allclose(np.asarray(f(x)), 3.0)
        np.testing.assert_allclose(np.asarray(f(x)), 2.0)
    np.testing.assert_allclose(np.asarray(f(x)), 1.0)


# ------------------------------------------------------------------------------------------------------
# 2. Strict kernel keys: statics equal in Python but different in meaning


def add(a, b):
    return a + b


@pytest.mark.parametrize("order", [(1.0, 1), (1, 1.0)])
def test_int_and_float_statics(order):
    raw = jnp.array([1, 2, 3], jnp.int32)
    x = nx.wrap(raw, ["k"])
    for s in order + order:
        got = nx.nmap(add)(x, s)
        assert_same(got.unwrap(["k"]), raw + s)
    assert nx.nmap(add)(x, 1.0).dtype == jnp.float32
    assert nx.nmap(add)(x, 1).dtype == jnp.int32


@pytest.mark.parametrize("order", [(True, 1), (1, True)])
def test_bool_and_int_statics(order):
    raw = jnp.array([True, False])
    x = nx.wrap(raw, ["k"])
    for s in order + order:
        assert_same(nx.nmap(add)(x, s).unwrap(["k"]), raw + s)
    assert_same(nx.nmap(add)(x, True).unwrap(["k"]), np.array([True, True]))
    assert_same(nx.nmap(add)(x, 1).unwrap(["k"]), np.array([2, 1], np.int32))


@pytest.mark.parametrize("order", [(1.0, 1, True), (True, 1, 1.0), (1, 1.0, True)])
def test_number_statics_of_jax_functions(order):
    # jax's own functions take the raw-key path (no user function held weakly): equally strict
    raw = jnp.array([0, 2], jnp.int32)
    x = nx.wrap(raw, ["k"])
    for hi in order + order:
        got = nx.nmap(jnp.clip)(x, 0, hi).unwrap(["k"])
        assert_same(got, jnp.clip(raw, 0, hi))
        assert got.dtype == jnp.clip(raw, 0, hi).dtype


def test_dtype_and_string_statics_of_user_functions():
    x = nx.wrap(jnp.ones(2), ["k"])

    def kind(v, d):
        return v * (2.0 if isinstance(d, str) else 3.0)

    for d in ("float32", np.dtype("float32"), "float32"):
        got = nx.nmap(kind)(x, d).unwrap(["k"])
        assert_same(got, jnp.full(2, 2.0 if isinstance(d, str) else 3.0))


@pytest.mark.parametrize("order", [(0.0, -0.0), (-0.0, 0.0)])
def test_signed_zero_statics(order):
    y = nx.wrap(jnp.ones(3), ["k"])
    for z in order + order:
        got = (1 / nx.full_like(y, z)).unwrap(["k"])
        assert_same(got, 1 / jnp.full((3,), z, jnp.float32))
        assert np.all(np.isinf(got)) and np.all(np.signbit(got) == (math.copysign(1, z) < 0))


@pytest.mark.parametrize("order", [(1, -1), (-1, 1)])
def test_signed_nan_statics(order):
    nan = float("nan")
    y = nx.wrap(jnp.ones(3), ["k"])
    for sign in order + order:
        v = math.copysign(nan, sign)
        got = nx.signbit(nx.full_like(y, v)).unwrap(["k"])
        assert_same(got, jnp.signbit(jnp.full((3,), v, jnp.float32)))
        assert bool(got[0]) == (sign < 0)


def test_nan_static_builds_one_kernel():
    nx.clear_caches()
    y = nx.wrap(jnp.ones(3), ["nan_static"])
    nx.full_like(y, 1.5)  # the kernels any full_like needs besides its own
    before = kernels.stats.kernels_built
    size = kernels.size()
    for _ in range(6):
        got = nx.full_like(y, float("nan"))  # a new NaN object each time, unequal to the one before
        assert np.all(np.isnan(np.asarray(got.unwrap(["nan_static"]))))
    assert kernels.stats.kernels_built - before == 1
    assert kernels.size() == size + 1
    nx.full_like(y, np.float32("nan"))
    nx.full_like(y, np.float32("nan"))
    assert kernels.stats.kernels_built - before == 2


def test_complex_statics():
    y = nx.wrap(jnp.ones(2, jnp.complex64), ["k"])
    for c in (1 + 0j, 1 - 0j, complex(1, -0.0), 1 + 0j):
        got = nx.full_like(y, c).unwrap(["k"])
        assert_same(np.signbit(np.imag(got)), np.signbit(np.imag(np.full(2, c, np.complex64))))


# ------------------------------------------------------------------------------------------------------
# 3. A rejected call leaves nothing behind


def test_rejected_axis_does_not_poison_the_valid_one():
    raw = jnp.arange(24.0).reshape(2, 3, 4)
    x = nx.wrap(raw, {2: "k"})
    with pytest.raises(errors.AxisSpecError):
        nx.sum(x, axis=0.0)
    assert_same(nx.sum(x, axis=0).unwrap({1: "k"}), jnp.sum(raw, axis=0))
    for bad in (0.0, False, True, 1.0):
        with pytest.raises(errors.AxisSpecError):
            nx.sum(x, axis=bad)
    assert_same(nx.sum(x, axis=0).unwrap({1: "k"}), jnp.sum(raw, axis=0))
    assert_same(nx.sum(x, axis=1).unwrap({1: "k"}), jnp.sum(raw, axis=1))


def picky(v):
    if v.shape[0] == 3:
        raise ValueError("three is rejected")
    return v * 2


def test_failed_first_trace_leaves_no_kernel():
    good = nx.wrap(jnp.arange(8.0).reshape(2, 4), {1: "k"})
    bad = nx.wrap(jnp.arange(12.0).reshape(3, 4), {1: "k"})
    f = nx.nmap(picky)
    size = kernels.size()
    with pytest.raises(ValueError, match="three"):
        f(bad)
    assert kernels.size() == size  # the kernel whose first trace failed is gone
    assert_same(f(good).unwrap({1: "k"}), 2 * jnp.arange(8.0).reshape(2, 4))
    with pytest.raises(ValueError, match="three"):
        f(bad)
    assert_same(f(good).unwrap({1: "k"}), 2 * jnp.arange(8.0).reshape(2, 4))


def shape_dependent(v):
    # a tuple at one size, a single array at another, an error at a third
    if v.shape[0] == 1:
        raise ValueError("size one is rejected")
    if v.shape[0] == 2:
        return v[0], v[1]
    return v.sum(0)


def test_failed_trace_after_success_keeps_structures():
    def arr(n):
        return nx.wrap(jnp.arange(4.0 * n).reshape(n, 4), {1: "k"})

    f = nx.nmap(shape_dependent)
    for n in (2, 1, 3, 1, 2, 3):
        raw = jnp.arange(4.0 * n).reshape(n, 4)
        if n == 1:
            with pytest.raises(ValueError, match="size one"):
                f(arr(n))
        elif n == 2:
            a, b = f(arr(n))
            assert_same(a.unwrap(["k"]), raw[0])
            assert_same(b.unwrap(["k"]), raw[1])
        else:
            out = f(arr(n))
            assert type(out) is nx.NamedArray
            assert_same(out.unwrap(["k"]), raw.sum(0))


# ------------------------------------------------------------------------------------------------------
# 4. The result structure follows the operands' sizes


def test_unstack_per_size():
    for n in (2, 4, 2, 1):
        raw = jnp.arange(3.0 * n).reshape(n, 3)
        a = nx.wrap(raw, {1: "b"})
        parts = nx.unstack(a, axis=0)
        assert len(parts) == n
        for k, p in enumerate(parts):
            assert p.names == ("b",)
            assert_same(p.unwrap(["b"]), raw[k])


def rows(v):
    return tuple(v[k] * (k + 1) for k in range(v.shape[0]))


def test_nmap_structure_per_size():
    f = nx.nmap(rows)
    for n in (2, 3, 2, 5, 3):
        raw = jnp.arange(4.0 * n).reshape(n, 4)
        out = f(nx.wrap(raw, {1: "k"}))
        assert type(out) is tuple and len(out) == n
        for k, p in enumerate(out):
            assert_same(p.unwrap(["k"]), raw[k] * (k + 1))


def test_nmap_structure_per_dtype():
    def by_dtype(v):
        return (v, v) if v.dtype == jnp.int32 else v

    f = nx.nmap(by_dtype)
    for dt in (jnp.int32, jnp.float32, jnp.int32):
        raw = jnp.arange(3, dtype=dt)
        out = f(nx.wrap(raw, ["k"]))
        if dt == jnp.int32:
            assert type(out) is tuple and len(out) == 2
            assert_same(out[1].unwrap(["k"]), raw)
        else:
            assert_same(out.unwrap(["k"]), raw)


# ------------------------------------------------------------------------------------------------------
# 5. Rules mapping a name to a list of mesh axes


def test_list_of_mesh_axes_in_rules():
    raw = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    with nx.env.axis_rules({"batch": ["data", "model"], "embed": None}):
        assert nx.env.current().rules["batch"] == ("data", "model")
        f = nx.xmap(lambda x: nx.sum(x * 2, "batch"), in_axes=["batch", ...], out_axes=[...])
        np.testing.assert_allclose(np.asarray(f(raw)), (raw * 2).sum(0))
        x = nx.wrap(jnp.asarray(raw), ["batch", "embed"])
        np.testing.assert_allclose(np.asarray((x + 1).unwrap(["batch", "embed"])), raw + 1)
        np.testing.assert_allclose(np.asarray(nx.sum(x, "embed").unwrap(["batch"])), raw.sum(1))
        dots = nx.einsum("{batch,embed},{batch,embed}->{batch}", x, x)
        np.testing.assert_allclose(np.asarray(dots.unwrap(["batch"])), (raw * raw).sum(1), rtol=1e-6)
        with nx.env.axis_rules({"embed": ["model"]}):
            assert nx.env.current().rules == {"batch": ("data", "model"), "embed": ("model",)}
            np.testing.assert_allclose(np.asarray(f(raw)), (raw * 2).sum(0))
            np.testing.assert_allclose(np.asarray((x * 3).unwrap(["batch", "embed"])), raw * 3)
    assert nx.env.current().rules is None


# ------------------------------------------------------------------------------------------------------
# 6. nx.clear_caches() and the bounded caches of nx.xmap


def test_clear_caches_empties_the_xmap_caches():
    traces = []

    def body(x):
        traces.append(x.shape)
        return x * 2

    class Unhashable:
        __hash__ = None

        def __call__(self, v):
            traces.append(v.shape)
            return v + 1

    nx.clear_caches()
    shared = nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...])
    own = nx.xmap(Unhashable(), in_axes=["i", ...], out_axes=["i", ...])
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    y = nx.wrap(jnp.asarray(x), ["r", "c"])
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(shared(x)), 2 * x)
        np.testing.assert_allclose(np.asarray(own(x)), x + 1)
        np.testing.assert_allclose(np.asarray((y + 1).unwrap(["r", "c"])), x + 1)
    assert len(traces) == 2  # one trace each, then the cached compilations
    # the hashable configuration went to the shared cache, the unhashable one to its own
    assert caches.sizes()[SHARED] == 1 and caches.sizes()[OWN] == 1
    assert kernels.size() > 0

    nx.clear_caches()
    assert caches.sizes()[SHARED] == caches.sizes()[OWN] == 0
    assert kernels.size() == 0
    assert not any(caches.sizes().values()), caches.sizes()  # every cache the library owns

    np.testing.assert_allclose(np.asarray(shared(x)), 2 * x)
    np.testing.assert_allclose(np.asarray(own(x)), x + 1)
    np.testing.assert_allclose(np.asarray((y + 1).unwrap(["r", "c"])), x + 1)
    assert len(traces) == 4  # both traced again: the compilations were dropped, not just unlisted


def test_local_cache_of_an_unhashable_xmap_is_bounded():
    class Unhashable:
        __hash__ = None

        def __call__(self, v):
            return v * _rule_factor()

    f = nx.xmap(Unhashable(), in_axes=["i", ...], out_axes=["i", ...])
    x = np.ones((2, 3), np.float32)
    limit = caches.resize(OWN, 3)  # each such xmap keeps at most 3 compilations (8 by default)
    try:
        assert 1 <= limit <= 16
        nx.clear_caches()  # from here on, f is the only member of the family that holds anything
        contexts = [{"batch": "data"}, {"batch": "model"}] + [{"batch": f"m{k}"} for k in range(10)]
        seen = []
        for rules in contexts + contexts[:2]:
            with nx.env.axis_rules(rules):
                np.testing.assert_allclose(np.asarray(f(x)), x * _rule_factor())
            seen.append(caches.sizes()[OWN])
        np.testing.assert_allclose(np.asarray(f(x)), x)
        assert seen[:4] == [1, 2, 3, 3] and max(seen) == 3  # grows to the bound, then evicts
        assert caches.sizes()[OWN] == 3
    finally:
        caches.resize(OWN, limit)
