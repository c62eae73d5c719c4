"""The documentation runs: every module's docstring examples, and every Python block of the README and of
the guides in docs/."""

import doctest
import importlib
import pathlib
import pkgutil
import re

import pytest
from conftest import fresh_canonical_orders

import namedarray

# every module of the package, in every layer folder (a folder's __init__ is its layer's essay)
MODULES = sorted(m.name.removeprefix("namedarray.")
                 for m in pkgutil.walk_packages(namedarray.__path__, "namedarray."))
LAYERS = {"core", "engine", "ops", "transforms", "parallel", "adapter", "interop", "surface"}
ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# the site's front page (index.md) and the copy of the README it builds (generated_readme.md) are not guides
GUIDES = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in {"index.md", "generated_readme.md"})


@pytest.mark.parametrize("name", MODULES)
def test_module_docstring_examples(name):
    mod = importlib.import_module(f"namedarray.{name}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0


def test_every_module_has_examples():
    without = []
    for name in sorted(set(MODULES) - LAYERS):
        mod = importlib.import_module(f"namedarray.{name}")
        if not any(t.examples for t in doctest.DocTestFinder().find(mod)):
            without.append(name)
    assert not without, f"modules without a docstring example: {without}"


def run_python_blocks(path: pathlib.Path) -> None:
    """Run the file's ```python blocks in order, in one namespace; tracebacks give the file's own lines."""
    text = path.read_text()
    blocks = list(re.finditer(r"```python\n(.*?)```", text, re.S))
    assert blocks, f"{path.name} has no Python examples"
    namespace: dict = {"__name__": f"docs_{path.stem}"}
    for block in blocks:
        first_line = text.count("\n", 0, block.start(1))
        code = "\n" * first_line + block.group(1)
        exec(compile(code, str(path), "exec"), namespace)  # noqa: S102  (the docs are ours)


def test_readme_python_blocks_run():
    run_python_blocks(README)


def test_there_are_guides():
    assert {p.name for p in GUIDES} >= {"xmap_migration.md", "library_authors.md"}


@pytest.mark.parametrize("path", GUIDES, ids=[p.name for p in GUIDES])
def test_guide_python_blocks_run(path):
    # a guide may fix canonical orders (nx.fix_canonical_order): as a fresh program would, without leaking
    with fresh_canonical_orders():
        run_python_blocks(path)


@pytest.mark.parametrize("path", GUIDES, ids=[p.name for p in GUIDES])
def test_guides_are_linked_from_the_readme(path):
    assert f"](docs/{path.name})" in README.read_text()
