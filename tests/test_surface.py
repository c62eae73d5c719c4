"""What an editor shows of nx, read the way editors read it: with jedi (the engine of IPython's and many
editors' completion), from the source and the type stubs, without running the package.

Most of nx's functions exist only at run time (the numpy mirror makes them on import), so an editor knows
them from the stubs alone: these tests check that every public function and method shows documentation
there, and that completion on ``nx.`` offers the public API and nothing else (no internal subpackage, no
module the package's source imports for itself). Names that begin with an underscore are Python's own
module attributes (``__doc__``, ``__file__``) or private by convention; editors list them last.
"""

from __future__ import annotations

import inspect
import pathlib
import types

import pytest

import namedarray as nx

jedi = pytest.importorskip("jedi")

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def complete():
    # the running interpreter's packages, this checkout's namedarray: what a user's editor reads
    project = jedi.Project(path=str(ROOT), added_sys_path=[str(ROOT)])
    environment = jedi.InterpreterEnvironment()

    def complete(code: str) -> dict[str, object]:
        script = jedi.Script(code, project=project, environment=environment)
        return {c.name: c for c in script.complete()}

    return complete


def functions(module: types.ModuleType) -> list[str]:
    """The public functions of ``module`` (classes, submodules and constants are no functions)."""
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if callable(getattr(module, n, None))
            and not isinstance(getattr(module, n), (type, types.ModuleType))]


def undocumented(offered: dict[str, object], names: list[str]) -> list[str]:
    return [n for n in names if n not in offered or not offered[n].docstring(raw=True).strip()]


def test_every_public_function_shows_its_documentation(complete):
    names = functions(nx)
    assert len(names) > 350  # the mirror's functions are among them
    offered = complete("import namedarray as nx\nnx.")
    assert undocumented(offered, names) == []
    # the documentation is the one help() shows: for the mirror, nx's rule first
    assert offered["sum"].docstring(raw=True).startswith("``nx.sum`` reduces the axes given in ``axis``")


def test_every_method_shows_its_documentation(complete):
    names = [n for n in dir(nx.NamedArray) if not n.startswith("_") and callable(getattr(nx.NamedArray, n))]
    offered = complete("import namedarray as nx\n\ndef f(x: nx.NamedArray):\n    x.")
    assert {"sum", "unwrap", "rename", "reshape", "shard", "tree_unflatten"} <= set(names)
    # every method is documented, for help() and in an editor alike (JAX's pytree hook too)
    assert [n for n in names if not inspect.getdoc(getattr(nx.NamedArray, n))] == []
    assert undocumented(offered, names) == []


# jedi prefers the documentation of a name's source definition to the stub's, and a function the source
# bound by assignment (``relu = _activation(jax.nn.relu)``) would show the assignment's, which is none: nx.nn
# and nx.random make those on first use instead (their module ``__getattr__``), so jedi shows the stub's.
@pytest.mark.parametrize("module", ["nn", "random", "linalg", "fft"])
def test_every_function_of_a_public_module_shows_its_documentation(complete, module):
    names = functions(getattr(nx, module))
    assert names
    offered = complete(f"import namedarray as nx\nnx.{module}.")
    assert undocumented(offered, names) == []


def test_completion_offers_the_public_names_only(complete):
    offered = set(complete("import namedarray as nx\nnx."))
    public = set(nx.__all__)
    assert sorted(n for n in offered - public if not n.startswith("_")) == []
    assert sorted(public - offered) == []
