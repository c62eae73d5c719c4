"""nx.plan_sharding ranks as the machine runs: a cost model measured on the mesh, the strategies users pick
first among the candidates, and Plan.verify measuring the top rows (parallel/plan.py).

Timings are never asserted here (the benchmarks measure how well the ranking holds, `make bench`); what
is tested is what the ranking is made of and what it must never do: rank a step where every device does
all the work above one that splits it, when compute is what the machine spends.
"""

import os
import sys

import jax
import numpy as np
import pytest
from meshes import auto_mesh

import namedarray as nx
from namedarray.parallel.plan import CostModel, candidate_rules, hlo_collectives

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import named_mlp  # noqa: E402


def mlp_problem():
    rng = np.random.default_rng(0)
    params = {"w1": nx.wrap(rng.standard_normal((256, 512), np.float32) / 16, ["inputs", "hidden"]),
              "w2": nx.wrap(rng.standard_normal((512, 16), np.float32) / 22.6, ["hidden", "classes"])}
    images = nx.wrap(rng.standard_normal((256, 256), np.float32), ["batch", "inputs"])
    labels = nx.wrap(rng.integers(0, 16, 256).astype(np.int32), ["batch"])
    return named_mlp.sgd_step, (params, images, labels)


def test_the_calibrated_model_has_the_machines_rates_and_is_kept():
    mesh = auto_mesh((8,), ("data",))
    model = CostModel.calibrated(mesh)
    assert model.flops_per_s > 0 and model.bytes_per_s > 0 and model.memory_bytes_per_s > 0
    assert model.latency_s >= 0
    assert CostModel.calibrated(mesh) is not model and CostModel.calibrated(mesh) == model  # measured once
    # simulated devices share the host's cores: far from an accelerator's round figures
    assert model.flops_per_s < CostModel().flops_per_s


def test_a_step_every_device_runs_whole_is_not_ranked_first_when_compute_dominates():
    step, args = mlp_problem()
    mesh = auto_mesh((8,), ("data",))
    plan = nx.plan_sharding(step, *args, mesh=mesh, candidates=[{}, {"batch": "data"}])
    assert plan.cost_model == CostModel.calibrated(mesh)
    assert plan.best == {"batch": "data"}
    replicated, split = plan.row({}), plan.row({"batch": "data"})
    assert replicated.flops > 4 * split.flops  # per device: the replicated step does all the work
    # the round figures of an accelerator say the opposite, which is why they are not the default here
    assert plan.rerank(cost_model=CostModel()).best == {}


def test_a_cost_model_of_the_documented_two_arguments_still_ranks():
    step, args = mlp_problem()
    calls = []

    def model(*, flops, collective_bytes):
        calls.append(flops)
        return -(flops or 0.0)  # prefers the most work: a model the user chose

    plan = nx.plan_sharding(step, *args, mesh=auto_mesh((8,), ("data",)), candidates=[{}, {"batch": "data"}],
                            cost_model=model)
    assert plan.best == {} and len(calls) == 2


def test_the_candidates_hold_what_users_write_first_on_two_mesh_axes():
    step, args = mlp_problem()
    cands = candidate_rules(step, *args, mesh=auto_mesh((4, 2), ("data", "model")), max_candidates=40)
    as_sets = [frozenset((k, v if isinstance(v, str) else tuple(v)) for k, v in c.items()) for c in cands]
    # data x tensor parallel: batch on one mesh axis, the hidden layer (split weights) on the other
    assert frozenset({("batch", "data"), ("hidden", "model")}) in as_sets
    # FSDP: batch and a weight dimension on one mesh axis, batch ranked first (a value with both splits by
    # batch); the rule order is kept in the candidate
    fsdp = [c for c in cands
            if list(c)[:1] == ["batch"] and len(c) == 2 and len(set(map(str, c.values()))) == 1]
    assert fsdp, cands
    # FSDP x tensor parallel
    assert any(len(c) >= 3 and c.get("batch") == "data" and "model" in map(str, c.values())
               and sum(v == "data" for v in c.values()) >= 2 for c in cands), cands


def test_fsdp_candidates_compile_and_give_the_one_device_values():
    step, args = mlp_problem()
    mesh = auto_mesh((8,), ("data",))
    cands = [c for c in candidate_rules(step, *args, mesh=mesh, max_candidates=40)
             if len(c) == 2 and list(c)[0] == "batch"]
    assert cands
    plan = nx.plan_sharding(step, *args, mesh=mesh, candidates=cands[:1])
    assert plan.rows[0].ok, plan.rows[0].reason
    want = step(*args)
    with jax.set_mesh(mesh), nx.axis_rules(cands[0]):
        got = nx.jit(step)(*args)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)


def test_verify_measures_the_top_rows_and_ranks_them_by_time():
    step, args = mlp_problem()
    plan = nx.plan_sharding(step, *args, mesh=auto_mesh((8,), ("data",)),
                            candidates=[{}, {"batch": "data"}, {"hidden": "data"}, {"inputs": "data"}])
    assert "ok (verify)" in repr(plan) or len({round(r.cost, 12) for r in plan.rows}) == len(plan.rows)
    checked = plan.verify(2)
    timed = [r for r in checked.rows if r.time_s is not None]
    assert len(timed) == 2 and checked.rows[:2] == tuple(timed)
    assert timed[0].time_s <= timed[1].time_s and checked.best == timed[0].rules
    assert {frozenset(r.rules.items()) for r in timed} == {frozenset(r.rules.items()) for r in plan.rows[:2]}
    assert all(r.time_s is None for r in checked.rows[2:]) and len(checked) == len(plan)
    assert "time ms" in repr(checked)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(TypeError, match="Plan.verify: k must be"):
            plan.verify(bad)


# -------------------------------------------------------------------------------------------------------
# What the enumeration holds, rule order, and the fast compile


def llama_problem(cfg):
    import llama
    import optax

    optimizer = optax.adam(1e-3)

    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(llama.nx_loss)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    params = llama.named_params(llama.init_params(0, cfg))
    return step, (params, optimizer.init(params), llama.named_tokens(llama.make_batch(0, cfg)))


def _llama(**sizes):
    import llama
    return llama.Config(**sizes)


def _ranked(rules, first, second):
    names = list(rules)
    return first in names and second in names and names.index(first) < names.index(second)


@pytest.mark.parametrize("shape", [(8,), (4, 2)])
def test_the_default_candidates_hold_dp_dp_x_tp_fsdp_and_fsdp_x_tp_of_the_llama(shape):
    step, args = llama_problem(_llama(layers=4))  # the example's sizes: 32 sequences, embed 64, mlp 192
    axes = ("data", "model")[:len(shape)]
    cands = candidate_rules(step, *jax.eval_shape(lambda: args), mesh=auto_mesh(shape, axes))
    assert len(cands) == 50 and cands[0] == {}
    whole = "data" if len(shape) == 1 else ("data", "model")
    assert {"batch": whole} in cands  # data parallel
    # FSDP: the batch and the parameters' embed on one mesh axis, batch ranked first (activations split by
    # batch, weights by embed; the other order is another candidate)
    assert [("batch", whole), ("embed", whole)] in [list(c.items()) for c in cands]
    if len(shape) == 1:
        return
    assert {"batch": "data"} in cands
    # data x tensor parallel: batch on data, the weights' own names (key/value heads, mlp) on model
    dp_tp = [c for c in cands if c.get("batch") == "data" and c.get("kv_heads") == "model"
             and c.get("mlp") == "model" and "embed" not in c]
    assert dp_tp and all(v == "model" for c in dp_tp for n, v in c.items() if n != "batch")
    # FSDP x tensor parallel
    assert any(c.get("batch") == "data" and c.get("embed") == "data" and _ranked(c, "batch", "embed")
               and c.get("kv_heads") == "model" and c.get("mlp") == "model" for c in cands)
    assert "seq" not in {n for c in cands for n in c}  # the tokens carry 17 positions, the model 16


def test_the_candidates_split_a_sequence_where_its_sizes_allow():
    rng = np.random.default_rng(0)
    params = {"wq": nx.wrap(rng.standard_normal((16, 8), np.float32), ["embed", "heads"]),
              "wo": nx.wrap(rng.standard_normal((8, 16), np.float32), ["heads", "embed"])}
    x = nx.wrap(rng.standard_normal((8, 16, 16), np.float32), ["batch", "seq", "embed"])

    def step(p, x):
        def loss(p):
            h = nx.tanh(nx.dot(x, p["wq"], "embed")).shard()
            return nx.mean(nx.dot(h, p["wo"], "heads") ** 2, ("batch", "seq", "embed")).unwrap()
        value, grads = jax.value_and_grad(loss)(p)
        return jax.tree.map(lambda a, g: a - 0.1 * g, p, grads), value

    cands = candidate_rules(step, params, x, mesh=auto_mesh((4, 2), ("data", "model")))
    assert {"batch": "data", "seq": "model"} in cands or {"batch": "model", "seq": "data"} in cands
    assert {"seq": ("data", "model")} in cands
    assert {"seq": "data"} in candidate_rules(step, params, x, mesh=auto_mesh((8,), ("data",))) or \
        {"seq": ("data",)} in candidate_rules(step, params, x, mesh=auto_mesh((8,), ("data",)))


def test_rules_that_differ_only_in_order_are_two_candidates_with_their_own_numbers():
    step, args = mlp_problem()
    mesh = auto_mesh((8,), ("data",))
    batch_first, inputs_first = {"batch": "data", "inputs": "data"}, {"inputs": "data", "batch": "data"}
    plan = nx.plan_sharding(step, *args, mesh=mesh, candidates=[batch_first, inputs_first])
    assert len(plan) == 2 and all(r.ok for r in plan.rows)
    a, b = plan.row(batch_first), plan.row(inputs_first)
    assert list(a.rules) == ["batch", "inputs"] and list(b.rules) == ["inputs", "batch"]
    # the images carry both: split by batch, the step needs no collective on them; split by inputs, the
    # first layer's contraction is summed over the devices
    assert (a.collective_bytes, a.temp_bytes) != (b.collective_bytes, b.temp_bytes)
    # names on disjoint mesh axes: the order changes nothing, one candidate
    two = auto_mesh((4, 2), ("data", "model"))
    once = nx.plan_sharding(step, *args, mesh=two, candidates=[{"batch": "data", "hidden": "model"},
                                                                {"hidden": "model", "batch": "data"}])
    assert len(once) == 1


def test_the_fast_compile_reads_what_the_full_compile_gives():
    # the planner compiles for reading (no optimised machine code); every figure of a row must be what a
    # full compile of the same candidate reports
    step, args = llama_problem(_llama(layers=2, embed=32, mlp=64, heads=4, kv_heads=2, head_dim=8, seq=8,
                                      batch=8, vocab=16))
    mesh = auto_mesh((4, 2), ("data", "model"))
    cands = [{"batch": ("data", "model")}, {"batch": "data", "embed": "data"},
             {"batch": "data", "kv_heads": "model", "mlp": "model"},
             {"batch": "data", "embed": "data", "kv_heads": "model", "mlp": "model"}]
    plan = nx.plan_sharding(step, *args, mesh=mesh, candidates=cands)
    for rules in cands:
        row = plan.row(rules)
        assert row.ok, row.reason
        with jax.set_mesh(mesh), nx.axis_rules(rules):
            # XLA's default level, named: the suite's own default is level 0 (tests/conftest.py)
            full = nx.jit(step).lower(*args).compile(compiler_options={"xla_backend_optimization_level": 3})
        m, cost = full.memory_analysis(), full.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        assert (row.argument_bytes, row.output_bytes, row.temp_bytes, row.alias_bytes) == (
            m.argument_size_in_bytes, m.output_size_in_bytes, m.temp_size_in_bytes, m.alias_size_in_bytes)
        found = hlo_collectives(full.as_text())
        assert [(k, b) for k, _, b in row.collectives] == [(k, b) for k, b, _ in found], rules
        assert row.flops == cost["flops"] and row.bytes_accessed == cost["bytes accessed"]
    assert plan.row(cands[0]).collective_bytes["all-reduce"] > 0  # the gradients, summed over the batch
