"""Sharded Llama rows on 8 simulated CPU devices: the model written once with ``.shard()`` and logical names,
against the same model sharded by hand with ``jax.jit`` + ``NamedSharding``.

The model is examples/llama.py at d_model 256: 4 layers run by a scan, 8 query heads over 4 kv heads
(grouped-query attention), seq 128, batch 8, one adamw step. The named model marks its layouts the way
docs/library_authors.md says (each layer's parameters and the activations of each contraction), and each
strategy is one ``nx.axis_rules`` mapping under ``nx.jit``. The hand-written twin is the positional model of
the same file: its parameters, optimizer state and tokens placed with the PartitionSpecs a user writes for the
strategy, passed as ``in_shardings``/``out_shardings``, and (fully sharded only) each layer's parameters
gathered inside the scan with ``with_sharding_constraint``, where the named model's ``nx.shard(p)`` does
it, the layer's input constrained to the batch split, where the named model's ``x.shard()`` does it, and the
embedding tables laid out by the loss's rules, where the named model's ``params["tok"].shard()`` does it.

Per strategy and device: argument, output and temporary bytes (``memory_analysis`` of the compiled step),
the collectives of each program by kind, the loss of one step from the same parameters, and the steady-state
step time.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import llama  # noqa: E402

CONFIG = llama.Config(layers=4, embed=256, heads=8, kv_heads=4, head_dim=32, mlp=688, seq=128, batch=8,
                      vocab=1024)

# name -> (mesh shape, mesh axes, the rules the step runs under, the rules of the computation inside the
# loss where they differ: fully sharded parameters are gathered layer by layer, by name)
STRATEGIES = {
    "data parallel": ((8,), ("data",), {"batch": "data"}, None),
    "tensor parallel": ((2, 4), ("data", "model"),
                        {"kv_heads": "model", "q_per_kv": "data", "mlp": ("data", "model"),
                         "vocab": ("data", "model")}, None),
    "data x tensor": ((4, 2), ("data", "model"),
                      {"batch": "data", "kv_heads": "model", "mlp": "model", "vocab": "model"}, None),
    "fully sharded": ((8,), ("data",), {"batch": "data", "embed": "data"}, {"embed": None}),
}


def _spec(axes: tuple[str, ...], rules: dict) -> P:
    return P(*[rules.get(a) for a in axes])


def named_case(mesh, rules, compute, params, tokens, opt):
    model = llama.make_nx_model()

    def loss(p, t):
        if compute is None:
            return model.loss(p, t)
        with nx.axis_rules(compute):
            return model.loss(p, t)

    def step(p, s, t):
        value, grads = jax.value_and_grad(loss)(p, t)
        updates, s = opt.update(grads, s, p)
        return value, optax.apply_updates(p, updates), s

    with jax.set_mesh(mesh), nx.axis_rules(rules):
        p = nx.shard(model.named_params(params))
        s = opt.init(p)
        t = nx.shard(model.named_tokens(tokens))
        f = nx.jit(step)
        compiled = f.lower(p, s, t).compile()
        value = float(f(p, s, t)[0])

    def call():
        with jax.set_mesh(mesh), nx.axis_rules(rules):
            return f(p, s, t)

    return compiled, value, call


def hand_case(mesh, rules, compute, params, tokens, opt):
    shardings = jax.tree_util.tree_map_with_path(
        lambda path, a: NamedSharding(mesh, _spec(llama.PARAM_AXES[path[-1].key], rules)), params)
    layer_inputs = None
    inner = {**rules, **(compute or {})}

    def gathered(p):  # the embedding tables, as the named loss lays them out (its params["tok"].shard() ...)
        return {**p, **{k: jax.lax.with_sharding_constraint(
            p[k], NamedSharding(mesh, _spec(llama.PARAM_AXES[k], inner))) for k in ("tok", "unembed")}}

    if compute is not None:  # fully sharded: each layer's parameters gathered where the layer runs

        def layer_inputs(x, layer):
            x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(inner.get("batch"))))
            return x, {k: jax.lax.with_sharding_constraint(
                a, NamedSharding(mesh, _spec(llama.PARAM_AXES[k][1:], inner))) for k, a in layer.items()}

    def step(p, s, t):
        value, grads = jax.value_and_grad(lambda p, t: llama.jnp_loss(gathered(p), t, layer_inputs))(p, t)
        updates, s = opt.update(grads, s, p)
        return value, optax.apply_updates(p, updates), s

    with jax.set_mesh(mesh):
        p = jax.device_put(params, shardings)
        s = opt.init(p)
        state_shardings = jax.tree.map(lambda a: a.sharding, s)
        t = jax.device_put(jnp.asarray(tokens), NamedSharding(mesh, P(rules.get("batch"))))
        f = jax.jit(step, in_shardings=(shardings, state_shardings, t.sharding),
                    out_shardings=(NamedSharding(mesh, P()), shardings, state_shardings))
        compiled = f.lower(p, s, t).compile()
        value = float(f(p, s, t)[0])

    def call():
        with jax.set_mesh(mesh):
            return f(p, s, t)

    return compiled, value, call


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f}"


def _colls(text: str) -> str:
    found = collectives(text)
    return ", ".join(f"{n} {k}" for k, n in sorted(found.items()) if n) or "none"


def measure(quick: bool = False) -> list[dict]:
    params = llama.init_params(0, CONFIG)
    tokens = llama.make_batch(0, CONFIG)
    opt = optax.adamw(1e-3)
    out = []
    for name, (shape, axes, rules, compute) in STRATEGIES.items():
        mesh = jax.make_mesh(shape, axes, axis_types=(AxisType.Auto,) * len(axes))
        cn, ln, fn = named_case(mesh, rules, compute, params, tokens, opt)
        ch, lh, fh = hand_case(mesh, rules, compute, params, tokens, opt)
        times = compare({"nx": fn, "jax": fh}, reps=2 if quick else 7, warmup=1 if quick else 2)
        mn, mh = cn.memory_analysis(), ch.memory_analysis()
        out.append({"strategy": name, "mesh": "x".join(map(str, shape)), "rules": rules,
                    "nx": (mn, _colls(cn.as_text()), ln, times["nx"], sum(hlo_ops(cn.as_text()).values())),
                    "jax": (mh, _colls(ch.as_text()), lh, times["jax"], sum(hlo_ops(ch.as_text()).values()))})
    return out


def main(quick: bool = False) -> str:
    rows, notes = [], []
    for r in measure(quick):
        (mn, cn, ln, tn, _), (mh, ch, lh, th, _) = r["nx"], r["jax"]
        an, ah = mn.argument_size_in_bytes, mh.argument_size_in_bytes
        rows.append([f"{r['strategy']} ({r['mesh']})", "argument MB", _mb(an), _mb(ah), ratio(an, ah)])
        rows.append(["", "output MB", _mb(mn.output_size_in_bytes), _mb(mh.output_size_in_bytes),
                     ratio(mn.output_size_in_bytes, mh.output_size_in_bytes)])
        rows.append(["", "temp MB", _mb(mn.temp_size_in_bytes), _mb(mh.temp_size_in_bytes),
                     ratio(mn.temp_size_in_bytes, mh.temp_size_in_bytes)])
        rows.append(["", "step ms", f"{tn / 1e3:.1f}", f"{th / 1e3:.1f}", ratio(tn, th)])
        rows.append(["", "loss", f"{ln:.7f}", f"{lh:.7f}", f"rel. diff {abs(ln - lh) / abs(lh):.1e}"])
        rows.append(["", "collectives", cn, ch, "same" if cn == ch else "differ"])
        rows.append(["", "compiled ops", str(r["nx"][4]), str(r["jax"][4]), ratio(r["nx"][4], r["jax"][4])])
        notes.append(f"- {r['strategy']}: mesh {r['mesh']}, rules `{r['rules']}`")
    c = CONFIG
    return (f"## Sharded Llama training step (8 simulated CPU devices)\n\n"
            f"{c.layers} layers (scanned), embed {c.embed}, {c.heads} query heads over {c.kv_heads} kv heads "
            f"x {c.head_dim}, SwiGLU MLP {c.mlp}, seq {c.seq}, batch {c.batch}, vocab {c.vocab}; one adamw "
            "step. nx: examples/llama.py's named model (its `.shard()` calls) under `nx.jit` and the rules; "
            "jax: the positional model under `jax.jit` with hand-written `NamedSharding`s. Bytes are per "
            "device; compiled ops count the work instructions XLA schedules. Bytes, collectives and ops are "
            "exact; the step time of 8 simulated devices on a few cores varies by about 20% from run to "
            "run.\n\n"
            + "\n".join(notes) + "\n\n"
            + table(["strategy", "measure", "nx", "jax", "nx vs jax"], rows))


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
