"""``nx.nmap``: lift a positional function so it vectorises over named axes.

The lifted function runs as if vmapped over every named axis of its NamedArray arguments (xmap's first rule:
named axes never interact implicitly with positional ones). Its outputs carry the union of the input names.
Inside, each named axis is also a vmap ``axis_name``, so ``jax.lax`` collectives over it work.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((4, 3, 3)), ["batch", ...])
>>> nx.nmap(jnp.linalg.det)(x).named_shape
{'batch': 4}
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax

from ..core.array import NamedArray, is_named
from ..errors import NamedAxisError, PositionalAxisError, fmt_names
from . import dispatch as engine

# how NumPy and jax say that an axis argument counts past an array's rank
_OUT_OF_BOUNDS = "out of bounds for array of dimension"

__all__ = ["nmap"]


def nmap(f: Callable) -> Callable:
    """Return ``f`` lifted over named axes; positional arguments and semantics are unchanged.

    Arrays anywhere in the arguments (pytrees included) are mapped over their names; every other argument
    is passed through as it is. Outputs that ``f`` names itself keep those names too. ``f`` never sees a
    named axis: to run it along one (a softmax over ``vocab``, an optax loss), use
    :func:`nx.along <namedarray.along>`; an axis argument past the positional axes is a
    :class:`~namedarray.errors.PositionalAxisError` that says so.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> a = nx.wrap(jnp.ones((2, 3)), ["i", ...])
    >>> b = nx.wrap(jnp.ones((4, 3)), ["j", ...])
    >>> nx.nmap(jnp.dot)(a, b).named_shape  # every pair (i, j): the union of the names
    {'i': 2, 'j': 4}
    """
    where = f"nx.nmap({getattr(f, '__name__', 'f')})"

    @functools.wraps(f)
    def lifted(*args, **kwargs):
        try:
            return engine.call_lifted(f, args, kwargs, where)
        except ValueError as e:
            if isinstance(e, NamedAxisError) or _OUT_OF_BOUNDS not in str(e):
                raise
            names = {n: None for v in jax.tree.leaves((args, kwargs), is_leaf=is_named)
                     if type(v) is NamedArray for n in v.names}
            # f counted an axis that only exists by name: point to the spelling that gives it one
            raise PositionalAxisError(
                f"{where}: {e}. The function runs on one element of each named axis "
                f"({fmt_names(names)}), so it sees only positional axes; to run it along a named axis, "
                f"use nx.along(name, f), which moves that axis to the last position") from e

    return lifted
