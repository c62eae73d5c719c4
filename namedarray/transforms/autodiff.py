"""``nx.grad`` and ``nx.value_and_grad``: ``jax.grad`` of a function whose scalar result is a NamedArray.

A loss written with nx ends in a reduction over every name, ``(y * y).sum(("batch", "embed"))``: a 0-d
NamedArray with no names, which ``jax.grad`` refuses as not a scalar. These accept it (and plain scalars);
a result that still carries names is an error naming them, since the gradient of a named value is not
defined without saying how to reduce it. Everything else is ``jax.grad``'s: arguments, ``argnums``,
``has_aux`` (the auxiliary output is returned as it is) and the other options.

>>> import namedarray as nx, jax.numpy as jnp
>>> w = nx.wrap(jnp.array([1.0, 2.0]), ["k"])
>>> nx.grad(lambda w: (w * w).sum("k"))(w).unwrap(["k"]).tolist()
[2.0, 4.0]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..core.array import NamedArray
from ..errors import PositionalMisuseError, fmt_names, wrong_type

__all__ = ["grad", "value_and_grad"]


def _scalar(out: Any, where: str) -> Any:
    if type(out) is not NamedArray:
        return out
    if out.names:
        names = out.names if len(out.names) > 1 else out.names[0]
        raise PositionalMisuseError(
            f"{where}: the function returned a value with named axes {fmt_names(out.names)}; a gradient "
            f"needs a scalar: reduce them first, e.g. .sum({names!r})")
    return out.data


def _scalar_output(fun: Callable, argnums: Any, has_aux: bool, where: str) -> Callable:
    if not callable(fun):
        raise wrong_type(where, "fun", fun, "a function")
    ints = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ints):
        raise wrong_type(where, "argnums", argnums,
                         "an int or a tuple of ints (positions of fun's arguments)")

    @functools.wraps(fun)
    def scalar_fun(*args, **kwargs):
        out = fun(*args, **kwargs)
        if has_aux:
            value, aux = out
            return _scalar(value, where), aux
        return _scalar(out, where)

    return scalar_fun


def grad(fun: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False, **kwargs: Any) -> Callable:
    """``jax.grad`` that also accepts a 0-d NamedArray without names as ``fun``'s scalar output.

    >>> import namedarray as nx
    >>> nx.grad(lambda x: (x * 3.0).sum("i"))(nx.ones({"i": 2})).unwrap(["i"]).tolist()
    [3.0, 3.0]
    """
    return jax.grad(_scalar_output(fun, argnums, has_aux, "nx.grad"), argnums, has_aux=has_aux, **kwargs)


def value_and_grad(fun: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False,
                   **kwargs: Any) -> Callable:
    """``jax.value_and_grad`` that also accepts a 0-d NamedArray without names as ``fun``'s scalar output
    (the value comes back as a jax scalar).

    >>> import namedarray as nx
    >>> value, g = nx.value_and_grad(lambda x: (x * x).sum("i"))(nx.ones({"i": 2}))
    >>> float(value), g.named_shape
    (2.0, {'i': 2})
    """
    scalar_fun = _scalar_output(fun, argnums, has_aux, "nx.value_and_grad")
    return jax.value_and_grad(scalar_fun, argnums, has_aux=has_aux, **kwargs)
