"""NamedArrays through JAX's transformations and pytree utilities, with values checked positionally."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optree
import pytest
from conftest import fresh_canonical_orders
from jax import lax
from jax.scipy.linalg import expm_frechet

import namedarray as nx


@pytest.fixture
def xw(rng):
    """x: positional (3,) with names batch=2, k=4 (stored from a (2, 3, 4) array); w: names k=4."""
    xd = rng.normal(size=(2, 3, 4)).astype(np.float32)
    wd = rng.normal(size=(4,)).astype(np.float32)
    return nx.wrap(xd, {0: "batch", 2: "k"}), nx.wrap(wd, ["k"]), xd, wd


def _loss(x, w):
    """A scalar from named arrays: contract k, reduce batch and the positional axis."""
    return ((x * w).sum("k") ** 2).sum(("batch", 0)).unwrap()


def _loss_ref(xd, wd):
    return jnp.sum(jnp.einsum("bpk,k->bp", xd, wd) ** 2)


def test_jit_matches_eager_and_reference(xw):
    x, w, xd, wd = xw
    f = jax.jit(lambda a, b: (a * b).sum("k"))
    out = f(x, w)
    assert isinstance(out, nx.NamedArray) and out.named_shape == {"batch": 2} and out.shape == (3,)
    np.testing.assert_allclose(out.unwrap([None, "batch"]), np.einsum("bpk,k->pb", xd, wd), rtol=1e-5)
    eager = (x * w).sum("k")
    np.testing.assert_allclose(out.unwrap([None, "batch"]), eager.unwrap([None, "batch"]), rtol=1e-6)


def test_jit_does_not_retrace_for_another_storage_order(rng):
    traces = []

    @jax.jit
    def f(a):
        traces.append(1)
        return a * 2

    d = rng.normal(size=(2, 3)).astype(np.float32)
    f(nx.wrap(d, ["a", "b"]))
    f(nx.wrap(d.T, ["b", "a"]))
    assert len(traces) == 1


def test_grad_with_respect_to_named_arrays(xw):
    x, w, xd, wd = xw
    gx, gw = jax.grad(_loss, argnums=(0, 1))(x, w)
    rx, rw = jax.grad(_loss_ref, argnums=(0, 1))(xd, wd)
    assert isinstance(gx, nx.NamedArray) and gx.named_shape == x.named_shape and gx.shape == x.shape
    assert gw.named_shape == {"k": 4}
    np.testing.assert_allclose(gx.unwrap({0: "batch", 2: "k"}), rx, rtol=1e-5)
    np.testing.assert_allclose(gw.unwrap(["k"]), rw, rtol=1e-5)


def test_grad_through_broadcast_input_sums_over_the_broadcast(rng):
    # w has no "batch" axis: its gradient must sum the contributions of every batch element
    xd = rng.normal(size=(5, 3)).astype(np.float32)
    x = nx.wrap(xd, ["batch", "k"])
    w = nx.wrap(np.float32([1.0, 2.0, 3.0]), ["k"])
    g = jax.grad(lambda w: (x * w).sum(("batch", "k")).unwrap())(w)
    np.testing.assert_allclose(g.unwrap(["k"]), xd.sum(0), rtol=1e-6)


def test_value_and_grad_of_a_pytree_of_named_arrays(xw):
    x, w, xd, wd = xw
    params = {"w": w, "scale": nx.wrap(np.float32(2.0))}
    val, g = jax.value_and_grad(lambda p: _loss(x, p["w"] * p["scale"]))(params)
    np.testing.assert_allclose(val, _loss_ref(xd, 2 * wd), rtol=1e-5)
    np.testing.assert_allclose(g["w"].unwrap(["k"]), 2 * jax.grad(_loss_ref, 1)(xd, 2 * wd), rtol=1e-5)
    assert isinstance(g["scale"], nx.NamedArray) and g["scale"].named_shape == {}


def test_vmap_over_a_leading_positional_axis(xw):
    x, w, xd, wd = xw
    out = jax.vmap(lambda a: (a * w).sum("k"))(x)  # maps positional axis 0 (size 3)
    assert out.shape == (3,) and out.named_shape == {"batch": 2}
    np.testing.assert_allclose(out.unwrap([None, "batch"]), np.einsum("bpk,k->pb", xd, wd), rtol=1e-5)


def test_vmap_inside_sees_valid_named_arrays_and_mixes_with_positional_args(rng):
    d = rng.normal(size=(6, 2, 3)).astype(np.float32)
    x = nx.wrap(d, [None, "a", "b"])
    seen = []

    def body(row, s):
        seen.append((row.shape, dict(row.named_shape)))
        return row.sum("b") * s

    out = jax.vmap(body, in_axes=(0, 0))(x, jnp.arange(6.0))
    assert seen == [((), {"a": 2, "b": 3})]
    np.testing.assert_allclose(out.unwrap([None, "a"]), d.sum(2) * np.arange(6.0)[:, None], rtol=1e-5)


def test_vmap_returns_pytrees_of_named_arrays(rng):
    d = rng.normal(size=(4, 3)).astype(np.float32)
    x = nx.wrap(d, [None, "k"])
    out = jax.vmap(lambda r: {"m": r.max("k"), "r": r - r.mean("k")})(x)
    np.testing.assert_allclose(out["m"].unwrap(), d.max(1))
    np.testing.assert_allclose(out["r"].unwrap([None, "k"]), d - d.mean(1, keepdims=True), atol=1e-6)


def test_scan_with_a_named_carry_and_named_xs(rng):
    d = rng.normal(size=(5, 2, 3)).astype(np.float32)
    xs = nx.wrap(d, [None, "b", "a"])  # scanned over positional axis 0

    def step(carry, x):
        carry = carry * 0.5 + x  # carry built as ("a", "b"), x stored from ("b", "a")
        return carry, carry.sum("a")

    init = nx.wrap(np.zeros((3, 2), np.float32), ["a", "b"])
    final, ys = lax.scan(step, init, xs)
    c = np.zeros((2, 3), np.float32)
    ref_ys = []
    for t in range(5):
        c = c * 0.5 + d[t]
        ref_ys.append(c.sum(1))
    np.testing.assert_allclose(final.unwrap(["b", "a"]), c, rtol=1e-5)
    assert ys.shape == (5,) and ys.named_shape == {"b": 2}
    np.testing.assert_allclose(ys.unwrap([None, "b"]), np.stack(ref_ys), rtol=1e-5)


def test_lax_map_with_and_without_batch_size(rng):
    d = rng.normal(size=(7, 3, 2)).astype(np.float32)
    x = nx.wrap(d, [None, "k", "batch"])
    for kwargs in ({}, {"batch_size": 3}):
        out = lax.map(lambda r: nx.exp(r).sum("k"), x, **kwargs)
        np.testing.assert_allclose(out.unwrap([None, "batch"]), np.exp(d).sum(1), rtol=1e-5)


def test_cond_branches_build_the_same_named_shape_in_different_orders(rng):
    d = rng.normal(size=(2, 3)).astype(np.float32)
    a = nx.wrap(d, ["a", "b"])
    b = nx.wrap(d.T, ["b", "a"])

    def f(pred, u, v):
        return lax.cond(pred, lambda: u * 2, lambda: nx.wrap(jnp.ones((3, 2)), ["b", "a"]) + v)

    for pred, ref in ((True, 2 * d), (False, d + 1)):
        np.testing.assert_allclose(f(pred, a, b).unwrap(["a", "b"]), ref, rtol=1e-6)
        np.testing.assert_allclose(jax.jit(f)(pred, a, b).unwrap(["a", "b"]), ref, rtol=1e-6)


def test_switch_and_while_loop_with_named_values(rng):
    x = nx.wrap(np.arange(6, dtype=np.float32).reshape(2, 3), ["a", "b"])
    branches = [lambda v: v + 1, lambda v: v.rename({"a": "b", "b": "a"}).rename({"a": "b", "b": "a"}) * 3]
    out = lax.switch(1, branches, x)
    np.testing.assert_allclose(out.unwrap(["a", "b"]), 3 * np.arange(6).reshape(2, 3))
    n, y = lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 2), (0, x))
    assert n == 3
    np.testing.assert_allclose(y.unwrap(["a", "b"]), 8 * np.arange(6).reshape(2, 3))


def test_jax_tree_map_over_pytrees_of_named_arrays(xw):
    x, w, xd, wd = xw
    tree = {"x": x, "ws": [w, w]}
    out = jax.tree.map(lambda v: v * 2, tree)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    np.testing.assert_allclose(out["x"].unwrap({0: "batch", 2: "k"}), 2 * xd)
    with fresh_canonical_orders():  # x's order is its set's (the first to flatten), whatever ran before
        leaves = jax.tree.leaves(tree)  # exactly one leaf per NamedArray: its storage
    assert len(leaves) == 3 and leaves[0] is w.data and leaves[2] is x.data  # dict keys sorted
    summed = jax.tree.map(lambda a, b: a + b, tree, out)
    np.testing.assert_allclose(summed["ws"][1].unwrap(["k"]), 3 * wd, rtol=1e-6)


def test_tree_map_across_different_storage_orders(rng):
    d = rng.normal(size=(2, 3)).astype(np.float32)
    a, b = nx.wrap(d, ["a", "b"]), nx.wrap(d.T.copy(), ["b", "a"])
    assert jax.tree.structure(a) == jax.tree.structure(b)
    out = jax.tree.map(lambda u, v: u - v, a, b)  # on storage: equal layouts by construction
    np.testing.assert_array_equal(out.unwrap(["a", "b"]), np.zeros((2, 3)))


def test_optree_namespace(xw):
    x, w, xd, wd = xw
    tree = {"x": x, "w": (w,)}
    out = optree.tree_map(lambda v: v + 1, tree, namespace="namedarray")
    assert isinstance(out["x"], nx.NamedArray) and out["x"].named_shape == x.named_shape
    np.testing.assert_allclose(out["w"][0].unwrap(["k"]), wd + 1)
    leaves, spec = optree.tree_flatten(tree, namespace="namedarray")
    assert len(leaves) == 2
    back = optree.tree_unflatten(spec, leaves)
    np.testing.assert_array_equal(back["x"].unwrap({0: "batch", 2: "k"}), xd)
    paths = optree.tree_paths(tree, namespace="namedarray")
    assert ("x", f"data[{','.join(nx.canonical_order(['batch', 'k']))}]") in paths  # the key names the order


def test_key_paths_name_the_data_field_and_its_order(xw):
    x, *_ = xw
    with fresh_canonical_orders():  # x's order is its set's (the first to flatten), whatever ran before
        [(path, leaf)] = jax.tree_util.tree_flatten_with_path(x)[0]
    assert jax.tree_util.keystr(path) == ".data[batch,k]" and leaf is x.data
    with fresh_canonical_orders():
        nx.fix_canonical_order(["k", "batch"])  # flattened in the other order, the key says so
        [(path, leaf)] = jax.tree_util.tree_flatten_with_path(x)[0]
    assert jax.tree_util.keystr(path) == ".data[k,batch]" and leaf.shape == (3, 4, 2)


def test_checkpoint_under_grad(xw):
    x, w, xd, wd = xw
    f = jax.checkpoint(lambda a, b: nx.sin(a * b).sum(("k", "batch", 0)).unwrap())
    g = jax.grad(f, argnums=1)(x, w)
    ref = jax.grad(lambda b: jnp.sum(jnp.sin(xd * b)))(wd)
    np.testing.assert_allclose(g.unwrap(["k"]), ref, rtol=1e-5)
    policy = jax.checkpoint_policies.dots_saveable
    g2 = jax.grad(jax.checkpoint(f, policy=policy), argnums=1)(x, w)
    np.testing.assert_allclose(g2.unwrap(["k"]), ref, rtol=1e-5)


def test_jit_returning_named_and_positional_outputs_in_a_tuple(xw):
    x, w, xd, wd = xw

    @jax.jit
    def f(a):
        return a.sum("k"), a.max("batch"), a.unwrap(["batch", None, "k"])

    s, m, u = f(x)
    np.testing.assert_allclose(s.unwrap([None, "batch"]), xd.sum(2).T, rtol=1e-5)
    np.testing.assert_allclose(m.unwrap([None, "k"]), xd.max(0))
    assert isinstance(u, jax.Array) and u.shape == (2, 3, 4)


# --------------------------------------------------------------------------------------------------------
# The xmap tutorial's expm_frechet examples, through nx.nmap


@pytest.fixture(scope="module")
def frechet_inputs():
    rng = np.random.default_rng(1)
    a = (rng.normal(size=(3, 4, 4)) * 0.3).astype(np.float32)
    e = (rng.normal(size=(3, 4, 4)) * 0.3).astype(np.float32)
    return a, e


def test_expm_frechet_batch_wise(frechet_inputs):
    a, e = frechet_inputs
    expm, frechet = nx.nmap(expm_frechet)(nx.wrap(a, ["b", ...]), nx.wrap(e, ["b", ...]))
    assert expm.named_shape == {"b": 3} and expm.shape == (4, 4)
    for i in range(3):
        r_expm, r_frechet = expm_frechet(a[i], e[i])
        np.testing.assert_allclose(expm[{"b": i}].unwrap(), r_expm, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(frechet[{"b": i}].unwrap(), r_frechet, rtol=1e-4, atol=1e-5)


def test_expm_frechet_all_pairs(frechet_inputs):
    a, e = frechet_inputs
    _, frechet = nx.nmap(expm_frechet)(nx.wrap(a, ["ba", ...]), nx.wrap(e, ["be", ...]))
    assert frechet.named_shape == {"ba": 3, "be": 3}
    out = nx.unwrap(frechet, ["ba", "be", ...])
    assert out.shape == (3, 3, 4, 4)
    for i in range(3):
        for j in range(3):
            np.testing.assert_allclose(out[i, j], expm_frechet(a[i], e[j])[1], rtol=1e-4, atol=1e-5)


def test_expm_frechet_keyword_arguments_pass_through(frechet_inputs):
    a, e = frechet_inputs
    frechet = nx.nmap(expm_frechet)(nx.wrap(a, ["b", ...]), nx.wrap(e, ["b", ...]), compute_expm=False)
    assert isinstance(frechet, nx.NamedArray)
    np.testing.assert_allclose(frechet[{"b": 2}].unwrap(), expm_frechet(a[2], e[2])[1], rtol=1e-4, atol=1e-5)


def test_mapping_a_named_axis_is_a_clear_error():
    # a NamedArray with no positional axes: vmap/scan can only slice one of its named axes
    x = nx.wrap(jnp.ones((3, 2)), ["a", "b"])
    for f in (lambda r: r * 2, lambda r: r.sum("a"), lambda r: nx.cumsum(r, axis="b")):
        with pytest.raises(nx.errors.AxisSpecError, match="mapped one of its named axes"):
            jax.vmap(f)(x)
    with pytest.raises(nx.errors.AxisSpecError, match="mapped one of its named axes"):
        lax.scan(lambda c, r: (c, r + 1), 0.0, x)


def test_nx_grad_takes_a_named_scalar_output(xw):
    x, w, xd, wd = xw

    def loss(x, w):  # ends in a reduction over every axis: a 0-d NamedArray with no names
        return ((x * w).sum("k") ** 2).sum(("batch", 0))

    gx, gw = nx.grad(loss, argnums=(0, 1))(x, w)
    rx, rw = jax.grad(_loss_ref, argnums=(0, 1))(xd, wd)
    np.testing.assert_allclose(gx.unwrap({0: "batch", 2: "k"}), rx, rtol=1e-5)
    np.testing.assert_allclose(gw.unwrap(["k"]), rw, rtol=1e-5)
    (value, aux), g = nx.value_and_grad(lambda w: (loss(x, w), w.sum("k")), has_aux=True)(w)
    np.testing.assert_allclose(value, _loss_ref(xd, wd), rtol=1e-5)
    assert isinstance(aux, nx.NamedArray) and aux.named_shape == {}
    np.testing.assert_allclose(g.unwrap(["k"]), rw, rtol=1e-5)
    with pytest.raises(nx.errors.PositionalMisuseError, match=r"named axes 'batch'.*\.sum\('batch'\)"):
        nx.grad(lambda w: (x * w).sum(("k", 0)))(w)
