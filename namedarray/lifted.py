"""The rest of a jax module, lifted over named axes: what ``nx.lax``, ``nx.nn``, ``nx.random`` leave out.

Each of those modules defines the functions whose arguments mean more than positions (collectives, axes by
name, named shapes) and hands every other attribute of the jax module it mirrors to :func:`rest_of`: a
function becomes ``nx.nmap(f)`` (vectorised over the names of its NamedArray arguments, built once), while
classes, submodules, constants and the ``passthrough`` functions are jax's own.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> nx.nn.initializers is jax.nn.initializers
True
>>> nx.lax.cummax(nx.wrap(jnp.array([[1, 3, 2]]), ["b", ...]), axis=0).unwrap(["b", ...]).tolist()
[[1, 3, 3]]
"""

from __future__ import annotations

import types
from collections.abc import Callable, Collection, Mapping
from typing import Any

from .nmap import nmap

__all__ = ["rest_of"]


def rest_of(jax_module: types.ModuleType, namespace: Mapping[str, Any],
            passthrough: Collection[str] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for a module whose globals are ``namespace``, mirroring ``jax_module``.

    >>> import jax
    >>> getattr_, dir_ = rest_of(jax.nn, {})
    >>> getattr_("relu") is getattr_("relu"), "relu" in dir_()
    (True, True)
    """
    lifted: dict[str, Callable] = {}
    module_name = namespace.get("__name__", "namedarray")

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            obj = getattr(jax_module, name)
        except AttributeError:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r} (nor has "
                                 f"{jax_module.__name__})") from None
        if name in passthrough or isinstance(obj, (type, types.ModuleType)) or not callable(obj):
            return obj
        f = lifted.get(name)
        if f is None:
            f = lifted[name] = nmap(obj)
        return f

    def __dir__() -> list[str]:
        return sorted(set(namespace) | {n for n in dir(jax_module) if not n.startswith("_")})

    return __getattr__, __dir__
