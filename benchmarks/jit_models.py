"""Jit rows: a 2-layer MLP and a transformer block written with nx vs with jnp.

For each model: trace time (median ``make_jaxpr`` of a fresh function, in rotation with the twin), the
optimised HLO's work instructions (equal counts mean names cost nothing once compiled), the steady-state
call time of the jitted function (NamedArray pytrees in and out vs plain arrays), and the per-call pytree
flatten cost.
"""

from __future__ import annotations

import jax

jax.config.update("jax_cpu_enable_async_dispatch", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import compare, hlo_ops, table  # noqa: E402

import namedarray as nx  # noqa: E402


def _rand(rng, *shape, scale=1.0):
    return jnp.asarray(rng.normal(size=shape) * scale, jnp.float32)


# ---- 2-layer MLP ------------------------------------------------------------------------------------------


def mlp_models(batch=128, d_in=256, hidden=512, d_out=64):
    rng = np.random.default_rng(0)
    p = {"w1": _rand(rng, d_in, hidden, scale=d_in ** -0.5), "b1": _rand(rng, hidden),
         "w2": _rand(rng, hidden, d_out, scale=hidden ** -0.5), "b2": _rand(rng, d_out)}
    x = _rand(rng, batch, d_in)
    pn = {"w1": nx.wrap(p["w1"], ["inputs", "hidden"]), "b1": nx.wrap(p["b1"], ["hidden"]),
          "w2": nx.wrap(p["w2"], ["hidden", "outputs"]), "b2": nx.wrap(p["b2"], ["outputs"])}
    xn = nx.wrap(x, ["batch", "inputs"])

    def f_jnp(p, x):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean(jax.nn.log_softmax(h @ p["w2"] + p["b2"], axis=-1))

    def f_nx(p, x):
        h = nx.nn.relu(nx.dot(x, p["w1"], axis="inputs") + p["b1"])
        out = nx.nn.log_softmax(nx.dot(h, p["w2"], axis="hidden") + p["b2"], axis="outputs")
        return out.mean(("batch", "outputs"))

    return (f_nx, (pn, xn)), (f_jnp, (p, x))


# ---- transformer block ------------------------------------------------------------------------------------


def block_models(batch=4, seq=64, embed=128, heads=4, head=32, mlp=512):
    rng = np.random.default_rng(1)
    s = embed ** -0.5
    p = {"wq": _rand(rng, embed, heads, head, scale=s), "wk": _rand(rng, embed, heads, head, scale=s),
         "wv": _rand(rng, embed, heads, head, scale=s), "wo": _rand(rng, heads, head, embed, scale=s),
         "w1": _rand(rng, embed, mlp, scale=s), "w2": _rand(rng, mlp, embed, scale=mlp ** -0.5)}
    x = _rand(rng, batch, seq, embed)
    qkv = ["embed", "heads", "head"]
    pn = {"wq": nx.wrap(p["wq"], qkv), "wk": nx.wrap(p["wk"], qkv), "wv": nx.wrap(p["wv"], qkv),
          "wo": nx.wrap(p["wo"], ["heads", "head", "embed"]), "w1": nx.wrap(p["w1"], ["embed", "mlp"]),
          "w2": nx.wrap(p["w2"], ["mlp", "embed"])}
    xn = nx.wrap(x, ["batch", "seq", "embed"])
    scale = head ** -0.5

    def f_jnp(p, x):
        q = jnp.einsum("bse,ehd->bshd", x, p["wq"])
        k = jnp.einsum("bse,ehd->bshd", x, p["wk"])
        v = jnp.einsum("bse,ehd->bshd", x, p["wv"])
        att = jax.nn.softmax(jnp.einsum("bshd,bthd->bhst", q, k) * scale, axis=-1)
        o = jnp.einsum("bhst,bthd->bshd", att, v)
        h = x + jnp.einsum("bshd,hde->bse", o, p["wo"])
        hn = jax.nn.standardize(h, axis=-1)
        return h + jax.nn.gelu(hn @ p["w1"]) @ p["w2"]

    def f_nx(p, x):
        q = nx.einsum("{batch,seq,embed},{embed,heads,head}->{batch,seq,heads,head}", x, p["wq"])
        kv = x.rename(seq="kseq")
        k = nx.einsum("{batch,kseq,embed},{embed,heads,head}->{batch,kseq,heads,head}", kv, p["wk"])
        v = nx.einsum("{batch,kseq,embed},{embed,heads,head}->{batch,kseq,heads,head}", kv, p["wv"])
        logits = nx.einsum("{batch,seq,heads,head},{batch,kseq,heads,head}->{batch,heads,seq,kseq}", q, k)
        att = nx.nn.softmax(logits * scale, axis="kseq")
        o = nx.einsum("{batch,heads,seq,kseq},{batch,kseq,heads,head}->{batch,seq,heads,head}", att, v)
        h = x + nx.einsum("{batch,seq,heads,head},{heads,head,embed}->{batch,seq,embed}", o, p["wo"])
        hn = nx.nn.standardize(h, axis="embed")
        return h + nx.dot(nx.nn.gelu(nx.dot(hn, p["w1"], axis="embed")), p["w2"], axis="mlp")

    block_models.__wrapped_jnp__ = f_jnp
    return (f_nx, (pn, xn)), (f_jnp, (p, x))


def _compiled_ops(f, args):
    return hlo_ops(jax.jit(f).lower(*args).compile().as_text())


def model_rows(name, models, quick):
    (f_nx, a_nx), (f_jnp, a_jnp) = models
    n = 10 if quick else 200  # many rounds: the medians of a busy machine settle
    # a fresh function object per trace: jax caches traces by function identity
    traces = compare({"nx": lambda: jax.make_jaxpr(lambda *a: f_nx(*a))(*a_nx),
                      "jnp": lambda: jax.make_jaxpr(lambda *a: f_jnp(*a))(*a_jnp)}, reps=n, warmup=3)
    t_nx, t_jnp = traces["nx"] / 1e6, traces["jnp"] / 1e6
    ops_nx, ops_jnp = _compiled_ops(f_nx, a_nx), _compiled_ops(f_jnp, a_jnp)
    diff = {k: (ops_nx.get(k, 0), ops_jnp.get(k, 0)) for k in set(ops_nx) | set(ops_jnp)
            if ops_nx.get(k, 0) != ops_jnp.get(k, 0)}
    j_nx, j_jnp = jax.jit(f_nx), jax.jit(f_jnp)
    t = compare({"nx": lambda: j_nx(*a_nx), "jnp": lambda: j_jnp(*a_jnp)},
                reps=50 if quick else 300, warmup=10)
    leaves = len(jax.tree.leaves(a_nx))
    fl = compare({"nx": lambda: jax.tree.flatten(a_nx), "jnp": lambda: jax.tree.flatten(a_jnp)},
                 reps=500 if quick else 3000, warmup=50)
    diff_text = "equal" if not diff else ", ".join(f"{k} {a} vs {b}" for k, (a, b) in sorted(diff.items()))
    if diff:
        diff_text += f" (total {sum(ops_nx.values())} vs {sum(ops_jnp.values())})"
    return [
        [name, "trace time (make_jaxpr)", f"{t_nx * 1e3:.2f} ms", f"{t_jnp * 1e3:.2f} ms",
         f"{t_nx / t_jnp:.2f}x"],
        [name, "compiled HLO work instructions", str(sum(ops_nx.values())), str(sum(ops_jnp.values())),
         diff_text],
        [name, "steady-state jitted call", f"{t['nx']:.1f} us", f"{t['jnp']:.1f} us",
         f"{t['nx'] / t['jnp']:.2f}x"],
        [name, f"pytree flatten of the arguments ({leaves} leaves)", f"{fl['nx']:.2f} us",
         f"{fl['jnp']:.2f} us",
         f"+{(fl['nx'] - fl['jnp']) / leaves:.2f} us/leaf"],
    ]


# ---- the trace path: value_and_grad of an unscanned residual MLP ------------------------------------------


def residual_trace_rows(quick: bool) -> list[list[str]]:
    """``jax.make_jaxpr(jax.value_and_grad(loss))`` of a residual MLP with 2, 8 and 32 unscanned layers, named
    vs positional: what the engine's Python costs on the path every traced op takes."""
    rng = np.random.default_rng(0)
    d, h, b = 64, 128, 32
    rows = []
    for layers in (2, 8, 32):
        pj = [{"w1": _rand(rng, d, h, scale=d ** -0.5), "b1": _rand(rng, h),
               "w2": _rand(rng, h, d, scale=h ** -0.5)} for _ in range(layers)]
        pn = [{"w1": nx.wrap(p["w1"], ["embed", "hidden"]), "b1": nx.wrap(p["b1"], ["hidden"]),
               "w2": nx.wrap(p["w2"], ["hidden", "embed"])} for p in pj]
        x = _rand(rng, b, d)
        xn = nx.wrap(x, ["batch", "embed"])

        def loss_jnp(ps, x):
            for p in ps:
                x = x + jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"]
            return jnp.mean(x ** 2)

        def loss_nx(ps, x):
            for p in ps:
                x = x + nx.dot(nx.nn.relu(nx.dot(x, p["w1"], "embed") + p["b1"]), p["w2"], "hidden")
            return nx.mean(x ** 2, ("batch", "embed")).unwrap()

        # a fresh function object per trace: jax caches traces by function identity
        def trace(loss, *args):
            return jax.make_jaxpr(jax.value_and_grad(lambda *a: loss(*a)))(*args)

        t = compare({"nx": lambda pn=pn, xn=xn: trace(loss_nx, pn, xn),
                     "jnp": lambda pj=pj, x=x: trace(loss_jnp, pj, x)},
                    reps=3 if quick else {2: 60, 8: 30}.get(layers, 16), warmup=1 if quick else 2)
        rows.append([f"residual MLP, {layers} unscanned layers", "trace time of value_and_grad (make_jaxpr)",
                     f"{t['nx'] / 1e3:.1f} ms", f"{t['jnp'] / 1e3:.1f} ms", f"{t['nx'] / t['jnp']:.2f}x"])
    return rows


def main(quick: bool = False) -> str:
    rows = (model_rows("2-layer MLP", mlp_models(), quick)
            + model_rows("transformer block", block_models(), quick)
            + residual_trace_rows(quick))
    return ("## Under jit (1 device)\n\n"
            + table(["model", "measure", "nx", "jnp", "nx vs jnp"], rows)
            + "\n\nCompiled instructions are the work instructions of the optimised HLO (fusions count once; "
            "parameters, tuples, constants and bitcasts are not counted). Inside the trace nx keeps each "
            "value in the order positional code would get, and NamedArrays cross the jit boundary in the "
            "canonical order of their names, which is the order the program first flattened them in (here "
            "the order the parameters and the input were built in, as the jnp code lays them out): the "
            "named models compile to the jnp models' instructions.")

if __name__ == "__main__":
    import sys

    print(main(quick="--quick" in sys.argv))
