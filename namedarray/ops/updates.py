"""``x.at[index]``: functional updates of the selected elements, by position and by name.

``x.at[index].set(values)`` is ``x`` with ``x[index]`` replaced, as ``jax.Array.at`` is; likewise ``add``,
``subtract``, ``multiply``, ``divide``, ``power``, ``min``, ``max``, ``apply(ufunc)`` and ``get()``. The
index is what ``x[index]`` takes: positional indices for the positional axes (NumPy's rules), a dict for
named axes (``{"seq": 3}`` drops the axis from the region; ``{"seq": slice(0, 4)}``, an index array or
``{"seq": nx.ds(i, 4)}``, a dynamic slice with a traced start, keep it; ``{"new": None}`` adds a size-1
axis to the region), or both in one tuple (``x.at[{"seq": slice(0, 4)}, 1]``). A NamedArray index gathers
by name, as in ``x[...]``: a name it shares with ``x`` pairs the two up (``x.at[{"seq": lengths}]`` with
``lengths`` named ``batch`` selects one position per batch element), and its positional axes are
advanced-index axes (see :mod:`namedarray.ops.indexing`).

The *region* is ``x[index]`` (``.get()`` returns it). ``values`` broadcast to it by name and their
positional shape must broadcast to the region's positional shape.

**Names: the union rule.** As every other operation, an update's result carries the union of the names of
``x``, of the index arrays and of ``values``: where an index array or ``values`` carries a name that ``x``
lacks, ``x`` is first broadcast along it, so that each slice along that name is its own updated copy of
``x``. With ``a`` over ``{foo, bar}``, ``a.at[{"bar": i}].add(v)`` with ``i`` and ``v`` over ``{qux}`` is
over ``{qux, foo, bar}``, and its slice ``qux=k`` is ``a.at[{"bar": i[k]}].add(v[k])``; ``.get()`` keeps
``qux`` as well. A name of ``x`` that an integer index selects away cannot appear in ``values``. A
``{"new": None}`` axis belongs to the region only: the result has ``x``'s names (as ``x.at[None]`` has
``x``'s shape in NumPy).

**Scatter: ``scatter=names``.** To write several positions into *one* array, name the index's axes that
enumerate them: with ``cache`` over ``{batch, seq}``, ``cache.at[{"seq": lengths + nx.arange(2,
name="new")}].set(kv, scatter="new")`` with ``kv`` over ``{batch, new}`` writes both new tokens of each
batch element and is over ``{batch, seq}`` (NumPy's scatter: repeated positions keep one of the writes for
``set``, add up for ``add``). The scatter names must be carried by the index arrays (named axes only), may
be carried by ``values``, and never by ``x``.

``mode``, ``indices_are_sorted``, ``unique_indices`` and ``fill_value`` (for ``get``) mean what they mean
for jax. An ``nx.ds`` window is clamped into the axis as ``jax.lax.dynamic_slice`` clamps (never out of
bounds), whatever ``mode`` says.

Eagerly an update is one cached kernel (one ``scatter`` on the storage, whatever order it holds its names in;
an integer index is an operand, so a loop over positions reuses it); under ``jit`` it is that ``scatter``
(a ``dynamic_slice`` and ``dynamic_update_slice`` around it for an ``nx.ds`` window).

>>> import namedarray as nx, jax.numpy as jnp
>>> cache = nx.zeros({"batch": 2, "seq": 4})
>>> step = nx.wrap(jnp.array([1.0, 2.0]), ["batch"])
>>> cache.at[{"seq": 1}].set(step).unwrap(["batch", "seq"]).tolist()
[[0.0, 1.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]]
>>> a = nx.zeros({"foo": 2, "bar": 3})
>>> out = a.at[{"bar": nx.arange(2, name="qux") + 1}].add(100.0 + 100.0 * nx.arange(2, name="qux"))
>>> out.named_shape, out.unwrap(["qux", "foo", "bar"])[:, 0].tolist()
({'bar': 3, 'foo': 2, 'qux': 2}, [[0.0, 100.0, 0.0], [0.0, 0.0, 200.0]])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import env as _env
from ..core.array import NamedArray, _make, transpose
from ..core.layout import align, pos_ndim
from ..core.shape import check_name, join_sizes
from ..engine import dispatch as engine
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    PositionalMisuseError,
    fmt_names,
    no_axis,
)
from . import indexing

__all__ = ["AtIndexer", "IndexUpdateRef", "getitem"]

_SCALAR_INTS = (int, np.integer)


class AtIndexer:
    """``x.at``: ``x.at[index]`` is an :class:`IndexUpdateRef`.

    An update's result carries the union of the names of ``x``, of the index arrays and of the values:
    ``x`` is broadcast along the names only the index or the values carry, each slice along them its own
    updated copy, so that ``.get()`` and the updates agree (see :mod:`namedarray.ops.updates`).

    >>> import namedarray as nx
    >>> a = nx.zeros({"foo": 2, "bar": 3})
    >>> i = nx.arange(2, name="qux")
    >>> a.at[{"bar": i}].get().named_shape, a.at[{"bar": i}].set(1.0).named_shape
    ({'foo': 2, 'qux': 2}, {'bar': 3, 'foo': 2, 'qux': 2})
    """

    __slots__ = ("x",)

    def __init__(self, x: NamedArray):
        self.x = x

    def __getitem__(self, index: Any) -> IndexUpdateRef:
        return IndexUpdateRef(self.x, index)

    def __repr__(self) -> str:
        return f"AtIndexer({self.x!r})"


class IndexUpdateRef:
    """``x.at[index]``: the selected region of ``x``, to read or to update functionally."""

    __slots__ = ("x", "index")

    def __init__(self, x: NamedArray, index: Any):
        self.x = x
        self.index = index

    def __repr__(self) -> str:
        return f"IndexUpdateRef({self.x!r}, {self.index!r})"

    def get(self, **kwargs: Any) -> NamedArray:
        """``x[index]``, with jax's ``mode``/``fill_value`` options for out-of-bounds indices.

        >>> import namedarray as nx, jax.numpy as jnp
        >>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
        >>> x.at[{"b": 5}].get(mode="fill", fill_value=-1.0).unwrap(["a"]).tolist()
        [-1.0, -1.0]
        """
        return _at(self.x, self.index, "get", None, None, kwargs)

    def set(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with the region replaced by ``values`` (broadcast to it by name).

        >>> import namedarray as nx
        >>> x = nx.zeros({"a": 2, "b": 3})
        >>> x.at[{"b": slice(1, None)}, ].set(1.0).unwrap(["a", "b"]).tolist()
        [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
        """
        return _at(self.x, self.index, "set", values, None, kwargs, scatter)

    def apply(self, func: Callable, **kwargs: Any) -> NamedArray:
        """``x`` with the unary ufunc ``func`` applied to the region (``func.at`` in NumPy).

        >>> import namedarray as nx, jax.numpy as jnp
        >>> x = nx.ones({"a": 3})
        >>> x.at[{"a": 0}].apply(jnp.negative).unwrap(["a"]).tolist()
        [-1.0, 1.0, 1.0]
        """
        return _at(self.x, self.index, "apply", None, func, kwargs)

    def add(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with ``values`` added to the region (repeated indices add up).

        >>> import namedarray as nx, jax.numpy as jnp
        >>> nx.zeros({"a": 3}).at[{"a": jnp.array([0, 0, 2])}].add(1.0).unwrap(["a"]).tolist()
        [2.0, 0.0, 1.0]
        """
        return _at(self.x, self.index, "add", values, None, kwargs, scatter)

    def subtract(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with ``values`` subtracted from the region."""
        return _at(self.x, self.index, "subtract", values, None, kwargs, scatter)

    def multiply(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with the region multiplied by ``values``."""
        return _at(self.x, self.index, "multiply", values, None, kwargs, scatter)

    def divide(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with the region divided by ``values``."""
        return _at(self.x, self.index, "divide", values, None, kwargs, scatter)

    def power(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with the region raised to the power ``values``."""
        return _at(self.x, self.index, "power", values, None, kwargs, scatter)

    def min(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with the region replaced by its minimum with ``values``."""
        return _at(self.x, self.index, "min", values, None, kwargs, scatter)

    def max(self, values: Any, *, scatter: str | tuple[str, ...] | None = None,
            **kwargs: Any) -> NamedArray:
        """``x`` with the region replaced by its maximum with ``values``."""
        return _at(self.x, self.index, "max", values, None, kwargs, scatter)


def getitem(x: NamedArray, index: Any) -> NamedArray:
    """``x[index]``; a tuple mixing a dict (names) with positional indices selects by both.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(24).reshape(2, 3, 4), {0: "b"})
    >>> x[{"b": 1}, 0].unwrap().tolist()
    [12, 13, 14, 15]
    """
    if type(index) is tuple and any(isinstance(i, Mapping) for i in index):
        return _at(x, index, "get", None, None, {})
    return indexing.select(x, index)


# --------------------------------------------------------------------------------------------------------
# The index as a static template plus its arrays (operands of the kernel)


def _template(x: NamedArray, index: Any, where: str) -> tuple[tuple, tuple, list]:
    """(positional entries, named entries, arrays): every int and array of ``index`` becomes an operand
    ``("arr", k)`` (so that a loop over positions reuses one kernel); slices, ``None`` and ``...`` are
    static."""
    items = index if type(index) is tuple else (index,)
    named: dict[str, Any] = {}
    positional = []
    for i in items:
        if isinstance(i, Mapping):
            for n, v in i.items():
                if n in named:
                    raise AxisSpecError(f"{where}: axis {n!r} is indexed twice")
                named[n] = v
        else:
            positional.append(i)
    arrays: list = []
    pos_entries = []
    for i in positional:
        pos_entries += _entries(i, arrays, where, None)
    named_entries = []
    _env.current().require_whole([n for n, i in named.items() if i is not None], where)
    for n, i in named.items():
        if i is None:  # a new axis of size 1, named
            check_name(n, where)
            if n in x.names:
                raise DuplicateAxisError(f"{where}: {{{n!r}: None}} adds an axis {n!r}, but the array "
                                         "already has one")
            named_entries.append((n, _NEW))
            continue
        if n not in x.names:
            raise no_axis(where, n, x.names)
        (entry,) = _entries(i, arrays, where, n, x.named_shape[n])
        named_entries.append((n, entry))
    return tuple(pos_entries), tuple(named_entries), arrays


def _entries(i: Any, arrays: list, where: str, name: str | None, size: int | None = None) -> list:
    if i is None or i is Ellipsis:
        if name is not None:
            raise AxisSpecError(f"{where}: axis {name!r} by name takes an int, a slice, an index array or a "
                                f"NamedArray, got {i!r}")
        return [("none",) if i is None else ("ellipsis",)]
    if isinstance(i, slice):
        return [("slice", i.start, i.stop, i.step)]
    if isinstance(i, indexing.ds):  # its start is an operand (traced or not), its size static
        arrays.append(indexing._start(i.start, where, name))
        return [("ds", len(arrays) - 1, i.size)]
    if indexing._is_bool_scalar(i):
        raise AxisSpecError(f"{where}: a boolean scalar index is not supported by .at[] (it would add an "
                            "axis); use nx.where(condition, new, x)")
    if isinstance(i, _SCALAR_INTS):
        arrays.append(np.asarray(int(i), np.int32 if -2**31 <= int(i) < 2**31 else np.int64))
        return [("arr", len(arrays) - 1)]
    if type(i) is NamedArray:
        if np.dtype(i.dtype) == np.bool_:
            if i.names:
                raise PositionalMisuseError(
                    f"{where}: a boolean NamedArray index with named axes {fmt_names(i.names)} selects a "
                    "value-dependent number of elements; use nx.where(mask, new, x) instead")
            i = i.data
        elif np.dtype(i.dtype).kind not in "iu":
            raise AxisSpecError(f"{where}: index arrays must be integers or booleans, got a NamedArray of "
                                f"dtype {i.dtype}")
        else:
            arrays.append(i)
            return [("arr", len(arrays) - 1)]
    try:
        a = i if isinstance(i, jax.Array) else np.asarray(i)
    except (TypeError, ValueError):
        a = None
    if a is None or a.dtype.kind not in "biu":
        raise AxisSpecError(f"{where}: indices must be ints, slices, None, ..., or integer or boolean "
                            f"arrays; got {i!r}")
    if a.dtype.kind == "b":
        if isinstance(a, jax.core.Tracer):
            raise PositionalMisuseError(f"{where}: a traced boolean mask selects a value-dependent number of "
                                        "elements; use nx.where(mask, new, x) instead")
        if name is not None and (a.ndim != 1 or a.shape[0] != size):
            raise IndexError(f"boolean index of shape {a.shape} for axis {name!r} with size {size}")
        out = []
        for nz in np.nonzero(np.asarray(a)):  # NumPy's meaning: the positions where it is True
            arrays.append(nz)
            out.append(("arr", len(arrays) - 1))
        return out
    if name is not None and a.ndim > 1:
        raise AxisSpecError(f"{where}: an index array for axis {name!r} must be 0-d or 1-d (got shape "
                            f"{a.shape}); name its axes and pass a NamedArray to index by several")
    arrays.append(a)
    return [("arr", len(arrays) - 1)]


def _at(x: Any, index: Any, method: str, values: Any, func: Callable | None, kwargs: dict,
        scatter: Any = None) -> Any:
    where = f"x.at[...].{method}"
    if type(x) is not NamedArray:
        raise TypeError(f"{where}: expected a NamedArray, got {type(x).__name__}")
    if scatter is not None:
        index, values = _scattered(x, index, values, scatter, where)
    pos, named, arrays = _template(x, index, where)
    static = (method, pos, named, func, tuple(sorted(kwargs.items())), where)
    return engine.run(_at_impl, static, (x, values, *arrays))


def _scattered(x: NamedArray, index: Any, values: Any, scatter: Any, where: str) -> tuple[Any, Any]:
    """``scatter=names``: the names of the index arrays that enumerate positions written into one array.

    They become the trailing advanced-index axes of the region (positional, in the order given) in the
    index arrays and in ``values``, so that one scatter writes every position; the result keeps ``x``'s
    names. Without it such a name is mapped over (the union rule): one updated copy of ``x`` per position.
    """
    names = (scatter,) if isinstance(scatter, str) else tuple(scatter)
    for n in names:
        check_name(n, where + " scatter=")
    if len(set(names)) != len(names):
        raise DuplicateAxisError(f"{where}: scatter={scatter!r} lists an axis twice")
    clash = [n for n in names if n in x.names]
    if clash:
        raise AxisSpecError(f"{where}: scatter={scatter!r} names {fmt_names(clash)}, which the array itself "
                            "carries; scatter names are the index's own axes, enumerating positions to write")
    items = index if type(index) is tuple else (index,)
    seen: set[str] = set()
    sizes: dict[str, int] = {}

    def positional(a: NamedArray, label: str) -> NamedArray:
        present = [n for n in names if n in a.names]
        if not present:
            return a
        if a.ndim:
            raise AxisSpecError(f"{where}: index {label} has positional axes {a.shape} besides the scatter "
                                f"axes {fmt_names(present)}; give it named axes only")
        seen.update(present)
        for n in present:
            sizes[n] = a.named_shape[n]
        out = a.untag(*present)
        return out.reshape(tuple(sizes[n] if n in present else 1 for n in names))

    out_items = []
    for i in items:
        if isinstance(i, Mapping):
            out_items.append({n: positional(v, repr(n)) if type(v) is NamedArray else v
                              for n, v in i.items()})
        else:
            if type(i) is NamedArray and set(names) & set(i.names):
                raise AxisSpecError(f"{where}: scatter axes {fmt_names(names)} on a positional index: put "
                                    "the index in a dict for the named axis it selects along")
            out_items.append(i)
    missing = [n for n in names if n not in seen]
    if missing:
        raise AxisSpecError(f"{where}: scatter={scatter!r}, but no index array carries "
                            f"{fmt_names(missing)}")
    if type(values) is NamedArray:
        present = [n for n in names if n in values.names]
        for n in present:
            if values.named_shape[n] != sizes[n]:
                raise AxisSizeError(f"{where}: axis {n!r} has size {sizes[n]} in the index and "
                                    f"{values.named_shape[n]} in the values")
        v = values.untag(*present)
        values = v.reshape(v.shape[:values.ndim] + tuple(sizes[n] if n in present else 1 for n in names))
    new_index = tuple(out_items) if type(index) is tuple else out_items[0]
    return new_index, values


# --------------------------------------------------------------------------------------------------------
# The implementation: one gather or scatter on the storage


def _placement(comps: list[tuple], adv: list) -> list:
    """Output dimensions of NumPy indexing with components ``comps`` (each ``("adv",)`` or a dimension tag):
    the advanced indices' dimensions ``adv`` go where the first advanced component stands when they are
    contiguous, else first (NumPy's rule, which jax follows)."""
    at = [k for k, c in enumerate(comps) if c == ("adv",)]
    if not at:
        return list(comps)
    contiguous = at == list(range(at[0], at[-1] + 1))
    rest = [c for c in comps if c != ("adv",)]
    if not contiguous:
        return list(adv) + rest
    before = sum(1 for c in comps[:at[0]] if c != ("adv",))
    return rest[:before] + list(adv) + rest[before:]


def _at_impl(static, x, values, *arrays):
    method, pos, named, func, kwargs, where = static
    pos = _expand(pos, pos_ndim(x), x.shape, where)
    # 1. {"new": None}: a size-1 axis named "new", taken whole
    new = tuple(n for n, e in named if e == _NEW)
    if new:
        d = x.data
        x = _make(jax.lax.expand_dims(d, tuple(range(d.ndim, d.ndim + len(new)))), x.names + new)
        named = tuple((n, _ALL if e == _NEW else e) for n, e in named)
    # 2. dynamic slices: the window they select, then taken whole (an update writes the window back)
    window: dict = {}
    axis, entries = 0, []
    for e in pos:
        if e[0] == "ds":
            window[axis] = (arrays[e[1]], e[2])
        if e[0] in ("slice", "arr", "ds"):
            axis += 1
        entries.append(_ALL if e[0] == "ds" else e)
    pos = tuple(entries)
    for n, e in named:
        if e[0] == "ds":
            window[n] = (arrays[e[1]], e[2])
    named = tuple((n, _ALL if e[0] == "ds" else e) for n, e in named)
    whole = x
    if window:
        x = indexing.slice_window(x, window, where)
    out = _region_op(method, pos, named, func, kwargs, where, x, values, arrays)
    if method == "get":
        return out
    if window:
        out = indexing.put_window(whole, out, {a: s for a, (s, _) in window.items()}, where)
    if new:
        p = pos_ndim(out)
        out = _make(jax.lax.squeeze(out.data, tuple(p + out.names.index(n) for n in new)),
                    tuple(n for n in out.names if n not in new))
    return out


def _union(x: NamedArray, values: Any, index_arrays: list) -> NamedArray:
    """``x`` broadcast along the names that the index arrays or the values carry and ``x`` lacks (the union
    rule: each slice along such a name is its own updated copy of ``x``)."""
    extra: dict[str, int] = {}
    for a in index_arrays + [values]:
        if type(a) is NamedArray:
            for n, s in engine.named_sizes(a).items():
                if n not in x.names:
                    extra.setdefault(n, s)  # a size conflict is reported with the region's checks
    if not extra:
        return x
    names = x.names + tuple(extra)
    return _make(align(x, names, {**engine.named_sizes(x), **extra}), names)


def _index_shape(arrays: list, where: str) -> tuple[int, ...]:
    """The positional shape the index arrays broadcast to (NumPy's rules)."""
    shapes = [tuple(a.shape) if type(a) is NamedArray else np.shape(a) for a in arrays]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise AxisSizeError(f"{where}: the index arrays' positional shapes {', '.join(map(str, shapes))} do "
                            "not broadcast together") from None


def _region_op(method, pos, named, func, kwargs, where, x, values, arrays):
    """The gather or scatter of the region, on ``x``'s storage; ``pos`` covers every positional axis."""
    if method != "get":
        x = _union(x, values, [arrays[e[1]] for e in pos + tuple(e for _, e in named) if e[0] == "arr"])
    d, own = x.data, x.names
    sizes = engine.named_sizes(x)
    by_name = dict(named)
    # 1. the dimensions the advanced indices make: the positional ones broadcast by NumPy's rules (``bp``),
    # the named ones by name (``labels``): a 1-d array for axis n makes n, a NamedArray index its names. The
    # positional axes of NamedArray indices along names join ``bp``, as one group after x's positional axes
    pos_arrays = [arrays[e[1]] for e in pos if e[0] == "arr"]
    named_pos = [arrays[e[1]] for _, e in named if e[0] == "arr" and type(arrays[e[1]]) is NamedArray
                 and arrays[e[1]].shape]
    bp = _index_shape(pos_arrays + named_pos, where)
    sources, labels_of = [], []
    for n, e in [(None, e) for e in pos] + list(named):
        a = arrays[e[1]] if e[0] == "arr" else None
        if type(a) is NamedArray:
            src = engine.named_sizes(a)
            twice = [m for m in src if m in by_name and m != n]
            if twice:
                raise AxisSpecError(f"{where}: a NamedArray index carries axis {fmt_names(twice)}, which the "
                                    "index also selects along; select along each axis once")
        elif n is not None and np.ndim(a) == 1:
            src = {n: np.shape(a)[0]}
        else:
            continue
        sources.append(src)
        labels_of.append("the index" if n is None else f"the index for axis {n!r}")
    # a name of x that a NamedArray index carries pairs the two up: that axis is indexed by its own positions
    zipped = [n for n in own if n not in by_name and any(n in src for src in sources)]
    labels = join_sizes(sources + [{n: sizes[n]} for n in zipped], where,
                        labels_of + [f"the array's axis {n!r}" for n in zipped])
    order = tuple(labels)
    n_adv = len(bp) + len(order)

    def spread(a, name: str | None = None):
        """Index array ``a`` over the advanced dimensions (bp..., order...), size 1 where it lacks one."""
        if type(a) is NamedArray:
            return align(a, order, pos=len(bp))
        a = jnp.asarray(a)
        if name is not None and a.ndim == 1:
            return a.reshape((1,) * len(bp) + tuple(a.shape[0] if m == name else 1 for m in order))
        shape = (1,) * (len(bp) - a.ndim) + a.shape + (1,) * len(order) if a.ndim else (1,) * n_adv
        return a if a.shape == shape else a.reshape(shape)

    # 2. the storage index, and the dimension each component of it gives (an advanced one: ADV)
    comps: list[tuple] = []
    index: list = []
    axis = 0
    for j, e in enumerate(pos):
        if e[0] == "none":
            comps.append(("new", j))
            index.append(None)
            continue
        comps.append(("pos", axis) if e[0] == "slice" else _ADV)
        index.append(slice(*e[1:]) if e[0] == "slice" else spread(arrays[e[1]]))
        axis += 1
    for n in own:
        e = by_name.get(n, _ALL)
        if n in zipped:
            comps.append(_ADV)
            index.append(spread(jnp.arange(sizes[n]), n))
        elif e[0] == "slice":
            comps.append(("name", n))
            index.append(slice(*e[1:]))
        else:
            comps.append(_ADV)
            index.append(spread(arrays[e[1]], n))
    index = tuple(index)
    out = _placement(comps, [("bp", i) for i in range(len(bp))] + [("name", m) for m in order])
    # the region as x[index] gives it: its positional dimensions by NumPy's rules on the positional part
    # (with the index arrays along names as one more advanced index after it), then the names in the order
    # the storage index gives them (no transpose where none is needed)
    region_pos = _placement(comps[:len(pos)] + ([_ADV] if named_pos else []),
                            [("bp", i) for i in range(len(bp))])
    region = region_pos + [t for t in out if t[0] == "name"]
    names = tuple(t[1] for t in region if t[0] == "name")
    ref = d.at[index]
    if method == "get":
        return _make(transpose(ref.get(**dict(kwargs)), tuple(out.index(t) for t in region)), names)
    if method == "apply":
        return _make(ref.apply(func, **dict(kwargs)), own)
    dim = dict(zip(out, jax.eval_shape(lambda v: v[index], d).shape))
    v = _values(values, names, {t[1]: dim[t] for t in region if t[0] == "name"},
                tuple(dim[t] for t in region_pos), where)
    v = transpose(v, tuple(region.index(t) for t in out))
    return _make(getattr(ref, method)(v, **dict(kwargs)), own)


_ADV = ("adv",)
_ALL = ("slice", None, None, None)
_NEW = ("new",)


def _expand(pos: tuple, p: int, shape: tuple[int, ...], where: str) -> tuple:
    """The positional entries over exactly the ``p`` positional axes (``...`` or the end filled by ``:``)."""
    used = sum(1 for e in pos if e[0] in ("slice", "arr", "ds"))
    if used > p:
        raise IndexError(f"{where}: too many indices for the positional axes: {used} indices for {p} "
                         f"positional axes (shape {shape}; index named axes by name: x.at[{{'name': i}}])")
    if pos.count(("ellipsis",)) > 1:
        raise IndexError(f"{where}: an index can only have a single ellipsis ('...')")
    fill = (_ALL,) * (p - used)
    if ("ellipsis",) in pos:
        k = pos.index(("ellipsis",))
        return pos[:k] + fill + pos[k + 1:]
    return pos + fill


def _values(values: Any, names: tuple[str, ...], sizes: dict[str, int], pshape: tuple[int, ...],
            where: str):
    """``values``' storage laid out as the region (its positional axes, then ``names``), size 1 where they
    broadcast."""
    if type(values) is NamedArray:
        own = engine.named_sizes(values)
        extra = [n for n in own if n not in sizes]
        if extra:
            raise AxisSpecError(f"{where}: the values have axes {fmt_names(extra)} that the selected region "
                                f"lacks (it has {fmt_names(names) or 'no named axes'}): the index selects "
                                "one element along each, so the values cannot carry them")
        for n, s in own.items():
            if s != sizes[n]:
                raise AxisSizeError(f"{where}: axis {n!r} has size {s} in the values but size {sizes[n]} in "
                                    "the selected region")
        vshape = values.shape
    else:
        values = jnp.asarray(values)
        vshape = values.shape
    try:
        fits = len(vshape) <= len(pshape) and np.broadcast_shapes(vshape, pshape) == pshape
    except ValueError:
        fits = False
    if not fits:
        raise AxisSizeError(f"{where}: the values' positional shape {tuple(vshape)} does not broadcast to "
                            f"the selected region's positional shape {pshape}")
    if type(values) is NamedArray:
        return align(values, names, pos=len(pshape))
    return values.reshape((1,) * (len(pshape) - values.ndim) + values.shape + (1,) * len(names))
