"""The layout rule at every pytree boundary: values built with their names in other orders (natural
intermediates) meet as equal structures with canonical storage, and values by name are unchanged."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import namedarray as nx
from namedarray import errors
from namedarray.engine import dispatch as engine


@pytest.fixture
def xy():
    rng = np.random.default_rng(0)
    d = rng.normal(size=(2, 3, 4)).astype(np.float32)  # (x, y, z)
    a = nx.wrap(d, ["x", "y", "z"])
    b = nx.wrap(d.transpose(2, 0, 1), ["z", "x", "y"])  # the same values, stored in another order
    return d, a, b


def _ref(v, order=("x", "y", "z")):
    return np.asarray(v.unwrap(list(order)))


def test_intermediates_keep_the_natural_order_and_flatten_canonically(xy):
    d, a, b = xy
    assert a.names == ("x", "y", "z") and b.names == ("z", "x", "y")  # no transpose on wrap
    s = b * 2.0 + a  # the operand with most names leads (a tie: the first)
    assert s.names == ("z", "x", "y")
    leaf, = jax.tree.leaves(s)
    np.testing.assert_allclose(np.asarray(leaf), _ref(3 * a, nx.canonical_order(s.names)))
    assert jax.tree.structure(s) == jax.tree.structure(a) == jax.tree.structure(b)


def test_a_name_set_flattens_in_the_order_it_first_flattened_in():
    d = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    first = nx.wrap(d, ["first_q", "first_p"])  # not alphabetical: the order the program built it in
    assert jax.tree.leaves(first)[0].shape == (2, 3)
    later = nx.wrap(d.T, ["first_p", "first_q"])
    leaf, = jax.tree.leaves(later)
    np.testing.assert_array_equal(np.asarray(leaf), d)  # the set's order, not this value's
    assert nx.canonical_order(["first_p", "first_q"]) == ("first_q", "first_p")
    assert jax.tree.structure(first) == jax.tree.structure(later)


def test_fix_canonical_order():
    nx.fix_canonical_order(["fixed_b", "fixed_a"], ["fixed_c"])
    nx.fix_canonical_order(["fixed_b", "fixed_a"])  # the same order again: nothing to do
    x = nx.wrap(np.zeros((2, 3), np.float32), ["fixed_a", "fixed_b"])
    assert jax.tree.leaves(x)[0].shape == (3, 2)
    with pytest.raises(nx.errors.AxisSpecError, match="already flatten in the order"):
        nx.fix_canonical_order(["fixed_a", "fixed_b"])
    with pytest.raises(nx.errors.AxisSpecError, match="twice"):
        nx.fix_canonical_order(["fixed_d", "fixed_d"])
    with pytest.raises(nx.errors.AxisSpecError, match="twice"):
        nx.canonical_order(["fixed_d", "fixed_d"])
    with pytest.raises(nx.errors.AxisSpecError, match="the string 'fixed_e'"):
        nx.fix_canonical_order("fixed_e", "fixed_f")  # two one-name sets are two lists
    with pytest.raises(nx.errors.AxisSpecError):
        nx.canonical_order(["fixed_g", 1])


def test_asking_for_an_order_fixes_nothing():
    assert nx.canonical_order(["asked_b", "asked_a"]) is None
    nx.fix_canonical_order(["asked_a", "asked_b"])  # not taken by the question
    assert nx.canonical_order(["asked_b", "asked_a"]) == ("asked_a", "asked_b")


def test_jit_arguments_and_outputs(xy):
    d, a, b = xy
    f = jax.jit(lambda u, v: (u * v, v.sum("z")))
    p, q = f(a, b)
    np.testing.assert_allclose(_ref(p), d * d, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(q.unwrap(["x", "y"])), d.sum(-1), rtol=1e-5)
    p2, _ = f(b, a)  # the other order: the same trace (same treedef), the same values
    np.testing.assert_allclose(_ref(p2), d * d, rtol=1e-6)


def test_cond_branches_built_in_different_orders(xy):
    d, a, b = xy

    def f(pred, u):
        return jax.lax.cond(pred, lambda v: v * 1.0, lambda v: nx.wrap(v.unwrap(["z", "y", "x"]),
                                                                      ["z", "y", "x"]) + 1.0, u)

    np.testing.assert_allclose(_ref(jax.jit(f)(True, a)), d)
    np.testing.assert_allclose(_ref(jax.jit(f)(False, b)), d + 1)


def test_scan_carry_changes_storage_order_inside_the_body(xy):
    d, a, _ = xy

    def body(c, _):
        flipped = nx.wrap(c.unwrap(["y", "z", "x"]), ["y", "z", "x"])  # a non-canonical intermediate
        return flipped * 2.0, flipped.sum("y")

    c, ys = jax.lax.scan(body, a, None, length=3)
    np.testing.assert_allclose(_ref(c), d * 8)
    np.testing.assert_allclose(np.asarray(ys.unwrap([None, "x", "z"])),
                               np.stack([d.sum(1) * 2 ** k for k in range(3)]), rtol=1e-5)


def test_tree_map_and_optax_update_across_orders(xy):
    d, a, b = xy
    params = {"w": b}
    total = jax.tree.map(lambda u, v: u + v, {"w": a}, params)
    np.testing.assert_allclose(_ref(total["w"]), 2 * d)
    opt = optax.adam(0.1)
    state = opt.init(params)
    grads = {"w": a * 1.0}  # gradients built in another storage order than the parameters
    updates, state = opt.update(grads, state, params)
    new = optax.apply_updates(params, updates)
    ref_p = {"w": jnp.asarray(d)}
    ref_u, _ = opt.update({"w": jnp.asarray(d)}, opt.init(ref_p), ref_p)
    np.testing.assert_allclose(_ref(new["w"]), np.asarray(optax.apply_updates(ref_p, ref_u)["w"]),
                               rtol=1e-6)


def test_vmap_and_scan_over_a_positional_axis_give_valid_named_arrays():
    d = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    x = nx.wrap(d, [None, "z", "y"])  # positional first axis, names stored (z, y)
    out = jax.vmap(lambda v: v.sum("y") * 1.0)(x)
    np.testing.assert_allclose(np.asarray(out.unwrap([None, "z"])), d.sum(2))
    _, ys = jax.lax.scan(lambda c, v: (c, v.sum("z")), 0.0, x)
    np.testing.assert_allclose(np.asarray(ys.unwrap([None, "y"])), d.sum(1))


def test_wrapping_data_in_any_order_then_adding_is_one_dispatch():
    y, x = np.ones((3, 2), np.float32), np.ones((2, 3), np.float32)
    a, b = nx.wrap(x, ["x", "y"]), nx.wrap(y, ["y", "x"])
    (a + b).block_until_ready()  # warm
    before = engine.stats.eager_calls
    out = a + nx.wrap(y, ["y", "x"])
    assert engine.stats.eager_calls - before == 1
    np.testing.assert_allclose(np.asarray(out.unwrap(["x", "y"])), 2 * x)


def test_positional_mismatch_names_the_positional_shapes():
    x = nx.wrap(jnp.ones((2, 3, 4)), {1: "k"})  # positional (2, 4)
    with pytest.raises(errors.AxisSizeError, match=r"positional shapes do not broadcast.*\(2, 4\).*\(3,\)"):
        x + jnp.ones(3)


def test_jacobian_of_named_to_named_is_a_clear_error():
    x = nx.wrap(jnp.ones(3), ["i"])
    with pytest.raises(errors.PositionalMisuseError, match="jax.jacfwd/jacrev"):
        jax.jacrev(lambda v: v * 2.0)(x)
    # the supported route: positional in, named inside
    jac = jax.jacrev(lambda v: (nx.wrap(v, ["i"]) * 2.0).unwrap(["i"]))(jnp.ones(3))
    np.testing.assert_allclose(np.asarray(jac), 2 * np.eye(3))


def test_vmap_over_a_named_storage_axis_is_reported_when_it_leaves_too_few_axes():
    x = nx.wrap(jnp.ones((3, 4)), ["a", "b"])  # no positional axes: in_axes=-1 can only reach a name
    with pytest.raises(errors.AxisSpecError, match=r"mapped one of its named axes.*0 <= in_axes < x.ndim"):
        jax.vmap(lambda v: v * 2, in_axes=-1)(x)


def test_a_value_flattened_inside_a_trace_keeps_no_tracer():
    a = nx.NamedArray(jnp.arange(6.0).reshape(2, 3), ("c", "a"))  # non-canonical storage
    inner = jax.jit(lambda v: v * 2)

    @jax.jit
    def outer(z):
        return inner(a).sum(("a", "c")).unwrap() + z  # `a` is closed over: flattened inside the trace

    assert float(outer(1.0)) == 31.0
    np.testing.assert_allclose(np.asarray(inner(a).unwrap(["c", "a"])), 2 * np.arange(6.0).reshape(2, 3))


def test_a_donated_canonical_copy_is_rebuilt_on_the_next_flatten():
    nx.fix_canonical_order(["donated_a", "donated_c"])  # b holds them the other way: it flattens to a copy
    b = nx.NamedArray(jnp.arange(6.0).reshape(2, 3), ("donated_c", "donated_a"))
    jax.jit(lambda v: v * 1, donate_argnums=0)(b)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda v: v + 0)(b).unwrap(["donated_c", "donated_a"])),
                               np.arange(6.0).reshape(2, 3))


def test_list_and_tuple_operands_broadcast_positionally():
    x = nx.wrap(jnp.ones((3, 2)), ["a", None])
    np.testing.assert_allclose(np.asarray((x + [1.0, 2.0]).unwrap(["a", None])), np.ones((3, 2)) + [1, 2])
    np.testing.assert_allclose(np.asarray(nx.add(x, (1, 2)).unwrap(["a", None])), np.ones((3, 2)) + [1, 2])


def test_indexing_with_a_named_array_reuses_its_kernel():
    x = nx.wrap(jnp.arange(12.0).reshape(3, 4), ["a", "b"])
    idx = nx.wrap(jnp.array([2, 0]), ["k"])
    x[{"a": idx}]
    before = engine.stats.kernels_built
    for _ in range(3):
        out = x[{"a": idx}]
    assert engine.stats.kernels_built == before
    np.testing.assert_allclose(np.asarray(out.unwrap(["k", "b"])), np.arange(12.0).reshape(3, 4)[[2, 0]])
