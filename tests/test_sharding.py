"""Sharding by name: x.shard(), nx.shard, nx.axis_rules, nx.sharding, nx.jit, nx.from_process_local.

Values never change: every layout test also compares values with the unsharded computation. Layouts are
checked as the PartitionSpec of the storage (positional axes first, then the names in storage order), for
Auto and Explicit meshes and every way of naming the mesh (jax.set_mesh, legacy `with Mesh`, mesh=).
"""

import asyncio
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from meshes import auto_mesh, collectives, explicit_mesh, in_context, legacy, mesh_of, norm_spec, same_spec

import namedarray as nx
from namedarray import errors
from namedarray.core.array import is_named

RULES = {"batch": "data", "embed": "model"}
TRAILING = {1: "batch", 2: "embed"}  # back to positions, after the positional axis


def example(order=("batch", "embed")):
    """A value with a positional axis and two names, stored in ``order``."""
    sizes = {"batch": 8, "embed": 4}
    data = jnp.arange(3 * 8 * 4, dtype=jnp.float32).reshape((3,) + tuple(sizes[n] for n in order))
    return nx.wrap(data, [None, *order])


def expected_spec(x, rules):
    """The storage spec by the rule: names split over their mesh axes, positional axes replicated."""
    parts = [None] * x.ndim
    for n in x.names:
        axes = rules.get(n)
        parts.append(axes if axes is None or isinstance(axes, str) or len(axes) > 1 else axes[0])
    return P(*parts)


# ------------------------------------------------------------------------------------------------------
# .shard() inside and outside jit


@pytest.mark.parametrize("kind", ["auto", "explicit", "legacy"])
@pytest.mark.parametrize("order", [("batch", "embed"), ("embed", "batch")])
def test_shard_inside_jit_constrains_by_name(kind, order):
    x = example(order)
    with in_context(kind, (4, 2), ("data", "model")), nx.axis_rules(RULES):
        out = jax.jit(lambda v: (v * 2).shard())(x)
    assert same_spec(out.sharding.spec, expected_spec(out, RULES))
    np.testing.assert_array_equal(out.unwrap(TRAILING), 2 * x.unwrap(TRAILING))


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_shard_with_mesh_argument_and_no_context(kind):
    mesh = mesh_of(kind, (4, 2), ("data", "model"))
    x = example()
    eager = x.shard(RULES, mesh=mesh)
    assert eager.sharding == NamedSharding(mesh, P(None, "data", "model"))
    np.testing.assert_array_equal(eager.unwrap(TRAILING), x.unwrap(TRAILING))
    f = jax.jit(lambda v: (v + 1).shard(RULES, mesh=mesh))
    if kind == "auto":
        assert same_spec(f(x).sharding.spec, P(None, "data", "model"))
    else:  # JAX lays jitted Explicit layouts out on the mesh in context: say so, rather than fail to lower
        with pytest.raises(errors.MissingResourceError, match="needs that mesh in context"):
            f(x)
        with jax.set_mesh(mesh):
            assert same_spec(f(x).sharding.spec, P(None, "data", "model"))


@pytest.mark.parametrize("kind", ["auto", "explicit", "legacy"])
def test_shard_outside_jit_places_the_data(kind):
    x = example(("embed", "batch"))
    with in_context(kind, (4, 2), ("data", "model")), nx.axis_rules(RULES):
        y = x.shard()
        assert isinstance(y.sharding, NamedSharding)
        assert same_spec(y.sharding.spec, P(None, "model", "data"))  # storage order kept
        assert [s.data.shape for s in y.data.addressable_shards] == [(3, 2, 2)] * 8
    np.testing.assert_array_equal(y.unwrap(TRAILING), x.unwrap(TRAILING))


def test_mixed_explicit_and_auto_mesh_axes():
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit, AxisType.Auto))
    x = example()
    with jax.set_mesh(mesh), nx.axis_rules(RULES):
        out = jax.jit(lambda v: (v * 3).shard())(x)
        eager = x.shard()
    for y in (out, eager):
        assert same_spec(y.sharding.spec, P(None, "data", "model"))
    np.testing.assert_array_equal(out.unwrap(TRAILING), 3 * x.unwrap(TRAILING))


def test_one_name_over_two_mesh_axes_major_to_minor():
    x = example()
    mesh = auto_mesh((4, 2), ("data", "model"))
    y = x.shard({"batch": ("model", "data")}, mesh=mesh)
    assert same_spec(y.sharding.spec, P(None, ("model", "data")))
    assert y.data.addressable_shards[0].data.shape == (3, 1, 4)


def test_unmapped_names_and_positional_axes_are_replicated():
    x = example()
    mesh = auto_mesh((8,), ("data",))
    y = jax.jit(lambda v: v.shard({"vocab": "data"}, mesh=mesh))(x)  # a rule for another name: unused
    assert same_spec(y.sharding.spec, P())
    assert all(s.data.shape == (3, 8, 4) for s in y.data.addressable_shards)


def test_no_mesh_and_no_rules_is_a_no_op_so_model_code_runs_on_one_device():
    x = example()
    assert x.shard() is x
    assert nx.shard({"w": x, "n": 3}) == {"w": x, "n": 3}
    with nx.axis_rules({"vocab": "model"}):  # rules for names the value does not carry: nothing to do
        assert x.shard() is x
    f = jax.jit(lambda v: (v * 2).shard().sum("embed"))
    np.testing.assert_allclose(f(x).unwrap({1: "batch"}), 2 * x.unwrap(TRAILING).sum(-1))


def test_shard_a_pytree_leaves_other_leaves_alone():
    mesh = auto_mesh((4, 2), ("data", "model"))
    params = {"w": example(), "b": nx.wrap(jnp.zeros(6), ["embed"]), "step": 7, "plain": jnp.ones(3)}
    out = nx.shard(params, RULES, mesh=mesh)
    assert out["step"] == 7 and out["plain"] is params["plain"]
    assert same_spec(out["w"].sharding.spec, P(None, "data", "model"))
    assert same_spec(out["b"].sharding.spec, P("model"))


def test_abstract_values_get_a_sharding():
    mesh = auto_mesh((4, 2), ("data", "model"))
    abstract = jax.eval_shape(example)
    out = abstract.shard(RULES, mesh=mesh)
    assert out.data.sharding == NamedSharding(mesh, P(None, "data", "model"))


def test_gradients_through_shard_are_the_positional_ones():
    mesh = auto_mesh((4, 2), ("data", "model"))
    x = example()

    def loss(v):
        return nx.sum(nx.tanh(v.shard(RULES, mesh=mesh)) ** 2, axis=(0, "batch", "embed")).unwrap()

    def positional(a):
        return jnp.sum(jnp.tanh(a) ** 2)

    g = jax.jit(jax.grad(loss))(x)
    # the positional program compiled whole too: the gradient of a saturated tanh is 1 - tanh**2, a
    # cancellation whose rounding differs between one fused program and op-by-op kernels
    ref = jax.jit(jax.grad(positional))(x.unwrap(TRAILING))
    np.testing.assert_allclose(g.unwrap(TRAILING), ref, rtol=1e-6)


def test_shard_under_vmap_constrains_the_unmapped_part():
    mesh = auto_mesh((4, 2), ("data", "model"))
    xs = nx.wrap(jnp.ones((5, 8, 4)), [None, "batch", "embed"])
    out = jax.jit(jax.vmap(lambda v: (v * 2).shard(RULES, mesh=mesh)))(xs)
    assert out.named_shape == {"batch": 8, "embed": 4} and out.shape == (5,)
    np.testing.assert_array_equal(out.unwrap(TRAILING), 2 * np.ones((5, 8, 4)))


# ------------------------------------------------------------------------------------------------------
# Explicit mesh axes: contractions over a split name get their layout by name


@pytest.mark.parametrize("rules", [
    {"batch": "data", "embed": "model"},                     # contracted name split: an all-reduce
    {"batch": "data", "embed": "model", "out": None},
    {"embed": ("data", "model")},
])
def test_contractions_over_a_split_name_on_explicit_axes(rules):
    rng = np.random.default_rng(0)
    x = nx.wrap(jnp.asarray(rng.normal(size=(8, 8)), jnp.float32), ["batch", "embed"])
    w = nx.wrap(jnp.asarray(rng.normal(size=(8, 4)), jnp.float32), ["embed", "out"])
    ref = x.unwrap(["batch", "embed"]) @ w.unwrap(["embed", "out"])
    with jax.set_mesh(explicit_mesh((4, 2), ("data", "model"))), nx.axis_rules(rules):
        for f in (lambda a, b: nx.dot(a.shard(), b.shard(), axis="embed"),
                  lambda a, b: nx.einsum("{batch,embed},{embed,out}->{batch,out}", a.shard(), b.shard()),
                  lambda a, b: (a.shard() * b.shard()).sum("embed")):
            got = jax.jit(lambda a, b, f=f: f(a, b).shard())(x, w)
            np.testing.assert_allclose(np.asarray(got.unwrap(["batch", "out"])), ref, rtol=1e-5, atol=1e-5)
            eager = f(x, w)
            np.testing.assert_allclose(np.asarray(eager.unwrap(["batch", "out"])), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rules", [
    {"batch": "data"},                                       # the indices split, the table whole
    {"batch": "data", "embed": "model"},                     # and the name the table keeps split
    {"batch": "data", "vocab": "model"},                     # the looked-up name split: gathered
])
def test_lookup_by_name_with_split_indices_on_explicit_axes(rules):
    rng = np.random.default_rng(0)
    table = nx.wrap(jnp.asarray(rng.normal(size=(12, 4)), jnp.float32), ["vocab", "embed"])
    tokens = nx.wrap(jnp.asarray(rng.integers(0, 12, size=(8, 5)), jnp.int32), ["batch", "seq"])
    ref = table.unwrap(["vocab", "embed"])[tokens.unwrap(["batch", "seq"])]
    with jax.set_mesh(explicit_mesh((4, 2), ("data", "model"))), nx.axis_rules(rules):
        jitted = jax.jit(lambda t, i: nx.take(t.shard(), i.shard(), axis="vocab"))(table, tokens)
        eager = nx.take(table.shard(), tokens.shard(), axis="vocab")
    for got in (jitted, eager):
        np.testing.assert_allclose(np.asarray(got.unwrap(["batch", "seq", "embed"])), ref)
        assert same_spec(got.sharding.spec, expected_spec(got, rules))  # laid out by its names


# ------------------------------------------------------------------------------------------------------
# nx.axis_rules


def test_axis_rules_nest_inner_wins_per_name_and_none_replicates():
    x = example()
    mesh = auto_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data", "embed": "model"}):
        assert nx.axis_rules() == {"batch": "data", "embed": "model"}
        with nx.axis_rules({"embed": None}):
            assert nx.axis_rules() == {"batch": "data", "embed": None}
            assert same_spec(x.shard().sharding.spec, P(None, "data"))
        assert same_spec(x.shard().sharding.spec, P(None, "data", "model"))
    assert nx.axis_rules() == {}


def test_axis_rules_as_a_decorator_applies_at_each_call():
    @nx.axis_rules({"batch": "model"})
    def layout(v):
        return v.shard().sharding.spec, nx.axis_rules()

    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
        with nx.axis_rules({"embed": "data"}):
            spec, rules = layout(example())
        assert rules == {"embed": "data", "batch": "model"}
        assert same_spec(spec, P(None, "model", "data"))
        assert same_spec(layout(example())[0], P(None, "model"))
    assert nx.axis_rules() == {}


def test_jitted_function_follows_the_rules_in_force_at_each_call():
    x = example()
    f = jax.jit(lambda v: (v + 1).shard())
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
        with nx.axis_rules({"batch": "data"}):
            a = f(x)
        with nx.axis_rules({"batch": "model", "embed": "data"}):
            b = f(x)
    assert same_spec(a.sharding.spec, P(None, "data"))
    assert same_spec(b.sharding.spec, P(None, "model", "data"))


def test_axis_rules_per_thread():
    seen = {}
    barrier = threading.Barrier(2)

    def worker(axis):
        with nx.axis_rules({"batch": axis}):
            barrier.wait()
            seen[axis] = nx.axis_rules()
            barrier.wait()

    threads = [threading.Thread(target=worker, args=(a,)) for a in ("data", "model")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"data": {"batch": "data"}, "model": {"batch": "model"}}
    assert nx.axis_rules() == {}


def test_axis_rules_per_asyncio_task():
    mesh = auto_mesh((4, 2), ("data", "model"))
    x = example()
    f = nx.jit(lambda v: v * 2)

    async def task(axis, results):
        with nx.axis_rules({"batch": axis}):
            await asyncio.sleep(0)  # the other task enters its rules meanwhile
            results[axis] = (nx.axis_rules(), f(x).sharding.spec)
            await asyncio.sleep(0)

    async def main():
        results = {}
        await asyncio.gather(task("data", results), task("model", results))
        return results

    with jax.set_mesh(mesh):
        results = asyncio.run(main())
    assert results["data"][0] == {"batch": "data"} and results["model"][0] == {"batch": "model"}
    assert same_spec(results["data"][1], P(None, "data"))
    assert same_spec(results["model"][1], P(None, "model"))


def test_axis_rules_validates_its_mapping_at_once():
    with pytest.raises(errors.AxisSpecError, match="'batch' must map to a mesh axis name"):
        nx.axis_rules({"batch": 3})
    with pytest.raises(TypeError, match="mapping from axis names"):
        nx.axis_rules(["batch", "data"])


# ------------------------------------------------------------------------------------------------------
# nx.sharding


def mlp_init(key, inputs=16, hidden=32, classes=8):
    k1, k2 = jax.random.split(key)
    return {
        "w1": nx.random.normal(k1, named_shape={"inputs": inputs, "hidden": hidden}) / np.sqrt(inputs),
        "w2": nx.random.normal(k2, named_shape={"hidden": hidden, "classes": classes}) / np.sqrt(hidden),
    }


def mlp_loss(params, images, labels):
    h = nx.nn.relu(nx.dot(images.shard(), params["w1"].shard(), axis="inputs")).shard()
    logits = nx.dot(h, params["w2"].shard(), axis="hidden")
    logp = logits - nx.nn.logsumexp(logits, "classes")
    return -nx.mean(nx.sum(nx.nn.one_hot(labels, 8, axis="classes") * logp, "classes"), "batch").unwrap()


def test_sharding_of_an_abstract_tree_for_jit_and_device_put():
    mesh = auto_mesh((4, 2), ("data", "model"))
    abstract = jax.eval_shape(mlp_init, jax.random.key(0))
    with jax.set_mesh(mesh), nx.axis_rules({"hidden": "model", "batch": "data"}):
        shardings = nx.sharding(abstract)
        assert jax.tree.structure(shardings) == jax.tree.structure(abstract, is_leaf=is_named)
        w1 = shardings["w1"]
        assert isinstance(w1, NamedSharding) and w1.mesh == mesh
        names = abstract["w1"].names
        assert same_spec(w1.spec, P(*[("model" if n == "hidden" else None) for n in names]))
        params = jax.jit(mlp_init, out_shardings=shardings)(jax.random.key(0))
        moved = jax.device_put(mlp_init(jax.random.key(0)), shardings)
        step = jax.jit(lambda p: jax.tree.map(lambda v: v * 2, p), in_shardings=(shardings,),
                       out_shardings=shardings)
        doubled = step(params)
    for p in (params, moved, doubled):
        assert p["w1"].sharding.is_equivalent_to(w1, 2)
    ref = mlp_init(jax.random.key(0))
    np.testing.assert_allclose(doubled["w2"].unwrap(["hidden", "classes"]),
                               2 * ref["w2"].unwrap(["hidden", "classes"]), rtol=1e-6)


def test_sharding_gives_other_leaves_replicated_and_needs_a_mesh():
    mesh = auto_mesh((8,), ("data",))
    s = nx.sharding({"x": example(), "n": jnp.ones(3)}, {"batch": "data"}, mesh=mesh)
    assert s["n"] == NamedSharding(mesh, P())
    with pytest.raises(errors.MissingResourceError, match="nx.sharding: no mesh is in context"):
        nx.sharding({"x": example()}, {"batch": "data"})


def test_sharding_spec_is_that_of_the_flattened_leaf():
    # built embed-first, flattened in the canonical order of its name set: the spec follows the leaf
    x = example(("embed", "batch"))
    mesh = auto_mesh((4, 2), ("data", "model"))
    s = nx.sharding(x, RULES, mesh=mesh)
    leaf_names = jax.tree_util.tree_flatten(x)[1].node_data()[1]
    assert same_spec(s.spec, P(None, *[RULES[n] for n in leaf_names]))


# ------------------------------------------------------------------------------------------------------
# nx.jit


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_nx_jit_init_creates_parameters_already_split(kind):
    mesh = mesh_of(kind, (4, 2), ("data", "model"))
    rules = {"inputs": "data", "hidden": "model"}
    init = nx.jit(mlp_init)
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        params = init(jax.random.key(0))
        compiled = init.lower(jax.random.key(0)).compile()
    ref = mlp_init(jax.random.key(0))
    w1 = params["w1"]
    full = w1.data.size * w1.data.dtype.itemsize
    for s in w1.data.addressable_shards:
        assert s.data.nbytes == full // 8  # inputs over data (4) x hidden over model (2)
    w2 = params["w2"]
    assert all(s.data.nbytes == w2.data.nbytes // 2 for s in w2.data.addressable_shards)  # hidden over 2
    # the program's outputs are 1/N per device, as jax.jit with the same out_shardings gives
    hand = jax.jit(mlp_init, out_shardings={"w1": NamedSharding(mesh, P(*[rules.get(n) for n in w1.names])),
                                            "w2": NamedSharding(mesh, P(*[rules.get(n) for n in w2.names]))})
    with jax.set_mesh(mesh):
        theirs = hand.lower(jax.random.key(0)).compile().memory_analysis()
    assert compiled.memory_analysis().output_size_in_bytes == theirs.output_size_in_bytes
    total = sum(v.data.nbytes for v in ref.values())
    assert compiled.memory_analysis().output_size_in_bytes < total / 3
    for k in ref:
        np.testing.assert_allclose(params[k].unwrap(list(ref[k].names)), ref[k].unwrap(list(ref[k].names)),
                                   rtol=1e-6)


def sgd_step(params, images, labels):
    loss, grads = jax.value_and_grad(mlp_loss)(params, images, labels)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


def positional_loss(params, images, labels):
    h = jax.nn.relu(images @ params["w1"])
    logits = h @ params["w2"]
    logp = logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, 8) * logp, axis=1))


def positional_step(params, images, labels):
    loss, grads = jax.value_and_grad(positional_loss)(params, images, labels)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


STRATEGIES = [
    ((8,), ("data",), {"batch": "data"}),
    ((8,), ("model",), {"hidden": "model"}),
    ((4, 2), ("data", "model"), {"batch": "data", "hidden": "model"}),
]


@pytest.mark.parametrize("shape,axes,rules", STRATEGIES)
def test_sharded_training_step_matches_the_hand_written_one(shape, axes, rules):
    mesh = auto_mesh(shape, axes)
    params = mlp_init(jax.random.key(1))
    rng = np.random.default_rng(0)
    images = nx.wrap(jnp.asarray(rng.normal(size=(32, 16)), jnp.float32), ["batch", "inputs"])
    labels = nx.wrap(jnp.asarray(rng.integers(0, 8, size=32)), ["batch"])

    # the hand-written twin: positional arrays, jit + NamedSharding from the same strategy
    def spec(*names):
        return NamedSharding(mesh, P(*[rules.get(n) for n in names]))

    pos = {"w1": params["w1"].unwrap(["inputs", "hidden"]), "w2": params["w2"].unwrap(["hidden", "classes"])}
    pshard = {"w1": spec("inputs", "hidden"), "w2": spec("hidden", "classes")}
    hand = jax.jit(positional_step, in_shardings=(pshard, spec("batch", "inputs"), spec("batch")),
                   out_shardings=(pshard, spec()))
    pargs = (jax.device_put(pos, pshard), jax.device_put(images.unwrap(["batch", "inputs"]),
                                                         spec("batch", "inputs")),
             jax.device_put(labels.unwrap(["batch"]), spec("batch")))
    (hand_params, hand_loss), hand_hlo = hand(*pargs), hand.lower(*pargs).compile()

    step = nx.jit(sgd_step)
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        new, loss = step(params, images, labels)
        compiled = step.lower(params, images, labels).compile()
    np.testing.assert_allclose(float(loss), float(hand_loss), rtol=1e-5)
    np.testing.assert_allclose(new["w1"].unwrap(["inputs", "hidden"]), hand_params["w1"], rtol=1e-5,
                               atol=1e-6)
    assert collectives(compiled.as_text()) == collectives(hand_hlo.as_text())
    mine, theirs = compiled.memory_analysis(), hand_hlo.memory_analysis()
    assert mine.argument_size_in_bytes == theirs.argument_size_in_bytes
    assert mine.output_size_in_bytes == theirs.output_size_in_bytes
    assert same_spec(new["w1"].sharding.spec, P(*[rules.get(n) for n in new["w1"].names]))


def test_nx_jit_passes_static_arguments_and_donation_through():
    mesh = auto_mesh((8,), ("data",))
    x = example()

    def scale(v, k, *, power):
        return v * k ** power

    f = nx.jit(scale, static_argnums=1, static_argnames="power", donate_argnums=0)
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
        placed = x.shard()
        out = f(placed, 3, power=2)
        assert placed.data.is_deleted()  # donated
        assert same_spec(out.sharding.spec, P(None, "data"))
    np.testing.assert_array_equal(out.unwrap(TRAILING), 9 * x.unwrap(TRAILING))


def test_nx_jit_as_a_decorator_with_resources_and_without_a_mesh():
    seen = []

    @nx.jit(resources={"embed": "data"})
    def double(v):
        seen.append(nx.axis_rules())
        return v * 2

    x = example()
    with jax.set_mesh(auto_mesh((2,), ("data",))):
        out = double(x)
    assert seen == [{"embed": "data"}]
    assert same_spec(out.sharding.spec, P(None, None, "data"))

    @nx.jit
    def plain(v):
        return v + 1

    np.testing.assert_array_equal(plain(x).unwrap(TRAILING), x.unwrap(TRAILING) + 1)


def test_nx_jit_moves_arguments_laid_out_otherwise_and_follows_new_rules():
    mesh = auto_mesh((4, 2), ("data", "model"))
    f = nx.jit(lambda v: v + 1)
    x = example()
    with jax.set_mesh(mesh):
        other = x.shard({"embed": "data"})
        with nx.axis_rules({"batch": "data"}):
            a = f(other)  # placed again, by the rules in force
            b = f(a)  # already laid out: passed as it is
        with nx.axis_rules({"batch": "model", "embed": "data"}):
            c = f(b)
    assert same_spec(a.sharding.spec, P(None, "data")) and same_spec(b.sharding.spec, P(None, "data"))
    assert same_spec(c.sharding.spec, P(None, "model", "data"))
    np.testing.assert_array_equal(c.unwrap(TRAILING), x.unwrap(TRAILING) + 3)


def test_nx_jit_inside_jit_constrains_instead_of_placing():
    mesh = auto_mesh((8,), ("data",))
    inner = nx.jit(lambda v: v * 2)
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
        out = jax.jit(lambda v: inner(v) + 1)(example())
    assert same_spec(out.sharding.spec, P(None, "data"))


# ------------------------------------------------------------------------------------------------------
# nx.jit's precedence for an output's layout: explicit out_shardings > the body's constraint > rules >
# replicated


def stated_in_body(v):
    return nx.shard(v, {"embed": "data"})  # a layout the body states, whatever the rules say


@pytest.mark.parametrize("order", [("batch", "embed"), ("embed", "batch")])
def test_nx_jit_keeps_the_layout_the_body_states_as_jax_jit_does(order):
    x = example(order)
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
        ours, theirs = nx.jit(stated_in_body)(x), jax.jit(stated_in_body)(x)
        abstract = nx.jit(stated_in_body).eval_shape(x)
    assert ours.names == theirs.names
    assert same_spec(ours.sharding.spec, theirs.sharding.spec)
    assert same_spec(ours.sharding.spec, expected_spec(ours, {"embed": "data"}))
    assert same_spec(abstract.data.sharding.spec, ours.sharding.spec)  # a restore target says the same
    np.testing.assert_array_equal(ours.unwrap(TRAILING), x.unwrap(TRAILING))


def test_nx_jit_body_constraint_outranks_the_rules_which_fill_in_the_rest():
    x = example()
    mesh = auto_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh):
        with nx.axis_rules({"batch": None}):  # a rule on another name: the body's layout stays
            a = nx.jit(stated_in_body)(x)
        with nx.axis_rules({"embed": "model", "batch": "data"}):  # a rule on the same name: the body wins
            b = nx.jit(stated_in_body)(x)
            c = nx.jit(lambda v: v * 2)(x)  # nothing stated: the rules
            d = nx.jit(lambda v: nx.shard(v, {"embed": "data"}) * 2)(x)  # stated, then computed on: rules
    assert same_spec(a.sharding.spec, expected_spec(a, {"embed": "data"}))
    assert same_spec(b.sharding.spec, expected_spec(b, {"embed": "data"}))
    assert same_spec(c.sharding.spec, expected_spec(c, {"embed": "model", "batch": "data"}))
    assert same_spec(d.sharding.spec, expected_spec(d, {"embed": "model", "batch": "data"}))
    for v in (a, b):
        np.testing.assert_array_equal(v.unwrap(TRAILING), x.unwrap(TRAILING))


def test_nx_jit_replicates_what_neither_body_nor_rules_say():
    x = example()
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules({"other": "data"}):
        out = nx.jit(lambda v: v + 1)(x.shard({"batch": "data"}))
    assert same_spec(out.sharding.spec, P())


def test_nx_jit_explicit_shardings_outrank_the_body_and_the_rules():
    x = example()
    mesh = auto_mesh((4, 2), ("data", "model"))
    explicit = NamedSharding(mesh, P(None, "model"))
    with jax.set_mesh(mesh), nx.axis_rules({"embed": "model", "batch": "data"}):
        out = nx.jit(stated_in_body, out_shardings=explicit)(x)
        placed = nx.jit(lambda v: v, in_shardings=explicit, out_shardings=explicit)(x)
        abstract = nx.jit(stated_in_body, out_shardings=explicit).eval_shape(x)
    assert same_spec(out.sharding.spec, P(None, "model"))
    assert same_spec(placed.sharding.spec, P(None, "model"))
    assert abstract.named_shape == x.named_shape
    np.testing.assert_array_equal(out.unwrap(TRAILING), x.unwrap(TRAILING))
    np.testing.assert_array_equal(placed.unwrap(TRAILING), x.unwrap(TRAILING))


# ------------------------------------------------------------------------------------------------------
# Errors, raised before anything moves, naming the names, sizes and mesh axes


def test_two_names_on_one_mesh_axis():
    mesh = auto_mesh((4, 2), ("data", "model"))
    with pytest.raises(errors.ResourceConflictError,
                       match=r"x.shard\(\): axes 'batch' and 'embed' both map to mesh axis 'data'"):
        example().shard({"batch": "data", "embed": ("model", "data")}, mesh=mesh)


def test_size_not_divisible_by_its_mesh_axes():
    mesh = auto_mesh((4, 2), ("data", "model"))
    bad = {"embed": ("data", "model")}
    with pytest.raises(errors.DivisibilityError,
                       match=r"axis 'embed' has size 4, which is not divisible by the 8 devices of its mesh "
                             r"axes \('data', 'model'\) \(data=4, model=2\)"):
        example().shard(bad, mesh=mesh)
    with pytest.raises(errors.DivisibilityError, match="'embed' has size 4"):
        jax.jit(lambda v: v.shard(bad, mesh=mesh))(example())  # inside jit too


def test_mesh_axis_the_mesh_lacks():
    mesh = auto_mesh((4, 2), ("data", "model"))
    with pytest.raises(errors.MissingResourceError,
                       match=r"axis 'batch' maps to mesh axis 'rows', but the mesh has axes \{'data': 4, "
                             r"'model': 2\}"):
        example().shard({"batch": "rows"}, mesh=mesh)


def test_rules_but_no_mesh():
    with nx.axis_rules({"batch": "data"}):
        with pytest.raises(errors.MissingResourceError,
                           match=r"x.shard\(\): the rules map 'batch' -> \('data',\), but no mesh is in "
                                 r"context"):
            example().shard()
        with pytest.raises(errors.MissingResourceError, match=r"nx.shard at \['w'\]: the rules map 'batch'"):
            nx.shard({"w": example()})


def test_mesh_axis_twice_in_one_names_tuple():
    with pytest.raises(errors.ResourceConflictError,
                       match=r"axis 'batch' maps to \('data', 'data'\), which names mesh axis 'data' twice"):
        nx.axis_rules({"batch": ("data", "data")})
    with pytest.raises(errors.ResourceConflictError, match="names mesh axis 'data' twice"):
        example().shard({"batch": ["data", "data"]}, mesh=auto_mesh((8,), ("data",)))


def test_nx_jit_ranks_two_names_of_one_argument_on_one_mesh_axis():
    # rules, unlike a mapping given to one call, are ranked: the first name keeps the mesh axis
    x = example()
    for rules, spec in [({"batch": "data", "embed": "data"}, P(None, "data")),
                        ({"embed": "data", "batch": "data"}, P(None, None, "data"))]:
        with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules(rules):
            out = nx.jit(lambda v: v * 2)(x)
        assert same_spec(out.sharding.spec, spec), rules
        np.testing.assert_array_equal(out.unwrap(TRAILING), 2 * x.unwrap(TRAILING))


def test_nx_jit_reports_the_argument_path():
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules({"embed": ("data", "model")}):
        with pytest.raises(errors.DivisibilityError, match=r"nx.jit argument 0 at \['x'\]: axis 'embed'"):
            nx.jit(lambda p: p)({"x": example()})


# ------------------------------------------------------------------------------------------------------
# One mapping for nx.xmap's resources and .shard()


@pytest.mark.parametrize("resources", [
    {"batch": "data"}, {"embed": "model"}, {"batch": ("data", "model")}, {"batch": "model", "embed": "data"},
    {"batch": ("model", "data")},
])
def test_xmap_and_shard_lay_out_the_same_names_alike(resources):
    data = jnp.arange(8 * 8, dtype=jnp.float32).reshape(8, 8)
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
        via_xmap = nx.xmap(lambda v: v * 1, in_axes=["batch", "embed", ...], out_axes=["batch", "embed", ...],
                           axis_resources=resources)(data)
        via_shard = nx.wrap(data, ["batch", "embed"]).shard(resources)
    assert norm_spec(via_xmap.sharding.spec) == norm_spec(via_shard.sharding.spec)


def test_shard_inside_xmap_keeps_xmaps_layout_for_its_names():
    data = jnp.arange(8 * 6, dtype=jnp.float32).reshape(8, 6)
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules({"embed": "model"}):
        out = nx.xmap(lambda v: (v * 2).shard(), in_axes=["batch", ...], out_axes=["batch", ...],
                      axis_resources={"batch": "data"})(data)
        with pytest.raises(errors.ResourceConflictError, match="'batch' and 'embed' both map to mesh axis"):
            nx.xmap(lambda v: nx.wrap(v, ["embed"]).shard({"embed": "data"}), in_axes=["batch", ...],
                    out_axes=["batch", ...], axis_resources={"batch": "data"})(data)
    np.testing.assert_array_equal(out, 2 * data)


# ------------------------------------------------------------------------------------------------------
# nx.from_process_local (one process here; two in test_multiprocess.py)


def test_from_process_local_in_one_process_is_placement():
    mesh = auto_mesh((4, 2), ("data", "model"))
    x = example()
    g = nx.from_process_local(x, RULES, mesh=mesh)
    assert same_spec(g.sharding.spec, P(None, "data", "model"))
    np.testing.assert_array_equal(g.unwrap(TRAILING), x.unwrap(TRAILING))
    with pytest.raises(errors.DivisibilityError, match="'embed'"):
        nx.from_process_local(x, {"embed": ("data", "model")}, mesh=mesh)
    with pytest.raises(TypeError, match="must be a NamedArray"):
        nx.from_process_local(jnp.ones(3), RULES, mesh=mesh)


# ------------------------------------------------------------------------------------------------------
# Legacy `with Mesh` and nx.jit


def test_nx_jit_under_the_legacy_mesh_context():
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    with legacy(mesh), nx.axis_rules(RULES):
        out = nx.jit(lambda v: v + 1)(example())
    assert same_spec(out.sharding.spec, P(None, "data", "model"))


def test_shard_of_an_already_placed_value_moves_nothing():
    mesh = auto_mesh((4, 2), ("data", "model"))
    x = example().shard(RULES, mesh=mesh)
    again = x.shard(RULES, mesh=mesh)
    assert again.data is x.data


def test_nx_jit_eval_shape_carries_the_layouts_a_call_gives():
    mesh = auto_mesh((4, 2), ("data", "model"))
    rules = {"inputs": "data", "hidden": "model"}
    init = nx.jit(mlp_init)
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        abstract = init.eval_shape(jax.random.key(0))
        params = init(jax.random.key(0))
    for k in ("w1", "w2"):
        assert isinstance(abstract[k].data, jax.ShapeDtypeStruct)
        assert abstract[k].named_shape == params[k].named_shape
        assert abstract[k].data.sharding.is_equivalent_to(params[k].sharding, 2)


def test_joins_and_lifted_functions_on_explicit_axes_with_operands_split_differently():
    # an operand made on the spot is whole where another is split: vmapping over the name needs one layout
    a = nx.wrap(jnp.arange(64 * 9.0).reshape(64, 9), ["batch", "seq"])
    with jax.set_mesh(explicit_mesh((2, 4), ("data", "model"))), nx.axis_rules({"batch": "data"}):
        pad = {"batch": 64, "seq": 3}
        joined = jax.jit(lambda v: nx.concatenate([v.shard(), nx.zeros(pad)], axis="seq"))(a)
        stacked = jax.jit(lambda v: nx.stack([v.shard(), nx.zeros({"batch": 64, "seq": 9})], axis="two"))(a)
        lifted = jax.jit(lambda v: nx.nmap(lambda u, w: u + w)(v.shard(), nx.ones({"batch": 64})))(a)
    data = np.asarray(a.unwrap(["batch", "seq"]))
    np.testing.assert_array_equal(np.asarray(joined.unwrap(["batch", "seq"])),
                                  np.concatenate([data, np.zeros((64, 3))], 1))
    assert same_spec(joined.sharding.spec, P("data"))
    assert stacked.named_shape == {"batch": 64, "seq": 9, "two": 2}
    np.testing.assert_array_equal(np.asarray(lifted.unwrap(["batch", "seq"])), data + 1)
