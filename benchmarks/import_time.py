"""Import rows: what ``import namedarray`` adds to ``import jax``, in fresh interpreters.

Each round starts one interpreter that imports jax alone and one that imports jax and then namedarray (in
rotation, so that drift on a busy machine hits both alike). Two measures per round:

* the whole start-up: from just before the process is started to the end of its imports (the process
  leaves with ``os._exit`` right after, so interpreter teardown is not counted), and the median of the
  rounds' differences;
* ``import namedarray`` timed inside the second interpreter, after ``import jax``.

Both are taken with every module's bytecode cached (as an installed package has it: a warm cache in a
temporary folder), and as the environment runs Python: where it writes no bytecode
(``PYTHONDONTWRITEBYTECODE``) and the checkout has none, each of the package's modules is compiled from source
on every import.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import table

_JAX = "import os, time; import jax; print(time.time()); os._exit(0)"
_BOTH = ("import os, time; import jax; t = time.perf_counter(); import namedarray; "
         "d = time.perf_counter() - t; print(time.time()); print(d); os._exit(0)")


def _start(code: str, env: dict) -> list[float]:
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    values = [float(v) for v in out.stdout.split()]
    return [values[0] - t0, *values[1:]]


def _rows(label: str, env: dict, rounds: int) -> list[list[str]]:
    _start(_BOTH, env)  # fills the bytecode cache where there is one
    jax_only, both, inside = [], [], []
    for _ in range(rounds):
        jax_only.append(_start(_JAX, env)[0])
        start, imported = _start(_BOTH, env)
        both.append(start)
        inside.append(imported)
    ms = lambda v: f"{statistics.median(v) * 1e3:.0f} ms"  # noqa: E731
    added = [b - a for a, b in zip(jax_only, both)]
    return [[label, "start-up to imports done: import jax", ms(jax_only)],
            [label, "start-up to imports done: import jax; import namedarray", ms(both)],
            [label, "namedarray's share of the start-up (median of the rounds' differences)", ms(added)],
            [label, "import namedarray after import jax, timed in the process", ms(inside)]]


def main(quick: bool = False) -> str:
    rounds = 5 if quick else 20
    unset = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    cached = {k: v for k, v in os.environ.items() if k not in unset}
    with tempfile.TemporaryDirectory() as cache:
        rows = _rows("cached", {**cached, "PYTHONPYCACHEPREFIX": cache}, rounds)
    writes = "off" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "on"
    rows += _rows(f"as the environment has it (writing {writes})", dict(os.environ), rounds)
    return (f"## Import time ({rounds} interleaved rounds of fresh interpreters, medians)\n\n"
            + table(["bytecode", "measure", "time"], rows))


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
