"""Indexing: positional indices act on positional axes; a dict indexes by name.

``x[0]``, ``x[..., 1:3]``, ``x[None]``, ``x[idx_array]`` follow NumPy on the positional axes only (an
``...`` never reaches the named axes). By name, ``x[{"batch": 0}]`` drops the axis (so does a 0-d integer
array, a traced loop counter for instance); ``x[{"batch": slice(0, 4)}]``, ``x[{"batch": [0, 2]}]`` and
``x[{"batch": nx.ds(i, 4)}]`` (a dynamic slice: a traced start, a static size) keep it; ``x[{"new": None}]``
adds a size-1 axis named ``new``.

A NamedArray index keeps its own axes: its names broadcast by name (a name the array also carries pairs the
two up, a name it lacks is a new axis of the result), and its positional axes are advanced-index axes, which
broadcast with the other index arrays by NumPy's rules. The named axes indexed by arrays that have
positional axes count as one group standing right after the array's positional axes: ``x[{"seq": idx}]`` with
``idx`` of positional shape ``(3,)`` puts that ``(3,)`` after ``x``'s positional axes, as NumPy's
``x_logical[..., idx]`` does (``x.at[...]`` follows the same rules).

``nx.nonzero``, one-argument ``nx.where`` and ``nx.argwhere`` enumerate the hits of a value with named axes
along a new named axis (``axis_name=``), in an order that does not depend on how the value stores its axes;
``size=`` and ``fill_value=`` make that axis static under ``jit``.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.arange(24).reshape(2, 3, 4), {0: "b"})
>>> x[..., 1:3].shape, x[{"b": 1}].named_shape, x[{"b": slice(0, 1)}].named_shape
((3, 2), {}, {'b': 1})
>>> x[{"new": None}].named_shape
{'b': 2, 'new': 1}
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import env as _env
from ..core.array import NamedArray, _make, to_storage
from ..core.layout import align, named_sizes, pos_ndim
from ..core.shape import check_name
from ..core.wrapping import name_to_position, position_to_name
from ..engine import dispatch as engine
from ..engine.arguments import call
from ..engine.registry import implements
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    PositionalMisuseError,
    RankError,
    fmt_names,
    no_axis,
)

__all__ = ["select", "ds", "dynamic_slice", "dynamic_update_slice", "nonzero", "where", "argwhere"]


class ds:
    """A dynamic slice: ``size`` consecutive elements from ``start``, for ``x[{"seq": nx.ds(i, 4)}]``.

    ``start`` may be traced (a loop counter under ``jit``); ``size`` is a static int. ``nx.ds(n)`` is
    ``nx.ds(0, n)``. As ``jax.lax.dynamic_slice`` does, a negative start counts from the end once, and the
    start is then clamped so that the window lies inside the axis: it never reads or writes out of bounds,
    and ``start + size`` past the end moves the window back (``nx.ds(8, 4)`` of a size-10 axis is elements
    6..9). A ``start`` with named axes slices each of its elements at its own start (the result carries its
    names).

    >>> import namedarray as nx, jax, jax.numpy as jnp
    >>> from namedarray.ops.indexing import ds
    >>> x = nx.wrap(jnp.arange(10), ["seq"])
    >>> jax.jit(lambda x, i: x[{"seq": ds(i, 4)}])(x, 3).unwrap(["seq"]).tolist()
    [3, 4, 5, 6]
    >>> x[{"seq": ds(8, 4)}].unwrap(["seq"]).tolist()  # clamped: the window stays inside the axis
    [6, 7, 8, 9]
    """

    __slots__ = ("start", "size")

    def __init__(self, start: Any, size: int | None = None):
        if size is None:
            start, size = 0, start
        try:
            size = operator.index(size)
        except TypeError:
            raise TypeError(f"nx.ds: size must be a static int, got {size!r}") from None
        if size < 0:
            raise AxisSizeError(f"nx.ds: size must be non-negative, got {size}")
        self.start = start
        self.size = size

    def __repr__(self) -> str:
        return f"ds({self.start!r}, {self.size})"


def _start(start: Any, where: str, axis: Any) -> Any:
    """A dynamic slice's start as an operand: a 0-d integer array, or a NamedArray with names (0-d
    positionally); ints become arrays so that a loop over starts reuses one kernel."""
    label = f"{where}: the start for axis {axis!r}" if axis is not None else f"{where}: a start"
    if isinstance(start, (bool, np.bool_)):
        raise TypeError(f"{label} must be an integer, got {start!r}")
    if isinstance(start, (int, np.integer)):
        return np.asarray(int(start), np.int32 if -2**31 <= int(start) < 2**31 else np.int64)
    if type(start) is NamedArray:
        if start.shape:
            raise AxisSpecError(f"{label} must have no positional axes (got shape {start.shape}); name them "
                                "to slice along each at its own start")
        if np.dtype(start.dtype).kind not in "iu":
            raise TypeError(f"{label} must be an integer, got dtype {start.dtype}")
        return start if start.names else start.data
    if not hasattr(start, "dtype") or np.dtype(start.dtype).kind not in "iu" or np.ndim(start) != 0:
        what = (f"an array of dtype {start.dtype} and shape {np.shape(start)}" if hasattr(start, "dtype")
                else repr(start))
        raise TypeError(f"{label} must be an integer scalar (traced is fine), got {what}")
    return start


def _storage_axis(x: NamedArray, axis: int | str, where: str) -> int:
    """The storage dimension of positional axis ``axis`` (an int) or of the name ``axis``."""
    p = pos_ndim(x)
    if isinstance(axis, str):
        if axis not in x.names:
            raise no_axis(where, axis, x.names)
        return p + x.names.index(axis)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise AxisSpecError(f"{where}: axes are names (strings) or positions (ints), got {axis!r}")
    if not -p <= axis < p:
        raise RankError(f"{where}: positional axis {axis} is out of range for {p} positional axes "
                        f"(shape {x.shape}{'; named axes ' + fmt_names(x.names) if x.names else ''})")
    return axis % p


def slice_window(x: NamedArray, window: Mapping[int | str, tuple[Any, int]], where: str) -> NamedArray:
    """``x`` sliced along each axis of ``window`` (a position or a name) to ``(start, size)``, with
    ``jax.lax.dynamic_slice``'s clamping. Starts with names slice each of their elements at its own start."""
    d = x.data
    starts, sizes = [0] * d.ndim, list(d.shape)
    named_starts = False
    for axis, (start, size) in window.items():
        j = _storage_axis(x, axis, where)
        if size > d.shape[j]:
            raise AxisSizeError(f"{where}: a dynamic slice of size {size} along axis {axis!r}, which has "
                                f"size {d.shape[j]}")
        start = _start(start, where, axis)
        named_starts = named_starts or type(start) is NamedArray
        starts[j], sizes[j] = start, size
    if not named_starts:
        return _make(jax.lax.dynamic_slice(d, starts, sizes), x.names)
    # vectorised over the starts' names: the named axes sliced become positional for the slice
    moved, axes, names = _to_positions(x, window)
    starts = tuple(_start(s, where, a) for a, (s, _) in window.items())
    out = engine.call_lifted(_dynamic_slice_at, (moved, starts),
                             {"axes": axes, "sizes": tuple(size for _, size in window.values())}, where)
    return _from_positions(out, names)


def put_window(x: NamedArray, update: NamedArray, starts: Mapping[int | str, Any], where: str) -> NamedArray:
    """``x`` with the window of ``update``'s shape at ``starts`` (clamped as ``jax.lax.dynamic_update_slice``
    does) replaced by ``update``, cast to ``x``'s dtype. The result carries the union of their names: ``x``
    is broadcast along names only ``update`` (or a start) carries."""
    names = x.names + tuple(n for n in update.names if n not in x.names)
    sizes = {**named_sizes(update), **named_sizes(x)}
    if pos_ndim(update) != pos_ndim(x):
        raise RankError(f"{where}: the update has {pos_ndim(update)} positional axes (shape {update.shape}) "
                        f"but the array has {pos_ndim(x)} (shape {x.shape}); they must have the same number")
    us = named_sizes(update)
    for n in x.names:
        if n in us and n not in starts and us[n] != sizes[n]:
            raise AxisSizeError(f"{where}: axis {n!r} has size {us[n]} in the update but size {sizes[n]} in "
                                "the array (give it a start to update a window of it)")
    for k, (su, sx) in enumerate(zip(update.shape, x.shape)):
        if k not in starts and k - len(x.shape) not in starts and su != sx:
            raise AxisSizeError(f"{where}: positional axis {k} has size {su} in the update but size {sx} in "
                                "the array (give it a start to update a window of it)")
    for axis in starts:
        if isinstance(axis, str) and axis not in us:
            raise AxisSpecError(f"{where}: the update has no axis {axis!r}, whose size is the window's "
                                f"(it has {fmt_names(update.names) or 'no named axes'})")
        j = _storage_axis(x, axis, where)
        size = us[axis] if isinstance(axis, str) else update.shape[j]
        if size > x.data.shape[j]:
            raise AxisSizeError(f"{where}: an update of size {size} along axis {axis!r}, which has size "
                                f"{x.data.shape[j]}")
    checked = {a: _start(s, where, a) for a, s in starts.items()}
    if not any(type(s) is NamedArray for s in checked.values()):
        full = _make(align(x, names, sizes), names)
        u = align(update, names, {**sizes, **us})
        index = [0] * full.data.ndim
        for axis, s in checked.items():
            index[_storage_axis(full, axis, where)] = s
        return _make(jax.lax.dynamic_update_slice(full.data, u.astype(x.dtype), index), names)
    moved, axes, moved_names = _to_positions(x, starts)
    moved_update, _, _ = _to_positions(update, starts)
    out = engine.call_lifted(_dynamic_update_slice_at, (moved, moved_update, tuple(checked.values())),
                             {"axes": axes}, where)
    return _from_positions(out, moved_names)


def _to_positions(x: NamedArray, axes: Mapping[int | str, Any]) -> tuple[NamedArray, tuple[int, ...], tuple]:
    """``x`` with the names among ``axes`` moved after its positional axes, their positional indices (ints
    in ``axes`` normalised), and the names moved (in the order moved)."""
    p = pos_ndim(x)
    names = tuple(a for a in axes if isinstance(a, str))
    for n in names:
        x = name_to_position(x, n, where="a dynamic slice")
    return x, tuple(p + names.index(a) if isinstance(a, str) else a % p for a in axes), names


def _from_positions(x: NamedArray, names: tuple[str, ...]) -> NamedArray:
    """The inverse of :func:`_to_positions`: the last ``len(names)`` positional axes named ``names``."""
    p = pos_ndim(x) - len(names)
    for n in names:
        x = position_to_name(x, p, n, where="a dynamic slice")
    return x


# Module-level, not lambdas: the eager kernel of a lifted function is keyed by the function object
def _dynamic_slice_at(a, starts, *, axes, sizes):
    full_starts, full_sizes = [0] * a.ndim, list(a.shape)
    for j, s, n in zip(axes, starts, sizes):
        full_starts[j], full_sizes[j] = s, n
    return jax.lax.dynamic_slice(a, full_starts, full_sizes)


def _dynamic_update_slice_at(a, u, starts, *, axes):
    index = [0] * a.ndim
    for j, s in zip(axes, starts):
        index[j] = s
    return jax.lax.dynamic_update_slice(a, u.astype(a.dtype), index)


def _as_axis_map(x: NamedArray, spec: Any, what: str, where: str) -> dict:
    """``{axis: value}`` from a mapping (names and positions) or a sequence over every positional axis."""
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence):
        raise TypeError(f"{where}: {what} must be a dict {{axis: value}} (axis names or positions) or a "
                        f"sequence with one value per positional axis, got {spec!r}")
    if len(spec) != len(x.shape):
        raise RankError(f"{where}: {what} has {len(spec)} entries for {len(x.shape)} positional axes (shape "
                        f"{x.shape}); index named axes with a dict {{name: value}}")
    return dict(enumerate(spec))


def dynamic_slice(x: Any, start_indices: Any, slice_sizes: Any, *, fill_value: Any = None) -> Any:
    """``jax.lax.dynamic_slice`` by name: ``nx.dynamic_slice(x, {"seq": i}, {"seq": 4})``.

    ``start_indices`` and ``slice_sizes`` are dicts with the same keys: axis names and positional axes
    (ints); a sequence means one entry per positional axis, as in ``jax.lax``. Starts may be traced; sizes
    are static. As in ``jax.lax.dynamic_slice``, a negative start counts from the end once and the start is
    then clamped so that the window lies inside the axis (no out-of-bounds reads, no error). Axes not given
    are kept whole. A start with named axes slices each of its elements at its own start. The same as
    ``x[{"seq": nx.ds(i, 4)}]``.

    With ``fill_value`` (a number), the window is not clamped: it starts exactly at ``start`` (a negative
    start reaches before the first element) and its elements outside the axis are ``fill_value``, as a
    sliding window over a padded sequence reads them.

    >>> import namedarray as nx, jax, jax.numpy as jnp
    >>> from namedarray.ops.indexing import dynamic_slice
    >>> x = nx.wrap(jnp.arange(12).reshape(3, 4), ["b", "seq"])
    >>> f = jax.jit(lambda x, i: dynamic_slice(x, {"seq": i}, {"seq": 2}))
    >>> f(x, 1).unwrap(["b", "seq"]).tolist()
    [[1, 2], [5, 6], [9, 10]]
    >>> dynamic_slice(x, {"seq": -1}, {"seq": 3}, fill_value=-1).unwrap(["b", "seq"])[0].tolist()
    [-1, 0, 1]
    """
    where = "nx.dynamic_slice"
    fill = _fill_value(fill_value, where)
    if type(x) is not NamedArray:
        if isinstance(start_indices, Mapping) or isinstance(slice_sizes, Mapping):
            raise TypeError(f"{where}: axes by name need a NamedArray, got {type(x).__name__}")
        if fill is not None:  # by position: the named path, on a value without names
            x = _make(call(jnp.asarray, (x,), {}, where), ())
            return dynamic_slice(x, start_indices, slice_sizes, fill_value=fill).data
        return call(jax.lax.dynamic_slice, (x, start_indices, slice_sizes), {}, where)
    starts = _as_axis_map(x, start_indices, "start_indices", where)
    sizes = _as_axis_map(x, slice_sizes, "slice_sizes", where)
    if set(starts) != set(sizes):
        odd = sorted(map(repr, set(starts) ^ set(sizes)))
        raise AxisSpecError(f"{where}: start_indices and slice_sizes must give the same axes; only one of "
                            f"them gives {', '.join(odd)}")
    window = {}
    for axis, start in starts.items():
        try:
            size = operator.index(sizes[axis])
        except TypeError:
            raise TypeError(f"{where}: slice_sizes[{axis!r}] must be a static int, got "
                            f"{sizes[axis]!r}") from None
        if size < 0:
            raise AxisSizeError(f"{where}: slice_sizes[{axis!r}] must be non-negative, got {size}")
        window[axis] = (_start(start, where, axis), size)
    axes = tuple(window)
    static = (axes, tuple(s for _, s in window.values()), where, fill)
    return engine.run(_dynamic_slice_impl, static, (x, *[s for s, _ in window.values()]))


def _fill_value(v: Any, where: str) -> Any:
    """A static fill value: a Python number (it keys the kernel cache), or None."""
    if v is None:
        return None
    if isinstance(v, np.ndarray | np.generic) and np.ndim(v) == 0:
        v = v.item()
    if not isinstance(v, bool | int | float | complex):
        raise TypeError(f"{where}: fill_value must be a number (static), got {v!r}")
    return v


def _padded(x: NamedArray, window: dict, fill: Any, where: str) -> tuple[NamedArray, dict]:
    """``x`` padded with ``fill`` by each window's size on both sides, and the starts moved to match.

    Starts are clipped to ``[-size, n]`` first: every window starting further out reads only padding, and
    after the shift every window lies inside the padded axis, so ``dynamic_slice``'s clamping never moves it.
    """
    d = x.data
    widths = [(0, 0)] * d.ndim
    moved = {}
    for axis, (start, size) in window.items():
        j = _storage_axis(x, axis, where)
        widths[j] = (size, size)
        n = d.shape[j]
        if type(start) is NamedArray:
            start = _make(jnp.clip(start.data, -size, n) + size, start.names)
        else:
            start = jnp.clip(start, -size, n) + size
        moved[axis] = (start, size)
    return _make(jnp.pad(d, widths, constant_values=jnp.asarray(fill, d.dtype)), x.names), moved


def _dynamic_slice_impl(static, x, *starts):
    axes, sizes, where, fill = static
    window = dict(zip(axes, zip(starts, sizes)))
    if fill is not None:
        for axis, (_, size) in window.items():  # before padding: the size check names the axis's own size
            if size > x.data.shape[_storage_axis(x, axis, where)]:
                raise AxisSizeError(f"{where}: a dynamic slice of size {size} along axis {axis!r}, which has "
                                    f"size {x.data.shape[_storage_axis(x, axis, where)]}")
        x, window = _padded(x, window, fill, where)
    return slice_window(x, window, where)


def dynamic_update_slice(x: Any, update: Any, start_indices: Any) -> Any:
    """``jax.lax.dynamic_update_slice`` by name: ``x`` with the window at ``start_indices`` replaced by
    ``update``.

    ``start_indices`` is a dict of axis names and positional axes (ints), or a sequence with one start per
    positional axis. The window's size along each axis given is ``update``'s size along it (so ``update``
    must carry each name given); along the others the update covers the whole axis (a name it lacks
    broadcasts). ``update`` is cast to ``x``'s dtype; names only ``update`` or a start carries broadcast
    ``x`` (the result has the union of the names). Starts are clamped as in ``jax.lax``: the window always
    lies inside the axis.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> from namedarray.ops.indexing import dynamic_update_slice
    >>> cache = nx.zeros({"b": 2, "seq": 4})
    >>> step = nx.wrap(jnp.array([[1.0], [2.0]]), ["b", "seq"])
    >>> dynamic_update_slice(cache, step, {"seq": 2}).unwrap(["b", "seq"]).tolist()
    [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 2.0, 0.0]]
    """
    where = "nx.dynamic_update_slice"
    if type(x) is not NamedArray:
        if isinstance(start_indices, Mapping) or type(update) is NamedArray:
            raise TypeError(f"{where}: axes by name need a NamedArray, got {type(x).__name__}")
        return call(jax.lax.dynamic_update_slice, (x, update, start_indices), {}, where)
    if type(update) is not NamedArray:
        update = _make(to_storage(update, where, "update"), ())
    starts = _as_axis_map(x, start_indices, "start_indices", where)
    axes = tuple(starts)
    operands = [_start(s, where, a) for a, s in starts.items()]
    return engine.run(_dynamic_update_slice_impl, (axes, where), (x, update, *operands))


def _dynamic_update_slice_impl(static, x, update, *starts):
    axes, where = static
    return put_window(x, update, dict(zip(axes, starts)), where)


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


def _check_used(index: tuple, p: int) -> None:
    used = sum(_consumed(i) for i in index)
    if used > p:
        raise IndexError(f"too many indices for the positional axes: {used} indices for {p} positional axes "
                         "(index named axes by name: x[{'name': i}])")
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")


def _positional_take(d, index: tuple, p: int, k: int):
    """``d[index]`` with ``index`` acting on the ``p`` positional axes only, by NumPy's rules.

    The ``k`` named (trailing) storage axes get full slices after an ellipsis, which jax expands over the
    positional axes the index leaves; as in NumPy, an ellipsis still separates the advanced indices on either
    side of it when it expands to nothing.
    """
    _check_used(index, p)
    ellipses = [j for j, i in enumerate(index) if i is Ellipsis]
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


def _positional_windows(x: NamedArray, index: tuple) -> tuple[NamedArray, tuple]:
    """The ``nx.ds`` entries of a positional index applied as dynamic slices (each then a full slice)."""
    p = pos_ndim(x)
    _check_used(index, p)
    at = next((j for j, i in enumerate(index) if i is Ellipsis), len(index))
    window = {}
    for j, i in enumerate(index):
        if isinstance(i, ds):
            axis = (sum(_consumed(b) for b in index[:j]) if j < at
                    else p - sum(_consumed(b) for b in index[j:]))
            window[axis] = (i.start, i.size)
    x = slice_window(x, window, "x[...]")
    return x, tuple(slice(None) if isinstance(i, ds) else i for i in index)


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
    if any(isinstance(i, ds) for i in index):
        x, index = _positional_windows(x, index)
    if any(isinstance(i, NamedArray) for i in index):
        index = tuple(_named_index(i) for i in index)
    if any(isinstance(i, NamedArray) for i in index):
        return engine.call_lifted(_getitem, (x, index), {}, "NamedArray.__getitem__")
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
    where = "indexing by name"
    new = []
    for name, i in index.items():
        if i is None:
            check_name(name, where)
            if name in x.names:
                raise DuplicateAxisError(f"indexing axis {name!r} by name takes {_BY_NAME_HELP}, got None, "
                                         f"which adds a new axis {name!r}: the array already has one")
            new.append(name)
        elif name not in x.names:
            raise no_axis(where, name, x.names)
    # inside nx.shard_map a slice of a split name cuts each device's block (the result is still blocks of
    # it, side by side); other indices would need the whole axis
    whole = [n for n, i in index.items() if not isinstance(i, slice) and i is not None]
    _env.current().require_whole(whole, where)
    gathers, window = [], {}
    for name, i in index.items():
        if i is None:
            continue
        if isinstance(i, ds):
            window[name] = (i.start, i.size)
            continue
        if isinstance(i, NamedArray) and not (i.names == () and np.dtype(i.dtype) == np.bool_):
            _named_index(i)  # raises for a boolean NamedArray with names
            twice = [m for m in i.names if m in index and m != name]
            if twice:
                raise AxisSpecError(f"{where}: a NamedArray index carries axis {fmt_names(twice)}, which the "
                                    "index also selects along; select along each axis once")
            gathers.append((name, i))
            continue
        x = _index_one(x, name, _named_index(i))
    if window:
        x = slice_window(x, window, where)
    if gathers:
        x = _gather_by_name(x, gathers)
    if new:
        d = x.data
        x = _make(jax.lax.expand_dims(d, tuple(range(d.ndim, d.ndim + len(new)))), x.names + tuple(new))
    return x


_BY_NAME_HELP = ("an int, a slice, nx.ds(start, size), None, a 1-d integer or boolean index array or a "
                 "NamedArray")


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


def _gather_by_name(x: NamedArray, gathers: list[tuple[str, NamedArray]]) -> NamedArray:
    """``x`` indexed along several names at once by NamedArrays: each name moves after the positional axes,
    and one lifted ``a[..., i1, i2, ...]`` broadcasts the indices' positional axes together (NumPy's rule
    for adjacent index arrays) and their names by name."""
    for name, idx in gathers:
        if np.dtype(idx.dtype).kind not in "iu":
            raise AxisSpecError(f"indexing axis {name!r} by name takes {_BY_NAME_HELP}, got a NamedArray of "
                                f"dtype {idx.dtype}")
    moved = x
    for name, _ in gathers:
        moved = name_to_position(moved, name, where="indexing by name")
    return engine.call_lifted(_take_last, (moved, tuple(idx for _, idx in gathers)), {}, "indexing by name")


# Module-level, not lambdas: the eager kernel of a lifted function is keyed by the function object
def _getitem(a, idx):
    return a[idx]


def _take_last(a, idx):
    return a[(Ellipsis, *idx)]


# --------------------------------------------------------------------------------------------------------
# Where the elements are non-zero, along a new named axis


def _hits(a: NamedArray, size, fill_value, axis_name, order, where: str):
    """(the axes in enumeration order: positions then names, the index array of each along the hits)."""
    check_name(axis_name, where)
    if axis_name in a.names:
        raise DuplicateAxisError(f"{where}: axis_name {axis_name!r} is already an axis of the array (it has "
                                 f"{fmt_names(a.names)}); choose a new name for the hits")
    if order is None:
        names = tuple(sorted(a.names))
    else:
        names = (order,) if isinstance(order, str) else tuple(order)
        if sorted(names) != sorted(a.names):
            raise AxisSpecError(f"{where}: order must list each named axis of the array once (it has "
                                f"{fmt_names(a.names)}), got {fmt_names(names)}")
    keys = tuple(range(pos_ndim(a))) + names
    if size is None and isinstance(a.data, jax.core.Tracer):
        raise TypeError(f"{where}: under jit the number of hits must be static: pass size= (and fill_value= "
                        "for the padding, 0 by default)")
    if isinstance(fill_value, Mapping):
        unknown = [k for k in fill_value if k not in keys]
        if unknown:
            raise AxisSpecError(f"{where}: fill_value gives axes {', '.join(map(repr, unknown))} that the "
                                f"array lacks (it has {', '.join(map(repr, keys))})")
        fill_value = tuple(fill_value.get(k, 0) for k in keys)
    elif isinstance(fill_value, (tuple, list)) and a.names:
        raise TypeError(f"{where}: fill_value for an array with named axes is a scalar or a dict "
                        "{axis: value} (names and positions), not a sequence")
    d = align(a, names) if a.names else a.data
    if d.ndim == 0:
        raise RankError(f"{where}: the array has no axes; nothing to enumerate")
    return keys, jnp.nonzero(d, size=size, fill_value=fill_value)


@implements(jnp.nonzero)
def nonzero(a: Any, *, size: int | None = None, fill_value: Any = None, axis_name: str | None = None,
            order: Sequence[str] | None = None) -> Any:
    """``nx.nonzero`` gives the positions of the non-zero elements along a new named axis ``axis_name``.

    With ``axis_name``, the result is a dict with one NamedArray over ``{axis_name: hits}`` per named axis
    of ``a``, keyed by its name, so that gathering by name lines up: ``a[result]`` holds the non-zero
    values. (An array without names gives a dict keyed by position; one with positional axes besides its
    names is an error: name them first, or take :func:`argwhere`, whose coordinates cover both.) Hits are
    enumerated in row-major order over the named axes taken in ``order`` (default: sorted names), whatever
    order ``a`` stores them in. Under ``jit`` give ``size=`` (the number of hits kept, padded with
    ``fill_value``: a scalar or a dict by axis, default 0).
    Without ``axis_name``, an array without names gives ``jax.numpy.nonzero``'s tuple (of NamedArrays
    without names for a NamedArray), and one with names is an error (its hits need a name).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> from namedarray.ops.indexing import nonzero
    >>> x = nx.wrap(jnp.array([[0, 5], [7, 0]]), ["a", "b"])
    >>> hits = nonzero(x, axis_name="nz")
    >>> {k: v.unwrap(["nz"]).tolist() for k, v in hits.items()}
    {'a': [0, 1], 'b': [1, 0]}
    >>> x[hits].unwrap(["nz"]).tolist()  # the values, gathered by name
    [5, 7]
    """
    return _nonzero(a, size, fill_value, axis_name, order, "nx.nonzero")


def _nonzero(a, size, fill_value, axis_name, order, where: str):
    if type(a) is not NamedArray or (not a.names and axis_name is None):
        if order is not None:
            raise TypeError(f"{where}: order= orders named axes; give axis_name= too")
        if type(a) is not NamedArray:
            return call(jnp.nonzero, (a,), {"size": size, "fill_value": fill_value}, where)
        return tuple(_make(o, ()) for o in jnp.nonzero(a.data, size=size, fill_value=fill_value))
    if axis_name is None:
        raise PositionalMisuseError(
            f"{where}: the hits of an array with named axes {fmt_names(a.names)} lie along a new axis: name "
            f"it with axis_name= (e.g. {where}(x, axis_name='nz', size=k)), or unwrap the names first")
    if a.names and a.shape:
        raise PositionalMisuseError(
            f"{where}: the array has positional axes (shape {a.shape}) besides its named axes "
            f"{fmt_names(a.names)}; the hits are keyed by name, so name the positional axes first "
            "(x.tag(...)), or take nx.argwhere, whose coordinates cover both")
    keys, out = _hits(a, size, fill_value, axis_name, order, where)
    return {k: _make(o, (axis_name,)) for k, o in zip(keys, out)}


@implements(jnp.where)
def where(condition: Any, x: Any = None, y: Any = None, /, *, size: int | None = None, fill_value: Any = None,
          axis_name: str | None = None, order: Sequence[str] | None = None) -> Any:
    """``nx.where(condition, x, y)`` works elementwise and broadcasts by name; ``nx.where(condition)`` is
    :func:`nonzero`.

    The three-argument form's result carries every name of its operands (one size per name), and positional
    axes broadcast by NumPy's rules. The one-argument form takes ``size``, ``fill_value``, ``axis_name`` and
    ``order`` as :func:`nonzero` does.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> from namedarray.ops.indexing import where
    >>> m = nx.wrap(jnp.array([True, False, True]), ["k"])
    >>> where(m, 1.0, 0.0).unwrap(["k"]).tolist(), where(m, axis_name="hit")["k"].unwrap(["hit"]).tolist()
    ([1.0, 0.0, 1.0], [0, 2])
    """
    if x is None and y is None:
        return _nonzero(condition, size, fill_value, axis_name, order, "nx.where")
    if x is None or y is None:
        raise TypeError("nx.where: give both x and y, or neither (nx.where(condition) is nx.nonzero)")
    if axis_name is not None or order is not None:
        raise TypeError("nx.where: axis_name= and order= belong to the one-argument form nx.where(condition)")
    return engine.elementwise(jnp.where, (condition, x, y), "nx.where")


@implements(jnp.argwhere)
def argwhere(a: Any, *, size: int | None = None, fill_value: Any = None, axis_name: str | None = None,
             coord_name: str | None = None, order: Sequence[str] | None = None) -> Any:
    """``nx.argwhere`` gives the coordinates of the non-zero elements along a new named axis ``axis_name``.

    The result has the hits along ``axis_name`` and one coordinate per axis of ``a`` along a coordinate
    axis: positional (the default, as in ``jax.numpy.argwhere``'s second axis) or named ``coord_name``.
    Coordinates come in the enumeration order of :func:`nonzero`: the positional axes, then the named axes
    in ``order`` (default: sorted); ``size=`` and ``fill_value=`` (a scalar or a dict by axis) as there.
    Without ``axis_name``, an array without names gives ``jax.numpy.argwhere``'s array (a NamedArray
    without names for a NamedArray).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> from namedarray.ops.indexing import argwhere
    >>> x = nx.wrap(jnp.array([[0, 5], [7, 0]]), ["a", "b"])
    >>> argwhere(x, axis_name="nz", coord_name="axis").unwrap(["nz", "axis"]).tolist()
    [[0, 1], [1, 0]]
    """
    where_ = "nx.argwhere"
    if type(a) is not NamedArray or (not a.names and axis_name is None):
        if order is not None or coord_name is not None:
            raise TypeError(f"{where_}: order= and coord_name= go with axis_name=")
        if type(a) is not NamedArray:
            return call(jnp.argwhere, (a,), {"size": size, "fill_value": fill_value}, where_)
        return _make(jnp.argwhere(a.data, size=size, fill_value=fill_value), ())
    if axis_name is None:
        raise PositionalMisuseError(
            f"{where_}: the hits of an array with named axes {fmt_names(a.names)} lie along a new axis: name "
            f"it with axis_name= (e.g. {where_}(x, axis_name='nz', size=k)), or unwrap the names first")
    if coord_name is not None:
        check_name(coord_name, where_)
        if coord_name == axis_name or coord_name in a.names:
            raise DuplicateAxisError(f"{where_}: coord_name {coord_name!r} must differ from axis_name and "
                                     f"from the array's axes ({fmt_names(a.names)})")
    _, out = _hits(a, size, fill_value, axis_name, order, where_)
    coords = jnp.stack(out, 0)  # (coordinate, hit)
    return _make(coords, (axis_name,) if coord_name is None else (coord_name, axis_name))
