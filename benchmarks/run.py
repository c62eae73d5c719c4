"""``make bench``: run every benchmark in its own process and write benchmarks/RESULTS.md.

Each script runs in a fresh interpreter because the device count is fixed at JAX start-up: eager and jit
rows use one CPU device (what a notebook user has), sharding rows use 8 simulated devices.
``--quick`` runs fewer repetitions (for a smoke check).
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = ["import_time.py", "eager.py", "jit_models.py", "gpt.py", "llama.py", "sharded.py",
           "sharded_llama.py", "external_llama.py", "plan.py", "xmap_port.py"]


def main() -> int:
    quick = "--quick" in sys.argv
    sections = []
    failed = False
    for script in SCRIPTS:
        cmd = [sys.executable, os.path.join(HERE, script)] + (["--quick"] if quick else [])
        proc = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
        if proc.returncode != 0:
            failed = True
            sections.append(f"## {script}: FAILED\n\n```\n{proc.stderr[-3000:]}\n```")
        else:
            sections.append(proc.stdout.strip())
        print(sections[-1] + "\n", flush=True)
    import jax

    header = (f"# Benchmark results\n\nMachine: {platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, jax {jax.__version__}; "
              f"{datetime.date.today().isoformat()}{' (quick run)' if quick else ''}.\n"
              "Every ratio compares two cases measured side by side in one process: medians over many calls "
              "after warm-up, synchronous CPU dispatch.\n")
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write(header + "\n" + "\n\n".join(sections) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
