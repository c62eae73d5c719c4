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
from namedarray.parallel.plan import CostModel, candidate_rules

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
