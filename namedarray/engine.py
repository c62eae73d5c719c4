"""The dispatch engine: how every named operation runs.

An operation is a pure *implementation* written on NamedArrays, ``impl(static, *operands)``, where ``static``
holds its hashable configuration (the jax function, axis arguments, keyword options) and ``operands`` its
arrays (NamedArrays, jax/NumPy arrays, Python scalars). :func:`run` executes it:

* under tracing (inside ``jit``/``grad``/``scan``/``xmap``) the implementation runs inline and emits the lax
  operations a positional programmer would write;
* eagerly it runs as ONE cached ``jax.jit`` of the implementation per ``static``. The jit cache is keyed by
  the operands' pytree structure (their axis names, in storage order), shapes, dtypes and weak types, so
  alignment (reshapes, transposes, broadcasts) is fused with the operation into a single dispatch.

The implementations share three building blocks defined here: :func:`elementwise` (broadcast by name),
:func:`reduce` (reduce over positions and names) and :func:`along` (an operation along one axis that keeps
it), plus :func:`lift`, which vectorises any positional function over named axes (``nx.nmap``).

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((2, 3)), ["a", "b"])
>>> y = nx.wrap(jnp.ones(3), ["b"])
>>> (x + y).named_shape
{'a': 2, 'b': 3}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import env as _env
from .array import NamedArray, _make, from_storage, is_named
from .errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    PositionalMisuseError,
    UnboundAxisError,
    fmt_names,
)
from .shape import canonical, join_sizes

__all__ = ["run", "elementwise", "reduce", "along", "lift", "normalize_axis", "stats"]

_Tracer = jax.core.Tracer
try:  # the concrete array type: `type(d) is _ArrayImpl` rules out a tracer far faster than isinstance
    from jax._src.array import ArrayImpl as _ArrayImpl
except ImportError:  # pragma: no cover - a jax without it only loses the shortcut
    _ArrayImpl = _Tracer

# Eager kernels: static configuration -> jitted implementation. Bounded by the number of distinct
# (operation, static arguments) pairs a program uses; jax.jit keeps its own per-layout cache inside.
_kernels: dict = {}


class _Stats:
    """Counters the tests read to check the mechanism (one dispatch per eager op), not timings."""

    def __init__(self):
        self.kernels_built = 0
        self.eager_calls = 0

    def reset(self) -> None:
        self.__init__()


stats = _Stats()


class _Kernel:
    """One jitted implementation on *storage* arrays, for one layout of its operands.

    Operands enter as raw arrays (no NamedArray pytree to flatten per call) and the result's structure (its
    axis names) is recorded when jax traces the kernel. Names never depend on sizes or dtypes, only on the
    operands' names and ranks, which the layout key fixes, so one recorded structure serves every call.
    """

    __slots__ = ("jitted", "names", "tree")

    def __init__(self, impl: Callable, static: Any, layout: tuple):
        self.names = None  # the result's names, when the result is one NamedArray
        self.tree = None  # else its pytree structure

        def on_storage(*datas):
            ops = [d if lay is None or lay[0] is None else _make(d, lay[0]) for d, lay in zip(datas, layout)]
            out = impl(static, *ops)
            if type(out) is NamedArray:
                self._record(out.names, None)
                return out.data
            leaves, tree = jax.tree.flatten(out)
            self._record(None, tree)
            return leaves

        self.jitted = jax.jit(on_storage)

    def _record(self, names, tree) -> None:
        if self.names is None and self.tree is None:
            self.names, self.tree = names, tree
        elif (names, tree) != (self.names, self.tree):
            raise AssertionError(f"the result structure of a kernel changed between traces: "
                                 f"{self.names or self.tree} then {names or tree}")

    def __call__(self, datas):
        out = self.jitted(*datas)
        if self.names is not None:
            return _make(out, self.names)
        return jax.tree.unflatten(self.tree, out)


def run(impl: Callable, static: Any, operands: tuple) -> Any:
    """Run ``impl(static, *operands)``: inline when tracing, else as one cached jitted kernel.

    The eager kernel cache is keyed by the implementation, its static configuration, the axis environment
    and the operands' layout (names and rank); jax's own cache inside each kernel handles shapes, dtypes
    and weak types. ``static`` must be hashable for the kernel to be cached (else the implementation runs
    op by op).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> def scaled(static, x):
    ...     return x * static
    >>> run(scaled, 3.0, (nx.wrap(jnp.ones(2), ["k"]),)).unwrap(["k"]).tolist()
    [3.0, 3.0]
    """
    datas = []
    layout = []
    for v in operands:
        if type(v) is NamedArray:
            d = v.data
            if type(d) is not _ArrayImpl and isinstance(d, _Tracer):
                return _run_traced(impl, static, operands)
            datas.append(d)
            layout.append((v.names, len(d.shape)))
        else:
            if type(v) is not _ArrayImpl and isinstance(v, _Tracer):
                return _run_traced(impl, static, operands)
            datas.append(v)
            layout.append((None, getattr(v, "ndim", -1)) if v is not None else None)
    env = _env.current()
    layout = tuple(layout)
    key = (impl, static, layout, None if env is _env.EMPTY else env)
    try:
        kernel = _kernels.get(key)
    except TypeError:  # unhashable static configuration: run op by op rather than fail
        return impl(static, *operands)
    if kernel is None:
        kernel = _kernels[key] = _Kernel(impl, static, layout)
        stats.kernels_built += 1
    stats.eager_calls += 1
    return kernel(datas)


def _run_traced(impl: Callable, static: Any, operands: tuple):
    out = impl(static, *operands)
    if _env.current().resources:  # inside nx.xmap with resources: no value may use one twice
        from .resources import check_created

        check_created(out, static)
    return out


def clear_cache() -> None:
    """Forget every eager kernel (tests that count kernels start from an empty table)."""
    _kernels.clear()


# --------------------------------------------------------------------------------------------------------
# Alignment


def named_sizes(x: NamedArray) -> dict[str, int]:
    """``x``'s named shape as a plain dict, checking that a transform left its storage valid.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> named_sizes(nx.wrap(jnp.zeros((2, 3)), ["a", ...]))
    {'a': 2}
    """
    d = x.data
    k = len(x.names)
    if d.ndim < k:
        raise AxisSpecError(
            f"a NamedArray with names {fmt_names(x.names)} holds data of rank {d.ndim}: a transform "
            "(vmap/scan/map) mapped one of its named axes; map a positional axis instead")
    return dict(zip(x.names, d.shape[d.ndim - k:]))


def pos_ndim(x: NamedArray) -> int:
    """The number of positional axes (negative when a transform mapped a named axis away).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> pos_ndim(nx.wrap(jnp.zeros((2, 3)), ["a", ...]))
    1
    """
    return x.data.ndim - len(x.names)


def align(v: Any, names: tuple[str, ...], sizes: dict[str, int] | None = None) -> Any:
    """Storage of ``v`` laid out as (its positional axes, ``names``), size 1 where ``v`` lacks a name.

    Right-aligned broadcasting of such storages is then exactly broadcasting by name plus NumPy's
    positional rules. Missing names are broadcast to ``sizes`` when given. ``names`` must be canonical
    (sorted) and include every name of ``v``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> align(nx.wrap(jnp.zeros((5, 3)), [None, "b"]), ("a", "b")).shape
    (5, 1, 3)
    """
    if type(v) is NamedArray:
        if v.names == names:
            return v.data
        d = v.data
        p = d.ndim - len(v.names)
        if sizes is None and p == 0 and names[len(names) - len(v.names):] == v.names:
            # a trailing run of the names (a bias {hidden} against {batch, hidden}): NumPy's right-aligned
            # broadcasting already lines it up, exactly as positional code would rely on
            return d
        own = dict(zip(v.names, d.shape[p:]))
        extra = set(v.names) - set(names)
        if extra:
            raise AxisSpecError(f"cannot align names {fmt_names(v.names)} to {fmt_names(names)}")
        # v.names is a sorted subset of the sorted `names`: a reshape inserts the missing axes.
        shape = d.shape[:p] + tuple(own.get(n, 1) for n in names)
        d = jax.lax.reshape(d, shape)  # the primitive: jnp's reshape costs trace time on every op
        if sizes is not None:
            d = jnp.broadcast_to(d, d.shape[:p] + tuple(sizes[n] for n in names))
        return d
    if not names or v is None or isinstance(v, (int, float, complex, bool)):
        return v
    v = jnp.asarray(v)
    if v.ndim == 0:
        return v
    d = jax.lax.reshape(v, v.shape + (1,) * len(names))
    if sizes is not None:
        d = jnp.broadcast_to(d, v.shape + tuple(sizes[n] for n in names))
    return d


def join(operands: Sequence[Any], where: str) -> dict[str, int]:
    """The named shape of the broadcast of ``operands``; a name with two sizes is an :class:`AxisSizeError`.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> join([nx.wrap(jnp.zeros(2), ["a"]), 1.0, nx.wrap(jnp.zeros(3), ["b"])], "example")
    {'a': 2, 'b': 3}
    """
    return join_sizes([named_sizes(v) if type(v) is NamedArray else None for v in operands], where)


# --------------------------------------------------------------------------------------------------------
# Elementwise


def _elementwise_impl(static, *operands):
    fn, where, kwargs = static
    named = [v for v in operands if type(v) is NamedArray]
    first = named[0]
    names = first.names
    same = True
    for v in named[1:]:
        if v.names != names:
            same = False
            break
    if same:
        k = len(names)
        for v in named:  # trace time only: a transform that mapped a named axis left too few dims
            if v.data.ndim < k:
                named_sizes(v)
        tail = first.data.shape[first.data.ndim - k:] if k else ()
        for v in named[1:]:
            if (v.data.shape[v.data.ndim - k:] if k else ()) != tail:
                join(operands, where)  # raises the size error with the user's names
        datas = [align(v, names) for v in operands]
    else:
        names = canonical(join(operands, where))
        datas = [align(v, names) for v in operands]
    out = fn(*datas, **dict(kwargs))
    if isinstance(out, tuple):
        return tuple(_make(o, names) for o in out)
    return _make(out, names)


def elementwise(fn: Callable, operands: tuple, where: str, kwargs: tuple = ()) -> Any:
    """``fn(*operands)`` broadcast by name: the result's named shape is the union of the operands'.

    ``kwargs`` are static options as sorted ``(name, value)`` pairs.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> elementwise(jnp.add, (nx.wrap(jnp.ones(2), ["a"]), nx.wrap(jnp.ones(3), ["b"])), "add").named_shape
    {'a': 2, 'b': 3}
    """
    for v in operands:
        if type(v) is NamedArray:
            return run(_elementwise_impl, (fn, where, kwargs), operands)
    return fn(*operands, **dict(kwargs))


# --------------------------------------------------------------------------------------------------------
# Axis arguments


def normalize_axis(axis: Any, x: NamedArray, where: str, *,
                   allow_unbound: bool = False) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Split an ``axis=`` argument into (positional ints, names), validating both.

    ``axis`` is None (every positional axis), an int, a name, or a tuple mixing both. Names the value does
    not carry must be bound by an enclosing ``nx.xmap`` when ``allow_unbound``; else they are an error.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> normalize_axis((-1, "a"), nx.wrap(jnp.zeros((2, 3, 4)), ["a", ...]), "example")
    ((1,), ('a',))
    """
    p = pos_ndim(x)
    if p < 0:
        named_sizes(x)  # raises: a transform mapped one of the named axes
    if axis is None:
        return tuple(range(p)), ()
    items = axis if isinstance(axis, (tuple, list)) else (axis,)
    ints: list[int] = []
    names: list[str] = []
    for a in items:
        if isinstance(a, str):
            if a in names:
                raise DuplicateAxisError(f"{where}: duplicate value in 'axis': {a!r}")
            if a not in x.names:
                env = _env.current()
                if not env.is_bound(a) and a not in env.loops:
                    raise UnboundAxisError(
                        f"{where}: unbound axis name {a!r}: the value's named axes are "
                        f"{fmt_names(x.names) or 'none'} (positional shape {x.shape}) and no enclosing "
                        "nx.xmap binds it")
                env.size(a, where)  # a name computed by a serial loop cannot be reduced here
                if not allow_unbound:
                    raise AxisSpecError(f"{where}: the value does not carry axis {a!r} "
                                        f"(it has {fmt_names(x.names) or 'no names'})")
            names.append(a)
        elif isinstance(a, (int, np.integer)) and not isinstance(a, bool):
            a = int(a)
            if not -p <= a < p:
                raise AxisSpecError(
                    f"{where}: positional axis {a} is out of bounds for a value with {p} positional "
                    f"axes (shape {x.shape}; named axes are addressed by name, not by position)")
            a %= p
            if a in ints:
                raise DuplicateAxisError(f"{where}: duplicate value in 'axis': {a}")
            ints.append(a)
        else:
            raise AxisSpecError(f"{where}: axis must be an int, an axis name or a tuple of them, got {a!r}")
    return tuple(ints), tuple(names)


def _broadcast_missing(x: NamedArray, names: Sequence[str]) -> NamedArray:
    """``x`` broadcast along bound names it lacks (reducing over such a name then means what xmap said)."""
    missing = [n for n in names if n not in x.names]
    if not missing:
        return x
    env = _env.current()
    sizes = named_sizes(x)
    for n in missing:
        sizes[n] = env.size(n)
    out_names = canonical(sizes)
    return _make(align(x, out_names, sizes), out_names)


# --------------------------------------------------------------------------------------------------------
# Reductions


def _reduce_impl(static, x, *extra):
    fn, where, axis, keepdims, kwargs, single = static
    ints, names = normalize_axis(axis, x, where, allow_unbound=True)
    x = _broadcast_missing(x, names)
    # a where= mask (aligned to x) follows x along the names it was just broadcast to
    extra = tuple(_broadcast_missing(e, names) if type(e) is NamedArray else e for e in extra)
    p = pos_ndim(x)
    data_axes = ints + tuple(p + x.names.index(n) for n in names)
    out_names = tuple(n for n in x.names if n not in names)
    kw = dict(kwargs)
    if single:
        if len(data_axes) != 1:
            raise AxisSpecError(f"{where} reduces over exactly one axis, got axis={axis!r}")
        data_axes = data_axes[0]
    out = fn(x.data, *extra, axis=data_axes, **kw)
    if keepdims:
        # keepdims keeps positional axes only (size 1); the reduced named axes leave the named shape.
        # Done here by a reshape: jnp's own keepdims is wrong for some functions on 0-d input (median).
        kept = tuple(1 if i in ints else s for i, s in enumerate(x.data.shape[:p]))
        kept += tuple(x.data.shape[p + x.names.index(n)] for n in out_names)
        lead = out.ndim - (len(kept) - len(ints))  # e.g. quantile's leading q axes
        out = out.reshape(out.shape[:lead] + kept)
    return _make(out, out_names)


def reduce(fn: Callable, x: Any, axis: Any, where: str, keepdims: bool = False, kwargs: tuple = (),
           extra: tuple = (), single: bool = False) -> Any:
    """Reduce ``x`` over ``axis`` (positions and/or names); ``axis=None`` reduces positional axes only.

    A name the value lacks but an enclosing ``nx.xmap`` binds reduces as if the value were broadcast along
    it (sum multiplies by the size; mean, max and min return the value), as in xmap. ``extra`` operands
    follow ``x`` into ``fn`` (quantile's ``q``, a ``where=`` mask aligned to ``x``); ``single`` asks for
    exactly one axis (argmax).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> reduce(jnp.sum, nx.wrap(jnp.ones((2, 3)), ["a", "b"]), "b", "sum").unwrap(["a"]).tolist()
    [3.0, 3.0]
    """
    if type(x) is not NamedArray:
        kw = dict(kwargs, keepdims=True) if keepdims else dict(kwargs)
        return fn(x, *extra, axis=axis, **kw)
    if isinstance(axis, list):
        axis = tuple(axis)
    return run(_reduce_impl, (fn, where, axis, keepdims, kwargs, single), (x, *extra))


# --------------------------------------------------------------------------------------------------------
# Operations along one axis that keep it (cumsum, sort, flip, roll, diff, ...)


def _along_impl(static, x, *extra):
    fn, where, axis, kwargs = static
    ints, _ = normalize_axis(axis, x, where)
    p = pos_ndim(x)

    def storage_axis(a):
        return p + x.names.index(a) if isinstance(a, str) else int(a) % p

    # in the order given: per-axis options (roll's shifts) pair with the axes by position
    if axis is None:
        ax = ints
    elif isinstance(axis, tuple):
        ax = tuple(storage_axis(a) for a in axis)
    else:
        ax = storage_axis(axis)
    out = fn(x.data, *extra, axis=ax, **dict(kwargs))
    if isinstance(out, (tuple, list)):
        return type(out)(_make(o, x.names) for o in out)
    return _make(out, x.names)


def along(fn: Callable, x: Any, axis: Any, where: str, kwargs: tuple = (), extra: tuple = ()) -> Any:
    """``fn(x, axis=...)`` on the axis given by position or name; the other axes are batch axes.

    A tuple of axes reaches ``fn`` in the order given (``roll``'s shifts pair with it).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> along(jnp.cumsum, nx.wrap(jnp.ones((2, 3)), ["a", "b"]), "b", "cumsum").unwrap(["a", "b"])[0].tolist()
    [1.0, 2.0, 3.0]
    """
    if type(x) is not NamedArray:
        return fn(x, *extra, axis=axis, **dict(kwargs))
    if isinstance(axis, list):
        axis = tuple(axis)
    return run(_along_impl, (fn, where, axis, kwargs), (x, *extra))


# --------------------------------------------------------------------------------------------------------
# Lifting a positional function over named axes (nx.nmap)


def _is_dynamic(v) -> bool:
    return type(v) is NamedArray or isinstance(v, (jax.Array, np.ndarray, np.generic))


def vectorize(f: Callable, named_flags: Sequence[tuple[str, ...] | None], names: tuple[str, ...]):
    """``f`` on storages, vmapped over ``names`` (sorted), the first name innermost.

    The outermost map takes the last name, so each map finds its name as the last storage axis of the
    operands that carry it (names are stored sorted) once the maps outside it have taken theirs, and each
    stacks its results last: the outputs come out with their names sorted, as storage wants.
    """
    fn = f
    for name in names:
        in_axes = tuple(-1 if (ns is not None and name in ns) else None for ns in named_flags)
        fn = jax.vmap(fn, in_axes=in_axes, out_axes=-1, axis_name=name)
    return fn


def _lift_impl(static, *dyn):
    f, treedef, slots, where = static
    try:
        sizes = join(dyn, where)
    except AxisSizeError:  # say which argument (and where in its pytree), not which dynamic leaf
        join_sizes([named_sizes(v) if type(v) is NamedArray else None for v in dyn], where,
                   _dyn_labels(treedef, slots))
        raise
    names = canonical(sizes)
    flags = [v.names if type(v) is NamedArray else None for v in dyn]

    def body(*datas):
        leaves = list(slots)
        it = iter(datas)
        for i, s in enumerate(leaves):
            if s is _DYN:
                leaves[i] = next(it)
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        return f(*args, **kwargs)

    out = vectorize(body, flags, names)(*[v.data if type(v) is NamedArray else v for v in dyn])
    return jax.tree.map(lambda o: _out_leaf(o, names), out, is_leaf=is_named)


def _dyn_labels(treedef, slots) -> list[str]:
    """``argument 1``, ``argument 0[2]``, ``keyword argument 'b'``: the dynamic leaves, for messages."""
    marks = jax.tree.unflatten(treedef, list(range(len(slots))))
    labels = {}
    for path, i in jax.tree_util.tree_flatten_with_path(marks)[0]:
        where, key, rest = path[0].idx, path[1], jax.tree_util.keystr(tuple(path[2:]))
        labels[i] = f"argument {key.idx}{rest}" if where == 0 else f"keyword argument {key.key!r}{rest}"
    return [labels[i] for i, s in enumerate(slots) if s is _DYN]


def _out_leaf(o, names):
    if type(o) is NamedArray:
        # f produced names of its own: the vmapped names were appended after them
        inner = o.names
        return from_storage(o.data, inner + names, "nx.nmap")
    return _make(o, names) if hasattr(o, "ndim") else o


class _DynSlot:
    __slots__ = ()

    def __repr__(self):
        return "<dynamic>"

    def __hash__(self):
        return 0

    def __eq__(self, other):
        return other is self


_DYN = _DynSlot()


def lift(f: Callable, args: tuple, kwargs: dict, where: str) -> Any:
    """Call positional ``f`` vectorised over every named axis of the NamedArrays among its arguments.

    Arrays anywhere in ``args``/``kwargs`` are operands; every other leaf is static configuration (it keys
    the eager kernel). Without a NamedArray among them this is just ``f(*args, **kwargs)``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> lift(jnp.linalg.norm, (nx.wrap(jnp.ones((4, 3)), ["b", ...]),), {}, "norm").named_shape
    {'b': 4}
    """
    leaves, treedef = jax.tree.flatten((args, kwargs), is_leaf=is_named)
    dyn = []
    slots = []
    any_named = False
    for leaf in leaves:
        if _is_dynamic(leaf):
            dyn.append(leaf)
            slots.append(_DYN)
            any_named = any_named or type(leaf) is NamedArray
        else:
            slots.append(leaf)
    if not any_named:
        return f(*args, **kwargs)
    static = (f, treedef, tuple(slots), where)
    try:
        hash(static)
    except TypeError:
        return _lift_impl(static, *dyn)
    return run(_lift_impl, static, tuple(dyn))


def positional_only(fn: Callable, x: Any, where: str) -> Any:
    """``fn`` of ``x``'s storage, for functions whose output size depends on values (``nonzero``).

    They cannot vectorise over names, so a value with named axes is a :class:`PositionalMisuseError`.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> positional_only(jnp.flatnonzero, nx.wrap(jnp.array([0, 3, 4])), "flatnonzero").tolist()
    [1, 2]
    """
    if type(x) is NamedArray and x.names:
        raise PositionalMisuseError(
            f"{where} cannot vectorise over named axes {fmt_names(x.names)}: its output size depends on "
            "the values. Move the names to positions first with x.unwrap(...) or nx.unwrap(x, ...)")
    return fn(x.data if type(x) is NamedArray else x)
