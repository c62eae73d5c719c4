"""Two processes, one model: sharding by name on JAX's multi-process runtime (``jax.distributed``).

Run ``python examples/multihost.py``: it starts two copies of itself on this machine (4 CPU devices each,
gloo collectives on a free loopback port), which together form one 4x2 mesh of 8 devices: ``data`` spans
the two processes, ``model`` stays inside each. Each process loads only its half of the batch and turns it
into one global array with ``nx.from_process_local``; ``nx.jit`` creates the parameters already split and
trains the network written with ``.shard()`` and logical names. The same training then runs in this one
process on 8 devices, and the losses are compared. ``--fast`` trains fewer steps.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import jax

BATCH, INPUTS, HIDDEN, CLASSES = 64, 32, 64, 8
RULES = {"batch": "data", "hidden": "model"}


# ---------------------------------------------------------------------------------------------------------
# The model: the tutorial network with logical names only (named_mlp.py, which configures nothing, so each
# process sets its devices and joins the run before anything touches JAX's backend)


def init(key):
    import named_mlp

    return named_mlp.init_params(key, INPUTS, HIDDEN, CLASSES)


def sgd_step(params, images, labels):
    import named_mlp

    return named_mlp.sgd_step(params, images, labels, lr=0.5)


def dataset():
    """The whole batch (every process can make it; each keeps only its rows)."""
    import numpy as np

    rng = np.random.default_rng(0)
    teacher = rng.normal(size=(INPUTS, CLASSES))
    images = rng.normal(size=(BATCH, INPUTS)).astype(np.float32)
    labels = np.argmax(images @ teacher, axis=1).astype(np.int32)
    return images, labels


def train(images, labels, steps: int) -> tuple[list[float], dict]:
    import namedarray as nx

    with nx.axis_rules(RULES):
        params = nx.jit(init)(jax.random.key(0))  # created split: no process holds them whole
        step = nx.jit(sgd_step)
        losses = []
        for _ in range(steps):
            params, value = step(params, images, labels)
            losses.append(float(value.addressable_data(0)))  # replicated: every device holds the loss
    return losses, params


# ---------------------------------------------------------------------------------------------------------
# One process of the pair


def worker(pid: int, port: int, steps: int, out: str) -> None:
    jax.config.update("jax_num_cpu_devices", 4)
    jax.config.update("jax_platforms", "cpu")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid,
                               initialization_timeout=60)
    from jax.experimental import multihost_utils

    import namedarray as nx

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    images, labels = dataset()
    mine = slice(pid * BATCH // 2, (pid + 1) * BATCH // 2)  # this process loads only its half
    with jax.set_mesh(mesh):
        x = nx.from_process_local(nx.wrap(images[mine], ["batch", "inputs"]), RULES)
        y = nx.from_process_local(nx.wrap(labels[mine], ["batch"]), RULES)
        losses, params = train(x, y, steps)
        picture = str(nx.visualize_sharding(params["w1"]))
    result = {"process": pid, "devices": jax.device_count(), "local_devices": jax.local_device_count(),
              "local_rows": int(images[mine].shape[0]), "global_batch": x.named_shape["batch"],
              "losses": losses, "w1": picture}
    multihost_utils.sync_global_devices("trained")
    with open(out, "w") as fh:
        json.dump(result, fh)
    jax.distributed.shutdown()


# ---------------------------------------------------------------------------------------------------------
# The launcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict[str, str]:
    """This process's environment without its JAX and XLA settings (each child sets its own devices), except
    the collective timeouts of XLA:CPU (``--xla_cpu_collective_call_*`` in ``XLA_FLAGS``), which a busy
    machine needs in every process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    keep = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.startswith("--xla_cpu_collective_call_")]
    if keep:
        env["XLA_FLAGS"] = " ".join(keep)
    return env


def run_processes(commands: list[list[str]], limit_s: float) -> list[str]:
    """Start one process per command, wait for all within ``limit_s``, and end any left by its PID whatever
    happens; their outputs, or a RuntimeError with the output of the first that failed."""
    env = child_env()
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for cmd in commands]
    logs = [""] * len(procs)
    try:
        deadline = time.monotonic() + limit_s
        for i, p in enumerate(procs):
            logs[i] = p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
    finally:
        for p in procs:  # by PID, whatever happened
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, p in enumerate(procs):
        if p.returncode != 0:
            raise RuntimeError(f"process {i} failed (exit {p.returncode}):\n{logs[i][-3000:]}")
    return logs


def launch(steps: int, limit_s: float = 300) -> list[dict]:  # a guard against a hang: busy machines are slow
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"process_{i}.json") for i in range(2)]
        run_processes([[sys.executable, os.path.abspath(__file__), "--worker", str(i), str(port), str(steps),
                        outs[i]] for i in range(2)], limit_s)
        results = []
        for path in outs:
            with open(path) as fh:
                results.append(json.load(fh))
    return results


def main(fast: bool = False) -> None:
    steps = 3 if fast else 20
    print(f"Starting 2 processes x 4 CPU devices (jax.distributed, gloo on 127.0.0.1), {steps} SGD steps ...")
    t0 = time.perf_counter()
    results = launch(steps)
    print(f"done in {time.perf_counter() - t0:.1f} s")
    for r in results:
        print(f"process {r['process']}: {r['local_devices']} of {r['devices']} devices, loaded "
              f"{r['local_rows']} of {r['global_batch']} rows")
    print("w1 as the two processes hold it:\n" + results[0]["w1"])

    # the same training in this one process, on 8 devices
    jax.config.update("jax_num_cpu_devices", 8)
    import numpy as np

    import namedarray as nx

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    images, labels = dataset()
    with jax.set_mesh(mesh):
        single, _ = train(nx.wrap(images, ["batch", "inputs"]), nx.wrap(labels, ["batch"]), steps)
    print(f"{'step':>4}  {'2 processes':>12}  {'1 process':>12}")
    for i, (a, b) in enumerate(zip(results[0]["losses"], single)):
        print(f"{i:>4}  {a:>12.6f}  {b:>12.6f}")
    same = all(np.allclose(r["losses"], single, rtol=1e-5) for r in results)
    print(f"the two processes agree with one process: {same}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main(fast="--fast" in sys.argv)
