"""Every notebook in notebooks/ runs top to bottom, with this interpreter, without an error."""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 120  # per cell; the whole tour takes a few seconds


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


def test_there_is_a_notebook():
    assert any(p.name == "tour.ipynb" for p in NOTEBOOKS)


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
