"""How each ``nx.<f>`` treats names: the first paragraph of its docstring, so that ``help()`` says it first.

Functions mirrored from ``jax.numpy`` (and lifted from ``jax.lax``, ``jax.nn``, ``jax.random``,
``jax.numpy.linalg``, ``jax.numpy.fft``) keep jax's documentation, after one paragraph stating the nx rule
for their kind. The kinds are the mirror's declarations (:mod:`namedarray.ops.mirror`).

>>> import namedarray as nx
>>> nx.sum.__doc__.splitlines()[0]
'``nx.sum`` reduces the axes given in ``axis``: positions (ints) and names (strings), mixed freely'
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

__all__ = ["RULES", "document", "jax_name"]

RULES = {
    "elementwise": (
        "works elementwise and broadcasts by name: the result carries every name of its operands (one "
        "size per name), and positional axes broadcast by NumPy's rules."),
    "reduction": (
        "reduces the axes given in ``axis``: positions (ints) and names (strings), mixed freely\n"
        "(``axis=(\"batch\", 0)``); the names not given are kept. ``axis=None`` reduces the positional axes\n"
        "only, as in xmap, and is an error on a value whose axes are all named (except inside ``nx.xmap``).\n"
        "``keepdims=True`` keeps reduced positional axes (size 1); reduced names are dropped even then,\n"
        "since names broadcast by name (``x - x.mean(\"batch\")`` already lines up)."),
    "single": (
        "reduces one axis, given by position or by name in ``axis``; the other names are kept.\n"
        "``axis=None`` reduces the flattened positional axes. ``keepdims=True`` keeps a reduced positional\n"
        "axis (size 1); a reduced name is dropped even then, since names broadcast by name."),
    "along": (
        "acts along the axis given in ``axis``, by position or by name, and keeps it; every other name\n"
        "is a batch axis. Options may be arrays, traced under ``jit`` (``roll``'s shift, ``repeat``'s\n"
        "counts), as in ``jax.numpy``; one with named axes is an error that shows the ``nx.along``\n"
        "spelling."),
    "lifted": (
        "is lifted: it runs as if vmapped over every named axis of its NamedArray arguments, and\n"
        "the result carries their names. Integer axis arguments count positional axes only, and a value\n"
        "whose names leave it too few positional axes is an error."),
    "positional": (
        "is positional only: its output size depends on the values, so it cannot map over names. A\n"
        "NamedArray with named axes is an error (unwrap it first)."),
    "dtype": "looks at dtypes only: a NamedArray counts by its dtype.",
}


def document(f: Callable, kind: str, where: str, source: Callable | None = None) -> Callable:
    """Give ``f`` the docstring: ``where`` and the rule of ``kind``, then ``source``'s documentation.

    >>> g = document(lambda x: x, "lifted", "nx.example", abs)
    >>> g.__doc__.splitlines()[0]
    '``nx.example`` is lifted: it runs as if vmapped over every named axis of its NamedArray arguments, and'
    """
    rule = RULES[kind]
    own = inspect.cleandoc(source.__doc__) if source is not None and source.__doc__ else ""
    tail = f"\n\nThe documentation of ``{jax_name(where)}`` follows.\n\n{own}" if own else ""
    f.__doc__ = f"``{where}`` {rule}{tail}"
    return f


_JAX_HOMES = {"linalg": "jax.numpy.linalg", "fft": "jax.numpy.fft", "lax": "jax.lax", "nn": "jax.nn",
              "random": "jax.random"}


def jax_name(where: str) -> str:
    """The public jax name an ``nx`` function mirrors: ``nx.sum`` -> ``jax.numpy.sum``.

    >>> jax_name("nx.linalg.det"), jax_name("nx.lax.cumsum"), jax_name("nx.exp")
    ('jax.numpy.linalg.det', 'jax.lax.cumsum', 'jax.numpy.exp')
    """
    parts = where.split(".")[1:]
    if len(parts) > 1 and parts[0] in _JAX_HOMES:
        return f"{_JAX_HOMES[parts[0]]}.{'.'.join(parts[1:])}"
    return "jax.numpy." + ".".join(parts)
