"""Sphinx configuration of the documentation site (``make docs``).

The site is built from the package as it runs: the API pages are written here at build time from
``nx.__all__`` and the layers that ``pyproject.toml`` declares, so a new public function or module appears
without editing a page. The README and the notebooks (with their saved outputs, never executed) are copied
beside the guides. Cross-references to ``namedarray`` must resolve (``nitpicky``); with ``-W`` a broken one
fails the build.

``NX_DOCS_LAYERS`` (comma-separated layer names, e.g. ``errors,core``) builds the API pages of those layers
only, without the package root's page: the quick build the tests run.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pathlib
import pkgutil
import re
import shutil
import tomllib
import types

import jax.numpy as jnp

import namedarray as nx
from namedarray.ops import mirror

HERE = pathlib.Path(__file__).resolve().parent
ROOT = pathlib.Path(nx.__file__).resolve().parent.parent
SUBSET = [s for s in os.environ.get("NX_DOCS_LAYERS", "").split(",") if s]

project = "namedarray"
author = "the namedarray authors"
copyright = "the namedarray authors; Apache-2.0"
release = version = nx.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_nb"]
nb_execution_mode = "off"  # notebooks show the outputs saved with them
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# references into namedarray must resolve; jax's and numpy's names (in jax's docstrings) are not ours
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!namedarray\b).*"), (r"py:.*", r"namedarray\.typing\..*"),
                        (r"py:class", r"namedarray\..*\.[A-Z]")]  # type variables
if SUBSET:  # the other layers' pages and the package root's are not built: references to them not checked
    nitpick_ignore_regex.append((r"py:.*", rf"namedarray\.(?!(?:{'|'.join(SUBSET)})\b).*"))
# jax's docstrings refer to labels of its own site (type-promotion, ...), which this site does not have
suppress_warnings = ["ref.ref"]


def layers() -> list[str]:
    """The layers of the package, highest first, as pyproject.toml's import contract declares them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [name.strip() for layer in contract["layers"] for name in layer.split("|")]


def modules(layer: str) -> list[str]:
    mod = importlib.import_module(f"namedarray.{layer}")
    names = [mod.__name__]
    if hasattr(mod, "__path__"):
        names += sorted(m.name for m in pkgutil.walk_packages(mod.__path__, f"{mod.__name__}."))
    return names


def layer_page(layer: str) -> str:
    lines = [f"# `{layer}`", ""]
    for name in modules(layer):
        mod = importlib.import_module(name)
        many = len(getattr(mod, "__all__", ())) > 50  # the numpy mirror: its functions are on the root page
        options = [] if many else ["   :members:", "   :ignore-module-all:"]  # every public name
        lines += ["```{eval-rst}", f".. automodule:: {name}", *options, "```", ""]
    return "\n".join(lines)


def home(name: str) -> str:
    """The layer an ``nx.<name>`` comes from."""
    obj = getattr(nx, name)
    if isinstance(obj, types.ModuleType):
        return "modules"
    if name in mirror.__all__ and getattr(mirror, name, None) is obj:
        return "ops"
    module = getattr(obj, "__module__", "") or ""
    return module.split(".")[1] if module.startswith("namedarray.") else "ops"


def root_page() -> str:
    groups: dict[str, list[str]] = {}
    for name in nx.__all__:
        groups.setdefault(home(name), []).append(name)
    lines = ["# `nx`: the package root", "", "Every name of `nx.__all__`, by the layer it comes from.", ""]
    for layer in [*layers(), "modules"]:
        if layer not in groups:
            continue
        lines += [f"## {layer}", "", "```{eval-rst}"]
        for name in groups.pop(layer):
            obj = getattr(nx, name)
            if isinstance(obj, types.ModuleType):
                lines.append(f".. py:module:: namedarray.{name}\n   :no-index:\n\n   ``nx.{name}``: "
                             f"{(inspect.getdoc(obj) or '').splitlines()[0] if inspect.getdoc(obj) else ''}\n")
            elif isinstance(obj, type) and obj.__module__.startswith("namedarray"):
                lines.append(f".. autoclass:: namedarray.{name}\n   :members:\n   :no-index:\n")
            elif callable(obj) and not isinstance(obj, type) and getattr(jnp, name, None) is not obj:
                lines.append(f".. autofunction:: namedarray.{name}\n")
            else:
                lines.append(f".. py:data:: namedarray.{name}\n\n   ``jax.numpy.{name}``, as it is.\n")
        lines += ["```", ""]
    assert not groups, f"names of nx.__all__ on no API page: {sorted(groups)}"
    return "\n".join(lines)


def readme() -> str:
    """The README, its links rewritten for the site (files outside it become plain text)."""
    text = (ROOT / "README.md").read_text()

    def link(m: re.Match) -> str:
        label, target = m.group(1), m.group(2)
        if target.startswith(("http:", "https:", "#")):
            return m.group(0)
        if target.startswith("docs/") and target.endswith(".md"):
            return f"[{label}]({target.removeprefix('docs/')})"
        if target.startswith("notebooks/"):
            return f"[{label}]({target})"
        return f"{label} (`{target}`)"

    return re.sub(r"\[([^\]]+)\]\(([^)]+)\)", link, text)


def generate() -> None:
    out = HERE / "api" / "generated"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    chosen = SUBSET or layers()
    pages = []
    if not SUBSET:
        (out / "nx.md").write_text(root_page())
        pages.append("nx")
    for layer in chosen:
        (out / f"{layer}.md").write_text(layer_page(layer))
        pages.append(layer)
    (out / "index.md").write_text("# API reference\n\n```{toctree}\n:maxdepth: 1\n\n"
                                  + "\n".join(pages) + "\n```\n")
    (HERE / "generated_readme.md").write_text(readme())
    notebooks = HERE / "notebooks"
    shutil.rmtree(notebooks, ignore_errors=True)
    notebooks.mkdir()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        shutil.copy(nb, notebooks / nb.name)


_JAX_LINK = re.compile(r"`([^`<>]+)`__?")
_JAX_NAME = re.compile(r"(?<![`\w])(\w+)_(?=[\s.,;:)]|$)")  # numpy's ``from_`` in prose is no link


def jax_links_as_text(app, what, name, obj, options, lines) -> None:
    """In jax's documentation that a mirrored function carries, jax's own links become text (their targets
    are on jax's site)."""
    start = next((i for i, line in enumerate(lines) if line.startswith("The documentation of ``jax")), None)
    if start is not None:
        lines[start:] = [_JAX_NAME.sub(r"\1\\_", _JAX_LINK.sub(r"\1", line)) for line in lines[start:]]


def setup(app) -> None:
    app.connect("autodoc-process-docstring", jax_links_as_text)


generate()
