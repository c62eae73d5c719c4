"""GPT training step rows: the small GPT of examples/gpt.py, one adam step under jit, nx vs jnp
(see training_step.py for what is measured), and the per-call cost of ``nx.jit`` against ``jax.jit`` of the
same named step with the same shardings, on 1 device and on 8 simulated devices (data parallel; measured in
a second process, since the device count is fixed at start-up)."""

from __future__ import annotations

import sys

import jax

DEVICES = 8 if "--jit-call-8" in sys.argv else 1
if DEVICES > 1:
    jax.config.update("jax_num_cpu_devices", DEVICES)
jax.config.update("jax_cpu_enable_async_dispatch", False)

import os  # noqa: E402
import subprocess  # noqa: E402

import optax  # noqa: E402
from common import compare, ratio, table  # noqa: E402
from jax.sharding import AxisType  # noqa: E402
from training_step import NOTE, _step, load_example, rows  # noqa: E402

import namedarray as nx  # noqa: E402

gpt = load_example("gpt")


def jit_call_row(quick: bool) -> list[str]:
    """The named step (examples/gpt.py's model, optax adam) under ``nx.jit`` against ``jax.jit`` of the same
    function with in_shardings and out_shardings from ``nx.sharding`` of its arguments and results (what
    nx.jit lays out by the rules), on a ``data`` mesh of every device with ``{"batch": "data"}``; the same
    committed arguments every call (steady state), interleaved."""
    cfg = gpt.Config()
    model = gpt.make_nx_model()
    optimizer = optax.adam(1e-3)
    params = model.named_params(gpt.init_params(0, cfg))
    step = _step(model.loss, optimizer)
    mesh = jax.make_mesh((DEVICES,), ("data",), axis_types=(AxisType.Auto,))
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
        args = (params, optimizer.init(params), model.named_tokens(gpt.make_batch(0, cfg)))
        args = jax.device_put(args, nx.sharding(args))
        fn = nx.jit(step)
        plain = jax.jit(step, in_shardings=nx.sharding(args), out_shardings=nx.sharding(fn(*args)))
        t = compare({"nx.jit": lambda: fn(*args), "jax.jit": lambda: plain(*args)},
                    reps=30 if quick else 400, warmup=5 if quick else 30)
    where = "1 device" if DEVICES == 1 else f"{DEVICES} devices, data parallel"
    return [where, f"{t['nx.jit']:.0f} us", f"{t['jax.jit']:.0f} us", ratio(t["nx.jit"], t["jax.jit"])]


def jit_call_rows(quick: bool) -> list[list[str]]:
    eight = subprocess.run([sys.executable, os.path.abspath(__file__), "--jit-call-8"]
                           + (["--quick"] if quick else []), capture_output=True, text=True, check=True)
    return [jit_call_row(quick), eight.stdout.strip().split("\t")]


def main(quick: bool = False) -> str:
    body, cfg = rows(gpt, "GPT training step (adam)", quick)
    return (f"## GPT training step under jit (1 device)\n\n"
            f"{cfg.layers} layers, embed {cfg.embed}, {cfg.heads} heads x {cfg.head_dim}, MLP {cfg.mlp}, "
            f"seq {cfg.seq}, batch {cfg.batch}, vocab {cfg.vocab} (examples/gpt.py); one step = "
            "jit(value_and_grad(loss)) + optax adam update, named vs positional from the same init.\n\n"
            + table(["model", "measure", "nx", "jnp", "nx vs jnp"], body) + "\n\n" + NOTE + "\n\n"
            + "## GPT training step, nx.jit call vs jax.jit call\n\n"
            "The named step above under `nx.jit` with `nx.axis_rules({'batch': 'data'})` on a `data` mesh of "
            "every device, against `jax.jit` of the same function with the in_shardings and out_shardings "
            "`nx.sharding` gives its arguments and results: the same committed arguments every call, "
            "interleaved medians (8 devices simulated on the CPU, in a second process).\n\n"
            + table(["devices", "nx.jit", "jax.jit", "nx / jax"], jit_call_rows(quick)))


if __name__ == "__main__":
    if DEVICES > 1:
        print("\t".join(jit_call_row("--quick" in sys.argv)))
    else:
        print(main(quick="--quick" in sys.argv))
