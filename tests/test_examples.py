"""The examples run in their fast modes and print what they claim."""

import os
import subprocess
import sys

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def run_example(name: str, *args: str, timeout: float = 240) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_multihost_two_processes_train_as_one():
    out = run_example("multihost.py", "--fast")
    assert "process 0: 4 of 8 devices, loaded 32 of 64 rows" in out
    assert "process 1: 4 of 8 devices, loaded 32 of 64 rows" in out
    assert "hidden[0:32]" in out and "p1:" in out  # the picture shows blocks on both processes
    rows = [ln.split() for ln in out.splitlines() if ln.strip()[:1].isdigit() and len(ln.split()) == 3]
    assert len(rows) == 3 and all(abs(float(a) - float(b)) < 1e-5 for _, a, b in rows)
    assert float(rows[-1][1]) < float(rows[0][1])  # it learns
    assert "the two processes agree with one process: True" in out
