"""nx.plan_sharding: each candidate compiled as nx.jit would, its numbers those of compiling it by hand."""

import json
import os
import re
import sys

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from meshes import auto_mesh

import namedarray as nx
from namedarray.errors import AxisSpecError, MissingResourceError
from namedarray.parallel.plan import KINDS, CostModel, _key, candidate_rules, hlo_collectives

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import named_mlp  # noqa: E402
import transformer  # noqa: E402

REASONS = ("indivisible", "conflicting", "failed to compile", "over memory_limit")


# -------------------------------------------------------------------------------------------------------
# The HLO reader

HLO = """
HloModule m

%add (x: f32[], y: f32[]) -> f32[] {
  ROOT %s = f32[] add(%x, %y)
}

%body (p: (s32[], f32[16])) -> (s32[], f32[16]) {
  %ar = f32[16]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  %cp = bf16[4,2]{1,0} collective-permute(%y), channel_id=2, source_target_pairs={{0,2},{2,4},{4,6},{6,0}}
}

%cond (p: (s32[], f32[16])) -> pred[] {
  ROOT %c = pred[] constant(true)
}

ENTRY %main (a: f32[4,8], b: f32[8]) -> f32[16,8] {
  %ags = (f32[4,8]{1,0}, f32[16,8]{1,0}) all-gather-start(%a), replica_groups=[2,4]<=[4,2]T(1,0)
  %agd = f32[16,8]{1,0} all-gather-done(%ags)
  %rs = f32[2]{0} reduce-scatter(%b), replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, to_apply=%add
  %t = (f32[8]{0}, s32[2]{0}) all-to-all(%b, %i), replica_groups={{0,1,2,3,4,5,6,7}}
  %w = (s32[], f32[16]) while(%tuple), condition=%cond, body=%body, TRIPS
  %ar2 = f32[8]{0} all-reduce-start(%b), replica_groups={{0,1,2,3,4,5,6,7}}, to_apply=%add
  ROOT %ard = f32[8]{0} all-reduce-done(%ar2)
}
""".replace("TRIPS", 'backend_config={"known_trip_count":{"n":"3"}}')


def test_hlo_reader_counts_result_bytes_once_per_execution():
    found = hlo_collectives(HLO)
    totals = {k: sum(b for kind, b, _ in found if kind == k) for k in KINDS}
    assert totals == {"all-gather": 16 * 8 * 4, "reduce-scatter": 2 * 4, "all-to-all": 8 * 4 + 2 * 4,
                      "all-reduce": 3 * 16 * 4 + 8 * 4, "collective-permute": 3 * 4 * 2 * 2}
    groups = {kind: g for kind, _, g in found}
    assert groups["all-gather"] == [[0, 2, 4, 6], [1, 3, 5, 7]]          # iota groups, transposed
    assert groups["reduce-scatter"] == [[0, 2, 4, 6], [1, 3, 5, 7]]      # mesh groups over axis_0
    assert sorted(len(g) for _, _, g in found if g) and all(g is not None for _, _, g in found)


def test_hlo_reader_counts_a_collective_wrapped_in_async_start_and_done_once():
    hlo = """
%wrapped (p: f32[8]) -> f32[2] {
  ROOT %rs = f32[2]{0} reduce-scatter(%p), replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add
}

ENTRY %main (b: f32[8]) -> f32[2] {
  %s = ((f32[8]{0}), f32[2]{0}, s32[]) async-start(%b), calls=%wrapped
  ROOT %d = f32[2]{0} async-done(%s), calls=%wrapped
}
"""
    assert hlo_collectives(hlo) == [("reduce-scatter", 8, [[0, 1, 2, 3]])]


def test_hlo_reader_on_a_compiled_program_finds_the_all_reduce_over_the_contracted_axis():
    mesh = auto_mesh((4, 2), ("data", "model"))
    x = nx.wrap(jnp.ones((8, 16)), ["batch", "embed"])
    w = nx.wrap(jnp.ones((16, 4)), ["embed", "out"])
    plan = nx.plan_sharding(lambda x, w: nx.dot(x, w, axis="embed"), x, w, mesh=mesh,
                            candidates=[{"embed": "model", "batch": "data"}])
    row = plan.rows[0]
    assert row.ok and row.collective_bytes["all-reduce"] > 0
    assert "across mesh axes model (names on them: embed)" in plan.explain(row.rules)


# -------------------------------------------------------------------------------------------------------
# The tutorial's MLP and the transformer: rows equal compiling each strategy by hand


def _by_hand(step, args, rules, mesh):
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        c = nx.jit(step).lower(*args).compile()
    m = c.memory_analysis()
    found = hlo_collectives(c.as_text())
    kinds = {k: 0 for k in KINDS}
    for k, b, _ in found:
        kinds[k] += b
    ops = len(re.findall(r"\b(?:all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
                         r"(?:-done)?\(", c.as_text()))
    return (m.argument_size_in_bytes, m.output_size_in_bytes, m.temp_size_in_bytes), kinds, ops


def _mlp():
    rng = np.random.default_rng(0)
    params = {"w1": nx.wrap(rng.standard_normal((64, 32), np.float32) * 0.1, ["inputs", "hidden"]),
              "w2": nx.wrap(rng.standard_normal((32, 8), np.float32) * 0.1, ["hidden", "classes"])}
    images = nx.wrap(rng.standard_normal((16, 64), np.float32), ["batch", "inputs"])
    labels = nx.wrap(rng.integers(0, 8, 16).astype(np.int32), ["batch"])
    return params, images, labels


# the model_parallelism notebook's four strategies, by the MLP's names
MLP_HAND = {"replicated": {}, "data parallel": {"batch": ("data", "model")},
            "model parallel": {"hidden": ("data", "model")},
            "data x model": {"batch": "data", "hidden": "model"}}


def test_mlp_rows_are_what_compiling_each_strategy_by_hand_gives_and_best_is_no_worse():
    mesh = auto_mesh((4, 2), ("data", "model"))
    args = _mlp()
    step = named_mlp.sgd_step
    plan = nx.plan_sharding(step, *args, mesh=mesh, candidates=list(MLP_HAND.values()))
    assert len(plan) == 4 and all(r.ok for r in plan.rows)
    for rules in MLP_HAND.values():
        row = plan.row(rules)
        sizes, kinds, ops = _by_hand(step, args, rules, mesh)
        assert (row.argument_bytes, row.output_bytes, row.temp_bytes) == sizes
        assert row.collective_bytes == kinds
        assert len(row.collectives) == ops
    assert plan.row({}).collective_bytes == {k: 0 for k in KINDS}
    assert plan.row({"batch": ("data", "model")}).collective_bytes["all-reduce"] > 0  # the gradients
    # the enumerated plan's choice is at least as good as the best hand-picked strategy by the cost model
    auto = nx.plan_sharding(step, *args, mesh=mesh)
    best_hand = min(plan.rows, key=lambda r: r.cost)
    assert auto.rows[0].ok and auto.rows[0].rules == auto.best
    assert auto.rows[0].cost <= best_hand.cost
    assert [r.cost for r in auto.rows if r.ok] == sorted(r.cost for r in auto.rows if r.ok)
    assert auto.rows[0 if auto.best == {} else 1].rules is not None and {} in [r.rules for r in auto.rows]


TINY = transformer.Config(digits=4, layers=1, embed=16, heads=2, head_dim=4, mlp=32, batch=8)


def _gpt_step(params, tokens):  # the forward pass and loss: a training step compiles several times longer
    return transformer.loss(params, tokens, TINY)


def _gpt_args():
    params = nx.jit(transformer.init, static_argnums=1)(jax.random.key(0), TINY)
    strings = transformer.Strings(TINY, held_out=4)
    return params, transformer.named_tokens(strings.batch())


GPT_HAND = {"replicated": {}, "data parallel": {"batch": ("data", "model")},
            "model parallel": {"heads": ("data", "model"), "qkv": ("data", "model"),
                               "mlp": ("data", "model")},
            "data x model": {"batch": "data", "heads": "model", "qkv": "model", "mlp": "model"}}


def test_transformer_rows_are_what_compiling_each_strategy_by_hand_gives():
    mesh = auto_mesh((4, 2), ("data", "model"))
    args = _gpt_args()
    abstract = jax.eval_shape(lambda: args)
    plan = nx.plan_sharding(_gpt_step, *abstract, mesh=mesh, candidates=list(GPT_HAND.values()))
    for title, rules in GPT_HAND.items():
        row = plan.row(rules)
        if title == "model parallel":  # 2 heads cannot be split 8 ways
            assert not row.ok and row.reason.startswith("indivisible") and "'heads' has size 2" in row.reason
            with pytest.raises(nx.errors.DivisibilityError):
                _by_hand(_gpt_step, args, rules, mesh)
            continue
        sizes, kinds, ops = _by_hand(_gpt_step, args, rules, mesh)
        assert row.ok, row.reason
        assert (row.argument_bytes, row.output_bytes, row.temp_bytes) == sizes, title
        assert row.collective_bytes == kinds, title
        assert len(row.collectives) >= ops  # a collective in the scanned block counts once per layer
    assert plan.rows[-1].rules == GPT_HAND["model parallel"]  # rejected rows come last
    dm = plan.explain(GPT_HAND["data x model"])
    assert "all-reduce" in dm and "names on them: batch" in dm and "heads, mlp, qkv" in dm


def test_memory_limit_below_replicated_rejects_it_with_that_reason():
    mesh = auto_mesh((4, 2), ("data", "model"))
    args = _mlp()
    free = nx.plan_sharding(named_mlp.sgd_step, *args, mesh=mesh, candidates=list(MLP_HAND.values()))
    replicated = free.row({}).memory_bytes
    plan = nx.plan_sharding(named_mlp.sgd_step, *args, mesh=mesh, candidates=list(MLP_HAND.values()),
                            memory_limit=replicated - 1)
    row = plan.row({})
    assert not row.ok and row.reason.startswith("over memory_limit") and str(replicated - 1) in row.reason
    assert plan.best not in (None, {}) and plan.row(plan.best).memory_bytes < replicated
    assert plan.rows.index(row) > plan.rows.index(plan.row(plan.best))  # rejected rows follow the accepted
    text = repr(plan)
    assert "over memory_limit" in text and "Plan: 4 candidates on mesh (data=4, model=2)" in text
    page = plan._repr_html_()
    assert page.count("<tr") == 5 and "over memory_limit" in page


def test_enumeration_is_deterministic_and_respects_names_that_occur_together():
    mesh = auto_mesh((4, 2), ("data", "model"))
    args = _gpt_args()
    first = candidate_rules(_gpt_step, *args, mesh=mesh, max_candidates=40)
    assert first == candidate_rules(_gpt_step, *args, mesh=mesh, max_candidates=40)  # traces not cached
    assert first[0] == {} and 1 < len(first) <= 40
    sizes = {"batch": 8, "seq": 8, "embed": 16, "heads": 2, "head_dim": 4, "mlp": 32, "qkv": 24,
             "layer": 1, "vocab": 11, "which": 3}
    for rules in first:
        for name, axes in rules.items():
            axes = (axes,) if isinstance(axes, str) else axes
            assert sizes[name] % (4 ** ("data" in axes) * 2 ** ("model" in axes)) == 0
    # batch and heads are carried together by the attention activations: where they share a mesh axis the
    # rules rank them (a value with both splits by the first), and each order is its own candidate
    shared = [list(r) for r in first if {"batch", "heads"} <= set(r) and r["batch"] == r["heads"]]
    for order in shared:
        assert [n for n in order if n in ("batch", "heads")] in (["batch", "heads"], ["heads", "batch"])
    keys = [json.dumps(_key(r)) for r in first]
    assert len(set(keys)) == len(keys)  # no strategy twice
    assert "seq" not in {n for r in first for n in r}  # the tokens carry 9 positions, the model 8


def test_on_an_explicit_mesh_enumerated_candidates_keep_names_of_any_value_apart():
    # On Explicit axes a layout is part of a value's type: (batch, hidden) activations cannot have both
    # names on one mesh axis, though no argument carries both. Every enumerated candidate must compile.
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {"w1": nx.wrap(jax.random.normal(k1, (16, 32)), ["embed", "hidden"]),
              "w2": nx.wrap(jax.random.normal(k2, (32, 16)), ["hidden", "embed"])}
    x = nx.wrap(jnp.ones((8, 16)), ["batch", "embed"])

    def step(p, x):
        def loss(p):
            h = nx.nn.relu(nx.dot(x, p["w1"], "embed"))
            return nx.mean(nx.dot(h, p["w2"], "hidden") ** 2, ("batch", "embed")).unwrap()

        value, grads = jax.value_and_grad(loss)(p)
        return nx.tree_map(lambda a, g: a - 0.1 * g, p, grads), value

    plan = nx.plan_sharding(step, params, x, mesh=mesh, max_candidates=8)
    assert len(plan) == 8 and all(row.ok for row in plan.rows), [(r.rules, r.reason) for r in plan.rows]
    for row in plan.rows:
        on = {n: set((a,) if isinstance(a, str) else a) for n, a in row.rules.items()}
        assert not on.get("batch", set()) & on.get("hidden", set()), row.rules
    # on an Auto mesh the same pair may share an axis (XLA moves the data): the enumeration keeps it open
    auto = candidate_rules(step, params, x, mesh=auto_mesh((4, 2), ("data", "model")), max_candidates=40)
    assert any({"batch", "hidden"} <= set(r) and r["batch"] == r["hidden"] for r in auto)


def test_cost_model_constants_can_be_overridden():
    mesh = auto_mesh((4, 2), ("data", "model"))
    args = _mlp()
    cands = list(MLP_HAND.values())
    slow_links = nx.plan_sharding(named_mlp.sgd_step, *args, mesh=mesh, candidates=cands,
                                  cost_model=CostModel(bytes_per_s=1.0))
    assert slow_links.best == {}  # with collectives costing seconds per byte, replicated wins
    slow_math = nx.plan_sharding(named_mlp.sgd_step, *args, mesh=mesh, candidates=cands,
                                 cost_model=CostModel(flops_per_s=1.0))
    assert slow_math.best != {}  # with compute dominating, splitting the work wins
    assert slow_math.cost_model.flops_per_s == 1.0


def test_measure_times_each_accepted_candidate_and_ranks_by_time():
    mesh = auto_mesh((4, 2), ("data", "model"))
    args = _mlp()
    plan = nx.plan_sharding(named_mlp.sgd_step, *args, mesh=mesh, candidates=[{}, {"batch": "data"}],
                            measure=True)
    times = [r.time_s for r in plan.rows]
    assert all(t is not None and t > 0 for t in times) and times == sorted(times)
    assert "time ms" in repr(plan)
    unmeasured = nx.plan_sharding(named_mlp.sgd_step, *args, mesh=mesh, candidates=[{}])
    assert unmeasured.rows[0].time_s is None


# -------------------------------------------------------------------------------------------------------
# Errors


def test_no_mesh_is_an_nx_error():
    with pytest.raises(MissingResourceError, match=r"nx.plan_sharding: no mesh"):
        nx.plan_sharding(lambda x: x, nx.wrap(jnp.ones(4), ["batch"]))


def test_a_candidate_naming_a_missing_mesh_axis_is_an_nx_error_before_anything_compiles():
    mesh = auto_mesh((4, 2), ("data", "model"))
    with pytest.raises(MissingResourceError, match=r"candidate 1 .*axis 'batch' to mesh axis 'pipe', but the "
                                                   r"mesh has axes \{'data': 4, 'model': 2\}"):
        nx.plan_sharding(lambda x: x, nx.wrap(jnp.ones(8), ["batch"]), mesh=mesh,
                         candidates=[{}, {"batch": "pipe"}])
    with pytest.raises(AxisSpecError, match="candidates must be a list"):
        nx.plan_sharding(lambda x: x, nx.wrap(jnp.ones(8), ["batch"]), mesh=mesh,
                         candidates={"batch": "data"})
    with pytest.raises(AxisSpecError, match="candidates is empty"):
        nx.plan_sharding(lambda x: x, nx.wrap(jnp.ones(8), ["batch"]), mesh=mesh, candidates=[])


def test_a_step_that_fails_under_one_candidate_gets_a_rejected_row_and_the_plan_goes_on():
    mesh = auto_mesh((4, 2), ("data", "model"))

    def step(x):
        if nx.axis_rules().get("embed"):
            raise RuntimeError("this step cannot split embed")
        return (x * 2).shard().sum("embed")

    x = nx.wrap(jnp.ones((8, 6)), ["batch", "embed"])
    together = nx.wrap(jnp.ones((4, 4)), ["batch", "other"])
    candidates = [{"embed": "model"}, {"batch": "data"}, {"batch": "model", "other": "model"},
                  {"embed": ("data", "model")}]
    plan = nx.plan_sharding(lambda x, y: (step(x), (y * 1).shard()), x, together, mesh=mesh,
                            candidates=candidates)
    reasons = {repr(r.rules): r.reason for r in plan.rows}
    assert plan.best == {"batch": "data"} and plan.rows[0].ok
    assert reasons["{'embed': 'model'}"].startswith("failed to compile: RuntimeError: this step cannot split")
    # rules are ranked: 'batch' keeps 'model' in the value that carries 'other' too (nx.axis_rules)
    assert reasons["{'batch': 'model', 'other': 'model'}"] is None
    assert reasons["{'embed': ('data', 'model')}"].startswith("indivisible")
    assert "axis 'embed' has size 6" in reasons["{'embed': ('data', 'model')}"]
    assert "argument [0][0]" in reasons["{'embed': ('data', 'model')}"]
    assert [r.ok for r in plan.rows] == [True, True, False, False]


# -------------------------------------------------------------------------------------------------------
# Property: what the plan accepts runs and gives the single-device values; what it rejects says why

MESHES = [((8,), ("x",)), ((4, 2), ("x", "y")), ((2, 2, 2), ("x", "y", "z"))]


def _program(kind):
    if kind == "dot":
        return lambda a, b: nx.tanh(nx.dot(a.shard(), b, axis="k")).shard()
    if kind == "reduce":
        return lambda a, b: (nx.sum(a * 2, "k") + nx.max(b, "k")).shard()
    return lambda a, b: nx.nn.softmax(nx.dot(a, b, axis="k"), "n").shard()


@hypothesis.settings(max_examples=6, deadline=None)
@hypothesis.given(kind=st.sampled_from(["dot", "reduce", "softmax"]), mesh_i=st.integers(0, 2),
                  sizes=st.tuples(st.sampled_from([2, 4, 6, 8]), st.sampled_from([2, 4, 8]),
                                  st.sampled_from([1, 2, 4, 8])),
                  picks=st.lists(st.tuples(st.sampled_from(["m", "k", "n"]), st.integers(0, 3)),
                                 min_size=1, max_size=4), data=st.data())
def test_accepted_candidates_run_and_give_the_single_device_values(kind, mesh_i, sizes, picks, data):
    shape, axes = MESHES[mesh_i]
    mesh = auto_mesh(shape, axes)
    m, k, n = sizes
    rng = np.random.default_rng(0)
    a = nx.wrap(rng.standard_normal((m, k), np.float32), ["m", "k"])
    b = nx.wrap(rng.standard_normal((k, n), np.float32), ["k", "n"])
    f = _program(kind)
    expected = f(a, b)
    groups = [None] + list(axes) + [tuple(axes[:2])]
    candidates = [{}]
    for _ in range(3):
        rules = {}
        for name, g in picks:
            if g < len(groups) and groups[g] is not None:
                rules[name] = groups[g]
        rules = data.draw(st.sampled_from([rules, {nm: gg for nm, gg in rules.items() if nm != "k"}]))
        if rules not in candidates:
            candidates.append(rules)
        picks = picks[1:] + picks[:1]
    plan = nx.plan_sharding(f, a, b, mesh=mesh, candidates=candidates)
    # one row per distinct strategy: {"m": "x"} and {"m": ("x",)} are one (the plan drops the repeat), while
    # the order of two names on one mesh axis is part of the strategy (the first ranked wins the axis)
    def strategy(c):
        axes = {nm: (gg,) if isinstance(gg, str) else tuple(gg) for nm, gg in c.items()}
        names = list(axes)
        first = sorted((x, y) for i, x in enumerate(names) for y in names[i + 1:]
                       if set(axes[x]) & set(axes[y]))
        return tuple(sorted(axes.items())), tuple(first)

    distinct = {strategy(c) for c in candidates}
    assert len(plan) == len(distinct)
    for row in plan.rows:
        if not row.ok:
            assert row.reason and row.reason.startswith(REASONS), row.reason
            continue
        with jax.set_mesh(mesh), nx.axis_rules(row.rules):
            got = nx.jit(f)(a, b)
        np.testing.assert_allclose(np.asarray(nx.unwrap(got, sorted(got.names))),
                                   np.asarray(nx.unwrap(expected, sorted(expected.names))),
                                   rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("option, value, cls, words", [
    ("candidates", [None], TypeError, r"candidates\[0\] must be a rule mapping"),
    ("memory_limit", "1GB", TypeError, "memory_limit must be a number of bytes"),
    ("memory_limit", -5, ValueError, "memory_limit is bytes per device and cannot be negative"),
    ("cost_model", 3, TypeError, "cost_model must be a CostModel"),
    ("max_candidates", 0, ValueError, "max_candidates must be at least 1"),
    ("max_candidates", 2.5, TypeError, "max_candidates must be an int"),
    ("measure", "yes", TypeError, "measure must be True or False"),
    ("mesh", "notamesh", TypeError, "mesh must be a jax.sharding.Mesh"),
])
def test_options_are_checked_before_anything_compiles(option, value, cls, words):
    traced = []

    def step(x):
        traced.append(1)
        return x.sum("e")

    kwargs = {"mesh": auto_mesh((8,), ("d",)), option: value}
    with pytest.raises(cls, match=rf"^nx.plan_sharding: {words}"):
        nx.plan_sharding(step, nx.wrap(jnp.ones((8, 4)), ["b", "e"]), **kwargs)
    assert not traced


def test_measure_fills_an_abstract_key_with_keys():
    x = jax.eval_shape(lambda: nx.wrap(jnp.ones((8, 4)), ["b", "e"]))
    key = jax.eval_shape(lambda: jax.random.key(0))
    plan = nx.plan_sharding(lambda k, v: v * jax.random.normal(k, ()), key, x, mesh=auto_mesh((8,), ("d",)),
                            candidates=[{}, {"b": "d"}], measure=True)
    assert all(row.ok and row.time_s > 0 for row in plan.rows)
