"""The package's layers: declared once (pyproject.toml, import-linter's layers contract) and checked here.

A module imports only from its own layer and the layers below it, no module imports the package root
(implementations are found through the registry instead), and the root ``__init__`` only re-exports. An
upward import added on purpose to a copy of the package fails the contract, naming the import.
"""

import ast
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "namedarray"
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def _lint(cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_layers_contract_holds():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "namedarray", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shape = tmp_path / "namedarray" / "core" / "shape.py"
    shape.write_text(shape.read_text() + "\nfrom ..parallel import distribute  # noqa\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "namedarray.core is not allowed to import namedarray.parallel" in result.stdout
    assert "namedarray.core.shape -> namedarray.parallel.distribute" in result.stdout


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def test_no_module_imports_the_package_root():
    submodules = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    offenders = []
    for path, tree in _modules():
        depth = len(path.relative_to(PACKAGE).parts)  # the relative level that reaches the root
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == "namedarray" for a in node.names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom):
                to_root = (node.module == "namedarray" and node.level == 0) or (
                    node.level == depth and node.module is None)
                if to_root and any(a.name not in submodules for a in node.names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"modules that import the package root: {offenders}"


def test_the_root_only_re_exports():
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    others = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # the docstring
            continue
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] in (["__version__"], ["__all__"]):
            continue
        if isinstance(node, ast.FunctionDef) and node.name in ("__dir__", "__getattr__"):  # (__getattr__:
            continue  # the names imported on first use, read from their modules)
        others.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    assert not others, others


def test_the_registry_names_what_nx_exports():
    """A jax function's named implementation (what nx.xmap and the operators use) is the nx.<f> users call."""
    import jax
    import jax.numpy as jnp

    import namedarray as nx
    from namedarray.engine import registry

    for name in nx.__all__:
        j = getattr(jnp, name, None)
        if callable(j) and not isinstance(j, type) and registry.named(j) is not None:
            assert registry.named(j) is getattr(nx, name), name
    for name in nx.lax.__all__:
        if hasattr(jax.lax, name):  # (pdot is xmap's, and jax's no more)
            assert registry.named(getattr(jax.lax, name)) is getattr(nx.lax, name), name
    assert registry.named(jnp.linalg.norm) is nx.linalg.norm
    assert registry.named(jax.scipy.special.logsumexp) is nx.nn.logsumexp
    assert registry.named(jax.nn.relu) is nx.nn.relu
    assert registry.named(print) is None


def test_no_public_name_hides_a_subpackage():
    # `nx.sharding` is a function: a folder of the same name would be unreachable as an attribute
    # (help(), `namedarray.sharding.distribute` in tracebacks and docs would point at the function)
    import importlib

    import namedarray as nx

    packages = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    modules = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    folders = sorted(packages + modules)
    hidden = []
    for name in folders:
        module = importlib.import_module(f"namedarray.{name}")
        if getattr(nx, name, module) is not module:
            hidden.append(f"nx.{name} is {getattr(nx, name)!r}, not the module namedarray.{name}")
    assert not hidden, hidden
    assert "parallel" in folders and "sharding" not in folders


def test_process_wide_state_lives_in_one_module_per_kind():
    # caches and tables: core/caches.py (bounded, locked, cleared by nx.clear_caches()); context variables:
    # core/context.py. A cache or context variable made anywhere else fails here, naming the line.
    home = {"lru_cache": "core/caches.py", "OrderedDict": "core/caches.py", "WeakSet": "core/caches.py",
            "WeakKeyDictionary": "core/caches.py", "WeakValueDictionary": "core/caches.py",
            "ContextVar": "core/context.py"}
    offenders = []
    for path, tree in _modules():
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(tree):
            name = getattr(node, "attr", None) or getattr(node, "id", "")
            if name == "cache" and getattr(getattr(node, "value", None), "id", "") == "functools":
                name = "lru_cache"  # functools.cache, unbounded
            if name in home and home[name] != where:
                offenders.append(f"{where}:{node.lineno} {name} (belongs in {home[name]})")
    assert not offenders, offenders
