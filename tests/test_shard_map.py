"""nx.shard_map: a function of NamedArrays on per-device blocks, by name.

The backbone is a property: random named programs (elementwise, reductions, collectives, einsum, softmax)
under random legal resources on (8,), (4, 2) and (2, 2, 2) meshes give the same values under nx.shard_map,
under nx.xmap with the same resources, and unsharded. Then the block-level tools (ppermute of blocks, halo
exchange), the examples, gradients, partial manual mode, and the errors.
"""

import sys
from pathlib import Path

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import fresh_canonical_orders
from hypothesis import given, settings
from jax.sharding import PartitionSpec as P
from meshes import MESHES, auto_mesh, collectives, explicit_mesh, legal_mapping, named_operands, same_spec

import namedarray as nx
from namedarray import errors

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

OPS = ["elementwise", "sum", "mean", "max", "std", "psum", "pmean", "pmax", "all_gather", "einsum", "softmax",
       "logsumexp", "layer_norm", "axis_index"]


@st.composite
def problems(draw, mesh_shape):
    sizes, x_names, y_names = draw(named_operands())
    resources = draw(legal_mapping(set(x_names) | set(y_names), sizes, mesh_shape))
    op, pick = draw(st.sampled_from(OPS)), draw(st.integers(0, 3))
    return sizes, x_names, y_names, resources, op, pick, draw(st.integers(0, 2**16))


def program(op, pick):
    """A named program with a single result, chosen by ``op`` (names picked by sorted position)."""
    def f(x, y):
        z = nx.tanh(x) * y + 1.0
        names = sorted(z.names)
        n = names[pick % len(names)]
        if op == "elementwise":
            return z
        if op in ("sum", "mean", "max", "std"):
            return getattr(nx, op)(z, n)
        if op == "layer_norm":
            return nx.nn.layer_norm(z, n)
        if op in ("psum", "pmean", "pmax"):
            return getattr(nx, op)(z, n)
        if op == "all_gather":
            return nx.all_gather(z, n)
        if op == "einsum":
            keep = sorted(set(x.names) ^ set(y.names))
            spec = "{" + ",".join(x.names) + "},{" + ",".join(y.names) + "}->{" + ",".join(keep) + "}"
            return nx.einsum(spec, x, y)
        if op == "softmax":
            return nx.nn.softmax(z, n)
        if op == "logsumexp":
            return nx.nn.logsumexp(z, n)
        return z + nx.axis_index(n).astype(jnp.float32) * 0.5 + nx.psum(1, n)
    return f


def positions(v):
    """out_axes placing every name of ``v`` after its positional axes, in sorted order."""
    return {i: n for i, n in enumerate(sorted(v.names), start=v.ndim)}


@pytest.mark.parametrize("mesh_shape", list(MESHES))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_shard_map_equals_xmap_and_the_unsharded_run(mesh_shape, data):
    sizes, x_names, y_names, resources, op, pick, seed = data.draw(problems(mesh_shape))
    rng = np.random.default_rng(seed)
    xd = rng.normal(size=[sizes[n] for n in x_names]).astype(np.float32)
    yd = rng.normal(size=[sizes[n] for n in y_names]).astype(np.float32)
    f = program(op, pick)
    in_axes = (list(x_names), list(y_names))
    # the result's names, found abstractly, place it (every argument name is bound, as in both maps)
    with nx.env.bind({n: sizes[n] for n in set(x_names) | set(y_names)}):
        shape = jax.eval_shape(f, nx.wrap(jnp.asarray(xd), x_names), nx.wrap(jnp.asarray(yd), y_names))
    out_axes = positions(shape)
    unsharded = nx.xmap(f, in_axes=in_axes, out_axes=out_axes)(xd, yd)
    mesh = auto_mesh(mesh_shape, MESHES[mesh_shape])
    with jax.set_mesh(mesh):
        via_xmap = nx.xmap(f, in_axes=in_axes, out_axes=out_axes, axis_resources=resources)(xd, yd)
        got = nx.shard_map(f, resources=resources)(nx.wrap(xd, x_names), nx.wrap(yd, y_names))
    assert got.named_shape == shape.named_shape and got.shape == shape.shape
    got = np.asarray(got.unwrap(out_axes))
    # normalising by a split name sums its squares blockwise: where a row's variance is near the epsilon
    # (two nearly equal values), float32 rounding of that sum moves the result by ~1e-4
    tol = 2e-4 if op in ("layer_norm", "std") else 2e-5
    np.testing.assert_allclose(got, np.asarray(unsharded), rtol=tol, atol=tol)
    np.testing.assert_allclose(got, np.asarray(via_xmap), rtol=tol, atol=tol)


# ------------------------------------------------------------------------------------------------------
# Blocks: what each device holds, and moving blocks


def test_inside_values_are_blocks_with_the_whole_sizes_known():
    seen = {}

    def body(x):
        seen.update(local=dict(x.named_shape), size=nx.axis_size("batch"), classes=nx.psum(1, "k"))
        return nx.axis_index("batch")

    x = nx.wrap(jnp.zeros((8, 3)), ["batch", "k"])
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        idx = nx.shard_map(body, resources={"batch": "data"})(x)
    assert seen == {"local": {"batch": 2, "k": 3}, "size": 8, "classes": 3}
    np.testing.assert_array_equal(idx.unwrap(["batch"]), np.arange(8))  # each element's index in the whole
    assert same_spec(idx.sharding.spec, P("data"))


@pytest.mark.parametrize("shift", [1, -1, 3])
def test_ppermute_over_a_split_name_moves_whole_blocks(shift):
    x = nx.wrap(jnp.arange(16.0).reshape(8, 2), ["x", "y"])
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        out = nx.shard_map(lambda v: nx.ppermute(v, "x", shift=shift), resources={"x": "data"})(x)
        pairs = nx.shard_map(lambda v: nx.ppermute(v, "x", [(0, 1), (1, 2)]), resources={"x": "data"})(x)
    blocks = np.asarray(x.unwrap(["x", "y"])).reshape(4, 2, 2)
    np.testing.assert_array_equal(np.asarray(out.unwrap(["x", "y"])),
                                  np.roll(blocks, shift, axis=0).reshape(8, 2))
    expected = np.zeros_like(blocks)  # blocks no pair reaches are zero-filled, as in JAX
    expected[1], expected[2] = blocks[0], blocks[1]
    np.testing.assert_array_equal(np.asarray(pairs.unwrap(["x", "y"])), expected.reshape(8, 2))
    # on a name that is not split, ppermute shifts elements, as everywhere
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        elems = nx.shard_map(lambda v: nx.ppermute(v, "y", shift=1), resources={"x": "data"})(x)
    np.testing.assert_array_equal(np.asarray(elems.unwrap(["x", "y"])),
                                  np.asarray(x.unwrap(["x", "y"]))[:, ::-1])


def test_the_halo_exchange_stencil_equals_the_unsplit_one():
    import halo_exchange

    with fresh_canonical_orders():  # the grid stored as built (x, y), whatever flattened first in the worker
        r = halo_exchange.run(50, (64, 32))
    np.testing.assert_allclose(r["halo"], r["reference"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r["automatic"], r["reference"], rtol=1e-6, atol=1e-6)
    assert r["ops"]["collective-permute"] >= 2 and r["ops"]["all-gather"] == 0
    assert r["block_shape"] == (8, 32)
    assert not np.allclose(r["reference"], halo_exchange.initial_grid(64, 32).unwrap(["x", "y"]))  # it moved


def test_slice_decode_example_keeps_each_block_where_it_is(capsys):
    import slice_decode

    r = slice_decode.main(fast=True)
    assert r["same"]
    assert r["per_block"]["argument"] == r["total"] // 8 and r["per_block"]["all-gathers"] == 0
    assert r["gathering"]["all-gathers"] >= 1 and r["gathering"]["temp"] >= r["total"]
    assert "same tokens: True, same probabilities: True" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------
# The tutorial network: values and gradients under every strategy, and vocabulary-parallel classes


@pytest.mark.parametrize("resources", [{"batch": "data"}, {"hidden": "model"}, {"classes": "model"},
                                       {"batch": "data", "hidden": "model"}, {"batch": ("data", "model")}])
def test_tutorial_network_values_and_gradients(resources):
    import tutorial

    data = tutorial.make_data(batch=16, inputs=12, hidden=8, classes=4)
    w1, w2, images, labels = data
    args = (nx.wrap(w1, ["inputs", "hidden"]), nx.wrap(w2, ["hidden", "classes"]),
            nx.wrap(images, ["batch", "inputs"]), nx.wrap(labels, ["batch"]))
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
        f = nx.shard_map(tutorial.named_loss, resources=resources)
        value = float(f(*args))
        grads = jax.grad(lambda *a: f(*a).unwrap(), argnums=(0, 1))(*args)
    np.testing.assert_allclose(value, float(tutorial.loss(*data)), rtol=1e-5)
    ref = jax.grad(tutorial.loss, argnums=(0, 1))(*data)
    np.testing.assert_allclose(grads[0].unwrap(["inputs", "hidden"]), ref[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads[1].unwrap(["hidden", "classes"]), ref[1], rtol=1e-4, atol=1e-6)


def test_explicit_mesh_axes_and_partial_manual_mode():
    x = nx.wrap(jnp.arange(32.0).reshape(8, 4), ["batch", "hidden"])

    def body(v):
        # 'model' is not manual here: the body may still lay values out over it by name
        h = (v * 2).shard({"hidden": "model"})
        return nx.sum(h, "batch")

    for mesh in (auto_mesh((4, 2), ("data", "model")), explicit_mesh((4, 2), ("data", "model"))):
        with jax.set_mesh(mesh):
            out = nx.shard_map(body, resources={"batch": "data"})(x)
        np.testing.assert_allclose(out.unwrap(["hidden"]), 2 * np.arange(32.0).reshape(8, 4).sum(0))


def test_a_split_name_over_two_mesh_axes_and_results_laid_out_by_it():
    x = nx.wrap(jnp.arange(64.0).reshape(8, 8), ["batch", "k"])
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), fresh_canonical_orders():  # batch stored first
        out = nx.shard_map(lambda v: v - nx.mean(v, "batch"), resources={"batch": ("data", "model")})(x)
    assert same_spec(out.sharding.spec, P(("data", "model")))
    ref = np.arange(64.0).reshape(8, 8)
    np.testing.assert_allclose(out.unwrap(["batch", "k"]), ref - ref.mean(0))


def test_rules_in_force_are_the_default_resources_and_decorator_form():
    @nx.shard_map
    def total(v):
        return nx.psum(v, "batch")

    x = nx.wrap(jnp.arange(8.0), ["batch"])
    with jax.set_mesh(auto_mesh((8,), ("data",))), nx.axis_rules({"batch": "data"}):
        assert float(total(x)) == 28.0
        hlo = jax.jit(total).lower(x).compile().as_text()
    assert collectives(hlo).get("all-reduce", 0) >= 1


# ------------------------------------------------------------------------------------------------------
# Errors


def test_block_size_not_divisible_across_devices():
    x = nx.wrap(jnp.zeros((6, 4)), ["batch", "k"])
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        with pytest.raises(errors.DivisibilityError,
                           match=r"nx.shard_map argument \[0\]: axis 'batch' has size 6, which is not "
                                 r"divisible by the 4 devices"):
            nx.shard_map(lambda v: v, resources={"batch": "data"})(x)


def test_a_collective_over_a_mapped_name_that_is_not_split_here():
    x = nx.wrap(jnp.zeros((8, 4)), ["batch", "k"])

    def body(v):
        h = nx.zeros(named_shape={"hidden": 4})  # made here: whole on every device
        return nx.psum(h, "hidden") + nx.sum(v, "batch")

    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
        with pytest.raises(errors.MissingResourceError,
                           match=r"nx.psum: axis 'hidden' is mapped to mesh axes by the resources of this "
                                 r"nx.shard_map, but no argument carries it"):
            nx.shard_map(body, resources={"batch": "data", "hidden": "model"})(x)


def test_ppermute_pairs_that_are_not_a_permutation():
    x = nx.wrap(jnp.zeros((8, 4)), ["batch", "k"])
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        with pytest.raises(errors.AxisSpecError, match="sources and destinations must be unique"):
            nx.shard_map(lambda v: nx.ppermute(v, "batch", [(0, 1), (2, 1)]), resources={"batch": "data"})(x)
        with pytest.raises(errors.AxisSpecError, match=r"the pair \(0, 4\) in perm is out of range: axis "
                                                       r"'batch' is split into 4 blocks here"):
            nx.shard_map(lambda v: nx.ppermute(v, "batch", [(0, 4)]), resources={"batch": "data"})(x)


@pytest.mark.parametrize("op,match", [
    (lambda v: nx.cumsum(v, "batch"), "nx.cumsum: axis 'batch' is split across devices by nx.shard_map "
                                      r"\(each holds 2 of its 8 elements, over mesh axes \('data',\)\)"),
    (lambda v: nx.sort(v, "batch"), "nx.sort: axis 'batch' is split"),
    (lambda v: v[{"batch": 0}], "indexing by name: axis 'batch' is split"),
    (lambda v: nx.median(v, "batch"), "nx.median: axis 'batch' is split"),
    (lambda v: v.rename({"batch": "b"}), "rename: axis 'batch' is split"),
    (lambda v: nx.unflatten(v, "batch", {"p": 2, "q": 4}), "nx.unflatten: axis 'batch' is split"),
])
def test_operations_that_need_a_whole_split_axis_say_so(op, match):
    x = nx.wrap(jnp.zeros((8, 4)), ["batch", "k"])
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        with pytest.raises(errors.SplitAxisError, match=match):
            nx.shard_map(op, resources={"batch": "data"})(x)


def test_a_result_that_varies_without_its_name():
    x = nx.wrap(jnp.ones((8, 4)), ["batch", "k"])
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        with pytest.raises(errors.AxisSpecError, match="must be the same on every device"):
            nx.shard_map(lambda v: v.unwrap(["batch", "k"]).sum(0), resources={"batch": "data"})(x)


def test_no_mesh_and_keyword_arguments():
    x = nx.wrap(jnp.ones(8), ["batch"])
    with pytest.raises(errors.MissingResourceError, match="nx.shard_map: no mesh is in context"):
        nx.shard_map(lambda v: v, resources={"batch": "data"})(x)
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        with pytest.raises(TypeError, match="positional arguments only"):
            nx.shard_map(lambda v: v, resources={"batch": "data"})(v=x)

