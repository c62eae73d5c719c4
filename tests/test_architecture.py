"""The package's layers: declared once (pyproject.toml, import-linter's layers contract) and checked here.

A module imports only from its own layer and the layers below it, no module imports the package root
(implementations are found through the registry instead), and the root ``__init__`` only re-exports. An
upward import added on purpose to a copy of the package fails the contract, naming the import.
"""

import ast
import functools
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
    # an import at first use, inside a function, is an import all the same
    specs = tmp_path / "namedarray" / "core" / "specs.py"
    specs.write_text(specs.read_text() + "\n\ndef _later():\n    from ..adapter import xmap  # noqa\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    assert "namedarray.core is not allowed to import namedarray.parallel" in result.stdout
    assert "namedarray.core.shape -> namedarray.parallel.distribute" in result.stdout
    assert "namedarray.core.specs -> namedarray.adapter.xmap" in result.stdout


@functools.cache
def _modules() -> tuple:
    """Each module of the package with its syntax tree (parsed once for all the tests here)."""
    return tuple((path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py")))


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
    # the context.py of the layer that gives them their meaning (core's own in core/context.py, so that core
    # holds nothing for the layers above). A cache or context variable made anywhere else fails here, naming
    # the line.
    home = {"lru_cache": "core/caches.py", "OrderedDict": "core/caches.py", "WeakSet": "core/caches.py",
            "WeakKeyDictionary": "core/caches.py", "WeakValueDictionary": "core/caches.py",
            "ContextVar": "<layer>/context.py"}
    offenders = []
    for path, tree in _modules():
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(tree):
            name = getattr(node, "attr", None) or getattr(node, "id", "")
            if name == "cache" and getattr(getattr(node, "value", None), "id", "") == "functools":
                name = "lru_cache"  # functools.cache, unbounded
            at_home = (where.count("/") == 1 and where.endswith("/context.py") if name == "ContextVar"
                       else home.get(name) == where)
            if name in home and not at_home:
                offenders.append(f"{where}:{node.lineno} {name} (belongs in {home[name]})")
    assert not offenders, offenders


# --------------------------------------------------------------------------------------------------------
# Core names nothing of the layers above it
#
# Import-linter checks core's imports, those inside functions too (the copy above shows it); what it cannot
# see is a layer above reached by name: a module path in a string (importlib, sys.modules), a record keyed by
# what a caller above means, a function or parameter named for a caller. So the source of core is read:
#
# * every import, at any depth, stays in core, errors or outside the package;
# * no identifier of core's code is the name of a package or module above core, or a public name one of
#   them declares (its ``__all__``), except where that name is also Python's, JAX's or NumPy's (the mirrored
#   layers declare jax.numpy's names, and core's ``jax.jit`` is JAX's) or one of ``SHARED_WORDS``. A local
#   variable is not an identifier of core's interface, and can reach nothing without an import or a string;
# * no string (docstrings included) and no comment names a module above by its path (``namedarray.parallel``,
#   ``parallel/plan.py``), and no string of the code is the name of a public function above.
#
# What it allows: prose (messages, docstrings, comments) naming the public functions users call, in the words
# they write (``nx.xmap``): a message tells the user about the call they made, and an essay may say what a
# mechanism of core is for, neither of which reaches anything at run time.

BELOW_CORE = {"core", "errors"}
# core's own words as much as any layer's: the axis environment holds a mesh and resources, and placement
# gives a value its sharding (JAX's word); a module or function above that bears one does not own it
SHARED_WORDS = {"mesh", "resources", "sharding"}
# layers whose public names are jax.numpy's, jax.nn's, jax.random's and jax.lax's
MIRRORING = {"ops", "nn", "random", "lax", "typing"}


def _declared(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            try:
                names.update(ast.literal_eval(node.value))
            except ValueError:  # computed (the root's, the mirror's): jax.numpy's names, shared anyway
                pass
    return names


@functools.cache
def _above_core() -> tuple[set[str], set[str]]:
    """The top-level packages and modules above core, and the words that name something of theirs."""
    import builtins
    import typing

    import jax
    import jax.numpy as jnp
    import numpy

    tops, words, mirrored, core_words = set(), set(), set(), set()
    for path, tree in _modules():
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",):
            continue
        if parts[0] in BELOW_CORE:
            core_words.update({parts[-1]} | _declared(tree))
            continue
        tops.add(parts[0])
        words.update(p for p in parts if p != "__init__")
        (mirrored if parts[0] in MIRRORING else words).update(_declared(tree))
    shared = set(dir(builtins)) | SHARED_WORDS
    for module in (jax, jnp, jax.lax, jax.nn, jax.random, numpy, typing):
        shared.update(dir(module))
    return tops, (words | (mirrored - shared)) - (set(dir(builtins)) | SHARED_WORDS | core_words)


def _core_names_above(source: str, where: str, tops: set[str], words: set[str]) -> list[str]:
    """Where ``source`` (a module of namedarray/core/, at ``where``) names something of a layer above."""
    import io
    import re
    import tokenize

    tree = ast.parse(source)
    found = []
    package = ["namedarray", "core"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (package[:len(package) - node.level + 1] if node.level else [])
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
            if module == "namedarray":
                targets = [f"namedarray.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if parts[0] == "namedarray" and (len(parts) == 1 or parts[1] not in BELOW_CORE):
                found.append(f"{where}:{node.lineno} imports {target}")
    local = set()
    for fun in ast.walk(tree):
        if isinstance(fun, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stored = {n.id for n in ast.walk(fun) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            local.update(id(n) for n in ast.walk(fun) if isinstance(n, ast.Name) and n.id in stored)
    external = {"jax", "jnp", "np", "numpy", "lax", "optree", "math", "functools", "contextlib", "typing"}
    external_names = {id(a) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level
                      and not (n.module or "").startswith("namedarray") for a in n.names}  # theirs
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and id(node) not in local:
            name = node.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = node.name
        elif isinstance(node, ast.arg):
            name = node.arg
        elif isinstance(node, ast.keyword):
            name = node.arg
        elif isinstance(node, ast.alias):
            name = None if id(node) in external_names else node.asname or node.name
        elif isinstance(node, ast.Attribute):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            name = None if isinstance(base, ast.Name) and base.id in external else node.attr  # JAX's names
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value.strip().removeprefix("nx.") in words):
            found.append(f"{where}:{node.lineno} the string {node.value!r}")
            continue
        else:
            continue
        if name in words:
            found.append(f"{where}:{node.lineno} the identifier {name}")
    tops_rx = "|".join(sorted(tops))
    path_rx = re.compile(rf"\bnamedarray\.(?:{tops_rx})\b|\b(?:{tops_rx})/\w+\.py\b")
    texts = [(n.lineno, n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    texts += [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type == tokenize.COMMENT]
    for lineno, text in texts:
        for m in path_rx.finditer(text):
            found.append(f"{where}:{lineno + text.count(chr(10), 0, m.start())} names {m.group(0)}")
    return found


def test_core_names_nothing_above_it():
    tops, words = _above_core()
    assert {"parallel", "adapter", "transforms", "engine"} <= tops
    assert {"jit", "plan_sharding", "xmap", "shard_map", "pipeline", "distribute", "plan", "scan"} <= words
    found = []
    for path in sorted((PACKAGE / "core").glob("*.py")):
        found += _core_names_above(path.read_text(), path.relative_to(ROOT).as_posix(), tops, words)
    # the fix: say it in core's own words (a hook, a parameter), or, for a word that is core's as much as
    # the layer's above, add it to SHARED_WORDS saying why
    assert not found, f"core names what lies above it: {found}"


def test_the_core_check_finds_each_kind_of_naming():
    tops, words = _above_core()
    source = '''"""Kept for namedarray.parallel.plan."""
import importlib


def made(value, plan_sharding=None):
    from ..parallel import distribute  # at first use
    from .. import adapter
    import namedarray
    importlib.import_module("namedarray.adapter.xmap")  # see transforms/scan.py
    return getattr(value, "pipeline")


def jit(f):
    return f
'''
    found = _core_names_above(source, "x.py", tops, words)
    for expected in ["x.py:1 names namedarray.parallel", "x.py:5 the identifier plan_sharding",
                     "x.py:6 imports namedarray.parallel", "x.py:7 imports namedarray.adapter",
                     "x.py:8 imports namedarray", "x.py:9 names namedarray.adapter",
                     "x.py:9 names transforms/scan.py", "x.py:10 the string 'pipeline'",
                     "x.py:13 the identifier jit"]:
        assert expected in found, (expected, found)
    assert not _core_names_above("import jax\n\ncompiled = jax.jit\n", "y.py", tops, words)  # JAX's jit


def test_core_tells_what_it_makes_through_a_hook_of_the_context():
    """What a layer above learns of the values core makes, it hears through a hook it installs for a block:
    every value made (results and intermediates), innermost hook first, only in the context that installed
    it, and nothing once the block is left."""
    import threading

    import jax.numpy as jnp
    import pytest

    import namedarray as nx
    from namedarray.core import context

    x = nx.wrap(jnp.ones((2, 3)), ["a", "b"])
    heard: list = []
    other_thread: list = []

    def elsewhere():
        other_thread.append((context.made_hook(), (x + 1).names))

    with context.hearing_made(lambda v: heard.append(("outer", v.names))):
        y = x.sum("b")
        before = len(heard)
        with context.hearing_made(lambda v: heard.append(("inner", v.names))):
            z = nx.wrap(jnp.ones(4), ["c"]) * y
        inside = heard[before:]
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
    assert heard[before - 1] == ("outer", y.names) == ("outer", ("a",))
    # each value made in the inner block: heard by the inner hook, then by the outer one
    assert inside[0::2] == [("inner", n) for _, n in inside[1::2]]
    assert inside[1::2] == [("outer", n) for _, n in inside[0::2]]
    assert inside[-1] == ("outer", z.names)
    assert other_thread == [(None, ("a", "b"))] and len(heard) == before + len(inside)
    assert context.made_hook() is None
    _ = x * 2
    assert len(heard) == before + len(inside)

    def refuse(v):
        raise RuntimeError(f"made {v.names}")

    with context.hearing_made(refuse), pytest.raises(RuntimeError, match="made"):
        _ = x * 2
    assert context.made_hook() is None
