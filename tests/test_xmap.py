"""nx.xmap: the in_axes/out_axes forms, size inference, collectives, nesting and transforms.

Ports of the behaviours of xmap's own test suite (tests/xmap_test.py at its last version), each checked
against a NumPy reference; the error contract is in test_xmap_errors.py and resources in
test_xmap_resources.py.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import namedarray as nx
from namedarray.core.array import NamedArray


def xm(f, in_axes, out_axes, **kw):
    return nx.xmap(f, in_axes=in_axes, out_axes=out_axes, **kw)


# ------------------------------------------------------------------------------------------------------
# Spec forms


def test_dict_specs_positions_of_input_and_of_final_output():
    x = np.arange(24).reshape(2, 3, 4)

    def body(v):
        assert v.shape == (3,) and v.named_shape == {"a": 2, "b": 4}
        return v

    out = xm(body, {0: "a", 2: "b"}, {2: "a", 0: "b"})(x)
    np.testing.assert_array_equal(out, x.transpose(2, 1, 0))
    # insertion in ascending position order of the final output
    out = xm(body, {0: "a", 2: "b"}, {1: "a", 2: "b"})(x)
    np.testing.assert_array_equal(out, x.transpose(1, 0, 2))


def test_list_specs_with_ellipsis_none_and_rank_assertion():
    x = np.arange(24).reshape(2, 3, 4)
    out = xm(lambda v: v, [None, "i", ...], ["i", ...])(x)
    np.testing.assert_array_equal(out, x.transpose(1, 0, 2))
    out = xm(lambda v: v * 2, ["i", None, "j"], [None, "j", "i"])(x)
    np.testing.assert_array_equal(out, (x * 2).transpose(1, 2, 0))


def test_empty_specs_give_named_arrays_without_names():
    seen = []

    def body(a, b):
        seen.append((type(a), a.named_shape, type(b), b.named_shape))
        return a + b

    out = xm(body, ({}, [...]), [...])(np.ones(3), 2.0)
    assert seen == [(NamedArray, {}, NamedArray, {})]
    np.testing.assert_array_equal(out, np.full(3, 3.0))


def test_none_spec_means_no_names():
    # like vmap's None: an argument left unmapped (xmap itself required {} or [...])
    out = xm(lambda a, b: a + b, (["i"], None), ["i"])(np.arange(3.0), 10.0)
    np.testing.assert_array_equal(out, np.arange(3.0) + 10)


def test_tuple_of_names_is_one_rank_asserting_spec():
    x = np.arange(6).reshape(2, 3)
    out = xm(lambda v: v + 1, ("a", "b"), ("b", "a"))(x)
    np.testing.assert_array_equal(out, (x + 1).T)


def test_single_spec_applies_to_every_argument_and_output():
    x, y = np.arange(3.0), np.arange(3.0) * 10
    a, b = xm(lambda u, v: (u + v, u * v), ["i", ...], ["i", ...])(x, y)
    np.testing.assert_array_equal(a, x + y)
    np.testing.assert_array_equal(b, x * y)


def test_top_level_list_in_axes_is_the_argument_list():
    x = np.arange(6.0).reshape(2, 3)
    f_list = xm(lambda a, b: a * b, [["i", ...], ["j", ...]], ["i", "j", ...])
    f_tuple = xm(lambda a, b: a * b, (["i", ...], ["j", ...]), ["i", "j", ...])
    np.testing.assert_array_equal(f_list(x, x), f_tuple(x, x))
    np.testing.assert_array_equal(f_list(x, x), np.einsum("im,jm->ijm", x, x))


def test_pytree_prefix_specs_for_arguments_and_outputs():
    x = np.arange(6.0).reshape(2, 3)
    # (['i', ...],) is a prefix of ((a, b),): both leaves of the tuple argument are mapped
    out = xm(
        lambda ab: {"s": ab[0] + ab[1], "d": ab[0] - ab[1]}, (["i", ...],), {"s": ["i", ...], "d": {1: "i"}}
    )((x, x * 2))
    np.testing.assert_array_equal(out["s"], x * 3)
    np.testing.assert_array_equal(out["d"], (-x).T)
    # a dict with string keys is a container (xmap issue #6410)
    assert xm(lambda v: v, [...], {"a": [...]})({"a": 1}) == {"a": 1}
    # nested argument containers with their own specs
    tree = {"w": np.ones((2, 3)), "b": np.arange(2.0)}
    out = xm(lambda t: t["w"] * t["b"], ({"w": ["i", ...], "b": ["i"]},), ["i", ...])(tree)
    np.testing.assert_array_equal(out, np.ones((2, 3)) * np.arange(2.0)[:, None])


def test_out_axes_list_for_tuple_results():
    x = np.arange(4.0)
    a, b = xm(lambda v: (v, v * 2), ["i"], [["i"], ["i"]])(x)
    np.testing.assert_array_equal(b, x * 2)


def test_out_axes_none_when_fun_returns_none():
    assert xm(lambda v: None, ["i"], None)(np.arange(3)) is None


def test_in_axes_empty_tuple_with_axis_sizes():
    # testAxisSizes
    out = xm(lambda: nx.axis_index("i"), (), ["i", ...], axis_sizes={"i": 6})()
    np.testing.assert_array_equal(out, np.arange(6))


def test_broadcast_output_of_a_name_given_only_by_axis_sizes():
    # testBroadcast
    out = xm(lambda x: x, {}, ["i"], axis_sizes={"i": 4})(2.0)
    np.testing.assert_array_equal(out, [2.0, 2.0, 2.0, 2.0])
    out = xm(lambda: 2.0, (), ["i"], axis_sizes={"i": 4})()
    np.testing.assert_array_equal(out, [2.0, 2.0, 2.0, 2.0])


def test_nested_broadcast():
    # testNestedBroadcast
    inner = xm(lambda x: x, {}, ["i"], axis_sizes={"i": 4})
    out = xm(inner, {}, ["j", ...], axis_sizes={"j": 7})(2.0)
    np.testing.assert_array_equal(out, np.tile(np.array(2.0).reshape(1, 1), (7, 4)))


def test_axis_sizes_name_in_random_with_named_shape():
    key = jax.random.key(0)
    f = xm(lambda: nx.random.normal(key, (3,), named_shape={"i": 4}), (), [None, "i"], axis_sizes={"i": 4})
    out = np.asarray(f())
    assert out.shape == (3, 4)
    assert len({tuple(c) for c in out.T}) == 4  # samples differ along the named axis


def test_results_are_plain_arrays_at_top_level():
    # testNamedShape: results of a top-level xmap carry no names
    out = xm(lambda x, y: (x + y, y * nx.axis_index("i")), (["i", ...], {}), ["i", ...])(np.arange(4), 2)
    for o in out:
        assert isinstance(o, jax.Array) and not isinstance(o, NamedArray)
    np.testing.assert_array_equal(out[0], np.arange(4) + 2)
    np.testing.assert_array_equal(out[1], np.arange(4) * 2)


def test_psum_and_axis_size_are_python_ints_inside():
    seen = []

    def body(x):
        seen.append((int(nx.psum(1, "i")), int(nx.axis_size("i")), type(nx.psum(1, "i"))))
        return x

    xm(body, ["i", ...], ["i", ...])(np.arange(3))
    assert seen == [(3, 3, int)]


# ------------------------------------------------------------------------------------------------------
# Positional functions passed directly


def test_jax_functions_use_their_named_implementations():
    x = np.arange(6.0).reshape(2, 3)
    # jax.nn.softmax over the positional axis, vectorised over 'i'
    out = xm(jax.nn.softmax, ["i", ...], ["i", ...])(x)
    np.testing.assert_allclose(out, jax.nn.softmax(x, axis=-1), rtol=1e-6)
    out = xm(jnp.sum, ["i", ...], ["i", ...])(x)  # positional sum per 'i'
    np.testing.assert_allclose(out, x.sum(1))
    out = xm(jax.scipy.special.logsumexp, ["i", ...], ["i", ...])(x)
    np.testing.assert_allclose(out, jax.scipy.special.logsumexp(x, axis=1), rtol=1e-6)
    # a lax function with its axis name bound by partial
    out = xm(functools.partial(jax.lax.psum, axis_name="i"), ["i", ...], [...])(x)
    np.testing.assert_allclose(out, x.sum(0))
    # any other function of those modules is lifted
    out = xm(jnp.linalg.det, ["i", ...], ["i", ...])(np.stack([np.eye(2) * 2, np.eye(2) * 3]))
    np.testing.assert_allclose(out, [4.0, 9.0], rtol=1e-6)


def test_nmap_lifts_any_positional_function():
    def positional(v):
        return jnp.cumsum(v[::-1])

    out = xm(nx.nmap(positional), ["i", ...], ["i", ...])(np.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(out, np.cumsum(np.arange(6.0).reshape(2, 3)[:, ::-1], axis=1))


# ------------------------------------------------------------------------------------------------------
# Collectives (XMapTest) and named reductions (NamedNumPyTest)


def test_multiple_calls_tensordot():
    # testMultipleCalls
    def f(x, y):
        assert x.shape == y.shape == (3, 5)
        return nx.tensordot(x, y, axes=([1], [1]))

    fm = xm(f, (["i", ...], ["j", ...]), ["i", "j", ...])
    x = np.arange(30.0).reshape(2, 3, 5)
    for _ in range(10):
        np.testing.assert_allclose(fm(x, x), np.einsum("imk,jnk->ijmn", x, x))


def test_collective_reduce():
    # testCollectiveReduce
    a, b = np.arange(640).reshape(16, 8, 5), np.arange(14).reshape(2, 7)
    f = xm(lambda a, b: (nx.psum(a * 2, "a"), b * 4), (["a", "b", ...], {0: "c"}), (["b", ...], {0: "c"}))
    ra, rb = f(a, b)
    np.testing.assert_array_equal(ra, (a * 2).sum(0))
    np.testing.assert_array_equal(rb, b * 4)


def test_collective_permute_1d_and_2d():
    out = xm(lambda x: nx.pshuffle(x, "i", [3, 1, 2, 0]), ["i", ...], ["i", ...])(np.arange(4))
    np.testing.assert_array_equal(out, [3, 1, 2, 0])
    x = np.arange(4).reshape(2, 2)
    out = xm(lambda x: nx.pshuffle(x, ("i", "j"), [3, 1, 2, 0]), ["i", "j", ...], ["i", "j", ...])(x)
    np.testing.assert_array_equal(out.ravel(), [3, 1, 2, 0])


def test_collective_all_gather():
    x = np.arange(4, dtype=np.int32)
    out = xm(lambda x: nx.all_gather(x, "i") + nx.axis_index("i"), ["i", ...], ["i", ...])(x)
    np.testing.assert_array_equal(out, x[None] + x[None].T)


def test_collective_over_a_name_the_value_lacks():
    # testCollectiveOverNoName: psum of an unmapped value multiplies by the size
    out = xm(lambda x: nx.psum(jnp.array(2) ** 2, "i"), {}, {}, axis_sizes={"i": 4})(np.ones(()))
    assert int(out) == 16


def test_axis_index_of_a_tuple_of_names_is_row_major():
    out = xm(lambda: nx.axis_index(("i", "j")), (), ["i", "j"], axis_sizes={"i": 2, "j": 3})()
    np.testing.assert_array_equal(out, [[0, 1, 2], [3, 4, 5]])


def test_control_flow_with_collectives_inside():
    # testControlFlow: a collective inside fori_loop / cond / scan bodies
    x = np.arange(5.0)

    def body(v):
        v = jax.lax.fori_loop(0, 3, lambda _, c: c + nx.psum(c, "i") * 0.1, v)
        v = jax.lax.cond(nx.unwrap(nx.psum(v, "i") > 0), lambda c: c * 2, lambda c: c, v)
        return v

    ref = x.copy()
    for _ in range(3):
        ref = ref + ref.sum() * 0.1
    ref = ref * 2
    np.testing.assert_allclose(xm(body, ["i", ...], ["i", ...])(x), ref, rtol=1e-6)


def test_while_loop_with_psum_over_a_name_the_carry_lacks():
    # lax_control_flow_test.test_while_loop_fixed_point_with_nested_named_axes
    def body(x):
        return jax.lax.while_loop(lambda c: nx.unwrap(c < 100.0), lambda c: c + nx.psum(1.0, "i"), x)

    out = xm(body, {}, {}, axis_sizes={"i": 7})(np.float32(0.0))
    assert float(out) == 105.0


@pytest.mark.parametrize("reduction", ["sum", "max", "min", "mean", "var", "std", "logsumexp"])
@pytest.mark.parametrize("axes", [0, "i", (1,), ("i",), (0, 1), (0, "i"), ("i", 0)])
def test_named_reductions_match_positional(reduction, axes):
    # NamedNumPyTest.testReductions with the mapped axis at position 1 (x: (2, 5, 6) with 'i' of size 5)
    x = np.random.default_rng(0).normal(size=(2, 5, 6))
    mapped = 1
    nfun = nx.nn.logsumexp if reduction == "logsumexp" else getattr(nx, reduction)
    pfun = jax.scipy.special.logsumexp if reduction == "logsumexp" else getattr(np, reduction)
    ax = axes if isinstance(axes, tuple) else (axes,)
    pos_axes = [a for a in ax if isinstance(a, int)]
    # positional axes of the value inside are those of x without the mapped one
    ref_axes = tuple(mapped if a == "i" else (a if a < mapped else a + 1) for a in ax)
    keeps_i = "i" not in ax
    out_axes = {mapped - sum(1 for a in pos_axes if a < mapped): "i"} if keeps_i else {}
    f = xm(lambda v: nfun(v, axis=axes), {mapped: "i"}, out_axes)
    np.testing.assert_allclose(f(x), pfun(x, axis=ref_axes), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------------
# Nesting and vmap


def test_nested_xmap_sees_outer_names_and_keeps_them():
    seen = []

    def inner_body(y):
        seen.append(dict(y.named_shape))
        return y * 2 + nx.axis_index("a") + nx.psum(y, ("a", "b"))

    inner = xm(inner_body, ["b", ...], ["b", ...])

    def outer_body(x):
        r = inner(x)
        assert isinstance(r, NamedArray) and r.named_shape == {"a": 2}
        return r

    x = np.arange(6.0).reshape(2, 3)
    out = xm(outer_body, ["a", ...], ["a", ...])(x)
    assert seen[-1] == {"a": 2, "b": 3}  # the last call of the body is the one used
    np.testing.assert_allclose(out, x * 2 + np.arange(2)[:, None] + x.sum())


def test_nested_mesh_one_to_one_values():
    # testNestedMeshOneToOne (values; resources are in test_xmap_resources.py)
    x = np.arange(40.0).reshape(4, 2, 5)

    def f(x):
        y = x * 2

        def h(y):
            return nx.sin(y) * jnp.arange(5.0), nx.psum(y, ("a", "b"))

        return xm(h, {0: "b"}, ({1: "b"}, {}))(y)

    a, b = xm(f, {1: "a"}, ({0: "a"}, {}))(x)
    np.testing.assert_allclose(a, (np.sin(x * 2) * np.arange(5.0)).transpose(1, 2, 0), rtol=1e-6)
    np.testing.assert_allclose(b, (x * 2).sum((0, 1)), rtol=1e-6)


@pytest.mark.parametrize("outer", ["vmap", "xmap"])
@pytest.mark.parametrize("vx,xp,vr", [(0, 0, 0), (1, 1, 2), (2, 0, 1), (2, 1, 0)])
def test_nested_map_equals_flat_einsum(outer, vx, xp, vr):
    # testNestedMap: an inner xmap over 'x' (rows of x) and 'y' (columns of y) inside an outer vmap or
    # xmap over 'v', with the batch dims at any position; compared with one flat einsum.
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=(7, 3, 2)).astype(np.float32)  # (v, n, k)
    y = rng.normal(size=(2, 4)).astype(np.float32)  # (k, m)
    inner_order = [1, 2] if xp == 0 else [2, 1]  # (n, k) or (k, n) inside
    perm = inner_order[:vx] + [0] + inner_order[vx:]
    x = x0.transpose(perm)  # v at position vx
    inner = xm(lambda a, b: nx.einsum("k,k->", a, b), ({xp: "x"}, {1: "y"}), ["x", "y"])
    if outer == "vmap":
        out = jax.vmap(lambda xs: inner(xs, y), in_axes=vx, out_axes=vr)(x)
    else:
        out = xm(lambda xs: inner(xs, y), {vx: "v"}, {vr: "v"})(x)
    ref = np.moveaxis(np.einsum("vnk,km->vnm", x0, y), 0, vr)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_vmap_of_xmap_with_closed_over_batched_value():
    # testBatchingPostProcess
    x = np.arange(10.0).reshape(5, 2)
    out = jax.vmap(lambda y: xm(lambda v: v + y, ["i", ...], ["i", ...])(x))(x * 2)
    ref = jax.vmap(lambda y: jax.vmap(lambda v: v + y)(x))(x * 2)
    np.testing.assert_allclose(out, ref)


def test_vmap_with_axis_name_collective_inside_xmap_body():
    # a collective over an outer vmap axis name works inside the body, next to the xmap's own names
    x = np.arange(12.0).reshape(3, 4)

    def per_row(row):
        # nx.nmap runs its function per element of 'i', where the outer vmap's axis name is in scope
        return xm(nx.nmap(lambda v: v + jax.lax.psum(v, "v")), ["i"], ["i"])(row)

    out = jax.vmap(per_row, axis_name="v")(x)
    np.testing.assert_allclose(out, x + x.sum(0))


def test_jit_of_xmap_and_xmap_of_jit():
    x = np.arange(6.0).reshape(2, 3)
    f = xm(lambda v: nx.sum(v, "i") * 2, ["i", ...], [...])
    np.testing.assert_allclose(jax.jit(f)(x), x.sum(0) * 2)
    g = xm(jax.jit(lambda v: v * 3), ["i", ...], ["i", ...])
    np.testing.assert_allclose(g(x), x * 3)


def test_make_jaxpr_of_a_function_calling_xmap_with_constants():
    # test_can_stage_and_interpret_xmap_with_constants
    const = np.arange(8.0)
    f = xm(lambda v: v + const, ["i", ...], ["i", ...])
    x = np.ones((2, 8))
    closed = jax.make_jaxpr(f)(x)
    out = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, x)[0]
    np.testing.assert_allclose(out, x + const)


# ------------------------------------------------------------------------------------------------------
# Autodiff


def _cos_dot(x, y):
    return nx.cos(nx.dot(x, nx.sin(y), precision=jax.lax.Precision.HIGHEST))


def test_autodiff_no_broadcast():
    # testAutodiffNoBroadcast
    x = np.arange(12.0).reshape(3, 4) / 100
    y = np.arange(12.0).reshape(4, 3) / 100
    f = xm(_cos_dot, (["i", ...], [None, "i"]), ["i"])
    check_grads(f, (x, y), order=2, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)


def test_autodiff_broadcast_is_correct_in_both_modes():
    # testAutodiffBroadcast (skipped in xmap, where reverse mode was wrong): y is unmapped
    x = np.arange(12.0).reshape(3, 4) / 100
    y = np.arange(20.0).reshape(4, 5) / 100
    f = xm(_cos_dot, (["i", ...], {}), ["i", ...])
    check_grads(f, (x, y), order=2, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2)
    positional = lambda x, y: jnp.cos(jnp.dot(x, jnp.sin(y)))  # noqa: E731
    g = jax.grad(lambda y: f(x, y).sum())(y)
    g_ref = jax.grad(lambda y: positional(x, y).sum())(y)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5)


def test_grad_of_unmapped_weight_is_not_scaled_by_the_axis_size():
    # xmap 0.4.20 gave |b| times the true gradient here
    xs = np.arange(4.0)
    f = xm(lambda w, x: nx.sum(nx.tanh(x * w), "b"), ({}, ["b", ...]), {})
    g = jax.grad(lambda w: f(w, xs))(0.3)
    g_ref = jax.grad(lambda w: jnp.sum(jnp.tanh(xs * w)))(0.3)
    np.testing.assert_allclose(g, g_ref, rtol=1e-6)


def test_vjp_per_example_and_reduced():
    # NamedAutodiffTests.testVjpReduceAxes, in the global view. A vjp inside the body with respect to an
    # unmapped value gives its cotangent summed over the names it was broadcast along (what xmap needed
    # reduce_axes for); per-example cotangents come from nx.nmap, and then out_axes must place 'batch'.
    rng = np.random.default_rng(0)
    w, x, gy = rng.normal(size=(3, 4)), rng.normal(size=(2, 3)), rng.normal(size=(2, 4))

    def vjp_positional(x, w, gy):
        return jax.vjp(lambda w: jnp.sin(x @ w), w)[1](gy)[0]

    def vjp_named(x, w, gy):
        return jax.vjp(lambda w: nx.sin(nx.dot(x, w)), w)[1](gy)[0]

    in_axes = (["batch", ...], {}, ["batch", ...])
    summed = xm(vjp_named, in_axes, {})(x, w, gy)
    np.testing.assert_allclose(summed, vjp_positional(x, w, gy), rtol=1e-5)
    per = xm(nx.nmap(vjp_positional), in_axes, {0: "batch"})(x, w, gy)
    np.testing.assert_allclose(per, jax.vmap(vjp_positional, (0, None, 0))(x, w, gy), rtol=1e-5)
    with pytest.raises(
        nx.errors.UnplacedAxisError, match="mapped along more axes defined by this xmap call: batch"
    ):
        xm(nx.nmap(vjp_positional), in_axes, {})(x, w, gy)


def test_grad_through_psum_equals_positional_grad():
    # NamedAutodiffTests.testVjpReduceAxesCollective
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(3, 4)), rng.normal(size=(5, 3))
    f = xm(lambda w, x: nx.psum(nx.sum(nx.sin(nx.dot(x, w))), "batch"), ({}, ["batch", ...]), {})
    np.testing.assert_allclose(f(w, x), jnp.sin(x @ w).sum(), rtol=1e-5)
    np.testing.assert_allclose(jax.grad(f)(w, x), jax.grad(lambda w: jnp.sin(x @ w).sum())(w), rtol=1e-5)


def test_checkpoint_of_xmap():
    # testNewCheckpoint
    f = jax.checkpoint(xm(lambda x: x, ["i", ...], ["i", ...]))
    np.testing.assert_array_equal(jax.grad(lambda x: f(x).sum())(np.arange(3.0)), np.ones(3))


def test_jvp_through_xmap():
    x = np.arange(3.0)
    f = xm(lambda v, w: nx.sin(v) * w, (["i"], {}), ["i"])
    y, t = jax.jvp(f, (x, 2.0), (np.ones(3), 1.0))
    np.testing.assert_allclose(y, np.sin(x) * 2, rtol=1e-6)
    np.testing.assert_allclose(t, np.cos(x) * 2 + np.sin(x), rtol=1e-6)


# ------------------------------------------------------------------------------------------------------
# Lowering, donation, caching, backend


def test_lower_with_abstract_args_and_compile():
    f = xm(lambda x: x * 2, ["i", ...], ["i", ...])
    lowered = f.lower(jax.ShapeDtypeStruct((2, 2), jnp.float32))
    assert "stablehlo" in lowered.as_text() or "func.func" in lowered.as_text()
    x = np.arange(4.0, dtype=np.float32).reshape(2, 2)
    compiled = f.lower(x).compile()
    np.testing.assert_array_equal(compiled(x), f(x))
    assert lowered.compile().cost_analysis() is not None
    assert compiled.memory_analysis() is not None


def test_lower_compile_in_tree_and_arg_type_mismatch():
    f = xm(lambda x: x * 2, ["i", ...], ["i", ...])
    x = np.ones((2, 2), np.float32)
    exe = f.lower(x).compile()
    with pytest.raises(TypeError, match="Function compiled with input pytree does not match"):
        exe([x])
    with pytest.raises(
        TypeError, match=r"(?s)Argument types differ.*compiled with float32.*called with int32"
    ):
        exe(np.ones((2, 2), np.int32))


def test_buffer_donation():
    f = xm(lambda x, y: x + y * 4, (["i", ...], ["i", ...]), ["i", ...], donate_argnums=0)
    x, y = jnp.ones((4, 2)), jnp.ones((4, 2))
    out = f(x, y)
    np.testing.assert_array_equal(out, np.full((4, 2), 5.0))
    assert x.is_deleted() and not y.is_deleted()


def test_buffer_donation_named_shape():
    # testBufferDonationNamedShape: the output is a fresh array
    f = xm(lambda x: nx.all_gather(x, "i") * 2, ["i", ...], [...], donate_argnums=0)
    x = jnp.ones((4, 2, 5))
    np.testing.assert_array_equal(f(x), np.full((4, 2, 5), 2.0))
    assert x.is_deleted()


def test_equal_constructions_share_one_trace():
    # testCaching: building the same xmap twice does not re-run the Python function
    calls = []

    def f(x):
        calls.append(1)
        return x * 2

    x = np.arange(4.0)
    xm(f, ["i"], ["i"])(x)
    xm(f, ["i"], ["i"])(x)
    assert len(calls) == 1


def test_backend_is_checked():
    x = np.arange(3.0)
    np.testing.assert_array_equal(xm(lambda v: v + 1, ["i"], ["i"], backend="cpu")(x), x + 1)
    with pytest.raises(nx.errors.MissingResourceError, match="backend 'bogus'"):
        xm(lambda v: v, ["i"], ["i"], backend="bogus")(x)


def test_keyword_arguments_are_rejected():
    with pytest.raises(TypeError, match="positional arguments only"):
        xm(lambda v: v, ["i"], ["i"])(v=np.arange(3.0))


def test_named_array_arguments_at_top_level_pass_their_names_through():
    # a NamedArray argument keeps its own (unbound) names; positions are named as usual
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), [None, "k"])
    out = xm(lambda v: v * nx.axis_index("i"), ["i"], ["i"])(x)
    assert isinstance(out, NamedArray) and out.named_shape == {"k": 3} and out.shape == (2,)
    np.testing.assert_allclose(out.unwrap([None, "k"]), np.arange(6.0).reshape(2, 3) * np.arange(2)[:, None])
