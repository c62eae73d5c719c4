"""Planning time of ``nx.plan_sharding``: the 4-layer GPT of examples/transformer.py (one adam step) over the
candidates nx enumerates for a 4x2 mesh of 8 simulated CPU devices; and how well the ranking holds: the
2-layer GPT planned on (8,) and (4, 2), every accepted candidate then measured (``Plan.verify``, interleaved
rounds, medians), with the Kendall tau of the plan's cost order against the measured order and the measured
time of ``plan.best`` over the fastest candidate's.

Reports the wall time of the whole plan (the abstract trace that finds which names occur together, then
lowering and compiling every candidate), the candidate count, how many were accepted, the top rows and the
choice, and the choice with a memory limit of half of what the replicated step needs per device.
"""

from __future__ import annotations

import os
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

from common import table  # noqa: E402

import namedarray as nx  # noqa: E402
from namedarray.parallel.plan import MAX_CANDIDATES  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from plan_sharding import gpt_problem, mesh  # noqa: E402


def main(quick: bool = False) -> str:
    layers = 4
    cfg, step, abstract, _, _ = gpt_problem(layers)
    m = mesh()
    t0 = time.perf_counter()
    plan = nx.plan_sharding(step, *abstract, mesh=m)
    planning_s = time.perf_counter() - t0
    accepted = [r for r in plan.rows if r.ok]
    limit = plan.row({}).memory_bytes // 2
    limited = plan.rerank(memory_limit=limit)
    rows = [[f"`{r.rules}`", "ok" if r.ok else r.reason.split(":")[0], f"{r.memory_bytes}",
             ", ".join(f"{k} {v}" for k, v in r.collective_bytes.items() if v) or "none",
             "-" if r.flops is None else f"{r.flops:.3g}", f"{r.cost:.3g}", f"{r.compile_s:.1f}"]
            for r in plan.rows[:5]]
    out = [f"## Planning a sharding: `nx.plan_sharding` on the {layers}-layer GPT (8 simulated CPU "
           "devices)\n\n"
           f"examples/transformer.py's model ({layers} layers, embed {cfg.embed}, {cfg.heads} heads x "
           f"{cfg.head_dim}, mlp {cfg.mlp}, batch {cfg.batch}), one adam step, abstract arguments, mesh "
           f"{dict(m.shape)}, candidates enumerated (default bound {MAX_CANDIDATES}). "
           "Bytes are per device (arguments + outputs + temporaries); collectives in bytes per step; cost "
           "by the default cost model (model seconds). Compile seconds overlap: two candidates compile at "
           "once.\n",
           table(["planning time (s)", "candidates", "accepted", "best", f"best under {limit} bytes"],
                 [[f"{planning_s:.1f}", str(len(plan)), str(len(accepted)), f"`{plan.best}`",
                   f"`{limited.best}`"]]),
           "\nThe five first rows:\n",
           table(["rules", "ok", "bytes per device", "collective bytes", "flops", "cost", "compile s"], rows)]
    out += ["", ranking(quick)]
    return "\n".join(out)


def _tau(a: list[float], b: list[float]) -> float:
    agree = disagree = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            s = (a[i] - a[j]) * (b[i] - b[j])
            agree += s > 0
            disagree += s < 0
    return (agree - disagree) / max(1, agree + disagree)


def ranking(quick: bool = False) -> str:
    _, step, abstract, _, _ = gpt_problem(1 if quick else 2)
    rows = []
    for shape, axes in (((8,), ("data",)), ((4, 2), ("data", "model"))):
        m = jax.make_mesh(shape, axes, axis_types=(jax.sharding.AxisType.Auto,) * len(shape))
        t0 = time.perf_counter()
        plan = nx.plan_sharding(step, *abstract, mesh=m)
        planning_s = time.perf_counter() - t0
        timed = plan.verify(len([r for r in plan.rows if r.ok]))
        measured = [r for r in timed.rows if r.time_s is not None]
        fastest = min(r.time_s for r in measured)
        rows.append([str(shape), str(len(plan)), f"{planning_s:.1f}",
                     f"{_tau([r.cost for r in measured], [r.time_s for r in measured]):.2f}",
                     f"`{plan.best}`", f"{timed.row(plan.best).time_s / fastest:.2f}", f"`{timed.best}`"])
    return "\n".join([
        f"### Does the ranking hold? The {1 if quick else 2}-layer GPT, every accepted candidate measured\n",
        "The cost model's rates are measured on the mesh (`CostModel.calibrated`); each candidate's step is "
        "then timed in interleaved rounds (`Plan.verify`). Tau is Kendall's, cost order against measured "
        "order (1: the same order).\n",
        table(["mesh", "candidates", "planning s", "tau", "plan.best", "its time / fastest", "fastest"],
              rows)])


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
