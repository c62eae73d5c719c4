"""``nx.linalg.norm`` and ``nx.linalg.vector_norm`` with names in ``axis``, as reductions take them.

A norm along a name is a reduction over it: ``nx.linalg.norm(x, axis="embed")`` is the vector norm along
``embed``, ``axis=("i", "j")`` the matrix norm over those two names (rows ``i``), and ints mix in as
positional axes. ``axis=None`` keeps ``jax.numpy``'s meaning on the positional axes (named axes are batch
axes), which on a value whose axes are all named is an error outside ``nx.xmap`` bodies, as for every
reduction.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.array([[3.0, 4.0], [6.0, 8.0]]), ["b", "embed"])
>>> nx.linalg.norm(x, axis="embed").unwrap(["b"]).tolist()
[5.0, 10.0]
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from ..core.array import NamedArray
from ..engine import dispatch as engine
from ..engine.lifting import has_name, lift
from ..engine.registry import implements
from ..errors import AxisSpecError

__all__ = ["norm", "vector_norm"]

Axis = int | str | tuple[int | str, ...] | None


@implements(jnp.linalg.norm)
def norm(x: Any, ord: Any = None, axis: Axis = None, keepdims: bool = False) -> Any:
    """``jnp.linalg.norm`` where ``axis`` may hold names: one axis is a vector norm, two a matrix norm.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((2, 3, 4)), ["i", "j", "b"])
    >>> nx.linalg.norm(x, "fro", axis=("i", "j")).named_shape
    {'b': 4}
    """
    where = "nx.linalg.norm"
    if has_name(axis) and type(x) is NamedArray:
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        if len(axes) > 2:
            raise AxisSpecError(
                f"{where}: axis={axis!r} gives {len(axes)} axes; a norm is over one axis (a vector norm) or "
                f"two (a matrix norm). For the vector norm over all of them: "
                f"nx.linalg.vector_norm(x, axis={axis!r})")
        return engine.reduce(jnp.linalg.norm, x, axis, where, keepdims, (("ord", ord),))
    if axis is None:
        engine.check_reduces(x, where)
    return _lifted_norm(x, ord, axis, keepdims)


@implements(jnp.linalg.vector_norm)
def vector_norm(x: Any, /, *, axis: Axis = None, keepdims: bool = False, ord: Any = 2) -> Any:
    """``jnp.linalg.vector_norm`` where ``axis`` may hold names (the axes are flattened into one vector).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((2, 2, 3)), ["h", "d", "b"])
    >>> nx.linalg.vector_norm(x, axis=("h", "d")).unwrap(["b"]).tolist()
    [2.0, 2.0, 2.0]
    """
    where = "nx.linalg.vector_norm"
    if has_name(axis) and type(x) is NamedArray:
        return engine.reduce(jnp.linalg.vector_norm, x, axis, where, keepdims, (("ord", ord),))
    if axis is None:
        engine.check_reduces(x, where)
    return _lifted_vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)


# the positional cases: jax's norms lifted over the names, with the rank and axis checks of lifted functions
_lifted_norm = lift(jnp.linalg.norm, "nx.linalg.norm", "linalg", "norm")
_lifted_vector_norm = lift(jnp.linalg.vector_norm, "nx.linalg.vector_norm", "linalg", "vector_norm")
