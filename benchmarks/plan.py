"""Planning time of ``nx.plan_sharding`` and how well its ranking holds, on 8 simulated CPU devices.

Planning time: one adam step of examples/llama.py's Llama (4 layers, run by ``nx.scan``) and of
examples/transformer.py's GPT (4 layers), and one adamw step of the external Llama port
(tests/external/llama_port.py, where its ``penzai`` original is installed), each planned over the default
number of enumerated candidates (``MAX_CANDIDATES``) on (8,) and on (4, 2): the wall time of the whole plan
(the abstract trace that finds which names occur together, then lowering and compiling every candidate,
in threads), the candidates, how many were accepted and the choice. Then what one candidate costs, in
CPU seconds of this process (what a busy machine does not inflate): lowering, the planner's compile (code
generation made cheap, every figure of the row unchanged) and the full compile.

Ranking: the 2-layer GPT, the 2-layer Llama and the port planned on (8,) and (4, 2) over
``RANKED`` candidates, every accepted candidate then measured (``Plan.verify``: interleaved rounds,
medians), with the Kendall tau of the plan's cost order against the measured order and the measured time
of ``plan.best`` over the fastest candidate's. ``NX_PLAN_DETAIL=<file>`` writes every measured row (rules,
the model's terms, cost, time) there as JSON, to see which pairs the model misorders and why.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)

from common import table  # noqa: E402

import namedarray as nx  # noqa: E402
from namedarray.core import env as _env  # noqa: E402
from namedarray.parallel import distribute  # noqa: E402
from namedarray.parallel import plan as _plan  # noqa: E402
from namedarray.parallel.plan import MAX_CANDIDATES, candidate_rules  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "external"))
from plan_sharding import gpt_problem  # noqa: E402

MESHES = (((8,), ("data",)), ((4, 2), ("data", "model")))
RANKED = 16  # candidates per measured ranking: each accepted one is compiled in full and run


def _mesh(shape, axes):
    return jax.make_mesh(shape, axes, axis_types=(jax.sharding.AxisType.Auto,) * len(shape))


def llama_problem(layers: int):
    """One adam step of examples/llama.py's named Llama, ``layers`` layers; abstract arguments."""
    import llama
    import optax

    cfg = llama.Config(layers=layers)
    optimizer = optax.adam(1e-3)

    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(llama.nx_loss)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    def concrete():
        params = llama.named_params(llama.init_params(0, cfg))
        return params, optimizer.init(params), llama.named_tokens(llama.make_batch(0, cfg))

    return step, jax.eval_shape(concrete)


def port_problem():
    """The external port's adamw step and abstract arguments, or None where its original is not installed."""
    try:
        import llama_port
        abstract = jax.eval_shape(lambda: llama_port.example_args(0))
    except ImportError:
        return None
    return llama_port.train_step, abstract


def problems(layers: int) -> dict[str, tuple]:
    _, step, abstract, _, _ = gpt_problem(layers)
    only = os.environ.get("NX_PLAN_ONLY", "")
    out = {f"Llama (examples/llama.py, {layers} layers)": llama_problem(layers),
           f"GPT (examples/transformer.py, {layers} layers)": (step, abstract)}
    port = port_problem()
    if port is not None:
        out["Llama port (tests/external/llama_port.py, 4 layers)"] = port
    return {k: v for k, v in out.items() if only.lower() in k.lower()}


def _cpu_seconds(step, abstract, m, rules) -> tuple[float, float, float]:
    """CPU seconds of this process to lower, compile as the planner does, and compile in full."""
    t = time.process_time()
    with jax.set_mesh(m), _env.exact_rules(rules):
        lowered = distribute.jit(step).lower(*abstract)
    lower = time.process_time() - t
    t = time.process_time()
    lowered.compile(compiler_options=_plan._FAST_OPTIONS)
    fast = time.process_time() - t
    t = time.process_time()
    lowered.compile()
    return lower, fast, time.process_time() - t


def planning(quick: bool = False) -> str:
    rows, per = [], []
    for title, (step, abstract) in problems(4).items():
        for shape, axes in MESHES:
            m = _mesh(shape, axes)
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            plan = nx.plan_sharding(step, *abstract, mesh=m, max_candidates=8 if quick else MAX_CANDIDATES)
            planning_s = time.perf_counter() - t0
            rows.append([title, str(shape), f"{len(plan)}, {planning_s:.0f} s",
                         str(sum(r.ok for r in plan.rows)), f"{load:.1f}"])
            print(rows[-1], file=sys.stderr, flush=True)
        m = _mesh(*MESHES[1])
        cands = candidate_rules(step, *abstract, mesh=m, max_candidates=50)[1:4]
        got = [_cpu_seconds(step, abstract, m, rules) for rules in cands]
        per.append([title, str(len(got))] + [f"{sum(g[k] for g in got) / len(got):.2f}" for k in range(3)])
    return "\n".join([
        "## Planning a sharding: `nx.plan_sharding`, planning time (8 simulated CPU devices)\n",
        f"One training step per model, abstract arguments, candidates enumerated (default bound "
        f"{MAX_CANDIDATES}), compiled {_plan._COMPILE_THREADS} at a time with the CPU backend's code "
        "generation made cheap (`_FAST_OPTIONS`: what a row reads is fixed before it). Wall seconds on "
        "this machine, shared with other work: the load average when each plan started is given.\n",
        table(["model", "mesh", "planning time (candidates, seconds)", "accepted", "load"], rows),
        "\nWhat one candidate costs (CPU seconds of this process, mean over 3 candidates on (4, 2)):\n",
        table(["model", "candidates", "lower", "planner's compile", "full compile"], per)])


def _tau(a: list[float], b: list[float]) -> float:
    agree = disagree = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            s = (a[i] - a[j]) * (b[i] - b[j])
            agree += s > 0
            disagree += s < 0
    return (agree - disagree) / max(1, agree + disagree)


def ranking(quick: bool = False) -> str:
    rows, detail = [], []
    layers = 1 if quick else 2
    for title, (step, abstract) in problems(layers).items():
        for shape, axes in MESHES:
            if os.environ.get("NX_PLAN_MESH", str(shape)) != str(shape):
                continue
            m = _mesh(shape, axes)
            t0 = time.perf_counter()
            plan = nx.plan_sharding(step, *abstract, mesh=m, max_candidates=6 if quick else RANKED)
            planning_s = time.perf_counter() - t0
            timed = plan.verify(len([r for r in plan.rows if r.ok]))
            measured = [r for r in timed.rows if r.time_s is not None]
            fastest = min(r.time_s for r in measured)
            order = {json.dumps(_plan._key(r.rules)): i for i, r in enumerate(plan.rows)}
            position = [order[json.dumps(_plan._key(r.rules))] for r in measured]
            tau = _tau(position, [r.time_s for r in measured])
            # what a user runs after checking the plan: plan.verify() with its default k
            checked = plan.verify()
            # the noise floor: the same candidates measured again, against the first measurement; the
            # checked plan's choice is judged on this measurement, not on the one that chose it
            again = plan.verify(len(measured))
            ceiling = _tau([r.time_s for r in measured], [again.row(r.rules).time_s for r in measured])
            fastest_again = min(again.row(r.rules).time_s for r in measured)
            rows.append([title, str(shape), f"{len(plan)}, {planning_s:.0f} s", f"{tau:.2f}",
                         f"`{plan.best}`", f"{timed.row(plan.best).time_s / fastest:.2f}",
                         f"`{checked.best}`", f"{again.row(checked.best).time_s / fastest_again:.2f}",
                         f"`{timed.best}`",
                         f"{ceiling:.2f}", f"{os.getloadavg()[0]:.1f}"])
            print(rows[-1], file=sys.stderr, flush=True)
            model = plan.cost_model
            rates = [model.flops_per_s, model.memory_bytes_per_s, model.bytes_per_s, model.latency_s]
            detail.append({"model": title, "mesh": shape, "rates": rates,
                           "rows": [{"rules": r.rules, "position": order[json.dumps(_plan._key(r.rules))],
                                     "cost": r.cost, "time": r.time_s, "flops": r.flops,
                                     "accessed": r.bytes_accessed, "collectives": r.collective_bytes,
                                     "ops": len(r.collectives), "memory": r.memory_bytes}
                                    for r in measured]})
            if os.environ.get("NX_PLAN_DETAIL"):
                with open(os.environ["NX_PLAN_DETAIL"], "w") as f:
                    json.dump(detail, f, indent=1, default=str)
    return "\n".join([
        f"### Does the ranking hold? Every accepted candidate measured ({layers}-layer models; the port has "
        "4)\n",
        f"Each model planned over {RANKED} enumerated candidates with the cost model's rates measured on the "
        "mesh (`CostModel.calibrated`); each accepted candidate's step then timed in interleaved rounds "
        "(`Plan.verify`, medians). Tau is Kendall's, the plan's order against the measured order (1: the "
        "same order); 'tau, measured again' is a second measurement of the same candidates against the "
        "first: about the most any model can reach on this machine at that load. 'plan.verify().best' is "
        "the choice after measuring the plan's 3 best rows (the default `k`), its time over the fastest "
        "in the second measurement, which did not choose it.\n",
        table(["model", "mesh", "candidates, planning s", "tau", "plan.best", "its time / fastest",
               "plan.verify().best", "its time / fastest, measured again", "fastest",
               "tau, measured again", "load"], rows)])


def main(quick: bool = False) -> str:
    parts = sys.argv[1:]
    out = []
    if "--ranking" not in parts:
        out.append(planning(quick))
    if "--planning" not in parts:
        out.append(ranking(quick))
    return "\n\n".join(out)


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
