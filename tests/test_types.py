"""What type checkers see: the generated stubs are current, and mypy reads the README's and the guides' code
and the examples against them without an error, while a wrong use of nx is reported.

mypy starts from an empty cache, as on a fresh clone; jax and numpy are read from their own stubs only
(pyproject.toml's ``[tool.mypy]``), which keeps the check to seconds. The README and a file of user code
(tests/typed/user_code.py, which asserts the types nx's functions return) are checked again with jax's own
types, as a user's checker reads them; pyright reads the README, the guides, the examples and the user code.
Both read nx.typing's shapes as written, inside ``Annotated``; the user code is run, so that its types are
what nx returns. The stubs carry the documentation help() shows, and the mirror's annotations are its
signatures' (tests/test_surface.py checks what an editor shows of them).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import pathlib
import re
import runpy
import shutil
import subprocess
import sys

import pytest

from namedarray.surface import stubs

mypy_api = pytest.importorskip("mypy.api")

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md")
                                    if p.name not in {"index.md", "generated_readme.md"})]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_stubs_are_current():
    old = stubs.stale()
    assert not old, f"the type stubs {old} differ from the package: run `make stubs` and commit them"


def test_stubs_declare_every_public_name():
    import namedarray as nx

    text = stubs.render()["__init__.pyi"]
    declared = set(re.findall(r"^def (\w+)\(|^(\w+): |^from \S+ import \w+ as (\w+)$", text, re.M))
    names = {n for group in declared for n in group if n}
    assert set(nx.__all__) <= names, sorted(set(nx.__all__) - names)
    methods = stubs.render()["core/array.pyi"]
    for method in ("def sum(self, axis:", "def __add__(self, other:", "def unwrap(self", "def at(self)"):
        assert method in methods


def test_stubs_carry_the_documentation_help_shows():
    import namedarray as nx

    def getdoc(obj):  # as help() shows it, less trailing blanks
        doc = inspect.getdoc(obj)
        return doc.rstrip() if doc else None

    files = stubs.render()
    root = {n.name: ast.get_docstring(n) for n in ast.parse(files["__init__.pyi"]).body
            if isinstance(n, ast.FunctionDef)}  # the last of a name's overloads: the one documented
    functions = [n for n in nx.__all__ if n in root]
    assert len(functions) > 350
    assert [n for n in functions if root[n] != getdoc(getattr(nx, n))] == []
    assert root["sum"].startswith("``nx.sum`` reduces the axes given in ``axis``")
    array = next(n for n in ast.parse(files["core/array.pyi"]).body if isinstance(n, ast.ClassDef))
    methods = {n.name: ast.get_docstring(n) for n in array.body if isinstance(n, ast.FunctionDef)}
    assert [n for n, doc in methods.items() if doc != getdoc(getattr(nx.NamedArray, n))] == []
    assert methods["reshape"] == getdoc(nx.NamedArray.reshape)
    linalg = {n.name: ast.get_docstring(n) for n in ast.parse(files["linalg.pyi"]).body
              if isinstance(n, ast.FunctionDef)}
    assert linalg["det"] == getdoc(nx.linalg.det) and "nx.linalg.det" in linalg["det"]


def test_signatures_and_annotations_agree():
    import namedarray as nx

    for f in (nx.sum, nx.exp, nx.linalg.det, nx.nn.relu, nx.NamedArray.sum):
        signature = inspect.signature(f)
        expected = {p.name: p.annotation for p in signature.parameters.values() if p.annotation != p.empty}
        assert f.__annotations__ == {**expected, "return": signature.return_annotation}, f
    assert "NamedArray" in nx.sum.__annotations__["a"]  # nx's types, not jax's


def python_modules(path: pathlib.Path) -> list[str]:
    """The ```python blocks of a Markdown file as modules: a block that imports namedarray starts one, and
    the blocks after it that do not continue it (they run in one namespace in tests/test_docs.py). Blank
    lines keep each block on its own lines."""
    text = path.read_text()
    modules: list[str] = []
    for block in re.finditer(r"```python\n(.*?)```", text, re.S):
        code = block.group(1)
        if "import namedarray" in code or not modules:
            modules.append("")
        pad = text.count("\n", 0, block.start(1)) - modules[-1].count("\n")
        modules[-1] += "\n" * pad + code
    return modules


def mypy(files: list[pathlib.Path], cache: pathlib.Path) -> tuple[str, int]:
    out, err, status = mypy_api.run([
        "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache), "--no-error-summary",
        "--show-error-codes", *map(str, files)])
    return out + err, status


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("mypy_cache")


def test_docs_and_examples_type_check(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("MYPYPATH", str(ROOT))  # this checkout's package and stubs
    files = []
    for path in DOCS:
        for i, code in enumerate(python_modules(path)):
            file = tmp_path / f"{path.stem}_{i}.py"
            file.write_text(code)
            files.append(file)
    for path in EXAMPLES:
        file = tmp_path / path.name
        file.write_text(path.read_text())
        files.append(file)
    out, status = mypy(files, cache)
    for path in [*DOCS, *EXAMPLES]:  # name the source, not the temporary copy
        out = re.sub(rf"{re.escape(str(tmp_path))}/{path.stem}(_\d+)?\.py", path.name, out)
    assert status == 0, out


@pytest.mark.parametrize("snippet, error", [
    ("total: int = nx.sum(x, axis='batch')", 'expression has type "NamedArray"'),
    ("y = nx.summ(x, axis='batch')", 'Module has no attribute "summ"'),
    ("y = x.summ('batch')", '"NamedArray" has no attribute "summ"'),
    ("y = nx.einsum(3, x)", 'No overload variant of "einsum" matches argument types "int"'),
])
def test_wrong_uses_are_reported(snippet, error, tmp_path, cache, monkeypatch):
    monkeypatch.setenv("MYPYPATH", str(ROOT))
    file = tmp_path / "wrong.py"
    file.write_text("import jax.numpy as jnp\nimport namedarray as nx\n\n"
                    "x = nx.wrap(jnp.ones((2, 3)), ['batch', 'k'])\n" + snippet + "\n")
    out, status = mypy([file], cache)
    assert status == 1 and error in out, out


USER_CODE = ROOT / "tests" / "typed" / "user_code.py"

# jax read with its own types, as a user's checker does; a library without type information (orbax) is
# read as Any, as a user's configuration would say
JAX_TYPES_CONFIG = """\
[mypy]
python_version = 3.11
check_untyped_defs = True

[mypy-orbax.*,optax.*,treescope.*,safetensors.*,xarray.*,sklearn.*,tqdm.*]
ignore_missing_imports = True
"""


def test_readme_and_user_code_type_check_with_jax_types(tmp_path, monkeypatch):
    monkeypatch.setenv("MYPYPATH", str(ROOT))
    config = tmp_path / "mypy.ini"
    config.write_text(JAX_TYPES_CONFIG)
    files = []
    for i, code in enumerate(python_modules(ROOT / "README.md")):
        file = tmp_path / f"README_{i}.py"
        file.write_text(code)  # as written: nx.typing's annotations too
        files.append(file)
    files.append(USER_CODE)
    out, err, status = mypy_api.run(["--config-file", str(config), "--cache-dir", str(tmp_path / "cache"),
                                     "--no-error-summary", "--show-error-codes", *map(str, files)])
    out = re.sub(rf"{re.escape(str(tmp_path))}/README(_\d+)?\.py", "README.md", out + err)
    assert status == 0, out


def test_user_code_types_are_what_nx_returns():
    runpy.run_path(str(USER_CODE), run_name="user_code")  # its isinstance asserts hold at run time


# the internal modules the root stub hides from editors (stubs._internal) are there for a type checker
INTERNAL_USE = """\
import namedarray.core.shape
from namedarray.core import env

shape: namedarray.core.shape.NamedShape = namedarray.core.shape.NamedShape({"b": 2})
print(shape, env)
"""


def test_internal_modules_type_check(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("MYPYPATH", str(ROOT))
    file = tmp_path / "internal.py"
    file.write_text(INTERNAL_USE)
    out, status = mypy([file], cache)
    assert status == 0, out


def test_docs_examples_and_user_code_type_check_with_pyright(tmp_path):
    """pyright (the checker of VS Code's Python support) reads the README, the guides, the examples and the
    user code as mypy does,
    and reports a wrong use: the stubs are written for both."""
    here = pathlib.Path(sys.executable).parent  # this environment's, else one on PATH
    pyright = shutil.which("pyright", path=str(here)) or shutil.which("pyright")
    if pyright is None:
        pytest.skip("pyright is not installed")
    files = [USER_CODE]
    for path in DOCS:
        for i, code in enumerate(python_modules(path)):
            file = tmp_path / f"{path.stem}_{i}.py"
            file.write_text(code)
            files.append(file)
    for path in EXAMPLES:  # side by side, as they import each other; annotations as written
        file = tmp_path / path.name
        file.write_text(path.read_text())
        files.append(file)
    internal = tmp_path / "internal.py"
    internal.write_text(INTERNAL_USE)
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import jax.numpy as jnp\nimport namedarray as nx\n\n"
                     "x = nx.wrap(jnp.ones((2, 3)), ['batch', 'k'])\ntotal: int = nx.sum(x, axis='batch')\n")
    run = subprocess.run([pyright, "--outputjson", "--pythonpath", sys.executable,
                          *map(str, [*files, internal, wrong])], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)},  # the examples import each other
                         timeout=600)
    report = json.loads(run.stdout)
    errors = [(pathlib.Path(d["file"]).name, d["range"]["start"]["line"] + 1, d["message"])
              for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert len(errors) == 1 and errors[0][:2] == ("wrong.py", 5) and '"NamedArray"' in errors[0][2], errors
