"""The documentation site: it builds with warnings as errors, a broken cross-reference fails it, and its API
reference is the public API only, grouped by what it is for, each entry with nx's own signature.

``make docs`` builds all of it; here two API pages are built (``NX_DOCS_PAGES``), with the README, the guides
and the notebooks, from a copy of docs/ so that the checkout is left as it is. What goes on which page is
checked without a build, from ``docs/api_pages.py``.
"""

from __future__ import annotations

import html
import importlib.util
import inspect
import os
import pathlib
import re
import shutil
import subprocess
import sys
import types

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

import namedarray as nx  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
GENERATED = ("_build", "generated", "notebooks", "generated_readme.md")
GROUPS = ["arrays", "numpy", "reductions", "contraction", "structure", "indexing", "transforms",
          "collectives", "sharding", "nn", "random", "interop", "errors"]
# what jax's own annotations print as: an entry showing one of these shows jax's signature, not nx's
JAX_SIGNATURE = re.compile(r"jaxlib|jax\._src|numpy\.ndarray \| numpy\.bool|collections\.abc")


def api_pages():
    """docs/api_pages.py, which the site's configuration writes the API pages with."""
    if "api_pages" not in sys.modules:
        spec = importlib.util.spec_from_file_location("api_pages", ROOT / "docs" / "api_pages.py")
        sys.modules["api_pages"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["api_pages"])
    return sys.modules["api_pages"]


def build(tmp_path: pathlib.Path, pages: str, extra: str | None = None) -> subprocess.CompletedProcess:
    src = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", src, ignore=shutil.ignore_patterns(*GENERATED))
    if extra is not None:
        (src / "extra.md").write_text(extra)
        index = src / "index.md"
        index.write_text(index.read_text() + "\n```{toctree}\n:hidden:\n\nextra\n```\n")
    env = dict(os.environ, NX_DOCS_PAGES=pages, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(src),
                           str(tmp_path / "html")], env=env, capture_output=True, text=True, timeout=300)


def signatures(page: pathlib.Path) -> dict[str, str]:
    """Each entry of a built page: its anchor (``nx.sum``) -> its signature line as text."""
    found = re.findall(r'<dt class="sig sig-object py" id="([^"]+)">(.*?)</dt>', page.read_text(), re.S)
    return {anchor: " ".join(html.unescape(re.sub(r"<[^>]+>", "", sig)).replace("¶", "").split())
            for anchor, sig in found}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    done = build(tmp, "reductions,errors")
    assert done.returncode == 0, done.stderr[-5000:]
    return tmp / "html"


def test_site_builds_without_warnings(site):
    api = site / "api" / "generated"
    assert (api / "reductions.html").exists() and (api / "errors.html").exists()
    assert not (api / "numpy.html").exists()  # a quick build writes the pages it is given
    assert (site / "notebooks" / "tour.html").exists() and (site / "xmap_migration.html").exists()


def test_entries_show_nx_signatures_not_jax(site):
    reductions = signatures(site / "api" / "generated" / "reductions.html")
    assert len(reductions) == len([e for e in api_pages().entries() if e[0].slug == "reductions"]) >= 30
    shows_jax = {anchor: sig for anchor, sig in reductions.items()
                 if JAX_SIGNATURE.search(sig) or not sig.endswith("→ NamedArray")}  # jax's: -> Array
    assert not shows_jax
    total = reductions["nx.sum"]
    assert "axis: int | str | Sequence[int | str] | None = None" in total and total.endswith("→ NamedArray")
    assert total.replace(" ", "").replace(",)", ")").startswith(
        "nx.sum" + str(inspect.signature(nx.sum)).replace("'", "").replace(" ", "").split("->")[0])
    # nx's rule first, then a link to jax's entry instead of jax's positional examples
    page = (site / "api" / "generated" / "reductions.html").read_text()
    entry = page[page.index('id="nx.sum"'):page.index('id="nx.var"')]
    assert "reduces the axes given in" in entry
    assert "docs.jax.dev/en/latest/_autosummary/jax.numpy.sum.html" in entry
    assert "jnp.sum(" not in entry and "&gt;&gt;&gt;" not in entry


def test_pages_have_a_contents_sidebar_and_only_public_entries(site):
    from sphinx.util.inventory import InventoryFile

    page = (site / "api" / "generated" / "reductions.html").read_text()
    sidebar = page[page.index('class="sphinxsidebar"'):page.index('class="documentwrapper"')]
    assert "Table of Contents" in sidebar and "sum()" in sidebar and "argmax()" in sidebar
    with open(site / "objects.inv", "rb") as f:
        inventory = InventoryFile.load(f, "", os.path.join)
    python = {name for kind, items in inventory.items() if kind.startswith("py:") for name in items}
    assert "nx.sum" in python and "nx.errors.AxisSizeError" in python
    assert not {name for name in python if not name.startswith("nx.")}  # no internal module, no jax name


def test_every_public_name_has_one_entry_on_a_group_page():
    pages = api_pages()
    assert [g.slug for g in pages.GROUPS] == GROUPS
    where = pages.placement()  # fails on a public name that is on no page
    assert set(where) == set(nx.__all__)
    documented = [q for _, _, q, _ in pages.entries()]
    assert len(documented) == len(set(documented))
    submodules = {n for n in nx.__all__ if isinstance(getattr(nx, n), types.ModuleType)}
    assert {q for q in documented if "." not in q} == set(nx.__all__) - submodules
    for name in ("nn", "random", "errors"):
        module = getattr(nx, name)
        assert {q.split(".", 1)[1] for q in documented if q.startswith(f"{name}.")} \
            >= {n for n in module.__all__ if not isinstance(getattr(module, n), types.ModuleType)}
    assert set(pages.method_names()) >= {"sum", "mean", "unwrap", "named_shape", "at"}


def test_pages_document_public_names_only():
    pages = api_pages()
    public = {f"nx.{q}" for _, _, q, _ in pages.entries()} | {f"nx.{m}" for m in pages.SUBMODULES}
    for group in pages.GROUPS:
        text = pages.page(group)
        named = set(re.findall(r"^\.\. (?:auto\w+|py:\w+):: (\S+)", text, re.M)) - {"None"}
        assert named and named <= public, (group.slug, sorted(named - public))
        assert "namedarray." not in "".join(re.findall(r"^\.\. .*$", text, re.M))


def test_every_entry_signature_is_what_inspect_says():
    pages = api_pages()
    for _, _, qualname, kind in pages.entries():
        if kind != "function":
            continue
        obj = pages.resolve(qualname)
        shown = pages.signature(obj, bound=False)
        if shown is None:
            continue
        args, ret = shown
        assert not JAX_SIGNATURE.search(f"{args} -> {ret}"), (qualname, args, ret)
        expected = inspect.signature(obj)
        assert list(expected.parameters) == [p.split(":")[0].split("=")[0].strip(" *")
                                             for p in _split(args[1:-1]) if p not in ("/", "*")], qualname


def _split(args: str) -> list[str]:
    """The parameters of a signature's text, split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in args:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [p for p in [*parts, current.strip()] if p]


def test_a_broken_reference_fails_the_build(tmp_path):
    page = "# Extra\n\nSee {py:func}`namedarray.errors.no_such_function`.\n"
    done = build(tmp_path, "errors", page)
    assert done.returncode != 0
    assert "no_such_function" in done.stderr, done.stderr[-5000:]


@pytest.mark.skipif(shutil.which("node") is None, reason="the site's search runs in JavaScript")
def test_search_lists_the_entry_named_by_the_query_first(site):
    for query, first in [("sum", "nx.sum"), ("nx.sum", "nx.sum"), ("mean", "nx.mean"),
                         ("AxisSizeError", "nx.errors.AxisSizeError")]:
        done = subprocess.run(["node", str(ROOT / "tests" / "site_search.js"), str(site), query],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[0] == first, (query, done.stdout)
