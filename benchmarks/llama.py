"""Llama training step rows: the small Llama-style decoder of examples/llama.py, one adam step under jit.

The model has grouped-query attention (queries named ``{kv_heads, q_per_kv}``, keys and values ``kv_heads``),
rotary embeddings, RMSNorm, a SwiGLU MLP and its layers run by a scan over ``layer``. The step is
``jit(value_and_grad(loss))`` followed by the optax adam update, from the same init on the same batch.
Reported for the named model as written, and with its axis names respelled (reverse-alphabetical and random
spellings): named code should compile to the positional program's work whatever its names are called.
Measures: trace time (``make_jaxpr`` of a fresh step), the optimised HLO's work instructions, ``transpose``
instructions (fusion bodies included: that is where XLA's CPU backend keeps them) and fusions, and the
steady-state step time, all cases measured in one rotation.
"""

from __future__ import annotations

import jax

jax.config.update("jax_cpu_enable_async_dispatch", False)

import importlib.util  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from common import compare, layout_counts, table  # noqa: E402


def _load_example():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "llama.py")
    spec = importlib.util.spec_from_file_location("nx_llama_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


llama = _load_example()


def _step(loss_fn, optimizer):
    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    return step


def cases(cfg=None):
    """``{label: (step_fn, args)}`` for jnp and for the named model under each spelling."""
    cfg = cfg or llama.Config()
    optimizer = optax.adam(1e-3)
    params = llama.init_params(0, cfg)
    tokens = llama.make_batch(0, cfg)
    out = {"jnp": (_step(llama.jnp_loss, optimizer), (params, optimizer.init(params), jnp.asarray(tokens)))}
    spellings = {"names as written": {},
                 "names respelled reverse-alphabetically": llama.respelled(0, "reverse"),
                 "names respelled at random": llama.respelled(0, "random")}
    for label, names in spellings.items():
        model = llama.make_nx_model(names)
        p = model.named_params(params)
        out[label] = (_step(model.loss, optimizer), (p, optimizer.init(p), model.named_tokens(tokens)))
    return out


def main(quick: bool = False) -> str:
    cfg = llama.Config()
    cs = cases(cfg)
    jitted = {k: jax.jit(f) for k, (f, _) in cs.items()}
    counts = {k: layout_counts(jitted[k].lower(*a).compile().as_text()) for k, (_, a) in cs.items()}
    calls = {k: (lambda j=jitted[k], a=a: j(*a)) for k, (_, a) in cs.items()}
    t = compare(calls, reps=30 if quick else 300, warmup=5 if quick else 20)
    # a fresh function object per trace: jax caches traces by function identity
    f_nx, a_nx = cs["names as written"]
    f_jnp, a_jnp = cs["jnp"]
    tr = compare({"nx": lambda: jax.make_jaxpr(lambda *a: f_nx(*a))(*a_nx),
                  "jnp": lambda: jax.make_jaxpr(lambda *a: f_jnp(*a))(*a_jnp)},
                 reps=3 if quick else 20, warmup=1 if quick else 3)

    c_j = counts["jnp"]
    rows = [["Llama training step (adam)", "trace time (make_jaxpr), names as written",
             f"{tr['nx'] / 1e3:.1f} ms", f"{tr['jnp'] / 1e3:.1f} ms", f"{tr['nx'] / tr['jnp']:.2f}x"]]
    for label in cs:
        if label == "jnp":
            continue
        c = counts[label]
        rows += [
            ["Llama training step (adam)", f"compiled work instructions, {label}", str(c["work"]),
             str(c_j["work"]), f"{c['work'] / c_j['work']:.2f}x"],
            ["Llama training step (adam)", f"compiled transposes (fused included), {label}",
             str(c["transpose"]), str(c_j["transpose"]), f"{c['transpose'] - c_j['transpose']:+d}"],
            ["Llama training step (adam)", f"compiled fusions, {label}", str(c["fusion"]), str(c_j["fusion"]),
             f"{c['fusion'] - c_j['fusion']:+d}"],
            ["Llama training step (adam)", f"steady-state step, {label}", f"{t[label]:.0f} us",
             f"{t['jnp']:.0f} us", f"{t[label] / t['jnp']:.2f}x"],
        ]
    return (f"## Llama training step under jit (1 device)\n\n"
            f"{cfg.layers} layers (scanned), embed {cfg.embed}, {cfg.heads} query heads x {cfg.head_dim} "
            f"sharing {cfg.kv_heads} kv heads, SwiGLU MLP {cfg.mlp}, rotary embeddings, RMSNorm, "
            f"seq {cfg.seq}, batch {cfg.batch}, vocab {cfg.vocab} (examples/llama.py); one step = "
            "jit(value_and_grad(loss)) + optax adam update, named vs positional from the same init.\n\n"
            + table(["model", "measure", "nx", "jnp", "nx vs jnp"], rows)
            + "\n\nWork instructions are those of the optimised HLO's scheduled computations (fusions count "
            "once; parameters, tuples, constants and bitcasts are not counted); transposes are counted in "
            "every computation, fusion bodies included. The respelled rows run the same model with its "
            "axis names spelled differently: equal counts across spellings mean the layout does not "
            "depend on the names.")


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
