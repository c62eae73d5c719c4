"""The documentation runs: every module's docstring examples and every Python block of the README."""

import doctest
import importlib
import pathlib
import pkgutil
import re

import pytest

import namedarray

MODULES = sorted(m.name for m in pkgutil.iter_modules(namedarray.__path__))
README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.parametrize("name", MODULES)
def test_module_docstring_examples(name):
    mod = importlib.import_module(f"namedarray.{name}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0


def test_every_module_has_examples():
    without = []
    for name in MODULES:
        mod = importlib.import_module(f"namedarray.{name}")
        if not any(t.examples for t in doctest.DocTestFinder().find(mod)):
            without.append(name)
    assert not without, f"modules without a docstring example: {without}"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has no Python examples"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102  (the README is ours)
