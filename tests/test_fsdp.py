"""Fully sharded data parallelism by name: rules are ranked by their order.

Under ``nx.axis_rules({"batch": "data", "embed": "data"})`` the parameters split ``embed`` over ``data``
and an activation that carries ``batch`` and ``embed`` is split by ``batch`` alone: for each value the names
it carries take their mesh axes rule by rule, and a rule whose mesh axes an earlier-ranked name of that
value took is skipped (the name stays whole in that value). A mapping given to one call
(``x.shard(resources)``), ``nx.shard_map``'s split and ``nx.xmap``'s ``axis_resources`` keep the error.

Every layout test compares values with the unsharded computation; the memory test reads XLA's per-device
argument bytes of the compiled step.
"""

import json
import os
import subprocess
import sys

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jax.sharding import PartitionSpec as P
from meshes import (
    MESHES,
    NAMES,
    auto_mesh,
    explicit_mesh,
    mesh_of,
    named_operands,
    same_spec,
    sharded_program,
)

import namedarray as nx
from namedarray import errors
from namedarray.core import env as nx_env
from namedarray.core import placement

FSDP = {"batch": "data", "embed": "data"}
SIZES = {"batch": 8, "seq": 4, "embed": 16, "heads": 4, "head_dim": 8, "mlp": 32}

# (mesh shape, mesh axes, rules): FSDP over the whole mesh, FSDP with tensor parallelism, FSDP over both axes
STRATEGIES = {
    "fsdp (8,)": ((8,), ("data",), FSDP),
    "fsdp+tp (4,2)": ((4, 2), ("data", "model"), {"batch": "data", "embed": "data", "heads": "model",
                                                   "mlp": "model"}),
    "fsdp over both (4,2)": ((4, 2), ("data", "model"), {"batch": ("data", "model"),
                                                          "embed": ("data", "model")}),
}


def spec_by_name(v):
    """name -> the mesh axes its storage dim is split over (positional dims left out)."""
    spec = tuple(v.sharding.spec) + (None,) * v.data.ndim
    out = {}
    for n, e in zip(v.names, spec[v.data.ndim - len(v.names):]):
        out[n] = () if e is None else (e,) if isinstance(e, str) else tuple(e)
    return out


def axes(rule):
    return () if rule is None else (rule,) if isinstance(rule, str) else tuple(rule)


# ------------------------------------------------------------------------------------------------------
# The resolution rule itself


def test_the_first_rule_in_order_keeps_a_shared_mesh_axis():
    mapping = placement.normalize(FSDP, "test")
    assert placement.resolve({"batch", "embed"}, mapping) == {"batch": ("data",)}
    assert placement.resolve({"embed", "mlp"}, mapping) == {"embed": ("data",)}
    swapped = placement.normalize({"embed": "data", "batch": "data"}, "test")
    assert placement.resolve({"batch", "embed"}, swapped) == {"embed": ("data",)}


def test_a_rule_of_several_mesh_axes_is_taken_whole_or_not_at_all():
    # as Flax's and MaxText's logical rules: the rule is skipped when any of its mesh axes is taken
    mapping = placement.normalize({"batch": "data", "embed": ("data", "model"), "mlp": "model"}, "test")
    assert placement.resolve({"batch", "embed", "mlp"}, mapping) == {"batch": ("data",), "mlp": ("model",)}
    assert placement.resolve({"embed", "mlp"}, mapping) == {"embed": ("data", "model")}
    mesh = auto_mesh((4, 2), ("data", "model"))
    x = nx.wrap(jnp.arange(8 * 16, dtype=jnp.float32).reshape(8, 16), ["batch", "embed"])
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data", "embed": ("data", "model")}):
        assert spec_by_name(x.shard()) == {"batch": ("data",), "embed": ()}   # not 'model' alone
        w = nx.wrap(jnp.ones((16, 4)), ["embed", "out"]).shard()
        assert spec_by_name(w) == {"embed": ("data", "model"), "out": ()}


@st.composite
def rules_and_names(draw, mesh_shape, sizes=None):
    """Any rules for NAMES on the mesh (several names may share mesh axes; each of ``sizes`` divisible by its
    mesh axes), in a random order, and a value's names in two storage orders."""
    mesh_axes = MESHES[mesh_shape]
    msize = dict(zip(mesh_axes, mesh_shape))
    rules = {}
    for n in draw(st.permutations(NAMES)):
        k = draw(st.integers(0, min(2, len(mesh_axes))))
        chosen = tuple(draw(st.permutations(mesh_axes))[:k])
        if chosen and sizes is not None and sizes[n] % int(np.prod([msize[a] for a in chosen])):
            chosen = ()
        if chosen or draw(st.booleans()):
            rules[n] = chosen[0] if len(chosen) == 1 else (chosen or None)
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    return rules, names, draw(st.permutations(names))


@pytest.mark.parametrize("mesh_shape", list(MESHES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_resolution_is_rule_order_greedy_and_ignores_the_storage_order(mesh_shape, data):
    rules, names, reordered = data.draw(rules_and_names(mesh_shape))
    mapping = placement.normalize(rules, "test")
    got = placement.resolve(names, mapping)
    assert got == placement.resolve(reordered, mapping) == placement.resolve(set(names), mapping)
    taken: list[str] = []
    for n, ax in mapping.items():  # replay the rule: first to last, a rule is skipped iff its axes are taken
        if n not in names or not ax:
            assert n not in got
        elif set(ax) & set(taken):
            assert n not in got, (rules, names)
        else:
            assert got[n] == ax
            taken += ax
    assert len(taken) == len(set(taken))  # no mesh axis splits the value twice


# ------------------------------------------------------------------------------------------------------
# Values never change: random programs under any rules, conflicts included


@pytest.mark.parametrize("mesh_shape", list(MESHES))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_programs_under_ranked_rules_give_the_single_device_values(mesh_shape, data):
    sizes, x_names, y_names = data.draw(named_operands())
    rules, _, _ = data.draw(rules_and_names(mesh_shape, sizes))
    op = data.draw(st.sampled_from(["elementwise", "dot", "softmax"]))
    explicit = data.draw(st.booleans())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = nx.wrap(jnp.asarray(rng.normal(size=[sizes[n] for n in x_names]), jnp.float32), x_names)
    y = nx.wrap(jnp.asarray(rng.normal(size=[sizes[n] for n in y_names]), jnp.float32), y_names)
    expected = sharded_program(op, x, y)
    mesh = mesh_of("explicit" if explicit else "auto", mesh_shape, MESHES[mesh_shape])
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        got = jax.jit(lambda a, b: sharded_program(op, a, b))(x, y)
    order = {i: n for i, n in enumerate(expected.names, start=expected.ndim)}
    np.testing.assert_allclose(np.asarray(got.unwrap(order)), np.asarray(expected.unwrap(order)),
                               rtol=2e-5, atol=2e-5)
    want = placement.resolve(got.names, placement.normalize(rules, "test"))
    assert spec_by_name(got) == {n: want.get(n, ()) for n in got.names}


# ------------------------------------------------------------------------------------------------------
# A transformer-style train step under FSDP rules


def init(key):
    ks = jax.random.split(key, 6)
    s = SIZES

    def normal(k, names, scale):
        return nx.random.normal(k, named_shape={n: s[n] for n in names}) * scale

    return {"wq": normal(ks[0], ["embed", "heads", "head_dim"], 0.25),
            "wk": normal(ks[1], ["embed", "heads", "head_dim"], 0.25),
            "wv": normal(ks[2], ["embed", "heads", "head_dim"], 0.25),
            "wo": normal(ks[3], ["heads", "head_dim", "embed"], 0.1),
            "w_in": normal(ks[4], ["embed", "mlp"], 0.25),
            "w_out": normal(ks[5], ["mlp", "embed"], 0.1),
            "norm": nx.ones(named_shape={"embed": s["embed"]})}


def forward(p, x, seen=None):
    """One attention block and one MLP block, written with logical names and .shard() only."""
    p = nx.shard(p)
    h = nx.nn.rms_norm(x.shard(), "embed", scale=p["norm"])
    q = nx.dot(h, p["wq"], axis="embed").shard()
    k = nx.dot(h, p["wk"], axis="embed").shard().rename({"seq": "kv_seq"})
    v = nx.dot(h, p["wv"], axis="embed").shard().rename({"seq": "kv_seq"})
    attn = nx.nn.softmax(nx.dot(q, k, axis="head_dim") / np.sqrt(SIZES["head_dim"]), axis="kv_seq")
    mixed = nx.dot(nx.dot(attn, v, axis="kv_seq"), p["wo"], axis=("heads", "head_dim"))
    x = (x + mixed).shard()
    if seen is not None:
        seen.append(x)
    up = nx.nn.relu(nx.dot(x, p["w_in"], axis="embed").shard())
    x = (x + nx.dot(up, p["w_out"], axis="mlp")).shard()
    if seen is not None:
        seen.append(x)
    return x


def loss_fn(p, x, target):
    return nx.mean((forward(p, x) - target) ** 2, axis=("batch", "seq", "embed"))


@nx.jit
def train_step(p, x, target):
    loss, grads = nx.value_and_grad(loss_fn)(p, x, target)
    return jax.tree.map(lambda w, g: w - 0.1 * g, p, grads), loss


def batch(seed=1):
    x = nx.random.normal(jax.random.key(seed), named_shape={n: SIZES[n] for n in ("batch", "seq", "embed")})
    target = nx.random.normal(jax.random.key(seed + 1),
                              named_shape={n: SIZES[n] for n in ("seq", "batch", "embed")})
    return x, target


@pytest.mark.parametrize("kind", ["auto", "explicit"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_fsdp_train_step_gives_the_unsharded_values_and_lays_names_out_by_rank(strategy, kind):
    shape, mesh_axes, rules = STRATEGIES[strategy]
    params = init(jax.random.key(0))
    x, target = batch()
    want_params, want_loss = train_step(params, x, target)     # no mesh: one device
    mesh = mesh_of(kind, shape, mesh_axes)
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        sharded = nx.jit(init)(jax.random.key(0))
        got_params, got_loss = train_step(sharded, x, target)
        got_params, got_loss = train_step(got_params, x, target)
        acts = nx.jit(lambda p, x: forward(p, x))(got_params, x)
    want_params, want_loss = train_step(want_params, x, target)
    np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=1e-5)
    for k, w in want_params.items():
        assert nx.allclose(got_params[k], w, rtol=1e-4, atol=1e-6), k
    embed_axes = axes(rules["embed"])
    for k in got_params:   # every parameter carries embed: split over its mesh axes
        assert spec_by_name(sharded[k])["embed"] == embed_axes, k
        assert spec_by_name(got_params[k])["embed"] == embed_axes, k
    if "mlp" in rules:
        assert spec_by_name(got_params["w_in"])["mlp"] == ("model",)
    # activations carry batch and embed: batch keeps the mesh axes, embed is whole
    assert spec_by_name(acts) == {n: axes(rules["batch"]) if n == "batch" else () for n in acts.names}


def test_activations_inside_the_step_carry_the_ranked_layout_in_their_types():
    # on Explicit mesh axes every value's layout is part of its type: read the residual stream's in the trace
    mesh = explicit_mesh((8,), ("data",))
    x, _ = batch()
    layouts: list[dict] = []

    def probe(p, x):
        seen: list = []
        out = forward(p, x, seen)
        for v in seen:
            spec = tuple(jax.typeof(v.data).sharding.spec) + (None,) * v.data.ndim
            layouts.append(dict(zip(v.names, spec[v.data.ndim - len(v.names):])))
        return out

    with jax.set_mesh(mesh), nx.axis_rules(FSDP):
        nx.jit(probe).trace(nx.jit(init)(jax.random.key(0)), x)
    assert len(layouts) == 2
    assert all(layout == {"batch": "data", "seq": None, "embed": None} for layout in layouts), layouts


def test_fsdp_puts_an_eighth_of_the_parameters_on_each_device():
    mesh = auto_mesh((8,), ("data",))
    params, (x, target) = init(jax.random.key(0)), batch()
    param_bytes = sum(p.nbytes for p in nx.tree_leaves(params))
    data_bytes = x.nbytes + target.nbytes
    measured = {}
    for name, rules in {"data parallel": {"batch": "data"}, "fsdp": FSDP}.items():
        with jax.set_mesh(mesh), nx.axis_rules(rules):
            memory = train_step.lower(params, x, target).compile().memory_analysis()
        measured[name] = memory.argument_size_in_bytes - data_bytes // 8   # the batch is split 8 ways in both
    assert measured["data parallel"] == param_bytes                      # replicated: all of them
    assert measured["fsdp"] == param_bytes // 8                          # fully sharded: one eighth


# ------------------------------------------------------------------------------------------------------
# What "order" means, and that it is the same in every process


def example():
    return nx.wrap(jnp.arange(8 * 16, dtype=jnp.float32).reshape(8, 16), ["batch", "embed"])


def test_nested_rules_keep_the_rank_of_a_name_mapped_again_and_rank_new_names_after():
    mesh = auto_mesh((8,), ("data",))
    w = nx.wrap(jnp.ones((16, 8)), ["embed", "mlp"])
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data", "embed": None}):
        with nx.axis_rules({"mlp": "data", "embed": "data"}):
            assert list(nx.axis_rules()) == ["batch", "embed", "mlp"]     # the rank, first to last
            assert spec_by_name(example().shard()) == {"batch": ("data",), "embed": ()}
            assert spec_by_name(w.shard()) == {"embed": ("data",), "mlp": ()}


def test_the_order_of_the_rules_is_part_of_what_a_trace_depends_on():
    # a function traced under one order is not reused under the other, which lays values out otherwise
    mesh = auto_mesh((8,), ("data",))
    swapped = {"embed": "data", "batch": "data"}
    assert nx_env.AxisEnv(rules=FSDP) != nx_env.AxisEnv(rules=swapped)
    double = nx.jit(lambda v: (v * 2).shard())
    x = example()
    with jax.set_mesh(mesh):
        with nx.axis_rules(FSDP):
            first = double(x)
        with nx.axis_rules(swapped):
            second = double(x)
    assert spec_by_name(first) == {"batch": ("data",), "embed": ()}
    assert spec_by_name(second) == {"batch": (), "embed": ("data",)}
    np.testing.assert_array_equal(first.unwrap("batch", "embed"), second.unwrap("batch", "embed"))


def test_nx_jit_resources_are_rules_ranked_after_those_in_force():
    mesh = auto_mesh((8,), ("data",))
    x = example()
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
        out = nx.jit(lambda v: v + 1, resources={"embed": "data"})(x)
    assert spec_by_name(out) == {"batch": ("data",), "embed": ()}


_LAYOUTS = """
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 8)
import jax.numpy as jnp
import namedarray as nx
mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
rules = {"batch": "data", "embed": ("data", "model"), "heads": "model", "mlp": "model"}
sizes = {"batch": 8, "embed": 16, "heads": 4, "mlp": 8}
sets = [["batch", "embed"], ["embed", "heads"], ["embed", "mlp"], ["batch", "embed", "heads", "mlp"]]
if sys.argv[1] == "reversed":
    sets = [list(reversed(s)) for s in reversed(sets)]
values = {"+".join(sorted(s)): nx.zeros(named_shape={n: sizes[n] for n in s}) for s in sets}
with jax.set_mesh(mesh), nx.axis_rules(rules):
    out = {}
    for key, s in nx.sharding(values).items():
        names = nx.canonical_order(values[key].names)
        spec = tuple(s.spec) + (None,) * len(names)
        out[key] = {n: spec[i] for i, n in enumerate(names)}
print(json.dumps(out, sort_keys=True))
"""


def test_every_process_resolves_the_same_layouts_whatever_it_built_first():
    # the rank is the program text's: other hash seeds and other construction orders give the same layouts
    outs = []
    for seed, order in [("1", "as written"), ("2", "reversed")]:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", _LAYOUTS, order], capture_output=True, text=True, env=env,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        outs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1]
    # the whole activation keeps batch on data and heads (then mlp is skipped) on model; embed is whole
    assert outs[0]["batch+embed+heads+mlp"] == {"batch": "data", "embed": None, "heads": "model", "mlp": None}
    assert outs[0]["embed+mlp"] == {"embed": ["data", "model"], "mlp": None}
    assert outs[0]["batch+embed"] == {"batch": "data", "embed": None}


# ------------------------------------------------------------------------------------------------------
# Where a conflict stays an error


def test_a_mapping_given_to_one_call_may_not_put_two_names_of_a_value_on_one_mesh_axis():
    mesh = auto_mesh((8,), ("data",))
    x = example()
    with pytest.raises(errors.ResourceConflictError,
                       match=r"x.shard\(\): axes 'batch' and 'embed' both map to mesh axis 'data' .*"
                             r"under nx.axis_rules instead, the first of the two in rule order"):
        x.shard(FSDP, mesh=mesh)
    with pytest.raises(errors.ResourceConflictError, match=r"nx.shard at \['x'\]: axes 'batch' and 'embed'"):
        nx.shard({"x": x}, FSDP, mesh=mesh)
    both = r"axes 'batch' and 'embed' both map to mesh axis 'data'"
    with pytest.raises(errors.ResourceConflictError, match=r"nx.sharding at \['x'\]: " + both):
        nx.sharding({"x": x}, FSDP, mesh=mesh)
    with pytest.raises(errors.ResourceConflictError, match=r"nx.from_process_local: " + both):
        nx.from_process_local(x, FSDP, mesh=mesh)
    # values that carry one of the two names are laid out as asked
    w = nx.shard(nx.wrap(jnp.ones((16, 4)), ["embed", "out"]), FSDP, mesh=mesh)
    assert spec_by_name(w) == {"embed": ("data",), "out": ()}


def test_shard_map_cannot_leave_a_split_name_whole_in_one_value():
    mesh = auto_mesh((8,), ("data",))
    w = nx.wrap(jnp.ones((16, 4)), ["embed", "out"])
    with jax.set_mesh(mesh), nx.axis_rules(FSDP):
        with pytest.raises(errors.ResourceConflictError,
                           match=r"nx.shard_map argument \[1\]: axes 'batch' and 'embed' both map to mesh "
                                 r"axis 'data'.*splits a name alike in every value"):
            nx.shard_map(lambda w, x: nx.dot(x, w, axis="embed"))(w, example())


def test_xmap_resources_rank_before_the_rules_and_still_may_not_conflict_among_themselves():
    mesh = auto_mesh((8,), ("data",))
    data = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    with jax.set_mesh(mesh), nx.axis_rules({"embed": "data"}):
        # the xmap lays every value out by its resources: 'batch' keeps 'data', the rule for 'embed' yields
        out = nx.xmap(lambda v: (v * 2).shard(), in_axes=["batch", "embed", ...],
                      out_axes=["batch", "embed", ...], axis_resources={"batch": "data"})(data)
        np.testing.assert_array_equal(out, 2 * data)
        assert same_spec(out.sharding.spec, P("data"))
        with pytest.raises(errors.ResourceConflictError, match="`a` and `b` are both mapped to the resource"):
            nx.xmap(lambda x, y: x + y, ({0: "a"}, {0: "b"}), {0: "a", 1: "b"},
                    axis_resources={"a": "data", "b": "data"})(np.ones(8), np.ones(16))
