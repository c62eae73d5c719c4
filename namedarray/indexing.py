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

import jax.numpy as jnp
import numpy as np

from . import engine
from .array import NamedArray, _make
from .errors import AxisSpecError, fmt_names
from .wrapping import untag

__all__ = ["getitem"]


def _static_key(index: tuple):
    """A hashable form of an index made only of ints, slices, None and Ellipsis; None if it has arrays."""
    out = []
    for i in index:
        if i is None or i is Ellipsis:
            out.append(i)
        elif isinstance(i, slice):
            out.append(("slice", i.start, i.stop, i.step))
        elif isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            out.append(int(i))
        else:
            return None
    return tuple(out)


def _from_key(key: tuple) -> tuple:
    return tuple(slice(*k[1:]) if isinstance(k, tuple) else k for k in key)


def _consumed(i) -> int:
    if i is None or i is Ellipsis:
        return 0
    if hasattr(i, "dtype") and np.dtype(i.dtype) == np.bool_:
        return max(np.ndim(i), 1)
    return 1


def _storage_index(index: tuple, p: int, k: int) -> tuple:
    """Extend a positional index with full slices over the ``k`` named (trailing) storage axes."""
    used = sum(_consumed(i) for i in index)
    if used > p:
        raise IndexError(f"too many indices for the positional axes: {used} indices for {p} positional axes "
                         "(index named axes by name: x[{'name': i}])")
    if any(i is Ellipsis for i in index):
        at = next(j for j, i in enumerate(index) if i is Ellipsis)
        index = index[:at] + (slice(None),) * (p - used) + index[at + 1:]
    else:
        index = index + (slice(None),) * (p - used)
    return index + (slice(None),) * k


def _positional_impl(key, x):
    d = x.data
    k = len(x.names)
    return _make(d[_storage_index(_from_key(key), d.ndim - k, k)], x.names)


def getitem(x: NamedArray, index):
    if isinstance(index, Mapping):
        return _by_name(x, index)
    index = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, NamedArray) for i in index):
        return engine.lift(lambda a, idx: a[idx], (x, index), {}, "NamedArray.__getitem__")
    key = _static_key(index)
    if key is not None:
        return engine.run(_positional_impl, key, (x,))
    d = x.data
    k = len(x.names)
    return _make(d[_storage_index(index, d.ndim - k, k)], x.names)


def _by_name(x: NamedArray, index: Mapping):
    for name in index:
        if name not in x.names:
            raise AxisSpecError(f"indexing by name: the array has no axis {name!r} "
                                f"(it has {fmt_names(x.names) or 'no named axes'})")
    for name, i in index.items():
        if isinstance(i, NamedArray):
            x = _gather_by_name(x, name, i)
        else:
            x = _index_one(x, name, i)
    return x


def _index_one(x: NamedArray, name: str, i):
    d = x.data
    p = d.ndim - len(x.names)
    j = p + x.names.index(name)
    if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
        size = d.shape[j]
        if not -size <= int(i) < size:
            raise IndexError(f"index {int(i)} is out of bounds for axis {name!r} with size {size}")
        names = tuple(n for n in x.names if n != name)
    elif isinstance(i, slice):
        names = x.names
    else:
        i = jnp.asarray(i)
        if i.ndim > 1:
            raise AxisSpecError(f"indexing axis {name!r} by name takes an int, a slice, a 1-d index array or "
                                f"a NamedArray, got an array of shape {i.shape}")
        # a 0-d index (e.g. a traced loop counter) selects one element like an int: the axis goes
        names = x.names if i.ndim else tuple(n for n in x.names if n != name)
    return _make(d[(slice(None),) * j + (i,)], names)


def _gather_by_name(x: NamedArray, name: str, idx: NamedArray):
    if idx.shape:
        raise AxisSpecError(f"a NamedArray index for axis {name!r} must have no positional axes "
                            f"(got shape {idx.shape}); name them so they broadcast by name")
    moved = untag(x, name, where="indexing by name")
    return engine.lift(lambda a, i: a[..., i], (moved, idx), {}, "indexing by name")
