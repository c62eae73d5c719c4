"""The registry: which ``nx`` function implements each jax function.

Every named operation is declared where it is implemented, next to the jax function it stands for::

    @implements(jnp.dot)
    def dot(a, b, *, precision=None, preferred_element_type=None): ...

The numpy mirror (:mod:`namedarray.ops.mirror`) declares a default for every ``jax.numpy`` function, and
an explicit declaration replaces the default whichever is imported first. Namespaces that lift the rest of
a jax module on demand (``nx.nn``, ``nx.lax``) declare themselves as the fallback for that module.

The registry is how a layer finds an implementation declared above it without importing upward: ``nx.xmap``
maps ``jnp.vdot`` to ``nx.vdot`` (xmap's contract: a jax function passed directly uses its named version),
and the NamedArray's operators bind ``nx.add``, ``nx.matmul``, ... through it. It is filled once, while
the package is imported, and only read afterwards (the mirror's defaults are made when first read).

>>> import jax.numpy as jnp, namedarray as nx
>>> named(jnp.vdot) is nx.vdot, named(jnp.sum) is nx.sum, named(print)
(True, True, None)
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..core import caches

__all__ = ["implements", "declare_default", "declare_fallback", "named", "is_jax_function", "declared"]

F = TypeVar("F", bound=Callable[..., Any])

# id(jax function) -> (the jax function, its named implementation); explicit declarations and defaults
_EXPLICIT: dict[int, tuple[Any, Any]] = {}
_DEFAULT: dict[int, tuple[Any, Any]] = {}
# jax module name -> a function name -> named implementation, for namespaces that lift on demand
_FALLBACK: dict[str, Callable[[str], Any]] = {}
# the jax modules whose functions have named versions (explicit, mirrored, or nx.nmap of them), searched in
# this order: a function two modules share is jax.numpy's first
_MODULES = ("jax.numpy", "jax.nn", "jax.lax", "jax.scipy.special", "jax.numpy.linalg", "jax.numpy.fft",
            "jax.scipy.linalg", "jax.scipy.stats", "jax.scipy.signal")


def implements(*jax_functions: Any) -> Callable[[F], F]:
    """Declare the decorated function the named implementation of each of ``jax_functions``.

    >>> import jax.numpy as jnp
    >>> @implements(jnp.isnan)
    ... def my_isnan(x): ...
    >>> named(jnp.isnan) is my_isnan
    True
    >>> _ = _EXPLICIT.pop(id(jnp.isnan))  # (the doctest's declaration goes again)
    """
    def declare(f: F) -> F:
        for j in jax_functions:
            _EXPLICIT[id(j)] = (j, f)
        return f

    return declare


def declare_default(jax_function: Any, f: Any, *, deferred: bool = False) -> None:
    """The mirror's own version of ``jax_function``, used where nothing declares one explicitly.

    ``deferred``: ``f()`` makes it, when it is first asked for (the mirror makes its functions on first use).
    """
    _DEFAULT[id(jax_function)] = (jax_function, _Deferred(f) if deferred else f)


class _Deferred:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]):
        self.make = make


def declare_fallback(jax_module: str, getattr_: Callable[[str], Any]) -> None:
    """A namespace that lifts ``jax_module``'s remaining functions on demand (its module ``__getattr__``)."""
    _FALLBACK[jax_module] = getattr_


def named(jax_function: Any) -> Any | None:
    """The named implementation of ``jax_function``, or None when it has none (not a jax function).

    A function of ``jax.numpy``, ``jax.nn``, ``jax.lax`` or ``jax.scipy.special`` without an explicit or
    mirrored declaration gets what its namespace lifts on demand (``nx.nn.<f>``, ``nx.lax.<f>``).
    """
    for table in (_EXPLICIT, _DEFAULT):
        hit = table.get(id(jax_function))
        if hit is not None and hit[0] is jax_function:
            f = hit[1]
            if type(f) is _Deferred:  # made once (the maker returns the same object to every thread)
                f = f.make()
                table[id(jax_function)] = (jax_function, f)
            return f
    where = _jax_index().get(id(jax_function))
    if where is None or where[2] is not jax_function:
        return None
    getattr_ = _FALLBACK.get(where[0])
    if getattr_ is None:
        return None
    try:
        return getattr_(where[1])
    except AttributeError:
        return None


def is_jax_function(f: Any) -> bool:
    """Whether ``f`` is a function of one of the jax modules named versions come from (jax.numpy, ...)."""
    where = _jax_index().get(id(f))
    return where is not None and where[2] is f


def declared() -> dict[str, Any]:
    """Every explicit declaration, as ``{"module.name": implementation}`` (for tests and docs)."""
    out = {}
    for j, f in _EXPLICIT.values():
        out[f"{getattr(j, '__module__', '?')}.{getattr(j, '__name__', repr(j))}"] = f
    return out


# Built on first use (it walks the jax modules, so an import of nx that never meets a jax function does
# not pay for it); a lock so that threads that first need it at once build it once.
_INDEX: dict[int, tuple[str, str, Any]] | None = None
_INDEX_LOCK = threading.Lock()


def _forget_index() -> None:
    global _INDEX
    with _INDEX_LOCK:
        _INDEX = None


caches.register("jax function index", _forget_index, lambda: len(_INDEX or ()))


def _jax_index() -> dict[int, tuple[str, str, Any]]:
    """id(function) -> (jax module, name, function) over the modules with named versions (built once)."""
    global _INDEX
    index = _INDEX
    if index is not None:
        return index
    with _INDEX_LOCK:
        if _INDEX is not None:
            return _INDEX
        index = {}
        for modname in _MODULES:
            try:
                mod = importlib.import_module(modname)
            except ImportError:
                continue
            for name in dir(mod):
                if name.startswith("_"):
                    continue
                obj = getattr(mod, name)
                if callable(obj) and not isinstance(obj, type):
                    index.setdefault(id(obj), (modname, name, obj))  # the first module wins
        _INDEX = index
        return index
