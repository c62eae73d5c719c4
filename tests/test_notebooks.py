"""Every notebook in notebooks/ runs top to bottom, with this interpreter, without an error, and prints what
its text claims, both when run here and in the outputs saved with it."""

from __future__ import annotations

import json
import pathlib
import re
import sys
import tempfile

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 120  # per cell; each notebook takes well under a minute (the transformer's 4 strategies ~25 s)


def execute(nb, *, cwd: pathlib.Path | None = None, kernel_dir: pathlib.Path | None = None):
    """Run ``nb`` in place on a kernel started with ``sys.executable``, not whatever 'python3' names."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_dir = pathlib.Path(kernel_dir or tmp) / "kernels" / "nx-current"
        spec_dir.mkdir(parents=True, exist_ok=True)
        (spec_dir / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "current interpreter", "language": "python"}))
        specs = KernelSpecManager(kernel_dirs=[str(spec_dir.parent)])
        km = KernelManager(kernel_name="nx-current", kernel_spec_manager=specs)
        client = NotebookClient(nb, km=km, timeout=TIMEOUT_S, record_timing=False,
                                resources={"metadata": {"path": str(cwd or pathlib.Path.cwd())}})
        client.execute()
    return nb


def stdout(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def sharding_pictures(nb) -> list[str]:
    """The HTML of every ``nx.visualize_sharding`` picture a cell displayed."""
    return [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if "text/html" in o.get("data", {}) and "nx-sharding" in o["data"]["text/html"]]


def starts_on_eight_devices(nb) -> None:
    first = next(c for c in nb.cells if c.cell_type == "code").source.splitlines()
    assert first[0] == "import jax" and first[1].startswith('jax.config.update("jax_num_cpu_devices", 8)')


def numbers_after(out: str, title: str) -> list[float]:
    """The numbers on the printed line that is ``title`` followed by numbers only."""
    line = re.search(rf"^{re.escape(title)}((?:\s+\d+\.\d+)+)\s*$", out, re.M)
    assert line, f"no line {title!r} followed by numbers"
    return [float(v) for v in line.group(1).split()]


def check_named_axes_tutorial(nb) -> None:
    starts_on_eight_devices(nb)
    out = stdout(nb)
    positional, named = map(float, re.search(r"positional loss ([\d.]+), named loss ([\d.]+)", out).groups())
    assert named == pytest.approx(positional, rel=1e-5)
    # nx.xmap's loss, then each strategy's (axis_resources, axis_rules, nx.shard_map): all the positional one
    named_losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)$", out, re.M)]
    assert len(named_losses) == 1 + 3 + 4 + 2
    assert named_losses == pytest.approx([positional] * len(named_losses), rel=1e-5)
    pictures = sharding_pictures(nb)
    assert any("left[0:4]" in h and "right[6:8]" in h for h in pictures)      # the distributed matmul
    assert any("a[4:8]" in h and "b[8:12]" in h for h in pictures)           # {'a': 8, 'b': 12} on a 2x3 mesh
    assert any("batch[12:16]" in h and "hidden[16:32]" in h for h in pictures)   # data x model
    assert any("hidden[28:32]" in h and "batch" in h for h in pictures)       # model parallel over 8 devices


def check_model_parallelism(nb) -> None:
    starts_on_eight_devices(nb)
    out = stdout(nb)
    titles = ("replicated", "data parallel", "model parallel", "data x model")
    curves = {t: numbers_after(out, t) for t in titles}
    first = curves["replicated"]
    assert len(first) == 5 and first[-1] < first[0] - 0.5     # it trains
    for title, curve in curves.items():
        assert curve == pytest.approx(first, rel=1e-5), title
    one_device = float(re.search(r"loss on one device, before training: ([\d.]+)", out).group(1))
    assert first[0] == pytest.approx(one_device, rel=1e-5)
    assert "losses equal across strategies: True" in out
    pictures = sharding_pictures(nb)
    assert any("heads[7:8]" in h and "embed" in h and "head_dim" in h for h in pictures)   # model parallel
    assert any("mlp[32:64]" in h and "0,2,4,6" in h for h in pictures)                     # data x model
    assert any("batch[14:16]" in h and "seq" in h for h in pictures)                        # data parallel
    held = {t: int(re.search(rf"^{t}\s+(\d+) bytes of parameters", out, re.M).group(1)) for t in titles}
    assert held["data parallel"] == held["replicated"] > held["data x model"] > held["model parallel"]
    # nx.plan_sharding: the table shown, the choice no worse than the hand-picked, its losses the same
    assert any('class="nx-plan"' in o["data"]["text/html"] for c in nb.cells if c.cell_type == "code"
               for o in c.get("outputs", []) if "text/html" in o.get("data", {}))
    assert "as good as the best hand-picked: True" in out
    assert "losses under plan.best equal the hand-picked ones: True" in out
    assert re.search(r"^replicated: over memory_limit: \d+ bytes per device", out, re.M)


CHECKS = {"named_axes_tutorial.ipynb": check_named_axes_tutorial,
          "model_parallelism.ipynb": check_model_parallelism}


def test_there_is_a_notebook():
    assert {"tour.ipynb", *CHECKS} <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    execute(nb, cwd=path.parent, kernel_dir=tmp_path)  # raises CellExecutionError on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert errors == []
    # every code cell ran and the saved notebook shows outputs
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")
    saved = nbformat.read(path, as_version=4)
    assert any(c.get("outputs") for c in saved.cells if c.cell_type == "code")
    if path.name in CHECKS:  # what it prints now, and what readers see without running it
        CHECKS[path.name](nb)
        CHECKS[path.name](saved)
