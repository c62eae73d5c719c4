"""Operations whose axis argument can create, join, select, pad or tile along a *name*: concatenate, stack,
take, pad, tile.

Each one moves the named axis to a positional slot (``untag``), applies the positional jax function lifted
over the other names, and names the axis again (``tag``), inside one engine kernel.

>>> import namedarray as nx, jax.numpy as jnp
>>> a = nx.wrap(jnp.ones((2, 3)), ["t", "f"])
>>> nx.concatenate([a, a], axis="t").named_shape
{'f': 3, 't': 4}
>>> nx.stack([a, a], axis="layer").named_shape
{'f': 3, 'layer': 2, 't': 2}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from ..core import env as _env
from ..core import placement
from ..core.array import NamedArray, _make, as_storage
from ..core.wrapping import name_to_position, position_to_name
from ..engine import dispatch as engine
from ..engine.arguments import call
from ..engine.docstrings import follows_arguments
from ..engine.registry import implements
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    PositionalAxisError,
    fmt_names,
    no_axis,
    not_an_array,
    wrong_type,
)

__all__ = ["concatenate", "concat", "stack", "take", "append", "pad", "tile"]


def _sequence(arrays: Any, where: str) -> tuple:
    """The operands to join, as a tuple; a TypeError naming ``arrays`` (or the element) when they are not a
    sequence of arrays (None, a number, a string, a set, whose order is arbitrary)."""
    if arrays is None or isinstance(arrays, (str, bytes, Mapping, set, frozenset)):
        raise wrong_type(where, "arrays", arrays, "a sequence of arrays")
    try:
        items = tuple(arrays)
    except TypeError:
        raise wrong_type(where, "arrays", arrays, "a sequence of arrays") from None
    for i, a in enumerate(items):
        if a is None or isinstance(a, (str, bytes, Mapping, set, frozenset)):
            raise not_an_array(where, f"arrays[{i}]", a)
    return items


def _require_named(arrays, name, where):
    for i, a in enumerate(arrays):
        if not isinstance(a, NamedArray) or name not in a.names:
            have = fmt_names(a.names) if isinstance(a, NamedArray) else "no names"
            raise AxisSpecError(f"{where}: joining along axis {name!r}, but argument {i} does not carry it "
                                f"(it has {have})")
        if a.shape != arrays[0].shape:  # checked here: jnp's message would count the moved axis
            raise AxisSizeError(
                f"{where}: joining along axis {name!r}, the positional shapes must agree, but argument 0 has "
                f"shape {arrays[0].shape} and argument {i} has shape {a.shape}")


def _concat_impl(static, *arrays):
    name, dtype, where = static
    moved = [name_to_position(a, name, where=where) for a in arrays]
    out = engine.call_lifted(lambda *xs: jnp.concatenate(xs, axis=-1, dtype=dtype), tuple(moved), {}, where)
    return position_to_name(out, -1, name, where)


@follows_arguments
@implements(jnp.concatenate)
def concatenate(arrays: Sequence[NamedArray | ArrayLike], axis: int | str | None = 0,
                dtype: DTypeLike | None = None) -> NamedArray | jax.Array:
    """``jnp.concatenate`` where ``axis`` may be a name every operand carries; other names broadcast.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3), ["t"])
    >>> nx.concatenate([x, x], axis="t").unwrap(["t"]).tolist()
    [0, 1, 2, 0, 1, 2]
    """
    return _concatenate(arrays, axis, dtype, "nx.concatenate")


def _concatenate(arrays: Any, axis: int | str | None, dtype: Any, where: str) -> Any:
    arrays = _sequence(arrays, where)
    if isinstance(axis, str):
        _require_named(arrays, axis, where)
        return engine.run(_concat_impl, (axis, dtype, where), arrays)
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        for i, a in enumerate(arrays):
            if type(a) is NamedArray and a.names and not -a.ndim <= axis < a.ndim:
                raise PositionalAxisError(
                    f"{where}: axis={axis} counts positional axes, and argument {i} has "
                    f"{a.ndim or 'none'} (positional shape {a.shape}, named axes {fmt_names(a.names)}). To "
                    f"join along a name, give it: axis={a.names[0]!r}")
    return engine.call_lifted(jnp.concatenate, (arrays,), {"axis": axis, "dtype": dtype}, where)


@follows_arguments
@implements(jnp.concat)
def concat(arrays: Sequence[NamedArray | ArrayLike], /, *,
           axis: int | str | None = 0) -> NamedArray | jax.Array:
    """Array-API spelling of :func:`concatenate`.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.concat([nx.wrap(jnp.zeros(2), ["t"]), nx.wrap(jnp.ones(3), ["t"])], axis="t").named_shape
    {'t': 5}
    """
    return _concatenate(arrays, axis, None, "nx.concat")


@follows_arguments
@implements(jnp.append)
def append(arr: NamedArray | ArrayLike, values: NamedArray | ArrayLike,
           axis: int | str | None = None) -> NamedArray | jax.Array:
    """``jnp.append``; with a named ``axis``, :func:`concatenate` of the two along that name.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.append(nx.wrap(jnp.zeros(2), ["t"]), nx.wrap(jnp.ones(1), ["t"]), axis="t").unwrap(["t"]).tolist()
    [0.0, 0.0, 1.0]
    """
    if isinstance(axis, str):
        return concatenate([arr, values], axis=axis)
    return engine.call_lifted(jnp.append, (arr, values), {"axis": axis}, "nx.append")


def _stack_impl(static, *arrays):
    name, dtype, where = static
    out = engine.call_lifted(lambda *xs: jnp.stack(xs, axis=-1, dtype=dtype), arrays, {}, where)
    if not isinstance(out, NamedArray):  # every operand was positional: nothing was lifted
        out = _make(out, ())
    return position_to_name(out, -1, name, where)


# a NamedArray when an operand has names or the new axis is named, else jnp.stack's
@overload
def stack(arrays: Sequence[NamedArray | ArrayLike], axis: str, out: None = None,
          dtype: DTypeLike | None = None) -> NamedArray: ...
@overload
def stack(arrays: Sequence[NamedArray], axis: int | str = 0, out: None = None,
          dtype: DTypeLike | None = None) -> NamedArray: ...
@overload
def stack(arrays: Sequence[ArrayLike], axis: int = 0, out: None = None,
          dtype: DTypeLike | None = None) -> jax.Array: ...
@overload
def stack(arrays: Sequence[NamedArray | ArrayLike], axis: int | str = 0, out: None = None,
          dtype: DTypeLike | None = None) -> NamedArray: ...


@implements(jnp.stack)
def stack(arrays: Sequence[NamedArray | ArrayLike], axis: int | str = 0, out: None = None,
          dtype: DTypeLike | None = None) -> NamedArray | jax.Array:
    """``jnp.stack``; a name for ``axis`` stacks along a new named axis.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.stack([jnp.zeros(2), jnp.ones(2)], axis="layer").named_shape
    {'layer': 2}
    """
    arrays = _sequence(arrays, "nx.stack")
    if isinstance(axis, str):
        for i, a in enumerate(arrays):
            if isinstance(a, NamedArray) and axis in a.names:
                raise DuplicateAxisError(f"nx.stack: argument {i} already has an axis {axis!r}")
        _env.current().require_whole((axis,), "nx.stack")  # a split name is blocks, not a new axis
        return engine.run(_stack_impl, (axis, dtype, "nx.stack"), arrays)
    return engine.call_lifted(jnp.stack, (arrays,), {"axis": axis, "dtype": dtype}, "nx.stack")


def _lookup_by_name(a: NamedArray, name: str, indices: NamedArray, mode: Any, fill_value: Any) -> NamedArray:
    """An embedding lookup: ``a`` along ``name`` at named ``indices``, as ONE gather whose result is laid out
    as positional code's ``table[indices]``: the indices' axes, then ``a``'s other axes (no transpose of the
    table or of the result, whatever order the table is stored in)."""
    p = engine.pos_ndim(a)
    ax = p + a.names.index(name)
    n = a.data.shape[ax]
    idx = indices.data
    if mode == "wrap":
        idx, gmode = idx % n, lax.GatherScatterMode.PROMISE_IN_BOUNDS
    elif mode == "clip":
        gmode = lax.GatherScatterMode.CLIP
    else:  # as jnp.take: negative indices count from the end, the rest out of range give fill_value
        idx, gmode = jnp.where(idx < 0, idx + n, idx), lax.GatherScatterMode.FILL_OR_DROP
    k = idx.ndim
    # positional axes of `a` first, then the indices' names, then a's other names
    dnums = lax.GatherDimensionNumbers(offset_dims=tuple(range(p)) + tuple(range(p + k, a.data.ndim - 1 + k)),
                                       collapsed_slice_dims=(ax,), start_index_map=(ax,))
    sizes = tuple(1 if i == ax else a.data.shape[i] for i in range(a.data.ndim))
    names = indices.names + tuple(m for m in a.names if m != name)
    # on Explicit mesh axes JAX asks for the layout of a gather from split values: by name it is known
    a_labels = [("p", i) for i in range(p)] + [("n", m) for m in a.names]
    out_labels = [("p", i) for i in range(p)] + [("n", m) for m in names]
    idx_labels = [("n", m) for m in indices.names]
    out_sharding = placement.gather_sharding((a.data, idx), (a_labels, idx_labels), out_labels,
                                             {("n", m): m for m in names}, _env.current().mapping())
    gather = placement.with_layout(lambda d, i: lax.gather(d, i[..., None], dnums, sizes, mode=gmode,
                                                           fill_value=fill_value), out_sharding)
    return _make(gather(a.data, idx), names)


def _take_impl(static, a, indices):
    name, mode, fill_value, where = static
    if (type(indices) is NamedArray and not indices.shape and not set(indices.names) & set(a.names)
            and mode in (None, "fill", "clip", "wrap")):
        return _lookup_by_name(a, name, indices, mode, fill_value)
    moved = name_to_position(a, name, where=where)
    out = engine.call_lifted(lambda x, i: jnp.take(x, i, axis=-1, mode=mode, fill_value=fill_value),
                             (moved, indices), {}, where)
    rank = len(indices.shape) if hasattr(indices, "shape") else 0
    return position_to_name(out, -1, name, where) if rank == 1 else out


@follows_arguments
@implements(jnp.take)
def take(a: NamedArray | ArrayLike, indices: NamedArray | ArrayLike, axis: int | str | None = None,
         out: None = None,
         mode: Any = None, unique_indices: bool = False, indices_are_sorted: bool = False,
         fill_value: Any = None) -> NamedArray | jax.Array:
    """``jnp.take``; along a named ``axis``, a 1-d index keeps the name (resized), a scalar drops it.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(4) * 10, ["t"])
    >>> nx.take(x, jnp.array([3, 0]), axis="t").unwrap(["t"]).tolist()
    [30, 0]
    """
    if isinstance(axis, str) and isinstance(a, NamedArray):
        if axis not in a.names:
            raise no_axis("nx.take", axis, a.names)
        _env.current().require_whole((axis,), "nx.take")
        if not isinstance(indices, NamedArray):
            indices = as_storage(indices)  # a nested list counts by its rank too
        if len(indices.shape) > 1:
            raise AxisSpecError(f"nx.take along name {axis!r}: indices must be a scalar or 1-d (got shape "
                                f"{indices.shape}); name their axes and pass a NamedArray to gather by name")
        return engine.run(_take_impl, (axis, mode, fill_value, "nx.take"), (a, indices))
    return engine.call_lifted(jnp.take, (a, indices),
                              dict(axis=axis, mode=mode, unique_indices=unique_indices,
                                   indices_are_sorted=indices_are_sorted, fill_value=fill_value), "nx.take")


def _pad_impl(static, x):
    widths, mode, kwargs = static
    return _make(jnp.pad(x.data, widths, mode, **dict(kwargs)), x.names)


def _width(w: Any, axis: Any, where: str) -> tuple[int, int]:
    if isinstance(w, (int, np.integer)) and not isinstance(w, bool):
        pair = (w, w)
    elif np.ndim(w) == 1 and not isinstance(w, str):
        pair = tuple(np.asarray(w).tolist())
    else:
        pair = ()
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0
                             for v in pair):
        raise AxisSpecError(f"{where}: the pad width of axis {axis!r} must be an int or a pair "
                            f"(before, after) of non-negative ints, got {w!r}")
    return int(pair[0]), int(pair[1])


@follows_arguments
@implements(jnp.pad)
def pad(array: NamedArray | ArrayLike, pad_width: Any, mode: Any = "constant",
        **kwargs: Any) -> NamedArray | jax.Array:
    """``jnp.pad``, where ``pad_width`` may also be a mapping ``{axis: width}`` whose keys are names or
    positions, each width an int or a pair ``(before, after)``; the axes it leaves out are not padded, and
    the padded names keep their names (with larger sizes).

    A ``pad_width`` that is not a mapping counts positional axes, as ``jnp.pad``'s does (lifted over the
    names); on a value whose axes are all named it would pad nothing, so it is an error there (outside
    ``nx.xmap`` bodies, whose values are per-element).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((2, 3)), ["seq", "embed"])
    >>> nx.pad(x, {"seq": (1, 0)}).named_shape
    {'embed': 3, 'seq': 3}
    >>> nx.pad(x, {"seq": (1, 0)}).unwrap(["seq", "embed"])[:, 0].tolist()
    [0.0, 1.0, 1.0]
    """
    where = "nx.pad"
    if not isinstance(array, NamedArray):
        if isinstance(pad_width, Mapping):
            raise AxisSpecError(f"{where}: pad_width maps axes {list(pad_width)!r}, but the array has no "
                                "names; give widths by position (a sequence), as jnp.pad takes them")
        return call(jnp.pad, (array, pad_width, mode), kwargs, where)
    if not isinstance(pad_width, Mapping):
        if array.names and not array.ndim and not _env.current().sizes:
            n = array.names[0]
            raise PositionalAxisError(
                f"{where}: pad_width={pad_width!r} counts positional axes, and this value has none (its axes "
                f"are all named: {fmt_names(array.names)}), so it would pad nothing. Pad by name: "
                f"pad_width={{{n!r}: {pad_width!r}}}")
        return engine.call_lifted(jnp.pad, (array, pad_width), {"mode": mode, **kwargs}, where)
    p = array.ndim
    widths = [(0, 0)] * array.data.ndim
    for axis, w in pad_width.items():
        if isinstance(axis, str):
            if axis not in array.names:
                raise no_axis(where, axis, array.names)
            # a split name is blocks (in nx.shard_map): padding each block would pad inside the whole
            _env.current().require_whole((axis,), where)
            i = p + array.names.index(axis)
        elif isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and -p <= axis < p:
            i = int(axis) % p
        else:
            raise AxisSpecError(f"{where}: pad_width key {axis!r} is neither a name of the value "
                                f"({fmt_names(array.names) or 'none'}) nor one of its {p} positional axes")
        widths[i] = _width(w, axis, where)
    for k, v in kwargs.items():
        # one value, or one (before, after) pair, for every axis; per-axis rows would count positions
        if np.ndim(v) > 1 or (np.ndim(v) == 1 and np.shape(v)[0] != 2):
            raise AxisSpecError(f"{where}: with pad_width by name, {k} must be one value or one (before, "
                                f"after) pair for every padded axis (got {v!r}); per-axis values count "
                                "positions, which a mapping does not")
    return engine.run(_pad_impl, (tuple(widths), mode, tuple(sorted(kwargs.items()))), (array,))


def _tile_impl(static, x):
    by_pos, by_name = static
    p = x.data.ndim - len(x.names)
    reps = [1] * x.data.ndim
    for i, k in by_pos:
        reps[i] = k
    for n, k in by_name:
        reps[p + x.names.index(n)] = k
    return _make(jnp.tile(x.data, reps), x.names)


def _count(k: Any, axis: Any, where: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise AxisSpecError(f"{where}: the repetition count of axis {axis!r} must be a non-negative int, got "
                            f"{k!r}")
    return int(k)


@follows_arguments
@implements(jnp.tile)
def tile(A: NamedArray | ArrayLike, reps: Any) -> NamedArray | jax.Array:
    """``jnp.tile``, where ``reps`` may also be a mapping ``{axis: count}`` whose keys are names or
    positions: the whole axis is repeated ``count`` times along itself (``[a, b]`` tiled twice is
    ``[a, b, a, b]``), and keeps its name with ``count`` times the size; the axes it leaves out are not tiled.

    Every name in ``reps`` must be one the value carries (:class:`~namedarray.errors.AxisSpecError`
    otherwise): to repeat a value along a new named axis, broadcast it,
    ``nx.broadcast_to(x, x.shape, named_shape={name: count})``. ``reps`` that is not a mapping counts
    positional axes, as ``jnp.tile``'s does (lifted over the names; extra counts add leading positional
    axes); on a value whose axes are all named that would tile nothing of it, so it is an error there
    (outside ``nx.xmap`` bodies, whose values are per element).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(2, 3), ["h", "w"])
    >>> nx.tile(x, {"w": 2}).unwrap(["h", "w"]).tolist()
    [[0, 1, 2, 0, 1, 2], [3, 4, 5, 3, 4, 5]]
    """
    where = "nx.tile"
    if not isinstance(A, NamedArray):
        if isinstance(reps, Mapping):
            raise AxisSpecError(f"{where}: reps maps axes {list(reps)!r}, but the array has no names; give "
                                "counts by position (a sequence), as jnp.tile takes them")
        return call(jnp.tile, (A, reps), {}, where)
    if not isinstance(reps, Mapping):
        if A.names and not A.ndim and not _env.current().sizes:
            n = A.names[0]
            raise PositionalAxisError(
                f"{where}: reps={reps!r} counts positional axes, and this value has none (its axes are all "
                f"named: {fmt_names(A.names)}), so it would add new positional axes and tile nothing of it. "
                f"Tile by name: reps={{{n!r}: ...}}; to add a positional axis, "
                f"nx.broadcast_to(x, (k,))")
        return engine.call_lifted(jnp.tile, (A, reps), {}, where)
    p = A.ndim
    env = _env.current()
    by_pos: dict[int, int] = {}
    by_name: dict[str, int] = {}
    for axis, k in reps.items():
        if isinstance(axis, str):
            if axis not in A.names:
                raise AxisSpecError(
                    f"{where}: reps names axis {axis!r}, which the value does not carry (it has "
                    f"{fmt_names(A.names) or 'no names'}); to repeat the value along a new named axis, "
                    f"nx.broadcast_to(x, x.shape, named_shape={{{axis!r}: {k!r}}})")
            k = _count(k, axis, where)
            env.require_whole((axis,), where)  # tiling each block of a split name would interleave them
            if k != 1 and env.is_bound(axis):
                raise AxisSizeError(f"{where}: tiling axis {axis!r} {k} times would make it "
                                    f"{k * A.named_shape[axis]} long, but an enclosing nx.xmap binds it to "
                                    f"{env.size(axis)}")
            by_name[axis] = k
        elif isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) and -p <= axis < p:
            if int(axis) % p in by_pos:
                raise DuplicateAxisError(f"{where}: reps gives positional axis {int(axis) % p} twice")
            by_pos[int(axis) % p] = _count(k, axis, where)
        else:
            raise AxisSpecError(f"{where}: reps key {axis!r} is neither a name of the value "
                                f"({fmt_names(A.names) or 'none'}) nor one of its {p} positional axes")
    if all(k == 1 for k in (*by_pos.values(), *by_name.values())):
        return A
    return engine.run(_tile_impl, (tuple(sorted(by_pos.items())), tuple(sorted(by_name.items()))), (A,))
