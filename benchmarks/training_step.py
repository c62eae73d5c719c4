"""Training-step rows shared by gpt.py and llama.py: one adam step under jit, named vs positional.

The step is ``jit(value_and_grad(loss))`` followed by the optax adam update, from the same init on the same
batch. Reported for the named model as written, and with its axis names respelled (reverse-alphabetical
and random spellings): named code should compile to the positional program's work whatever its names are
called. Measures: trace time (``make_jaxpr`` of a fresh step), the optimised HLO's work instructions,
``transpose`` instructions (fusion bodies included: that is where XLA's CPU backend keeps them) and
fusions, and the steady-state step time, all cases measured in one rotation. An example module provides
``Config``, ``init_params``, ``make_batch``, ``jnp_loss``, ``respelled`` and ``make_nx_model``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import jax
import jax.numpy as jnp
import optax
from common import compare, layout_counts

NOTE = ("Work instructions are those of the optimised HLO's scheduled computations (fusions count once; "
        "parameters, tuples, constants and bitcasts are not counted); transposes are counted in every "
        "computation, fusion bodies included. The respelled rows run the same model with its axis names "
        "spelled differently: equal counts across spellings mean the layout does not depend on the names.")


def load_example(name: str):
    """``examples/<name>.py`` as a module."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"nx_{name}_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _step(loss_fn, optimizer):
    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    return step


def cases(example, cfg=None):
    """``{label: (step_fn, args)}`` for jnp and for the named model under each spelling."""
    cfg = cfg or example.Config()
    optimizer = optax.adam(1e-3)
    params = example.init_params(0, cfg)
    tokens = example.make_batch(0, cfg)
    out = {"jnp": (_step(example.jnp_loss, optimizer), (params, optimizer.init(params), jnp.asarray(tokens)))}
    spellings = {"names as written": {},
                 "names respelled reverse-alphabetically": example.respelled(0, "reverse"),
                 "names respelled at random": example.respelled(0, "random")}
    for label, names in spellings.items():
        model = example.make_nx_model(names)
        p = model.named_params(params)
        out[label] = (_step(model.loss, optimizer), (p, optimizer.init(p), model.named_tokens(tokens)))
    return out


def rows(example, title: str, quick: bool = False) -> tuple[list[list[str]], object]:
    """The table rows of one model (``title`` names it) and its config."""
    cfg = example.Config()
    cs = cases(example, cfg)
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
    out = [[title, "trace time (make_jaxpr), names as written",
             f"{tr['nx'] / 1e3:.1f} ms", f"{tr['jnp'] / 1e3:.1f} ms", f"{tr['nx'] / tr['jnp']:.2f}x"]]
    for label in cs:
        if label == "jnp":
            continue
        c = counts[label]
        out += [
            [title, f"compiled work instructions, {label}", str(c["work"]),
             str(c_j["work"]), f"{c['work'] / c_j['work']:.2f}x"],
            [title, f"compiled transposes (fused included), {label}",
             str(c["transpose"]), str(c_j["transpose"]), f"{c['transpose'] - c_j['transpose']:+d}"],
            [title, f"compiled fusions, {label}", str(c["fusion"]), str(c_j["fusion"]),
             f"{c['fusion'] - c_j['fusion']:+d}"],
            [title, f"steady-state step, {label}", f"{t[label]:.0f} us",
             f"{t['jnp']:.0f} us", f"{t[label] / t['jnp']:.2f}x"],
        ]
    return out, cfg
