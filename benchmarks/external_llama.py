"""A Llama the project did not write, sharded by name through its port against the original sharded by hand
(8 simulated CPU devices).

The original is Penzai's Llama (the ``external`` extra); tests/external/llama_port.py ports it by following
docs/library_authors.md, ``.shard()`` where the guide says and nowhere tuned. Both take the original's
initial weights: 4 layers in a scan, embed 256, 8 query heads over 4 kv heads x 32, SwiGLU MLP 688, seq 128,
batch 8, vocab 1024, one adamw step. Data x model on a (4, 2) mesh: the port under ``nx.jit`` and the rules
``{batch: data, kv_heads: model, mlp: model, vocab: model}``; the original under ``jax.jit`` with the
``NamedSharding``s a user writes by hand for the same strategy in Penzai's names (``head_groups``,
``neurons``, ``vocabulary``) as ``in_shardings``/``out_shardings``, and nothing inside the model.

Per device: argument, output and temporary bytes (``memory_analysis`` of the compiled step), the collectives
of each program by kind, the loss of one step, and the steady-state step time (interleaved medians). A third
column runs the port with its ``.shard()`` calls inert, to tell what they cost from what the two models'
different code costs.
"""

from __future__ import annotations

import os
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_cpu_enable_async_dispatch", False)

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from common import collectives, compare, hlo_ops, ratio, table  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import namedarray as nx  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from external import llama_port as lp  # noqa: E402

MESH = ((4, 2), ("data", "model"))


def named_case(mesh, values, tokens):
    with jax.set_mesh(mesh), nx.axis_rules(lp.RULES):
        p = nx.shard(lp.port_params(values))
        s = lp.OPTIMIZER.init(p)
        t = nx.shard(lp.named_tokens(tokens))
        f = nx.jit(lp.train_step)
        compiled = f.lower(p, s, t).compile()
        value = float(f(p, s, t)[0])

    def call():
        with jax.set_mesh(mesh), nx.axis_rules(lp.RULES):
            return f(p, s, t)

    return compiled, value, call


def hand_case(mesh, unbound, values, tokens):
    specs = lp.reference_specs(values, lp.PENZAI_RULES)
    shardings = {k: NamedSharding(mesh, spec) for k, spec in specs.items()}
    opt = lp.OPTIMIZER

    def step(v, s, t):
        value, grads = jax.value_and_grad(lambda v: lp.reference_loss(unbound, v, t))(v)
        updates, s = opt.update(grads, s, v)
        return value, optax.apply_updates(v, updates), s

    with jax.set_mesh(mesh):
        v = jax.device_put(values, shardings)
        s = opt.init(v)
        state_shardings = jax.tree.map(lambda a: a.sharding, s)
        t = jax.device_put(jnp.asarray(tokens), NamedSharding(mesh, P("data")))
        f = jax.jit(step, in_shardings=(shardings, state_shardings, t.sharding),
                    out_shardings=(NamedSharding(mesh, P()), shardings, state_shardings))
        compiled = f.lower(v, s, t).compile()
        value = float(f(v, s, t)[0])

    def call():
        with jax.set_mesh(mesh):
            return f(v, s, t)

    return compiled, value, call


def unmarked_case(mesh, values, tokens):
    """The port under ``jax.jit`` with its arguments laid out as ``nx.jit`` lays them out, but no mesh in
    context and no rules in force: every ``.shard()`` returns its value as it is, and the layout inside the
    step is what XLA propagates from the arguments. Against the ``nx`` column it prices the guide's
    ``.shard()`` calls alone, the model being the same."""
    p = lp.port_params(values)
    t = lp.named_tokens(tokens)
    shardings = nx.sharding(p, lp.RULES, mesh=mesh)
    token_sharding = nx.sharding(t, lp.RULES, mesh=mesh)
    p = jax.device_put(p, shardings)
    s = lp.OPTIMIZER.init(p)
    state_shardings = nx.sharding(s, lp.RULES, mesh=mesh)      # adam's step count replicated
    s = jax.device_put(s, state_shardings)
    t = jax.device_put(t, token_sharding)
    f = jax.jit(lp.train_step, in_shardings=(shardings, state_shardings, token_sharding),
                out_shardings=(NamedSharding(mesh, P()), shardings, state_shardings))
    compiled = f.lower(p, s, t).compile()
    value = float(f(p, s, t)[0])
    return compiled, value, lambda: f(p, s, t)


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f}"


def _colls(text: str) -> str:
    found = collectives(text)
    return ", ".join(f"{n} {k}" for k, n in sorted(found.items()) if n) or "none"


def measure(quick: bool = False) -> dict:
    unbound, values = lp.reference_split(lp.reference_model(0))
    tokens = lp.make_tokens(0)
    mesh = jax.make_mesh(*MESH, axis_types=(AxisType.Auto,) * 2)
    cn, ln, fn = named_case(mesh, values, tokens)
    ch, lh, fh = hand_case(mesh, unbound, values, tokens)
    cu, lu, fu = unmarked_case(mesh, values, tokens)
    times = compare({"nx": fn, "penzai": fh, "unmarked": fu}, reps=3 if quick else 15,
                    warmup=1 if quick else 3)
    return {k: (c.memory_analysis(), _colls(c.as_text()), v, times[k], sum(hlo_ops(c.as_text()).values()),
                c.as_text().count(" while("))
            for k, c, v in (("nx", cn, ln), ("penzai", ch, lh), ("unmarked", cu, lu))}


def main(quick: bool = False) -> str:
    r = measure(quick)
    (mn, cn, ln, tn, on, wn), (mh, ch, lh, th, oh, wh), (mu, cu, lu, tu, ou, wu) = (
        r["nx"], r["penzai"], r["unmarked"])

    def nbytes(field):
        a, b, c = (getattr(m, field) for m in (mn, mh, mu))
        return [_mb(a), _mb(b), ratio(a, b), _mb(c), ratio(a, c)]

    rows = [["argument MB", *nbytes("argument_size_in_bytes")],
            ["output MB", *nbytes("output_size_in_bytes")],
            ["temp MB", *nbytes("temp_size_in_bytes")],
            ["step ms", f"{tn / 1e3:.1f}", f"{th / 1e3:.1f}", ratio(tn, th), f"{tu / 1e3:.1f}",
             ratio(tn, tu)],
            ["loss", f"{ln:.7f}", f"{lh:.7f}", f"rel. diff {abs(ln - lh) / abs(lh):.1e}", f"{lu:.7f}",
             f"rel. diff {abs(ln - lu) / abs(lu):.1e}"],
            ["collectives", cn, ch, "same" if cn == ch else "differ", cu, "same" if cn == cu else "differ"],
            ["compiled ops", str(on), str(oh), ratio(on, oh), str(ou), ratio(on, ou)],
            ["loops (while)", str(wn), str(wh), "same" if wn == wh else "differ", str(wu),
             "same" if wn == wu else "differ"]]
    c = lp.CONFIG
    return (f"## External Llama (Penzai {lp.PENZAI_VERSION}), data x model on (4, 2) "
            "(8 simulated CPU devices)\n\n"
            f"A Llama the project did not write: Penzai's, {c.layers} layers (scanned), embed {c.embed}, "
            f"{c.heads} query heads over {c.kv_heads} kv heads x {c.head_dim}, SwiGLU MLP {c.mlp}, "
            f"seq {c.seq}, batch {c.batch}, vocab {c.vocab}; one adamw step from the original's initial "
            "weights. nx: the port written by docs/library_authors.md (tests/external/llama_port.py) under "
            "`nx.jit` and the rules "
            f"`{lp.RULES}`; penzai: the original under `jax.jit` with hand-written `NamedSharding`s "
            f"`{lp.PENZAI_RULES}` on its parameters and tokens; unmarked: the port under `jax.jit` with the "
            "arguments' shardings `nx.jit` gives them and no rules in force, so that its `.shard()` calls do "
            "nothing (what they cost, the model being the same). Bytes are per device, exact; step times are "
            "interleaved medians. Loops counts the compiled while loops: Penzai's `LayerStack` scans "
            "its layers with `unroll=True`, so the original compiles to straight-line code (each layer's "
            "collectives once per layer, more ops, more temporaries live at once), where the port's "
            "`nx.scan` keeps a forward and a backward loop.\n\n"
            + table(["measure", "nx (port)", "penzai (by hand)", "nx vs penzai", "unmarked port",
                     "nx vs unmarked"], rows))


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
