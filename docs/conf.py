"""Sphinx configuration of the documentation site (``make docs``).

The site is built from the package as it runs: the API pages are written here at build time by
``api_pages.py`` (which public name goes on which page), so a new public function appears without editing a
page. Entries are named as users write them (``nx.sum``, ``nx.nn.relu``) and show what ``inspect.signature``
and the type stubs say. The README and the notebooks (with their saved outputs, never executed) are copied
beside the guides. Cross-references to ``nx`` and ``namedarray`` must resolve (``nitpicky``); with ``-W`` a
broken one fails the build.

``NX_DOCS_PAGES`` (comma-separated API pages, e.g. ``errors,reductions``) builds those API pages only: the
quick build the tests run.
"""

from __future__ import annotations

import inspect
import os
import pathlib
import re
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import api_pages  # noqa: E402

import namedarray as nx  # noqa: E402

ROOT = pathlib.Path(nx.__file__).resolve().parent.parent
SUBSET = [s for s in os.environ.get("NX_DOCS_PAGES", "").split(",") if s]
api_pages.alias_modules()

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
html_theme_options = {
    # code of up to 110 columns (the package's line length) fits beside the sidebar; narrower screens wrap it
    "page_width": "min(1280px, 100%)",
    "sidebar_width": "260px",
    "fixed_sidebar": True,
}
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_sidebars = {"**": ["about.html", "searchfield.html", "navigation.html", "localtoc.html"]}
html_search_scorer = str(HERE / "search_scorer.js")  # the entry named by the query first
# the sidebar lists a page's entries (its contents), short: ``sum()``, not ``nx.sum()``
toc_object_entries_show_parents = "hide"
# a long signature lists one parameter a line
python_maximum_signature_line_length = 100
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# references into the package must resolve; jax's and numpy's names (in annotations) are not ours
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(?!(?:namedarray|nx)\b).*"),
                        (r"py:.*", r"(?:namedarray|nx)\.typing\..*"),
                        (r"py:class", r"(?:namedarray|nx)\..*\.[A-Z]")]  # type variables
# jax's docstrings refer to labels of its own site (type-promotion, ...), which this site does not have
suppress_warnings = ["ref.ref"]

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
    api_pages.write(out, SUBSET or None)
    (HERE / "generated_readme.md").write_text(readme())
    notebooks = HERE / "notebooks"
    shutil.rmtree(notebooks, ignore_errors=True)
    notebooks.mkdir()
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        shutil.copy(nb, notebooks / nb.name)


_JAX_LINK = re.compile(r"`([^`<>]+)`__?")
_JAX_NAME = re.compile(r"(?<![`\w])(\w+)_(?=[\s.,;:)]|$)")  # numpy's ``from_`` in prose is no link
_JAX_FOLLOWS = re.compile(r"The documentation of ``(jax[\w.]*)`` follows\.")
JAX_API = "https://docs.jax.dev/en/latest/_autosummary/{}.html"


def jax_docs_as_link(app, what, name, obj, options, lines) -> None:
    """A mirrored function's entry is nx's: the rule it follows for names, jax's one-line summary of what it
    computes, and a link to jax's entry for the rest (jax's parameters and examples are positional, written
    for ``jax.numpy``; ``help()`` still shows them)."""
    start = next((i for i, line in enumerate(lines) if _JAX_FOLLOWS.match(line)), None)
    if start is None:
        return
    jax_name = _JAX_FOLLOWS.match(lines[start])[1]
    paragraphs = "\n".join(lines[start + 1:]).strip().split("\n\n")
    summary = next((p for p in paragraphs if p.strip() and not p.lstrip().startswith("JAX implementation")),
                   "")
    summary = " ".join(_JAX_NAME.sub(r"\1\\_", _JAX_LINK.sub(r"\1", line)).strip()
                       for line in summary.splitlines())
    summary = summary if summary and not summary.startswith((">>>", "Args", "..")) else ""
    lines[start:] = [*([summary, ""] if summary else []),
                     f"Everything else as in `{jax_name} <{JAX_API.format(jax_name)}>`__ (its arguments; its "
                     "examples are written for plain arrays).", ""]


def nx_signature(app, what, name, obj, options, signature, return_annotation):
    """Every entry shows what ``inspect.signature`` gives (nx's own signature, as ``help()`` and the stubs),
    not the annotations of the jax function a mirrored one wraps (which autodoc would read from it)."""
    if what not in ("function", "method", "class", "exception") or not callable(obj):
        return None
    return api_pages.signature(obj, bound=what == "method" and not inspect.ismethod(obj))


PAGE: dict[str, str] = {}  # each entry's qualified name (``sum``, ``nn.relu``) -> its page
PUBLIC: dict[int, str] = {}  # an entry's object -> its qualified name, for references by another path
BUILT: set[str] = set()  # the pages this build writes


def public_reference(app, env, node, contnode):
    """``namedarray.<name>`` in a docstring refers to the entry ``nx.<name>``, or to the entry of the same
    object where it is documented under another path (``namedarray.core.env`` is ``nx.env``); a reference
    to something of the package that is not public (the site documents the public API only) stays text, as
    does one to an entry of a page that a quick build (``NX_DOCS_PAGES``) leaves out. A reference to nothing
    fails the build."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    if not target.startswith(("namedarray.", "nx.")):
        return None
    parts = target.split(".")[1:]
    obj = nx
    for part in parts:
        obj = getattr(obj, part, None)
    qualname = PUBLIC.get(id(obj), ".".join(parts)) if obj is not None else ".".join(parts)
    py = env.domains["py"]
    for candidate in dict.fromkeys([f"nx.{qualname}", "nx." + ".".join(parts)]):
        found = py.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], candidate, node, contnode)
        if found is not None:
            return found
    owner = next((PAGE[q] for q in (qualname, qualname.rpartition(".")[0]) if q in PAGE), None)
    if owner is not None and owner not in BUILT:
        return contnode
    if obj is not None and owner is None:  # it exists, and is not public
        return contnode
    return None


def public_objects_only(app, env) -> None:
    """A class's entry names it as users do (``nx.NamedArray``), not where it is defined
    (``namedarray.core.array.NamedArray``): the second name, which autodoc adds as an alias, is dropped
    from the index and the search, and a reference to it resolves to the public entry
    (:func:`public_reference`)."""
    objects = env.domains["py"].objects
    for name in [name for name, entry in objects.items() if entry.aliased]:
        del objects[name]


def setup(app) -> None:
    app.connect("env-check-consistency", public_objects_only)
    app.connect("autodoc-process-docstring", jax_docs_as_link)
    app.connect("autodoc-process-signature", nx_signature)
    app.connect("missing-reference", public_reference)


generate()
for _group, _section, _qualname, _kind in api_pages.entries():
    PAGE[_qualname] = _group.slug
    PUBLIC.setdefault(id(api_pages.resolve(_qualname)), _qualname)
PAGE.update({f"NamedArray.{m}": PAGE["NamedArray"] for m in api_pages.method_names()})
BUILT.update(SUBSET or PAGE.values())
