"""Eager rows: each named op against the jnp code a user would otherwise write, at two sizes."""

from __future__ import annotations

import jax

jax.config.update("jax_cpu_enable_async_dispatch", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import compare, table  # noqa: E402

import namedarray as nx  # noqa: E402

SIZES = [(32, 64), (1024, 1024)]


def _arrays(n, m, seed=0):
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.normal(size=(n, m)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(n, m)), jnp.float32)
    return a, b


def rows_for(n: int, m: int, reps: int) -> list[list[str]]:
    a, b = _arrays(n, m)
    bT = b.T
    v = b[0]
    x = nx.wrap(a, ["x", "y"])
    y = nx.wrap(b, ["x", "y"])
    y_from_t = nx.wrap(bT, ["y", "x"])  # built from (y, x) data
    vy = nx.wrap(v, ["y"])
    k = 128 if n == 32 else m
    w = jnp.asarray(np.random.default_rng(1).normal(size=(m, k)), jnp.float32)
    wn = nx.wrap(w, ["y", "z"])

    cases = {
        "aligned add": (lambda: x + y, lambda: a + b),
        "misaligned add (operands named from (x,y) and (y,x) data)": (lambda: x + y_from_t, lambda: a + bT.T),
        "wrap (y,x) data, then add": (lambda: x + nx.wrap(bT, ["y", "x"]), lambda: a + bT.T),
        "broadcast add (x,y)+(y)": (lambda: x + vy, lambda: a + v),
        "sum over a name": (lambda: x.sum("y"), lambda: jnp.sum(a, 1)),
        "softmax over a name": (lambda: nx.nn.softmax(x, axis="y"), lambda: jax.nn.softmax(a, axis=1)),
        f"named dot ({n},{m})x({m},{k})": (lambda: nx.dot(x, wn, axis="y"), lambda: jnp.dot(a, w)),
        "brace einsum {x,y},{y,z}->{x,z}": (lambda: nx.einsum("{x,y},{y,z}->{x,z}", x, wn),
                                           lambda: jnp.einsum("xy,yz->xz", a, w)),
    }
    rows = []
    for name, (f_nx, f_jnp) in cases.items():
        # both sides through the same wrapper (which hands the storage to block_until_ready): the ratio is
        # the ops', not the harness's
        t = compare({"nx": lambda f=f_nx: _data(f()), "jnp": lambda f=f_jnp: _data(f())}, reps=reps,
                    warmup=max(20, reps // 10))
        rows.append([name, f"({n}, {m})", f"{t['nx']:.1f}", f"{t['jnp']:.1f}", f"{t['nx'] / t['jnp']:.2f}x"])
    rows.append(_mlp_row(n, m, reps))
    return rows


def _data(v):
    return v.data if isinstance(v, nx.NamedArray) else v


def _mlp_row(n: int, m: int, reps: int) -> list[str]:
    hidden, out = (128, 10) if n == 32 else (1024, 256)
    rng = np.random.default_rng(2)
    a = jnp.asarray(rng.normal(size=(n, m)), jnp.float32)
    w1 = jnp.asarray(rng.normal(size=(m, hidden)) / np.sqrt(m), jnp.float32)
    b1 = jnp.zeros(hidden, jnp.float32)
    w2 = jnp.asarray(rng.normal(size=(hidden, out)) / np.sqrt(hidden), jnp.float32)
    b2 = jnp.zeros(out, jnp.float32)
    xa = nx.wrap(a, ["batch", "inputs"])
    nw1, nb1 = nx.wrap(w1, ["inputs", "hidden"]), nx.wrap(b1, ["hidden"])
    nw2, nb2 = nx.wrap(w2, ["hidden", "classes"]), nx.wrap(b2, ["classes"])

    def f_nx():
        h = nx.nn.relu(nx.dot(xa, nw1, axis="inputs") + nb1)
        return (nx.dot(h, nw2, axis="hidden") + nb2).data

    def f_jnp():
        h = jax.nn.relu(a @ w1 + b1)
        return h @ w2 + b2

    t = compare({"nx": f_nx, "jnp": f_jnp}, reps=reps, warmup=max(20, reps // 10))
    return ["2-layer MLP, eager", f"({n}, {m})", f"{t['nx']:.1f}", f"{t['jnp']:.1f}",
            f"{t['nx'] / t['jnp']:.2f}x"]


def main(quick: bool = False) -> str:
    rows = []
    for n, m in SIZES:
        reps = (300 if quick else 2000) if n == 32 else (30 if quick else 400)
        rows += rows_for(n, m, reps)
    return ("## Eager ops (median us per call, sync CPU dispatch, 1 device)\n\n"
            + table(["op", "size", "nx us", "jnp us", "nx / jnp"], rows))


if __name__ == "__main__":
    import sys

    print(main(quick="--quick" in sys.argv))
