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

from . import engine

__all__ = ["nmap"]


def nmap(f: Callable) -> Callable:
    """Return ``f`` lifted over named axes; positional arguments and semantics are unchanged."""

    @functools.wraps(f)
    def lifted(*args, **kwargs):
        return engine.lift(f, args, kwargs, f"nx.nmap({getattr(f, '__name__', 'f')})")

    lifted.__wrapped_positional__ = f
    return lifted
