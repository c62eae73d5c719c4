"""Indexing: positional indices act on positional axes; a dict indexes by name.

``x[0]``, ``x[..., 1:3]``, ``x[None]``, ``x[idx_array]`` follow NumPy on the positional axes only (an
``...`` never reaches the named axes). ``x[{"batch": 0}]`` drops the axis (so does a 0-d integer array, a
traced loop counter for instance), ``x[{"batch": slice(0, 4)}]`` and ``x[{"batch": [0, 2]}]`` keep it, and a
NamedArray index gathers by name (vectorised over its names).

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.arange(24).reshape(2, 3, 4), {0: "b"})
>>> x[..., 1:3].shape, x[{"b": 1}].named_shape, x[{"b": slice(0, 1)}].named_shape
((3, 2), {}, {'b': 1})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import env as _env
from ..core.array import NamedArray, _make
from ..core.wrapping import name_to_position
from ..engine import dispatch as engine
from ..errors import AxisSpecError, PositionalMisuseError, fmt_names, no_axis

__all__ = ["select"]


def _is_bool_scalar(i) -> bool:
    return isinstance(i, (bool, np.bool_)) or (
        getattr(i, "ndim", None) == 0 and np.dtype(i.dtype) == np.bool_)


def _is_concrete_bool_scalar(i) -> bool:
    return _is_bool_scalar(i) and not isinstance(i, jax.core.Tracer)


def _consumed(i) -> int:
    """How many positional axes index ``i`` consumes (NumPy's rules: a boolean mask of rank r takes r)."""
    if i is None or i is Ellipsis:
        return 0
    if hasattr(i, "dtype") and np.dtype(i.dtype) == np.bool_:
        return np.ndim(i)
    return 0 if isinstance(i, bool) else 1


def _positional_take(d, index: tuple, p: int, k: int):
    """``d[index]`` with ``index`` acting on the ``p`` positional axes only, by NumPy's rules.

    The ``k`` named (trailing) storage axes get full slices after an ellipsis, which jax expands over the
    positional axes the index leaves; as in NumPy, an ellipsis still separates the advanced indices on either
    side of it when it expands to nothing.
    """
    used = sum(_consumed(i) for i in index)
    if used > p:
        raise IndexError(f"too many indices for the positional axes: {used} indices for {p} positional axes "
                         "(index named axes by name: x[{'name': i}])")
    ellipses = [j for j, i in enumerate(index) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    index = index + (() if ellipses else (Ellipsis,)) + (slice(None),) * k
    if any(_is_concrete_bool_scalar(i) for i in index):
        d, index = _bool_scalars_as_arrays(d, index)
    return d[index]


def _bool_scalars_as_arrays(d, index: tuple):
    """NumPy's meaning of a boolean scalar index: a 0-d mask, an integer array over a new axis of length 1.

    jax's own handling of boolean scalars disagrees with NumPy's next to ``None``, ints and other arrays (and
    can move the trailing named axes), so each becomes that integer array (``[0]`` or ``[]``) over an axis
    inserted where it stands.
    """
    at = next(j for j, i in enumerate(index) if i is Ellipsis)
    new_axes, out = [], []
    for j, i in enumerate(index):
        if _is_concrete_bool_scalar(i):
            side = index[:j] if j < at else index[j + 1:]  # counted from the front before the ellipsis
            n = sum(_consumed(b) + _is_concrete_bool_scalar(b) for b in side)
            new_axes.append(n if j < at else -1 - n)
            i = np.zeros(int(bool(i)), np.int32)
        out.append(i)
    return jnp.expand_dims(d, new_axes), tuple(out)


def select(x: NamedArray, index: Any) -> NamedArray:
    """``x[index]``: NumPy indexing of the positional axes, or by name with a dict.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(2, 3), ["a", ...])
    >>> x[-1].named_shape, x[{"a": 1}].unwrap().tolist()
    ({'a': 2}, [3, 4, 5])
    """
    if isinstance(index, Mapping):
        return _by_name(x, index)
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, NamedArray) for i in index):
        index = tuple(_named_index(i) for i in index)
    if any(isinstance(i, NamedArray) for i in index):
        return engine.lift(_getitem, (x, index), {}, "NamedArray.__getitem__")
    # jax's own eager indexing: it dispatches static indices without compiling a kernel per index value
    d = x.data
    k = len(x.names)
    p = engine.pos_ndim(x)
    if p < 0:
        engine.named_sizes(x)  # raises: a transform mapped one of the named axes
    return _make(_positional_take(d, index, p, k), x.names)


def _named_index(i):
    if not isinstance(i, NamedArray):
        return i
    if not i.names:
        return i.data
    if np.dtype(i.dtype) == np.bool_:
        raise PositionalMisuseError(
            f"a boolean NamedArray index with named axes {fmt_names(i.names)} selects a value-dependent "
            "number of elements, which cannot vectorise over names; use nx.where(mask, x, fill) instead")
    return i


def _by_name(x: NamedArray, index: Mapping):
    for name in index:
        if name not in x.names:
            raise no_axis("indexing by name", name, x.names)
    # inside nx.shard_map a slice of a split name cuts each device's block (the result is still blocks of
    # it, side by side); other indices would need the whole axis
    whole = [n for n, i in index.items() if not isinstance(i, slice)]
    _env.current().require_whole(whole, "indexing by name")
    for name, i in index.items():
        if isinstance(i, NamedArray):
            x = _gather_by_name(x, name, i)
        else:
            x = _index_one(x, name, i)
    return x


_BY_NAME_HELP = "an int, a slice, a 1-d integer or boolean index array or a NamedArray"


def _index_one(x: NamedArray, name: str, i):
    d = x.data
    p = d.ndim - len(x.names)
    j = p + x.names.index(name)
    size = d.shape[j]
    if _is_bool_scalar(i):  # NumPy would add an axis: by name, that axis would have no name
        raise AxisSpecError(f"indexing axis {name!r} by name takes {_BY_NAME_HELP}, got the boolean {i!r}")
    if isinstance(i, (int, np.integer)):
        if not -size <= int(i) < size:
            raise IndexError(f"index {int(i)} is out of bounds for axis {name!r} with size {size}")
        names = tuple(n for n in x.names if n != name)
    elif isinstance(i, slice):
        names = x.names
    else:
        given = i
        try:
            i = jnp.asarray(i)
        except (TypeError, ValueError):
            i = None
        if i is None or i.dtype.kind not in "biu" or i.ndim > 1:
            what = (f"an array of dtype {i.dtype} and shape {i.shape}" if hasattr(given, "shape")
                    or isinstance(given, list) else repr(given))
            raise AxisSpecError(f"indexing axis {name!r} by name takes {_BY_NAME_HELP}, got {what}")
        if i.dtype == jnp.bool_ and i.shape != (size,):
            raise IndexError(f"boolean index of shape {i.shape} for axis {name!r} with size {size}")
        # a 0-d index (e.g. a traced loop counter) selects one element like an int: the axis goes
        names = x.names if i.ndim else tuple(n for n in x.names if n != name)
    return _make(d[(slice(None),) * j + (i,)], names)


def _gather_by_name(x: NamedArray, name: str, idx: NamedArray):
    if idx.shape:
        raise AxisSpecError(f"a NamedArray index for axis {name!r} must have no positional axes "
                            f"(got shape {idx.shape}); name them so they broadcast by name")
    moved = name_to_position(x, name, where="indexing by name")
    return engine.lift(_take_last, (moved, idx), {}, "indexing by name")


# Module-level, not lambdas: the eager kernel of a lifted function is keyed by the function object
def _getitem(a, idx):
    return a[idx]


def _take_last(a, i):
    return a[..., i]
