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

from . import dispatch as engine

__all__ = ["nmap"]


def nmap(f: Callable) -> Callable:
    """Return ``f`` lifted over named axes; positional arguments and semantics are unchanged.

    Arrays anywhere in the arguments (pytrees included) are mapped over their names; every other argument
    is passed through as it is. Outputs that ``f`` names itself keep those names too.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> a = nx.wrap(jnp.ones((2, 3)), ["i", ...])
    >>> b = nx.wrap(jnp.ones((4, 3)), ["j", ...])
    >>> nx.nmap(jnp.dot)(a, b).named_shape  # every pair (i, j): the union of the names
    {'i': 2, 'j': 4}
    """
    where = f"nx.nmap({getattr(f, '__name__', 'f')})"

    @functools.wraps(f)
    def lifted(*args, **kwargs):
        return engine.lift(f, args, kwargs, where)

    return lifted
