"""The documentation site builds with warnings as errors, and a broken cross-reference fails it.

``make docs`` builds all of it; here the API pages of two layers are built (``NX_DOCS_LAYERS``), with the
README, the guides and the notebooks, from a copy of docs/ so that the checkout is left as it is.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

ROOT = pathlib.Path(__file__).resolve().parent.parent
GENERATED = ("_build", "generated", "notebooks", "generated_readme.md")


def build(tmp_path: pathlib.Path, layers: str, extra: str | None = None) -> subprocess.CompletedProcess:
    src = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", src, ignore=shutil.ignore_patterns(*GENERATED))
    if extra is not None:
        (src / "extra.md").write_text(extra)
        index = src / "index.md"
        index.write_text(index.read_text() + "\n```{toctree}\n:hidden:\n\nextra\n```\n")
    env = dict(os.environ, NX_DOCS_LAYERS=layers, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(src),
                           str(tmp_path / "html")], env=env, capture_output=True, text=True, timeout=300)


def test_site_builds_without_warnings(tmp_path):
    done = build(tmp_path, "errors,core")
    assert done.returncode == 0, done.stderr[-5000:]
    html = tmp_path / "html"
    assert (html / "api" / "generated" / "core.html").exists()
    assert (html / "notebooks" / "tour.html").exists() and (html / "xmap_migration.html").exists()
    assert "NamedArray" in (html / "api" / "generated" / "core.html").read_text()


def test_a_broken_reference_fails_the_build(tmp_path):
    page = "# Extra\n\nSee {py:func}`namedarray.errors.no_such_function`.\n"
    done = build(tmp_path, "errors", page)
    assert done.returncode != 0
    assert "no_such_function" in done.stderr, done.stderr[-5000:]
