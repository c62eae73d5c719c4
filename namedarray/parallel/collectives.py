"""Collectives over axis names: ``psum``, ``all_gather``, ``ppermute``, ``all_to_all``, ``axis_index``, ...

A NamedArray holds the *whole* of each named axis (the global view), so a collective over a name the value
carries is an ordinary operation along that axis: ``psum(x, "i")`` sums over ``i``, ``all_gather`` turns the
name into a positional axis, ``psum_scatter`` sums over the name and hands slice ``k`` of the result to
index ``k`` of the name, and so on. Gradients are therefore exact without special rules: the transpose of a
``psum`` over a carried name is the broadcast back along it.

A value that lacks a name bound by an enclosing ``nx.xmap`` is constant along it (that is what xmap meant by
an unmapped value), so a collective over such a name acts on the broadcast value: ``psum`` multiplies by the
size, ``pmean``/``pmax``/``pmin`` return the value, and ``nx.psum(1, "classes")`` is the size of
``classes`` as a Python int. A name that is neither carried nor bound is an
:class:`~namedarray.errors.UnboundAxisError`.

Effect on named shapes (xmap's, except that ``psum_scatter`` keeps the name it scatters over):

==========================  ===========================================================================
``psum pmean pmax pmin``    the reduced names are removed (ints in ``axis_name`` reduce positional axes)
``all_gather``              the names are removed; a positional axis is added (or grows when ``tiled``)
``pbroadcast``              the names are removed (the value at index ``source``, like a ``psum``)
``ppermute pshuffle``       unchanged
``psum_scatter``            unchanged (the scatter axis is consumed, or shrinks when ``tiled``)
``all_to_all``              unchanged (positional ``split_axis`` and ``concat_axis`` change size)
``axis_index(n)``           ``{n: size}``
==========================  ===========================================================================

A tuple of names acts as one axis whose index is the row-major linear index over the names in the order
given, as in JAX.

Inside a positional ``nx.xmap`` body (one that receives per-element arrays, as xmap's did) the map's names
are JAX axis names (``jax.vmap``'s ``axis_name``), and a value there is one element of the map: each
collective over such a name is JAX's own (``nx.psum(x, "i")`` is ``jax.lax.psum(x, "i")``), with JAX's
effect on shapes, so code may use either spelling.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["i", "j"])
>>> nx.psum(x, "i").named_shape
{'j': 3}
>>> nx.all_gather(x, "i").shape
(2,)
>>> with nx.env.bind({"i": 2, "k": 5}):
...     int(nx.psum(1, "k")), nx.psum(x, "k").unwrap(["i", "j"]).tolist()[0]
(5, [0.0, 5.0, 10.0])
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from ..core import env as _env
from ..core.array import NamedArray, _make, from_storage, is_named
from ..core.layout import align
from ..core.shape import duplicates
from ..core.wrapping import wrap
from ..engine import dispatch as engine
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    MissingResourceError,
    describe,
    fmt_names,
    not_an_array,
)

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "ppermute", "pshuffle", "psum_scatter",
           "all_to_all", "pswapaxes", "pbroadcast", "pcast", "axis_index", "axis_size"]

AxisName = str | int | Sequence[str | int]
# a collective keeps its argument's kind and structure: a NamedArray, a positional array, a pytree of them
T = TypeVar("T")

_SCALARS = (int, float, complex, bool, np.number, np.bool_)


# --------------------------------------------------------------------------------------------------------
# Axis-name arguments


def _items(axis_name: Any, where: str) -> tuple:
    if axis_name is None:
        raise AxisSpecError(f"{where}: axis_name is required (an axis name, a positional int, or a tuple "
                            "of them); None does not mean 'all axes' for a collective")
    if isinstance(axis_name, (tuple, list)):
        return tuple(axis_name)
    if isinstance(axis_name, bool) or not isinstance(axis_name, (str, int, np.integer)):
        raise AxisSpecError(f"{where}: axis_name must be an axis name, a positional int, or a tuple of them, "
                            f"got {describe(axis_name)}")
    return (axis_name,)


def _names(axis_name: Any, where: str) -> tuple[str, ...]:
    """The names of an ``axis_name`` that must consist of names only (every collective but the reductions)."""
    names = _items(axis_name, where)
    if not names:
        raise AxisSpecError(f"{where}: axis_name is empty; give at least one axis name")
    for n in names:
        if not isinstance(n, str) or not n:
            raise AxisSpecError(f"{where}: axis_name must be an axis name or a tuple of names, got {n!r} "
                                "(this collective does not act on positional axes)")
    dup = duplicates(names)
    if dup:
        raise DuplicateAxisError(f"{where}: axis {fmt_names(dup)} appears twice in axis_name {names!r}")
    _check_not_mapped_unsplit(names, where)
    return names


def _check_not_mapped_unsplit(names: Sequence[Any], where: str) -> None:
    """Inside ``nx.shard_map``, a name its ``resources`` map to mesh axes but that no argument carried is not
    split into blocks (those mesh axes are not manual here): a collective over it would act on whole
    values where the program expects blocks, so it is an error."""
    split = _env.current().split
    for n in names:
        if n in split and not split[n]:
            raise MissingResourceError(
                f"{where}: axis {n!r} is mapped to mesh axes by the resources of this nx.shard_map, but no "
                "argument carries it, so it is not split into blocks here and those mesh axes are not "
                f"manual: a collective over it would act on whole values, not on blocks. Pass an argument "
                f"that carries {n!r}, or leave it out of the resources")


def _over_jax_names(axis_name: Any) -> bool:
    """Whether ``axis_name`` names an axis of an enclosing positional ``nx.xmap`` body, where the map's
    names are JAX axis names: the collective is then JAX's own, on per-element values."""
    return bool(_env.current().per_element(axis_name)[1])


def _jax_axis(axis_name: Any) -> Any:
    return tuple(axis_name) if isinstance(axis_name, list) else axis_name


def _per_element_permute(x: Any, axis_name: Any, perm: Sequence[tuple[int, int]], fill: bool) -> Any:
    """``ppermute`` / ``pshuffle`` on per-element values of a positional ``nx.xmap`` body.

    Over one name it is JAX's. Over several, each is its own ``jax.vmap`` there, and JAX permutes along one
    vmapped name at a time; the elements are gathered along each name instead and every element takes its
    source by the row-major linear index (destinations no pair reaches are zeros, as ``ppermute``'s)."""
    if isinstance(axis_name, str) or len(axis_name) == 1:
        return jax.lax.ppermute(x, axis_name, list(perm))
    names = tuple(axis_name)
    sizes = [jax.lax.axis_size(n) for n in names]
    n = math.prod(sizes)
    src = np.zeros(n, np.int32)
    reached = np.zeros(n, bool)
    for s, d in perm:
        src[d], reached[d] = s, True
    me = jnp.int32(0)
    for name, size in zip(names, sizes):
        me = me * size + jax.lax.axis_index(name)

    def one(v):
        whole = v
        for name in reversed(names):  # innermost name first: the gathered axes end up in names' order
            whole = jax.lax.all_gather(whole, name)
        whole = whole.reshape((n,) + jnp.shape(v))
        out = whole[jnp.asarray(src)[me]]
        return jnp.where(jnp.asarray(reached)[me], out, 0) if fill else out

    return jax.tree.map(one, x)


def _bound_sizes(names: Sequence[str], where: str) -> list[int]:
    env = _env.current()
    return [env.size(n, where) for n in names]


def _carry(x: Any, names: Sequence[str], where: str) -> tuple[NamedArray, list[int]]:
    """(``x`` broadcast along the bound names of ``names`` it lacks, the sizes of ``names``).

    ``x`` may be positional. A value is constant along a bound name it lacks, so broadcasting it there is
    what xmap meant by a collective over such a name.
    """
    x = wrap(x)
    sizes = engine.named_sizes(x)
    missing = [n for n in names if n not in sizes]
    if missing:
        env = _env.current()
        for n in missing:
            sizes[n] = env.size(n, where)
        out = x.names + tuple(missing)
        x = _make(align(x, out, sizes), out)
    return x, [sizes[n] for n in names]


def _split_names(names: Sequence[str]) -> tuple[str, ...]:
    """The names of ``names`` that ``nx.shard_map`` splits into per-device blocks here (usually none)."""
    split = _env.current().split
    return tuple(n for n in names if split.get(n)) if split else ()


def _mesh_axes(axes: tuple[str, ...]) -> str | tuple[str, ...]:
    """Mesh axes as JAX's collectives take them (a tuple is linearised row-major, as nx's names are)."""
    return axes if len(axes) > 1 else axes[0]


def _gather_blocks(x: NamedArray, names: Sequence[str]) -> NamedArray:
    """``x`` with the split ``names`` it carries made whole: every device gets every block (in block order
    along the axis), so the global-view operation that follows sees all of it.

    Each device writes its block into zeros and the devices add them up (``psum``): that is exact, and
    unlike ``lax.all_gather`` its result is known to be the same on every device, so a result computed from
    it may leave ``nx.shard_map`` without the name.
    """
    env = _env.current()
    d = x.data
    p = d.ndim - len(x.names)
    for n in names:
        if n not in x.names:
            continue
        axes = _mesh_axes(env.split[n])
        k = p + x.names.index(n)
        local = d.shape[k]
        full = jnp.zeros(d.shape[:k] + (local * env.blocks(n),) + d.shape[k + 1:],
                         jnp.int32 if d.dtype == jnp.bool_ else d.dtype)
        start = jax.lax.axis_index(axes) * local
        full = jax.lax.dynamic_update_slice_in_dim(full, d.astype(full.dtype), start, axis=k)
        d = jax.lax.psum(full, axes).astype(d.dtype)
    return _make(d, x.names)


def _merge_names(x: NamedArray, names: Sequence[str], position: int):
    """(storage with ``names`` merged, row-major in the order given, into one positional axis at
    ``position``, the remaining names)."""
    d = x.data
    p = d.ndim - len(x.names)
    rest = tuple(n for n in x.names if n not in names)
    pos = list(range(p))
    perm = pos[:position] + [p + x.names.index(n) for n in names] + pos[position:] + \
        [p + x.names.index(n) for n in rest]
    d = jnp.transpose(d, perm) if perm != list(range(d.ndim)) else d
    sizes = d.shape[position:position + len(names)]
    d = d.reshape(d.shape[:position] + (math.prod(sizes),) + d.shape[position + len(names):])
    return d, rest


def _split_to_names(d, position: int, names: Sequence[str], sizes: Sequence[int], rest: Sequence[str],
                    where: str) -> NamedArray:
    """Storage ``d`` = (positional..., ``rest`` names) whose positional axis ``position`` (of size
    ``prod(sizes)``) becomes the named axes ``names`` (row-major in the order given)."""
    k = len(rest)
    p = d.ndim - k
    perm = [i for i in range(p) if i != position] + [position] + list(range(p, d.ndim))
    d = jnp.transpose(d, perm) if perm != list(range(d.ndim)) else d
    # now (positional..., merged, rest...): split `merged` and name the rest after it
    d = d.reshape(d.shape[:p - 1] + tuple(sizes) + d.shape[p:])
    # from_storage wants the named axes last in the order they are listed: (names..., rest...)
    return from_storage(d, tuple(names) + tuple(rest), where)


def _positional(axis: int, x: NamedArray, where: str, what: str, extra: int = 0) -> int:
    """Normalise positional ``axis`` of ``x`` (``extra`` new slots allowed, for an inserted axis)."""
    p = engine.pos_ndim(x)
    n = p + extra
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -n <= axis < n:
        raise AxisSpecError(f"{where}: {what}={axis!r} is out of range for a value with {p} positional "
                            f"axes (shape {x.shape}, named axes {fmt_names(x.names) or 'none'}; named axes "
                            "are addressed through axis_name, not by position)")
    return int(axis) % n


def _tree(fn, x, where: str):
    """Apply ``fn`` to every leaf of the pytree ``x`` (JAX's collectives accept pytrees too); a leaf that is
    not an array or a number (a string, a set) is a TypeError naming its place in ``x``."""
    if _is_operand(x):
        return fn(x)

    def leaf(path, v):
        if not _is_operand(v):
            raise not_an_array(where, f"x{jax.tree_util.keystr(path)}" if path else "x", v)
        return fn(v)

    return jax.tree_util.tree_map_with_path(leaf, x, is_leaf=is_named)


def _is_operand(v: Any) -> bool:
    return type(v) is NamedArray or isinstance(v, _SCALARS) or hasattr(v, "ndim")


# --------------------------------------------------------------------------------------------------------
# Reductions: psum, pmean, pmax, pmin


def _scalar_reduce(kind: str, x, items: tuple, where: str):
    """A Python number over bound names: the answer is known without arrays (``psum(1, "i")`` is an int)."""
    ints = [a for a in items if not isinstance(a, str)]
    if ints:
        raise AxisSpecError(f"{where}: positional axis {ints[0]!r} is out of range for a scalar (it has no "
                            "positional axes)")
    names = _names(items, where) if items else ()
    n = math.prod(_bound_sizes(names, where))
    return x * n if kind == "sum" else x


def _sum(x, axis, **kwargs):
    """``jnp.sum`` with ``lax.psum``'s result type: integers keep theirs (``jnp.sum`` promotes int8 to
    int32); booleans become int32, as in ``psum``."""
    if jnp.issubdtype(x.dtype, jnp.integer):
        kwargs.setdefault("dtype", x.dtype)
    return jnp.sum(x, axis=axis, **kwargs)


_REDUCERS = {"sum": _sum, "mean": jnp.mean, "max": jnp.max, "min": jnp.min}
engine.BLOCK_COMBINE[_sum] = "sum"  # inside nx.shard_map: a psum over a split name adds up the blocks


_JAX_REDUCERS = {"sum": jax.lax.psum, "mean": jax.lax.pmean, "max": jax.lax.pmax, "min": jax.lax.pmin}


def _reduce(kind: str, x, axis_name, where: str):
    items = _items(axis_name, where)
    ours, theirs = _env.current().per_element(items)
    if theirs:
        # the names of a positional nx.xmap body are JAX's there; any other names (of NamedArrays made in
        # the body) and positional ints are reduced by nx first
        if ours:
            x = _reduce(kind, x, ours, where)
        return _JAX_REDUCERS[kind](x, theirs)
    _check_not_mapped_unsplit(items, where)
    axis = items if isinstance(axis_name, (tuple, list)) else axis_name

    def one(v):
        if isinstance(v, _SCALARS):
            return _scalar_reduce(kind, v, items, where)
        if type(v) is NamedArray:
            return engine.reduce(_REDUCERS[kind], v, axis, where)
        # a positional array: it lacks every name, so names must be bound; the result stays positional
        return engine.reduce(_REDUCERS[kind], wrap(v), axis, where).data

    return _tree(one, x, where)


def psum(x: T, axis_name: AxisName) -> T:
    """Sum over named axes (and positional ints) of ``x``; a bound name ``x`` lacks multiplies by its size.

    ``nx.psum(1, "i")`` is the size of the bound axis ``i`` (a Python int). Reduced names leave the named
    shape. ``x`` may be a pytree.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(2, 3), ["i", "j"])
    >>> nx.psum(x, ("i", "j")).tolist(), nx.psum(x, "j").unwrap(["i"]).tolist()
    (15, [3, 12])
    """
    return _reduce("sum", x, axis_name, "nx.psum")


def pmean(x: T, axis_name: AxisName) -> T:
    """Mean over named axes (and positional ints); over a bound name ``x`` lacks it returns ``x``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.pmean(nx.wrap(jnp.array([1.0, 3.0]), ["i"]), "i").tolist()
    2.0
    """
    return _reduce("mean", x, axis_name, "nx.pmean")


def pmax(x: T, axis_name: AxisName) -> T:
    """Maximum over named axes (and positional ints); over a bound name ``x`` lacks it returns ``x``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.pmax(nx.wrap(jnp.array([1, 3, 2]), ["i"]), "i").tolist()
    3
    """
    return _reduce("max", x, axis_name, "nx.pmax")


def pmin(x: T, axis_name: AxisName) -> T:
    """Minimum over named axes (and positional ints); over a bound name ``x`` lacks it returns ``x``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.pmin(nx.wrap(jnp.array([1, 3, 2]), ["i"]), "i").tolist()
    1
    """
    return _reduce("min", x, axis_name, "nx.pmin")


# --------------------------------------------------------------------------------------------------------
# Names-only collectives. Each is an engine implementation: eagerly one cached kernel, inline when traced.


def _restore(out: NamedArray, x: Any) -> Any:
    """Positional in, positional out: a plain array argument gets a plain array back when no name remains."""
    if type(x) is not NamedArray and not out.names:
        return out.data
    return out


def _all_gather_impl(static, x):
    names, axis, tiled, where = static
    x = wrap(x)
    split = _split_names(names)
    if split:
        x = _gather_blocks(x, split)
    x, _ = _carry(x, names, where)
    # tiled concatenates along an existing positional axis; untiled inserts a new one
    a = _positional(axis, x, where, "axis", extra=0 if tiled else 1)
    d, rest = _merge_names(x, names, a)
    if tiled:
        # (..., N, m, ...) -> (..., N*m, ...): the blocks of each name index, concatenated in order
        d = d.reshape(d.shape[:a] + (d.shape[a] * d.shape[a + 1],) + d.shape[a + 2:])
    return _make(d, rest)


def all_gather(x: T, axis_name: str | Sequence[str], *, axis: int = 0, tiled: bool = False) -> T:
    """Gather the slices of ``x`` along named axes into a positional axis; the names leave the value.

    Untiled, a new positional axis of size ``size(axis_name)`` is inserted at ``axis``; tiled, the slices
    are concatenated along the existing positional ``axis``. ``x`` may be a pytree.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(3, 2), ["i", ...])
    >>> nx.all_gather(x, "i").shape, nx.all_gather(x, "i", axis=1).shape
    ((3, 2), (2, 3))
    >>> nx.all_gather(x, "i", tiled=True).shape
    (6,)
    """
    where = "nx.all_gather"
    if _over_jax_names(axis_name):
        return jax.lax.all_gather(x, _jax_axis(axis_name), axis=axis, tiled=tiled)
    names = _names(axis_name, where)
    return _tree(lambda v: _restore(engine.run(_all_gather_impl, (names, axis, bool(tiled), where), (v,)), v),
                 x, where)


def _take_along_names(x: NamedArray, names: Sequence[str], sizes: Sequence[int], index: np.ndarray,
                      mask: np.ndarray | None, where: str) -> NamedArray:
    """Index the (row-major linearised) ``names`` of ``x`` with static ``index``; zero where ``~mask``."""
    p = engine.pos_ndim(x)
    d, rest = _merge_names(x, names, p)
    out = jnp.take(d, jnp.asarray(index, dtype=jnp.int32), axis=p)
    if mask is not None:
        m = jnp.asarray(mask).reshape((len(mask),) + (1,) * (d.ndim - p - 1))
        out = jnp.where(m, out, jnp.zeros((), out.dtype))
    return _split_to_names(out, p, names, sizes, rest, where)


def _ppermute_blocks(x: Any, names: tuple[str, ...], perm, shift, where: str) -> NamedArray:
    """ppermute over names split into blocks: whole blocks move between devices along their mesh axes (the
    block index is row-major over the names, as the element index is)."""
    env = _env.current()
    if len(_split_names(names)) != len(names):
        whole = [n for n in names if not env.split.get(n)]
        raise AxisSpecError(f"{where}: axis_name {names!r} mixes names that nx.shard_map splits into blocks "
                            f"with names it does not ({fmt_names(whole)}); permute them separately")
    x = wrap(x)
    missing = [n for n in names if n not in x.names]
    if missing:  # constant along them: the block of a missing name is the value broadcast to block size
        sizes = engine.named_sizes(x)
        sizes.update({n: env.local_size(n) for n in missing})
        out = x.names + tuple(missing)
        x = _make(align(x, out, sizes), out)
    n = math.prod(env.blocks(m) for m in names)
    if shift is not None:
        pairs = [(j, (j + shift) % n) for j in range(n)]
    else:
        for s_, t in perm:
            if not (0 <= s_ < n and 0 <= t < n):
                raise AxisSpecError(f"{where}: the pair ({s_}, {t}) in perm is out of range: axis "
                                    f"{fmt_names(names)} is split into {n} blocks here (nx.shard_map)")
        pairs = list(perm)
    axes = tuple(a for m in names for a in env.split[m])
    return _make(jax.lax.ppermute(x.data, _mesh_axes(axes), pairs), x.names)


def _ppermute_impl(static, x):
    names, perm, shift, where = static
    if _split_names(names):
        return _ppermute_blocks(x, names, perm, shift, where)
    x, sizes = _carry(x, names, where)
    n = math.prod(sizes)
    if shift is not None:
        src = (np.arange(n) - shift) % n
        return _take_along_names(x, names, sizes, src, None, where)
    src = np.zeros(n, dtype=np.int32)
    reached = np.zeros(n, dtype=bool)
    for s, t in perm:
        if not (0 <= s < n and 0 <= t < n):
            raise AxisSpecError(f"{where}: the pair ({s}, {t}) in perm is out of range for axis "
                                f"{fmt_names(names)} of size {n}")
        src[t] = s
        reached[t] = True
    return _take_along_names(x, names, sizes, src, None if reached.all() else reached, where)


def ppermute(x: T, axis_name: str | Sequence[str], perm: Sequence[tuple[int, int]] | None = None, *,
             shift: int | None = None) -> T:
    """Move slices along named axes: each ``(src, dst)`` pair of ``perm`` copies index ``src`` to ``dst``.

    Destinations no pair reaches are zero-filled, as in JAX. ``shift=k`` is the periodic shift
    ``perm = [(j, (j + k) % n) for j in range(n)]``. The named shape is unchanged.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.array([1, 2, 3]), ["i"])
    >>> nx.ppermute(x, "i", [(0, 1), (1, 2)]).unwrap(["i"]).tolist()
    [0, 1, 2]
    >>> nx.ppermute(x, "i", shift=1).unwrap(["i"]).tolist()
    [3, 1, 2]
    """
    where = "nx.ppermute"
    if _over_jax_names(axis_name) and (perm is None) != (shift is None):
        if perm is None:
            n = jax.lax.axis_size(_jax_axis(axis_name))
            perm = [(j, (j + operator.index(shift)) % n) for j in range(n)]
        return _per_element_permute(x, _jax_axis(axis_name), perm, fill=True)
    names = _names(axis_name, where)
    if (perm is None) == (shift is None):
        raise AxisSpecError(f"{where}: give exactly one of perm (a list of (source, destination) pairs) and "
                            "shift (an int)")
    if perm is not None:
        try:
            perm = tuple((operator.index(s), operator.index(t)) for s, t in perm)
        except (TypeError, ValueError):
            raise AxisSpecError(f"{where}: perm must be a sequence of (source, destination) int pairs, got "
                                f"{perm!r}") from None
        srcs = [s for s, _ in perm]
        dsts = [t for _, t in perm]
        if len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
            raise AxisSpecError(f"{where}: ppermute sources and destinations must be unique, got "
                                f"{list(perm)} (axis {fmt_names(names)})")
    else:
        try:
            shift = operator.index(shift)
        except TypeError:
            raise AxisSpecError(f"{where}: shift must be an int, got {shift!r}") from None
    static = (names, perm, shift, where)
    return _tree(lambda v: engine.run(_ppermute_impl, static, (v,)), x, where)


def _pshuffle_impl(static, x):
    names, perm, where = static
    _env.current().require_whole(names, where)
    x, sizes = _carry(x, names, where)
    n = math.prod(sizes)
    if len(perm) != n or sorted(perm) != list(range(n)):
        raise AxisSpecError(f"{where}: `perm` does not represent a permutation: {list(perm)} (axis "
                            f"{fmt_names(names)} has size {n}, so perm must order 0..{n - 1})")
    return _take_along_names(x, names, sizes, np.asarray(perm), None, where)


def pshuffle(x: T, axis_name: str | Sequence[str], perm: Sequence[int]) -> T:
    """Permute along named axes: index ``i`` of the result takes index ``perm[i]`` of ``x``.

    Over a tuple of names the indices are row-major linear indices. The named shape is unchanged.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(4), ["i"])
    >>> nx.pshuffle(x, "i", [3, 1, 2, 0]).unwrap(["i"]).tolist()
    [3, 1, 2, 0]
    """
    where = "nx.pshuffle"
    if _over_jax_names(axis_name):
        return _per_element_permute(x, _jax_axis(axis_name), [(int(s), d) for d, s in enumerate(perm)],
                                    fill=False)
    names = _names(axis_name, where)
    try:
        perm = tuple(operator.index(i) for i in perm)
    except (TypeError, ValueError):
        raise AxisSpecError(f"{where}: `perm` does not represent a permutation: {perm!r}") from None
    return _tree(lambda v: engine.run(_pshuffle_impl, (names, perm, where), (v,)), x, where)


def _psum_scatter_impl(static, x):
    names, dim, tiled, where = static
    _env.current().require_whole(names, where)
    x, sizes = _carry(x, names, where)
    n = math.prod(sizes)
    a = _positional(dim, x, where, "scatter_dimension")
    s = x.shape[a]
    if tiled and s % n:
        raise AxisSizeError(f"{where}: tiled reduce_scatter operand scatter dimension size {s} must be "
                            f"divisible by shard_count {n} (the size of axis {fmt_names(names)})")
    if not tiled and s != n:
        raise AxisSizeError(f"{where}: reduce_scatter operand scatter dimension size {s} must match shard "
                            f"count {n} (the size of axis {fmt_names(names)}); pass tiled=True to split it "
                            f"into {n} chunks")
    y = engine.reduce(_sum, x, names, where)
    d, rest = y.data, y.names
    if tiled:
        d = d.reshape(d.shape[:a] + (n, s // n) + d.shape[a + 1:])
    return _split_to_names(d, a, names, sizes, rest, where)


def psum_scatter(x: T, axis_name: str | Sequence[str], *, scatter_dimension: int = 0,
                 tiled: bool = False) -> T:
    """Sum over named axes, then hand slice ``k`` of positional ``scatter_dimension`` to index ``k``.

    Unlike xmap, the result keeps the names (it varies along them). Untiled, the scatter dimension must
    have the size of ``axis_name`` and is consumed; tiled, it must be divisible by it and shrinks.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((2, 2)), ["i", ...])
    >>> y = nx.psum_scatter(x, "i")
    >>> y.shape, y.named_shape, y.unwrap(["i"]).tolist()
    ((), {'i': 2}, [2.0, 2.0])
    """
    where = "nx.psum_scatter"
    if _over_jax_names(axis_name):
        return jax.lax.psum_scatter(x, _jax_axis(axis_name), scatter_dimension=scatter_dimension, tiled=tiled)
    names = _names(axis_name, where)
    static = (names, scatter_dimension, bool(tiled), where)
    return _tree(lambda v: engine.run(_psum_scatter_impl, static, (v,)), x, where)


def _all_to_all_impl(static, x):
    names, split_axis, concat_axis, tiled, where = static
    _env.current().require_whole(names, where)
    x, sizes = _carry(x, names, where)
    n = math.prod(sizes)
    p = engine.pos_ndim(x)
    a = _positional(split_axis, x, where, "split_axis")
    c = _positional(concat_axis, x, where, "concat_axis")
    s = x.shape[a]
    label = names[0] if len(names) == 1 else names
    if tiled and s % n:
        raise AxisSizeError(f"{where}: the size of all_to_all split_axis ({s}) has to be divisible by the "
                            f"size of the named axis {label!r} ({n})")
    if not tiled and s != n:
        raise AxisSizeError(f"{where}: all_to_all requires the size of the mapped axis {label!r} to equal "
                            f"x.shape[split_axis], but they are {n} and {s} respectively")
    # The names become positional axis J (index j = the source); the split axis (chunk k = the
    # destination) becomes the names. Result index k along the names, j along concat_axis:
    # y[k][.., j, ..] = x[j][.., k, ..] (untiled), or the concatenation over j of chunk k (tiled).
    d, rest = _merge_names(x, names, p)  # (positional..., J, rest...)
    if tiled:
        d = d.reshape(d.shape[:a] + (n, s // n) + d.shape[a + 1:])
        # labels of the axes: positional i (axis a split into "N", "m"), then "J", then the rest names
        labels = [("N" if i == a else i) for i in range(p)]
        labels.insert(a + 1, "m")
        labels.append("J")
        out = []
        for i in range(p):
            if i == c:
                out.append("J")
            out.append("m" if i == a else i)
    else:
        labels = list(range(p)) + ["J"]
        out = [i for i in range(p) if i != a]
        out.insert(c, "J")
        labels[a] = "N"
    perm = [labels.index(lbl) for lbl in out] + [labels.index("N")]
    perm += list(range(len(labels), d.ndim))
    d = jnp.transpose(d, perm)
    if tiled:
        j = out.index("J")
        d = d.reshape(d.shape[:j] + (d.shape[j] * d.shape[j + 1],) + d.shape[j + 2:])
    # d: (result positional..., N, rest...) -> name the N axis
    q = d.ndim - len(rest) - 1
    d = d.reshape(d.shape[:q] + tuple(sizes) + d.shape[q + 1:])
    return from_storage(d, tuple(names) + tuple(rest), where)


def all_to_all(x: T, axis_name: str | Sequence[str], split_axis: int, concat_axis: int, *,
               tiled: bool = False) -> T:
    """Exchange chunks between the indices of named axes; the names stay.

    Index ``k`` of the result receives, from every index ``j``, chunk ``k`` of positional ``split_axis``,
    and lays them out along positional ``concat_axis`` ordered by ``j``. Untiled, ``split_axis`` must have
    the size of ``axis_name``: it is removed and a new axis of that size is inserted at ``concat_axis``
    (a position in the result). Tiled, ``split_axis`` shrinks and ``concat_axis`` grows by that factor.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(9).reshape(3, 3), ["i", ...])
    >>> nx.all_to_all(x, "i", 0, 0).unwrap(["i", ...]).tolist()  # a transpose of (i, position)
    [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    """
    where = "nx.all_to_all"
    if _over_jax_names(axis_name):
        return jax.lax.all_to_all(x, _jax_axis(axis_name), split_axis, concat_axis, tiled=tiled)
    names = _names(axis_name, where)
    static = (names, split_axis, concat_axis, bool(tiled), where)
    return _tree(lambda v: engine.run(_all_to_all_impl, static, (v,)), x, where)


def pswapaxes(x: T, axis_name: str | Sequence[str], axis: int) -> T:
    """Swap named axes with positional ``axis`` (same size): ``all_to_all(x, axis_name, axis, axis)``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(4).reshape(2, 2), ["i", ...])
    >>> nx.lax.pswapaxes(x, "i", 0).unwrap(["i", ...]).tolist()
    [[0, 2], [1, 3]]
    """
    return all_to_all(x, axis_name, axis, axis)


def _pbroadcast_impl(static, x):
    names, source, where = static
    _env.current().require_whole(names, where)
    x, sizes = _carry(x, names, where)
    n = math.prod(sizes)
    if not 0 <= source < n:
        raise AxisSpecError(f"{where}: source={source} is out of range for axis {fmt_names(names)} of "
                            f"size {n}")
    p = engine.pos_ndim(x)
    d, rest = _merge_names(x, names, p)
    return _make(jnp.take(d, source, axis=p), rest)


def pbroadcast(x: T, axis_name: str | Sequence[str], source: int) -> T:
    """The value at index ``source`` of named axes, for every index: the names leave the value.

    JAX defines it as ``psum(where(axis_index(axis_name) == source, x, 0), axis_name)``; like that psum, the
    result no longer varies along the names. ``x`` may be a pytree.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.lax.pbroadcast(nx.wrap(jnp.array([5, 6, 7]), ["i"]), "i", 1).tolist()
    6
    """
    where = "nx.pbroadcast"
    if _over_jax_names(axis_name):
        return jax.lax.pbroadcast(x, _jax_axis(axis_name), source)
    names = _names(axis_name, where)
    try:
        source = operator.index(source)
    except TypeError:
        raise AxisSpecError(f"{where}: source must be an int index along {fmt_names(names)}, got "
                            f"{source!r}") from None
    return _tree(lambda v: _restore(engine.run(_pbroadcast_impl, (names, source, where), (v,)), v), x, where)


def pcast(x: T, axis_name: str | Sequence[str], *, to: str) -> T:
    """JAX's varying/invariant type cast (``to="varying"`` ...): values are unchanged, so it returns ``x``.

    A NamedArray holds the whole axis, so there is no per-device type to change; the names are checked.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3), ["i"])
    >>> nx.lax.pcast(x, "i", to="varying") is x
    True
    """
    where = "nx.pcast"
    if _over_jax_names(axis_name):
        return x
    names = _names(axis_name, where)

    def check(v):
        have = v.names if type(v) is NamedArray else ()
        env = _env.current()
        for n in names:
            if n not in have:
                env.size(n, where)  # an unbound name is an error, as for every collective
        return v

    return _tree(check, x, where)


# --------------------------------------------------------------------------------------------------------
# The axis environment


def axis_index(axis_name: str | Sequence[str]) -> NamedArray:
    """The index along bound named axes, as an int32 NamedArray carrying them.

    Over a tuple of names it is the row-major linear index. The sizes come from the enclosing ``nx.xmap``;
    an unbound name is an :class:`~namedarray.errors.UnboundAxisError`.

    >>> import namedarray as nx
    >>> with nx.env.bind({"i": 2, "j": 3}):
    ...     nx.axis_index(("i", "j")).unwrap(["i", "j"]).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    where = "nx.axis_index"
    if _over_jax_names(axis_name):
        return jax.lax.axis_index(_jax_axis(axis_name))
    names = _names(axis_name, where)
    sizes = _bound_sizes(names, where)
    if not _split_names(names):
        data = jax.lax.iota(jnp.int32, math.prod(sizes)).reshape(sizes)
        return from_storage(data, names, where)
    # inside nx.shard_map a split name holds one block: the indices of its elements in the whole axis
    env = _env.current()
    data = jnp.zeros((), jnp.int32)
    stride = 1
    for k in reversed(range(len(names))):
        n, local = names[k], env.local_size(names[k])
        idx = jax.lax.iota(jnp.int32, local)
        if env.split.get(n):
            axes = env.split[n]
            idx = idx + jax.lax.axis_index(_mesh_axes(axes)) * local
        shape = [1] * len(names)
        shape[k] = local
        data = data + idx.reshape(shape) * stride
        stride *= sizes[k]
    return from_storage(data, names, where)


def axis_size(axis_name: str | Sequence[str]) -> int:
    """The size of bound named axes (the product over a tuple), as a Python int.

    >>> import namedarray as nx
    >>> with nx.env.bind({"batch": 8}):
    ...     nx.axis_size("batch")
    8
    """
    where = "nx.axis_size"
    if _over_jax_names(axis_name):
        return jax.lax.axis_size(_jax_axis(axis_name))
    return math.prod(_bound_sizes(_names(axis_name, where), where))
