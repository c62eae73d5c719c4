"""An xmap-era program ported by its import line, against the same program on ``jax.jit(jax.vmap(...))``.

The program is tests/xmap_programs/sharded_lm.py: a haiku language model written for
``jax.experimental.maps.xmap`` (Megatron-style ``custom_vjp`` pairs around ``psum`` over ``'shard'``,
``pmean`` over ``'batch'``, the SGD step inside the map), on 8 simulated devices, mesh 4 x 2 (``dp``, ``mp``).

* nx: the program with ``from jax.experimental.maps import`` changed to ``from namedarray.maps import``.
* reference: the same text importing the hand-written equivalent below, what a user would write with
  today's jax: ``jax.jit`` of one ``jax.vmap`` per name (the name as ``axis_name``), with the arguments
  and results laid out by the same resources (``NamedSharding``).

Rows: the training losses of both (equal), the steady-state training step and evaluation call times
(interleaved medians), and the compiled programs' work instructions and collectives.
"""

from __future__ import annotations

import os
import sys
import types

import jax

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_cpu_enable_async_dispatch", False)

import numpy as np  # noqa: E402
from common import collectives, compare, hlo_ops, ratio, table  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "xmap_programs"))
import ported  # noqa: E402

QUICK = "--quick" in sys.argv


def _vmap_maps() -> types.ModuleType:
    """``xmap`` as one would hand-write it today for list specs of leading names: jit of nested vmaps."""
    from namedarray.maps import thread_resources  # only reads the mesh in context

    def xmap(fun, in_axes, out_axes, axis_resources=None, **_):
        resources = axis_resources or {}

        def names_of(spec):
            return [n for n in spec if isinstance(n, str)]

        def is_spec(s):
            return isinstance(s, list)

        def build(*args):
            flat_in = jax.tree_util.tree_leaves(in_axes, is_leaf=is_spec)
            names = list(dict.fromkeys(n for s in flat_in for n in names_of(s)))
            out_leaves, out_def = jax.tree_util.tree_flatten(out_axes, is_leaf=is_spec)
            f = fun
            for depth in reversed(range(len(names))):
                n = names[depth]
                ins = tuple(jax.tree_util.tree_map(lambda s, n=n: 0 if n in names_of(s) else None, spec,
                                                   is_leaf=is_spec) for spec in in_axes)
                outs = jax.tree_util.tree_unflatten(out_def, [0 if n in names_of(s) else None
                                                              for s in out_leaves])
                f = jax.vmap(f, in_axes=ins, out_axes=outs, axis_name=n)
            mesh = thread_resources.env.physical_mesh

            def sharding(spec):
                return NamedSharding(mesh, P(*[resources.get(n) for n in names_of(spec)]))

            in_sh = tuple(jax.tree_util.tree_map(sharding, s, is_leaf=is_spec) for s in in_axes)
            out_sh = jax.tree_util.tree_unflatten(out_def, [sharding(s) for s in out_leaves])
            return jax.jit(f, in_shardings=in_sh, out_shardings=out_sh)

        cache = {}

        def call(*args):
            if "f" not in cache:
                cache["f"] = build(*args)
            return cache["f"](*args)

        call.lower = lambda *args: build(*args).lower(*args)
        return call

    module = types.ModuleType("vmap_maps")
    module.xmap = xmap
    module.thread_resources = thread_resources
    sys.modules["vmap_maps"] = module
    return module


def main() -> None:
    _vmap_maps()
    programs = {"nx.xmap": ported.load("sharded_lm", "namedarray.maps", "nx"),
                "jit(vmap)": ported.load("sharded_lm", "vmap_maps", "reference")}
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("dp", "mp"))
    rows = []
    with mesh:
        models, states = {}, {}
        losses = {}
        for label, lm in programs.items():
            model = lm.ShardedLM(lm.CONFIG)
            out, params = model.run(steps=3)
            models[label], states[label], losses[label] = model, params, out["train"]
        host_tokens, host_targets = models["nx.xmap"].data(9)
        # the batch as a data loader hands it over: split over 'dp' already (rows below), or on one device
        tokens, targets = jax.device_put((host_tokens, host_targets), NamedSharding(mesh, P("dp")))
        one_tokens, one_targets = jax.device_put(host_tokens), jax.device_put(host_targets)
        equal = np.allclose(losses["nx.xmap"], losses["jit(vmap)"], rtol=1e-5)
        rows.append(["training losses, 3 steps", ", ".join(f"{v:.6f}" for v in losses["nx.xmap"]),
                     ", ".join(f"{v:.6f}" for v in losses["jit(vmap)"]), "equal" if equal else "DIFFER"])
        # steady state: the params stay the same between calls (the step's output is dropped); the batch is
        # already split over 'dp', as a data loader places it
        times = compare({label: (lambda m=models[label], p=states[label]: m.train_xmap(p, tokens, targets))
                         for label in programs}, reps=20 if QUICK else 300, warmup=5)
        rows.append(["training step (steady state)", f"{times['nx.xmap']:.0f} us",
                     f"{times['jit(vmap)']:.0f} us", ratio(times["nx.xmap"], times["jit(vmap)"])])
        times = compare({label: (lambda m=models[label], p=states[label]: m.eval_xmap(p, tokens, targets))
                         for label in programs}, reps=20 if QUICK else 600, warmup=5)
        rows.append(["evaluation call (steady state)", f"{times['nx.xmap']:.0f} us",
                     f"{times['jit(vmap)']:.0f} us", ratio(times["nx.xmap"], times["jit(vmap)"])])
        times = compare({label: (lambda m=models[label], p=states[label]: m.eval_xmap(p, one_tokens,
                                                                                     one_targets))
                         for label in programs}, reps=20 if QUICK else 600, warmup=5)
        rows.append(["evaluation call, batch on one device (split by each call)",
                     f"{times['nx.xmap']:.0f} us",
                     f"{times['jit(vmap)']:.0f} us", ratio(times["nx.xmap"], times["jit(vmap)"])])
        texts = {label: models[label].train_xmap.lower(states[label], tokens, targets).compile().as_text()
                 for label in programs}
    ops = {label: hlo_ops(t) for label, t in texts.items()}
    work = {label: sum(c.values()) for label, c in ops.items()}
    rows.append(["compiled work instructions (training step)", str(work["nx.xmap"]), str(work["jit(vmap)"]),
                 f"{work['nx.xmap'] - work['jit(vmap)']:+d}"])
    rows.append(["compiled copies (training step)", str(ops["nx.xmap"].get("copy", 0)),
                 str(ops["jit(vmap)"].get("copy", 0)),
                 f"{ops['nx.xmap'].get('copy', 0) - ops['jit(vmap)'].get('copy', 0):+d}"])
    col = {label: collectives(t) for label, t in texts.items()}
    rows.append(["collectives (training step)", _fmt(col["nx.xmap"]), _fmt(col["jit(vmap)"]),
                 "equal" if col["nx.xmap"] == col["jit(vmap)"] else "differ"])
    print("## An xmap-era program by import swap (8 simulated devices, mesh 4 x 2)\n")
    print("tests/xmap_programs/sharded_lm.py (haiku, custom_vjp pairs around psum, the SGD step inside the "
          "map) run by `nx.xmap` with only its import changed, against the same text on `jax.jit` of one "
          "`jax.vmap` per name with the same shardings.\n")
    print(table(["measure", "nx.xmap", "jit(vmap)", "nx vs jit(vmap)"], rows))


def _fmt(c: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


if __name__ == "__main__":
    main()
