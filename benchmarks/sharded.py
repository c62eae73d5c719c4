"""Sharding rows on 8 simulated CPU devices: the xmap tutorial's MLP under each parallel strategy, against the
same model hand-written with ``jax.jit`` + ``NamedSharding``.

* ``nx.xmap``: the loss under each ``axis_resources`` strategy.
* Sharding by name: a training step (forward, grad, SGD update) written once with ``.shard()`` and logical
  names, run by ``nx.jit`` under each ``nx.axis_rules`` strategy.

Per strategy: whether the losses agree, the collectives in each compiled HLO, the per-device argument (and
output) bytes against the unsharded total (the expected fraction is 1/N of each partitioned array), and for
the training step the steady-state call time. Also: the peak temporary memory of a serial loop against no
loop.
"""

from __future__ import annotations

import functools
import os
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_cpu_enable_async_dispatch", False)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import collectives, compare, ratio, table  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import namedarray as nx  # noqa: E402

# The model is the tutorial's (examples/tutorial.py): the named loss, its in_axes, and the positional twin.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from tutorial import IN_AXES, named_loss, rule_strategies, sgd_step  # noqa: E402
from tutorial import loss as positional_loss  # noqa: E402

BATCH, INPUTS, HIDDEN, CLASSES = 256, 784, 512, 16


STRATEGIES = {
    "batch -> x (8)": ((8,), ("x",), {"batch": "x"},
                       [P(), P(), P("x", None), P("x")]),
    "hidden -> x (8)": ((8,), ("x",), {"hidden": "x"},
                        [P(None, "x"), P("x", None), P(), P()]),
    "batch -> x, hidden -> y (4x2)": ((4, 2), ("x", "y"), {"batch": "x", "hidden": "y"},
                                      [P(None, "y"), P("y", None), P("x", None), P("x")]),
}


def _data():
    rng = np.random.default_rng(0)
    w1 = jnp.asarray(rng.normal(size=(INPUTS, HIDDEN)) / np.sqrt(INPUTS), jnp.float32)
    w2 = jnp.asarray(rng.normal(size=(HIDDEN, CLASSES)) / np.sqrt(HIDDEN), jnp.float32)
    images = jnp.asarray(rng.normal(size=(BATCH, INPUTS)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, CLASSES, size=BATCH), jnp.int32)
    return w1, w2, images, labels


def strategy_rows() -> list[list[str]]:
    args = _data()
    total = sum(a.size * a.dtype.itemsize for a in args)
    ref = float(positional_loss(*args))
    rows = []
    for label, (shape, names, resources, specs) in STRATEGIES.items():
        mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))
        with jax.set_mesh(mesh):
            f = nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...], axis_resources=resources)
            c_nx = f.lower(*args).compile()
            out_nx = float(f(*args))
        shardings = [NamedSharding(mesh, s) for s in specs]
        hand = jax.jit(positional_loss, in_shardings=shardings)
        placed = [jax.device_put(a, s) for a, s in zip(args, shardings)]
        c_hand = hand.lower(*placed).compile()
        out_hand = float(hand(*placed))
        expected = sum(a.size * a.dtype.itemsize / _split(s, mesh) for a, s in zip(args, specs))
        agree = abs(out_nx - ref) < 1e-4 and abs(out_hand - ref) < 1e-4
        rows.append([
            label, f"{out_nx:.6f} / {out_hand:.6f} ({'equal' if agree else 'DIFFER'})",
            _fmt(collectives(c_nx.as_text())), _fmt(collectives(c_hand.as_text())),
            f"{c_nx.memory_analysis().argument_size_in_bytes} / "
            f"{c_hand.memory_analysis().argument_size_in_bytes}"
            f" (expected {int(expected)}, unsharded {total})",
        ])
    return rows


def positional_sgd_step(w1, w2, images, labels, lr=0.1):
    """The training step of tutorial.sgd_step, written positionally (the hand-written twin)."""
    loss, (g1, g2) = jax.value_and_grad(positional_loss, argnums=(0, 1))(w1, w2, images, labels)
    return w1 - lr * g1, w2 - lr * g2, loss


def training_rows(quick: bool) -> list[list[str]]:
    w1, w2, images, labels = _data()
    params = {"w1": nx.wrap(w1, ["inputs", "hidden"]), "w2": nx.wrap(w2, ["hidden", "classes"])}
    named_images, named_labels = nx.wrap(images, ["batch", "inputs"]), nx.wrap(labels, ["batch"])
    total = sum(a.size * a.dtype.itemsize for a in (w1, w2, images, labels))
    rows = []
    for title, shape, axes, rules in rule_strategies():
        mesh = jax.make_mesh(shape, axes, axis_types=(AxisType.Auto,) * len(axes))

        def sharding(*names, mesh=mesh, rules=rules):
            return NamedSharding(mesh, P(*[rules.get(n) for n in names]))

        w_sh = (sharding("inputs", "hidden"), sharding("hidden", "classes"))
        in_sh = w_sh + (sharding("batch", "inputs"), sharding("batch"))
        hand = jax.jit(positional_sgd_step, in_shardings=in_sh, out_shardings=w_sh + (sharding(),))
        placed = [jax.device_put(a, s) for a, s in zip((w1, w2, images, labels), in_sh)]
        c_hand = hand.lower(*placed).compile()
        step = nx.jit(sgd_step)
        with jax.set_mesh(mesh), nx.axis_rules(rules):
            c_nx = step.lower(params, named_images, named_labels).compile()
            p = nx.shard(params)
            x, y = named_images.shard(), named_labels.shard()
            out_nx = float(step(p, x, y)[1])
            out_hand = float(hand(*placed)[2])
            cases = {"nx": functools.partial(step, p, x, y), "hand": functools.partial(hand, *placed)}
            times = compare(cases, reps=30 if quick else 200, warmup=5 if quick else 20)
        m_nx, m_hand = c_nx.memory_analysis(), c_hand.memory_analysis()
        agree = abs(out_nx - out_hand) < 1e-5 * max(1.0, abs(out_hand))
        rows.append([
            title, f"{out_nx:.6f} / {out_hand:.6f} ({'equal' if agree else 'DIFFER'})",
            _fmt(collectives(c_nx.as_text())), _fmt(collectives(c_hand.as_text())),
            f"{m_nx.argument_size_in_bytes} / {m_hand.argument_size_in_bytes} (unsharded {total})",
            f"{m_nx.output_size_in_bytes} / {m_hand.output_size_in_bytes}",
            f"{times['nx']:.0f} / {times['hand']:.0f} us ({ratio(times['nx'], times['hand'])})",
        ])
    return rows


def _split(spec, mesh) -> int:
    n = 1
    for entry in spec:
        for ax in (entry if isinstance(entry, tuple) else (entry,)):
            if ax is not None:
                n *= mesh.shape[ax]
    return n


def _fmt(c: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


def serial_loop_rows() -> list[list[str]]:
    """A body whose intermediate (an outer product per batch element, multiplied by a vector, so that it
    must exist whole) dwarfs its inputs and outputs. (Summed directly, XLA fuses it away under the vmap of
    a positional body: no loop needed.)"""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(16, 512)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(512,)), jnp.float32)

    def body(x, y):
        return nx.sum(nx.tanh(nx.outer(x, y)) @ y)

    in_axes = (["batch", ...], [...])
    rows = []
    outs = {}
    for label, resources in [("no loop", {}), ("SerialLoop(8) on batch", {"batch": nx.SerialLoop(8)})]:
        f = nx.xmap(body, in_axes=in_axes, out_axes=["batch"], axis_resources=resources)
        mem = f.lower(x, y).compile().memory_analysis()
        outs[label] = np.asarray(f(x, y))
        rows.append([label, f"{mem.temp_size_in_bytes}"])
    same = np.allclose(*outs.values(), rtol=1e-4, atol=1e-3)
    rows.append(["results equal", str(bool(same))])
    return rows


def jit_call_rows(quick: bool) -> list[list[str]]:
    """The per-call cost of ``nx.jit`` against ``jax.jit`` of the same function on the same pytree of
    NamedArrays (ten leaves: parameters and a first moment of an adam-like state, the embed axis split over
    8 devices), interleaved, steady state (the state passed back laid out, as a training loop does)."""
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    sizes = {"embed": 64, "mlp": 128, "vocab": 256}
    names = [("embed", "mlp"), ("mlp", "embed"), ("embed",), ("vocab", "embed"), ("mlp",)]

    def make():
        return {f"p{i}": nx.zeros({n: sizes[n] for n in ns}) for i, ns in enumerate(names)}

    def step(state):
        return jax.tree.map(lambda p: p * 0.9 + 0.1, state)

    with jax.set_mesh(mesh), nx.axis_rules({"embed": "data"}):
        fn = nx.jit(step)
        state = fn({"params": make(), "mu": make()})
        plain = jax.jit(step)
        t = compare({"nx.jit": lambda: fn(state), "jax.jit": lambda: plain(state)},
                    reps=100 if quick else 3000, warmup=50)
    return [["ten-leaf state, one step", f"{t['nx.jit']:.1f} us", f"{t['jax.jit']:.1f} us",
             ratio(t["nx.jit"], t["jax.jit"])]]


def main(quick: bool = False) -> str:
    out = ["## Sharded: the tutorial MLP loss on 8 simulated CPU devices\n",
           table(["strategy", "loss nx / hand-written", "collectives nx", "collectives hand-written",
                  "argument bytes per device nx / hand-written"], strategy_rows())]
    out += [f"\n## Sharding by name: an MLP training step on 8 simulated CPU devices\n\n"
            f"The tutorial MLP ({BATCH}x{INPUTS} inputs, {HIDDEN} hidden, {CLASSES} classes), one SGD step "
            "(forward, grad, update) written once with `.shard()` and logical names and run by `nx.jit` "
            "under each `nx.axis_rules` strategy, against the same step written positionally with `jax.jit` "
            "+ `NamedSharding` from the same strategy. Bytes are per device, from the compiled memory "
            "analysis; call times are medians of the steady-state step on one 2-core machine simulating 8 "
            "devices.\n",
            table(["strategy (nx.axis_rules)", "loss nx / hand-written", "collectives nx",
                   "collectives hand-written", "argument bytes per device nx / hand-written",
                   "output bytes per device nx / hand-written", "step nx / hand-written"],
                  training_rows(quick))]
    out += ["\n## nx.jit per call (8 simulated CPU devices)\n",
            table(["case", "nx.jit", "jax.jit", "nx / jax"], jit_call_rows(quick))]
    out += ["\n## Serial loops: memory of a chunked map (sum(tanh(outer(x, y)) @ y) per batch element, "
            "16x512, 1 device)\n",
            table(["resources", "temp bytes (compiled memory analysis)"], serial_loop_rows())]
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(main(quick="--quick" in sys.argv))
