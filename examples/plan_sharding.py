"""Let nx pick the parallel strategy: ``nx.plan_sharding`` on the tutorial's MLP and transformer.py's GPT.

A strategy is one mapping from logical names to mesh axes, so nx can list the strategies a model allows,
compile its training step under each (ahead of time: nothing runs), and rank them by what XLA reports: bytes
per device, collective traffic and FLOPs. Here, on 8 simulated devices as a 4x2 mesh:

1. the tutorial's MLP: the plan over the strategies nx enumerates, next to the four hand-picked in
   notebooks/model_parallelism.ipynb;
2. the GPT of examples/transformer.py: its adam step planned the same way, the table, why the winner wins
   (``plan.explain``), a memory limit that rules out keeping everything on every device, and a few training
   steps under the chosen rules and under the hand-picked ones, each loss equal to the one-device run.

``python examples/plan_sharding.py`` plans the 4-layer GPT over the enumerated candidates and the
hand-picked ones (a few minutes on two cores); ``--fast`` a smaller 1-layer one over fewer, for the tests.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import jax

# Simulate 8 CPU devices. This must come before any JAX computation.
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
import optax  # noqa: E402

import namedarray as nx  # noqa: E402
from namedarray.parallel.plan import candidate_rules  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import named_mlp  # noqa: E402
import transformer  # noqa: E402

MESH_SHAPE, MESH_AXES = (4, 2), ("data", "model")
# The strategies notebooks/model_parallelism.ipynb picks by hand, for the MLP's names and the GPT's
MLP_HAND: dict[str, dict[str, Any]] = {"replicated": {}, "data parallel": {"batch": ("data", "model")},
                                        "model parallel": {"hidden": ("data", "model")},
                                        "data x model": {"batch": "data", "hidden": "model"}}
GPT_HAND: dict[str, dict[str, Any]] = {
    "replicated": {},
    "data parallel": {"batch": ("data", "model")},
    "model parallel": {"heads": ("data", "model"), "qkv": ("data", "model"), "mlp": ("data", "model")},
    "data x model": {"batch": "data", "heads": "model", "qkv": "model", "mlp": "model"},
}


def mesh():
    return jax.make_mesh(MESH_SHAPE, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2)


def mlp_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {"w1": nx.wrap(rng.standard_normal((784, 512), np.float32) / 28, ["inputs", "hidden"]),
              "w2": nx.wrap(rng.standard_normal((512, 10), np.float32) / 22.6, ["hidden", "classes"])}
    images = nx.wrap(rng.standard_normal((128, 784), np.float32), ["batch", "inputs"])
    labels = nx.wrap(rng.integers(0, 10, 128).astype(np.int32), ["batch"])
    return named_mlp.sgd_step, (params, images, labels)


def gpt_problem(layers: int = 4, fast: bool = False):
    """The adam step of examples/transformer.py, its abstract arguments, and a way to make concrete ones."""
    cfg = (transformer.Config(layers=layers, embed=32, mlp=128, heads=4, head_dim=8, batch=32) if fast
           else transformer.Config(layers=layers))
    optimizer = optax.adam(3e-3)

    def step(params, opt_state, tokens):
        value, grads = nx.value_and_grad(transformer.loss)(params, tokens, cfg)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    def concrete():
        params = transformer.init(jax.random.key(0), cfg)
        return params, optimizer.init(params)

    strings = transformer.Strings(cfg, held_out=16)
    batches = [transformer.named_tokens(strings.batch()) for _ in range(3)]
    abstract = jax.eval_shape(lambda: (*concrete(), batches[0]))
    return cfg, step, abstract, concrete, batches


def train(step: Callable[..., Any], concrete, batches, rules=None, m=None):
    """Losses of a few steps: under ``rules`` on the mesh, or on one device (``rules=None``)."""
    params, opt_state = concrete()
    losses = []
    if rules is None:
        f = jax.jit(step)
        for tokens in batches:
            params, opt_state, value = f(params, opt_state, tokens)
            losses.append(float(value))
        return losses
    with jax.set_mesh(m), nx.axis_rules(rules):
        f = nx.jit(step)
        for tokens in batches:
            params, opt_state, value = f(params, opt_state, tokens)
            losses.append(float(value))
    return losses


def main(fast: bool = False) -> None:
    m = mesh()
    print(f"mesh {dict(m.shape)}: {m.size} simulated devices\n")

    print("== 1. The tutorial MLP: one SGD step, enumerated candidates and the notebook's strategies ==")
    step, args = mlp_problem()
    candidates = (candidate_rules(step, *args, mesh=m, max_candidates=4 if fast else 12)
                  + list(MLP_HAND.values()))
    plan = nx.plan_sharding(step, *args, mesh=m, candidates=candidates)
    print(plan)
    best_hand = min((plan.row(rules) for rules in MLP_HAND.values()), key=lambda r: r.cost)
    print(f"\nplan's choice {plan.best}: cost {plan.rows[0].cost:.3g}; best hand-picked {best_hand.rules}: "
          f"cost {best_hand.cost:.3g}; as good or better: {plan.rows[0].cost <= best_hand.cost}")
    print(plan.explain())

    layers = 1 if fast else 4
    print(f"\n== 2. The GPT of transformer.py, {layers} layer{'s' * (layers > 1)}: one adam step ==")
    cfg, step, abstract, concrete, batches = gpt_problem(layers, fast)
    t0 = time.perf_counter()
    candidates = (candidate_rules(step, *abstract, mesh=m, max_candidates=1 if fast else 12)
                  + list(GPT_HAND.values()))
    plan = nx.plan_sharding(step, *abstract, mesh=m, candidates=candidates)
    planning_s = time.perf_counter() - t0
    print(plan)
    print(f"planned {len(plan)} candidates (enumerated, and the notebook's) in {planning_s:.1f} s")
    print(plan.explain())
    print(plan.explain(GPT_HAND["data x model"]))
    limit = plan.row({}).memory_bytes // 2
    limited = plan.rerank(memory_limit=limit)  # ranked again, nothing compiled again
    print(f"\nwith memory_limit={limit} bytes per device (half of what replicated needs):")
    print(limited)

    print("\nlosses of 3 adam steps (one device, then strategies on the mesh):")
    reference = train(step, concrete, batches)
    print(f"  {'one device':<24} " + " ".join(f"{v:.6f}" for v in reference))
    runs = {"plan.best": plan.best, "plan.best under limit": limited.best}
    if not fast:
        runs.update({k: v for k, v in GPT_HAND.items() if plan.row(v).ok})
    agree = True
    for title, rules in runs.items():
        curve = train(step, concrete, batches, rules, m)
        agree &= bool(np.allclose(curve, reference, rtol=1e-5))
        print(f"  {title:<24} " + " ".join(f"{v:.6f}" for v in curve) + f"   rules {rules}")
    print(f"every strategy gives the one-device losses: {agree}")


if __name__ == "__main__":
    main(fast="--fast" in sys.argv)
