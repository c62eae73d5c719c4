"""The dispatch engine: how every named operation runs.

An operation is a pure *implementation* written on NamedArrays, ``impl(static, *operands)``, where ``static``
holds its hashable configuration (the jax function, axis arguments, keyword options) and ``operands`` its
arrays (NamedArrays, jax/NumPy arrays, Python scalars). :func:`run` executes it:

* under tracing (inside ``jit``/``grad``/``scan``/``xmap``) the implementation runs inline and emits the lax
  operations a positional programmer would write;
* eagerly it runs as ONE cached kernel (:mod:`namedarray.core.kernels`): a ``jax.jit`` of the implementation
  per
  static configuration, operand layout (axis names in storage order, ranks) and axis environment, traced
  per shapes and dtypes, so alignment (:mod:`namedarray.core.layout`: reshapes, transposes, broadcasts) is
  fused with the operation into a single dispatch.

Under a trace there is no kernel to reuse, and the Python that decides an operation's layout would run on
every traced op. What it decides is a function of the operands' names and abstract values and of the
environment, so the hottest implementations (elementwise, reductions, the named dot) keep it in trace-time
plans (:class:`namedarray.core.kernels.Plans`) under exactly that key: a second trace of the same layout
goes straight to the jax calls, and emits the jaxpr positional code would (a missing leading name is left to
the operation's own broadcasting where NumPy's rank promotion is allowed, as ``x + b`` does in jnp).

Results keep the natural storage order of the layout rule (:mod:`namedarray.core.layout`). The implementations
share three building blocks defined here: :func:`elementwise` (broadcast by name),
:func:`reduce` (reduce over positions and names) and :func:`along` (an operation along one axis that keeps
it), plus :func:`call_lifted`, which vectorises any positional function over named axes (``nx.nmap``).

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((2, 3)), ["a", "b"])
>>> y = nx.wrap(jnp.ones(3), ["b"])
>>> (x + y).named_shape
{'a': 2, 'b': 3}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import caches, kernels, placement
from ..core import env as _env
from ..core.array import _ONE, NamedArray, _make, from_storage, is_named, pack, to_storage, unpack
from ..core.layout import align, join, named_sizes, pos_ndim, union
from ..core.shape import join_sizes
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    NamedAxisError,
    PerElementAxisError,
    PositionalMisuseError,
    UnboundAxisError,
    did_you_mean,
    fmt_names,
    not_an_array,
)
from .arguments import mistyped

__all__ = ["run", "fire", "elementwise", "reduce", "check_reduces", "along", "call_lifted", "normalize_axis",
           "stats"]

_Tracer = jax.core.Tracer
try:  # the concrete array type: `type(d) is _ArrayImpl` rules out a tracer far faster than isinstance
    from jax._src.array import ArrayImpl as _ArrayImpl
except ImportError:  # pragma: no cover - a jax without it only loses the shortcut
    _ArrayImpl = _Tracer
#: The type of a concrete jax array: an operand whose ``type`` is this is no tracer (call sites with their own
#: kernel index take their hot path only then).
ArrayImpl = _ArrayImpl

stats = kernels.stats


def run(impl: Callable, static: Any, operands: tuple, site: dict | None = None, key: Any = None) -> Any:
    """Run ``impl(static, *operands)``: inline when tracing, else as one cached jitted kernel.

    The eager kernel (:mod:`namedarray.core.kernels`) is keyed by the implementation, its static configuration
    (strictly: ``1`` and ``1.0`` differ), the axis environment and the operands' layout (names and rank);
    jax's own cache inside each kernel handles shapes, dtypes and weak types. An unhashable ``static`` runs
    op by op. A call site with its own index of kernels (:func:`namedarray.core.kernels.site`) passes it
    with the key it found nothing under: the kernel is filed there once it ran, and the site's next call
    runs it through :func:`fire`.

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
    kernel = kernels.kernel_for(impl, static, tuple(layout), None if env is _env.EMPTY else env,
                                _make, unpack)
    if kernel is None:  # unhashable static configuration: run op by op rather than fail
        return impl(static, *operands)
    next(stats.eager)
    try:
        out = kernel.jitted(*datas)
    except BaseException:
        kernels.forget_failed(kernel)
        raise
    if not kernel.ok:
        kernel.ok = True
    if site is not None:
        kernels.file(site, key, kernel)
    result = kernel.result
    structure = result.single if not result.varies else result.lookup(datas)
    if structure[0] is _ONE:  # one NamedArray, the usual result: built here without a call to pack
        return _make(out, structure[1])
    return pack(out, structure)


def fire(kernel: kernels.Kernel, *datas: Any) -> Any:
    """Call ``kernel``, found in a call site's index, on the storage arrays ``datas``.

    Everything :func:`run` decides before the call (the operands are concrete, the key, the validation the
    first trace made) held when the site filed the kernel under the key it found it by, so only the call
    and the result remain: the hot path of an eager reduction or named dot.
    """
    out = kernel.jitted(*datas)
    kernel.tick = next(_clock)  # the table's least-recently-used stamp, as a lookup in it gives
    next(stats.eager)
    result = kernel.result
    structure = result.single if not result.varies else result.lookup(datas)
    if structure[0] is _ONE:
        return _make(out, structure[1])
    return pack(out, structure)


_clock = kernels.clock


def _run_traced(impl: Callable, static: Any, operands: tuple):
    out = impl(static, *operands)
    if _env.current().resources:  # inside nx.xmap with resources: no value may use one twice
        for check in _created_checks:
            check(out, static)
    return out


# Checks on every value an operation creates under nx.xmap with resources, installed from above
# (namedarray.adapter.resources) so that the engine imports nothing of the layers built on it.
_created_checks: list[Callable[[Any, Any], None]] = []


def install_created_check(check: Callable[[Any, Any], None]) -> None:
    """Have every traced operation inside ``nx.xmap`` with resources call ``check(result, static)``."""
    if check not in _created_checks:
        _created_checks.append(check)


clear_cache = caches.clear_caches


# --------------------------------------------------------------------------------------------------------
# Elementwise


def _planned(fn: Callable, operands: tuple, where: str, kwargs: tuple, key: tuple | None) -> Any:
    """``fn`` of ``operands`` by the plan an earlier trace of their layout (``key``) made: the same
    transposes and reshapes; None where there is none."""
    found = None if key is None else _ELEMENTWISE_PLANS.get(key)
    if found is None:
        return None
    names, recipes = found
    datas = [(v.data if type(v) is NamedArray else v) if r is None else _realign(v, r)
             for v, r in zip(operands, recipes)]
    return _apply(fn, kwargs, datas, names, operands, where)


def _elementwise_impl(static, *operands):
    fn, where, kwargs = static
    broadcasts = _broadcasts(fn)
    key = _layout_key(operands, _env.current(), broadcasts)
    out = _planned(fn, operands, where, kwargs, key)
    if out is not None:
        return out
    names = union(operands)
    pos = -1
    ranks_differ = False
    for v in operands:  # the positional rank of each operand: equal ranks need no padding
        r = pos_ndim(v) if type(v) is NamedArray else getattr(v, "ndim", 0)
        if r < 0:
            named_sizes(v)  # raises: a transform mapped one of its named axes
        if r and pos >= 0 and r != pos:
            ranks_differ = True
        pos = max(pos, r)
    same = True
    k = len(names)
    for v in operands:
        if type(v) is NamedArray and v.names != names:
            same = False
            break
    if same:  # one layout: check the named sizes agree without building the join (trace time only)
        tail = None
        for v in operands:
            if type(v) is NamedArray:
                t = v.data.shape[v.data.ndim - k:] if k else ()
                if tail is None:
                    tail = t
                elif t != tail:
                    join(operands, where)  # raises the size error with the user's names
    else:
        join(operands, where)
    pad = pos if ranks_differ else None
    # where NumPy's rules may add leading axes (rank promotion allowed), the operation broadcasts a
    # missing leading name itself, inside its own cached trace, as it does in positional code
    # (not on Explicit mesh axes, where the layouts are joined below name by name over full-rank storages)
    explicit = k and len(operands) > 1 and placement.explicit_in_context()
    implicit = broadcasts and _rank_promotion.value == "allow" and not explicit
    loose = names or pad is not None  # a plain array is reshaped: as a jax array
    operands_ = [v if type(v) is NamedArray or v is None or type(v) in _SCALARS or not loose
                 else jnp.asarray(v) for v in operands]
    recipes = tuple(_recipe(v, names, pad, implicit) for v in operands_)
    datas = [(v.data if type(v) is NamedArray else v) if r is None else _realign(v, r)
             for v, r in zip(operands_, recipes)]
    if explicit:
        # On Explicit mesh axes jax joins the operands' layouts dim by dim, and two names split over one mesh
        # axis in different operands (fully sharded rules: a parameter's `embed`, an activation's `batch`)
        # would split the result twice over it: lay them out as the result's names rank first
        datas = placement.align_explicit_layouts(
            datas, [names if type(v) is NamedArray else None for v in operands], _env.current().mapping())
        key = None
    out = _apply(fn, kwargs, datas, names, operands, where)
    if key is not None:  # kept once the operation succeeded: a failed call leaves nothing behind
        _ELEMENTWISE_PLANS.put(key, (names, recipes))
    return out


# What broadcasts every operand it is given as NumPy does, so that a missing leading axis may be left to it:
# jax.numpy's ufuncs, the comparisons and where. Not every elementwise function does (isclose broadcasts its
# a and b, not an rtol array), and those get every operand at full rank.
_BROADCASTING = frozenset({jnp.greater, jnp.greater_equal, jnp.less, jnp.less_equal, jnp.equal, jnp.not_equal,
                           jnp.where})


def _broadcasts(fn: Callable) -> bool:
    """Whether ``fn`` may be left to add a missing leading axis itself (part of an alignment's plan key)."""
    return type(fn) is jnp.ufunc or fn in _BROADCASTING


def _apply(fn: Callable, kwargs: tuple, datas: list, names: tuple[str, ...], operands: tuple, where: str):
    try:
        out = fn(*datas, **dict(kwargs)) if kwargs else fn(*datas)
    except (TypeError, ValueError):
        _check_positional(operands, where)
        raise
    if isinstance(out, tuple):
        return tuple(_make(o, names) for o in out)
    return _make(out, names)


_SCALARS = frozenset((int, float, complex, bool))
_rank_promotion = jax._src.config.numpy_rank_promotion
# Under a trace: the names of each layout's result and how each operand is laid out for it
_ELEMENTWISE_PLANS = kernels.plans


def _layout_key(operands: tuple, env: _env.AxisEnv, broadcasts: bool) -> tuple | None:
    """What an elementwise operation's alignment is a function of: each operand's names and abstract value
    (a Python scalar's type), the environment and NumPy's rank promotion; None where an operand is of
    another kind (a NumPy array, a list), or the mesh in context has Explicit axes (aligned afresh every
    time). A concrete jax array counts by its abstract value, as a tracer does: a constant the traced
    function closes over (a bias captured rather than passed) is aligned as a traced operand would be.
    ``broadcasts``: whether the operation may be left to add a missing leading axis itself."""
    parts = []
    for v in operands:
        t = type(v)
        if t is NamedArray:
            d = v.data
            if type(d) is not _ArrayImpl and not isinstance(d, _Tracer):
                return None
            parts.append((v.names, d.aval))
        elif t in _SCALARS or v is None:
            parts.append(t)
        elif t is _ArrayImpl or isinstance(v, _Tracer):
            parts.append(v.aval)
        else:
            return None
    if len(parts) > 1 and placement.explicit_in_context():  # layouts joined by name: aligned afresh
        return None
    env_key = None if env is _env.EMPTY else env
    return ("elementwise", tuple(parts), env_key, _rank_promotion.value, broadcasts)


def _recipe(v: Any, names: tuple[str, ...], pad: int | None, implicit: bool) -> tuple | None:
    """How :func:`namedarray.core.layout.align` lays ``v`` out as (``pad`` positional axes, ``names``):
    (a transpose or None, a reshape or None), or None when it is used as it is. With ``implicit``, leading
    size-1 axes are left to the operation's own broadcasting."""
    if type(v) is NamedArray:
        d = v.data
        own = v.names
        shape_now = d.shape
        p = len(shape_now) - len(own)
        if own == names and (pad is None or pad == p):
            return None
        order = tuple(n for n in names if n in own)
        perm = None
        if order != own:
            perm = tuple(range(p)) + tuple(p + own.index(n) for n in order)
            shape_now = tuple(shape_now[i] for i in perm)
        shape_of = dict(zip(order, shape_now[p:]))
        lead = () if pad is None else (1,) * (pad - p)
        shape: tuple | None = lead + shape_now[:p] + tuple(shape_of.get(n, 1) for n in names)
        missing = len(names) - len(order)
        # the axes added are all leading (what broadcasting may add) only where the names v lacks come first
        # and no positional axis of v stands before them
        leading = not missing or (p == 0 and names[missing:] == order)
    elif v is None or type(v) in _SCALARS or (not names and pad is None) or v.ndim == 0:
        return None
    else:
        perm = None
        shape_now = v.shape
        lead = () if pad is None else (1,) * (pad - v.ndim)
        shape = lead + shape_now + (1,) * len(names)
        leading = not names
    if shape == shape_now:
        shape = None
    elif implicit and leading:  # decided by which axes are added, never by their sizes: (1,) -> (1, 1) may
        shape = None            # add a trailing axis the operation would not add
    return None if perm is None and shape is None else (perm, shape)


def _realign(v: Any, recipe: tuple) -> Any:
    d = v.data if type(v) is NamedArray else v
    perm, shape = recipe
    if perm is not None:
        d = jax.lax.transpose(d, perm)
    if shape is not None:
        d = jax.lax.reshape(d, shape)  # the primitive: jnp's reshape costs trace time on every op
    return d


def _check_positional(operands: tuple, where: str) -> None:
    """Raise an :class:`AxisSizeError` in the user's terms when the positional shapes do not broadcast
    (the storage shapes jax would report include the named axes)."""
    try:
        shapes = [v.shape if type(v) is NamedArray else _shape_of(v) for v in operands]
        np.broadcast_shapes(*shapes)
    except ValueError:
        parts = ", ".join(
            f"argument {i}: shape {s}" + (f" with named axes {fmt_names(v.names)}"
                                         if type(v) is NamedArray and v.names else "")
            for i, (v, s) in enumerate(zip(operands, shapes)))
        raise AxisSizeError(f"{where}: the positional shapes do not broadcast ({parts}); named axes "
                            "broadcast by name, positional axes by NumPy's rules") from None


def _shape_of(v: Any) -> tuple[int, ...]:
    """A plain operand's shape; a list's is its array's (its elements may be tracers inside a kernel)."""
    if isinstance(v, (list, tuple)):
        return tuple(jnp.asarray(v).shape)
    return tuple(getattr(v, "shape", ()))


def elementwise(fn: Callable, operands: tuple, where: str, kwargs: tuple = (),
                static: kernels.Static | None = None, site: dict | None = None, key: Any = None) -> Any:
    """``fn(*operands)`` broadcast by name: the result's named shape is the union of the operands'.

    ``kwargs`` are static options as sorted ``(name, value)`` pairs. A declaration that calls this on every
    use passes ``static=kernels.Static((fn, where, kwargs))``, built once, so each call skips key building;
    one with its own index of kernels passes it as ``site``, with the ``key`` it found nothing under
    (:func:`run`).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> elementwise(jnp.add, (nx.wrap(jnp.ones(2), ["a"]), nx.wrap(jnp.ones(3), ["b"])), "add").named_shape
    {'a': 2, 'b': 3}
    """
    try:
        for v in operands:
            if type(v) is NamedArray:
                d = v.data
                if type(d) is not _ArrayImpl and isinstance(d, _Tracer):
                    # under a trace, a layout met before: its plan, called here (the path of every traced
                    # operator and activation, without run's frames in between)
                    env = _env.current()
                    if not env.resources:  # (there run's traced path checks every result)
                        plan_key = _layout_key(operands, env, _broadcasts(fn))
                        out = _planned(fn, operands, where, kwargs if static is None else static[2], plan_key)
                        if out is not None:
                            return out
                return run(_elementwise_impl, (fn, where, kwargs) if static is None else static, operands,
                           site, key)
        return fn(*operands, **dict(kwargs))
    except (TypeError, ValueError) as e:
        if isinstance(e, NamedAxisError):
            raise
        wrong = operand_error(operands, where, optional=_OPTIONAL.get(fn, ()))
        if wrong is None and kwargs:  # static options (an activation's alpha): judged by fn's annotations
            wrong = mistyped(fn, operands, dict(kwargs), where, e)
        if wrong is not None:
            raise wrong from None
        if type(e) in (TypeError, ValueError) and not str(e).startswith(f"{where}: "):
            # jax names its primitive ("shift_left does not accept dtype float32"): say which nx function
            raise type(e)(f"{where}: {e}") from e
        raise


def require_operands(where: str, operands: Sequence[Any], labels: Sequence[str],
                     optional: Sequence[str] = ()) -> None:
    """Raise the TypeError naming the first operand that is plainly not an array: None (unless its label is
    ``optional``), a string, a set or a mapping. A cheap check made before an operation runs, for operations
    that would otherwise meet such a value inside a kernel (whose error names jax's internals).

    >>> require_operands("nx.nn.glu", (None,), ("x",))
    Traceback (most recent call last):
    ...
    TypeError: nx.nn.glu: x must be an array or scalar, got None
    """
    for v, label in zip(operands, labels):
        if type(v) is NamedArray:
            continue
        if (v is None and label not in optional) or isinstance(v, (str, bytes, set, frozenset, Mapping)):
            raise not_an_array(where, label, v)


# elementwise functions some of whose operands may be None (the bounds of clip)
_OPTIONAL = {jnp.clip: (1, 2)}


def operand_error(operands: Sequence[Any], where: str, labels: Sequence[str] | None = None,
                  optional: Sequence[int] = ()) -> Exception | None:
    """The error naming the first operand that is not an array or scalar (None, a string, a set, ...), if any.

    Asked once an operation has failed, so valid calls pay nothing: the failure jax reports for such an
    operand (met inside a kernel, or inside jax.numpy) names jax's internals rather than the argument.
    ``labels`` name the operands (default ``argument i``); an ``optional`` operand may be None.

    >>> print(operand_error((1.0, "zz"), "nx.add"))
    nx.add: argument 1 must be an array or scalar, got the string 'zz'
    """
    for i, v in enumerate(operands):
        if type(v) is NamedArray or (v is None and i in optional):
            continue
        try:
            to_storage(v, where, labels[i] if labels else f"argument {i}")
        except (TypeError, ValueError) as e:
            return e
    return None


# --------------------------------------------------------------------------------------------------------
# Axis arguments


def normalize_axis(axis: Any, x: NamedArray, where: str, *, allow_unbound: bool = False,
                   blocks: bool = False) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Split an ``axis=`` argument into (positional ints, names), validating both.

    ``axis`` is None (every positional axis), an int, a name, or a tuple mixing both. Names the value does
    not carry must be bound by an enclosing ``nx.xmap`` when ``allow_unbound``; else they are an error.
    A name that ``nx.shard_map`` splits into per-device blocks is an error unless the caller combines the
    blocks itself (``blocks``).

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
                        f"nx.xmap binds it{did_you_mean(a, (*x.names, *env.sizes))}")
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
                    f"axes (shape {x.shape}{_and_names(x)}; named axes are addressed by name, not by "
                    "position)")
            a %= p
            if a in ints:
                raise DuplicateAxisError(f"{where}: duplicate value in 'axis': {a}")
            ints.append(a)
        else:
            raise AxisSpecError(f"{where}: axis must be an int, an axis name or a tuple of them, got {a!r}")
    if names and not blocks:
        _env.current().require_whole(names, where)
    return tuple(ints), tuple(names)


def _and_names(x: NamedArray) -> str:
    """``, named axes 'a', 'b'`` for messages about positional axes (empty for a value without names)."""
    return f", named axes {fmt_names(x.names)}" if x.names else ""


def _broadcast_missing(x: NamedArray, names: Sequence[str]) -> NamedArray:
    """``x`` broadcast along bound names it lacks (reducing over such a name then means what xmap said)."""
    missing = [n for n in names if n not in x.names]
    if not missing:
        return x
    env = _env.current()
    sizes = named_sizes(x)
    for n in missing:
        sizes[n] = env.local_size(n)  # inside nx.shard_map: one block of it (the reduction combines them)
    out_names = x.names + tuple(missing)
    return _make(align(x, out_names, sizes), out_names)


# --------------------------------------------------------------------------------------------------------
# Reductions


def _reduce_impl(static, x, *extra):
    return _reduce_named(static, x, extra, None)


def _reduce_named(static: tuple, x: NamedArray, extra: tuple, plan: list | None) -> NamedArray:
    fn, where, axis, keepdims, kwargs, single = static
    ints, names = normalize_axis(axis, x, where, allow_unbound=True, blocks=True)
    split = _split_names(names, fn, where, extra)
    if split or extra:
        plan = None
    wide = _broadcast_missing(x, names)
    if wide is not x:
        x, plan = wide, None
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
    if split and fn in _MOMENTS:
        out = _block_moment(fn, x.data, data_axes, kw, split)
    else:
        out = fn(x.data, *extra, axis=data_axes, **kw)
    shape = None
    if keepdims:
        # keepdims keeps positional axes only (size 1); the reduced named axes leave the named shape.
        # Done here by a reshape: jnp's own keepdims is wrong for some functions on 0-d input (median).
        kept = tuple(1 if i in ints else s for i, s in enumerate(x.data.shape[:p]))
        kept += tuple(x.data.shape[p + x.names.index(n)] for n in out_names)
        lead = out.ndim - (len(kept) - len(ints))  # e.g. quantile's leading q axes
        shape = out.shape[:lead] + kept
        out = out.reshape(shape)
    if plan is not None:
        plan.append((data_axes, out_names, shape))
    if split and fn not in _MOMENTS:  # (the moments combined their blocks already)
        out = _combine_blocks(out, fn, split)
    return _make(out, out_names)


# Inside nx.shard_map a reduction over a name split into per-device blocks reduces each block, then combines
# the blocks with the mesh collective of the same kind; reductions that cannot be combined so are refused.
BLOCK_COMBINE: dict[Callable, str] = {
    jnp.sum: "sum", jnp.nansum: "sum", jnp.max: "max", jnp.amax: "max", jnp.nanmax: "max",
    jnp.min: "min", jnp.amin: "min", jnp.nanmin: "min", jnp.mean: "mean", jnp.any: "max", jnp.all: "min",
}


# variance and standard deviation over a split name: two means, each combined over the blocks
_MOMENTS = (jnp.var, jnp.std)


def _split_names(names: tuple[str, ...], fn: Callable, where: str, extra: tuple) -> tuple[str, ...]:
    env = _env.current()
    split = tuple(n for n in names if env.split.get(n))
    combined = fn in BLOCK_COMBINE or fn in _MOMENTS
    if split and (not combined or (extra and BLOCK_COMBINE.get(fn, "mean") == "mean")):
        # a mean or moment with a where= mask has unequal counts per block; the others need the whole axis
        env.require_whole(split, where)
    return split


def split_mesh_axes(names: Sequence[str]) -> tuple[str, ...]:
    """The mesh axes holding the blocks of the ``names`` that ``nx.shard_map`` splits here (usually none)."""
    split = _env.current().split
    return tuple(a for n in names for a in split.get(n, ())) if split else ()


def block_mean(d: Any, axes: tuple[int, ...], mesh_axes: tuple[str, ...]) -> Any:
    """``jnp.mean(d, axes, keepdims=True)``, over the whole axes when their blocks are spread over
    ``mesh_axes`` (every block has the same size, so it is the mean of the blocks' means)."""
    m = jnp.mean(d, axis=axes, keepdims=True)
    return jax.lax.pmean(m, mesh_axes) if mesh_axes else m


def _block_moment(fn: Callable, d: Any, axes: tuple[int, ...], kw: dict, split: tuple[str, ...]) -> Any:
    """``jnp.var``/``jnp.std`` over axes some of which are split into blocks: the mean, then the mean squared
    deviation from it, each combined over the blocks."""
    unknown = sorted(set(kw) - {"ddof", "dtype"})
    if unknown:
        raise AxisSpecError(f"nx.{fn.__name__}: over a name split into blocks, only ddof= and dtype= are "
                            f"supported, got {unknown}")
    mesh_axes = split_mesh_axes(split)
    dtype = kw.get("dtype") or jnp.promote_types(d.dtype, jnp.float32)
    xf = d.astype(dtype)
    mean = block_mean(xf, axes, mesh_axes)
    var = jnp.squeeze(block_mean(jnp.abs(xf - mean) ** 2, axes, mesh_axes), axes)
    ddof = kw.get("ddof", 0)
    if ddof:
        n = math.prod(d.shape[a] for a in axes) * math.prod(_env.current().blocks(name) for name in split)
        var = var * (n / (n - ddof))
    return jnp.sqrt(var) if fn is jnp.std else var


def _combine_blocks(out: Any, fn: Callable, split: tuple[str, ...]) -> Any:
    env = _env.current()
    axes = tuple(a for n in split for a in env.split[n])
    kind = BLOCK_COMBINE[fn]
    if out.dtype == jnp.bool_:  # any/all: max/min of the blocks' answers
        return _combine_blocks(out.astype(jnp.int32), fn, split).astype(jnp.bool_)
    if kind == "sum":
        return jax.lax.psum(out, axes)
    if kind == "mean":  # every block has the same size: the mean of the means
        return jax.lax.pmean(out, axes)
    # the blocks' answers side by side on every device (a psum, which has a gradient; pmax has none)
    n = math.prod(env.blocks(name) for name in split)
    answers = jnp.zeros((n,) + out.shape, out.dtype).at[jax.lax.axis_index(axes)].set(out)
    answers = jax.lax.psum(answers, axes)
    return jnp.max(answers, axis=0) if kind == "max" else jnp.min(answers, axis=0)


def reduce(fn: Callable, x: Any, axis: Any, where: str, keepdims: bool = False, kwargs: tuple = (),
           extra: tuple = (), single: bool = False, site: dict | None = None) -> Any:
    """Reduce ``x`` over ``axis`` (positions and/or names); ``axis=None`` reduces positional axes only.

    A name the value lacks but an enclosing ``nx.xmap`` binds reduces as if the value were broadcast along
    it (sum multiplies by the size; mean, max and min return the value), as in xmap. ``extra`` operands
    follow ``x`` into ``fn`` (quantile's ``q``, a ``where=`` mask aligned to ``x``); ``single`` asks for
    exactly one axis (argmax). A declaration that reduces with one ``fn`` passes its own ``site``
    (:func:`namedarray.core.kernels.site`): a reduction over one name then finds its kernel there by the
    name, ``keepdims``, the value's names and the environment.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> reduce(jnp.sum, nx.wrap(jnp.ones((2, 3)), ["a", "b"]), "b", "sum").unwrap(["a"]).tolist()
    [3.0, 3.0]
    """
    key = None
    if (site is not None and type(axis) is str and type(x) is NamedArray
            and (keepdims is False or keepdims is True) and not kwargs and not extra and not single):
        # the key determines what the rest of this function and run() decide (all of it a function of
        # the environment, the names and the flags): a kernel filed under it is the one they would call
        env = _env.current()
        key = (axis, keepdims, x.names, None if env is _env.EMPTY else env)
        d = x.data
        if type(d) is _ArrayImpl:
            kernel = site.get(key)
            if kernel is not None:
                return fire(kernel, d)
        elif isinstance(d, _Tracer):  # under a trace: the plan an earlier trace of this layout made
            out = _reduce_traced(fn, x, d, axis, where, keepdims, kwargs, single)
            if out is not None:
                return out
    else:
        site = None
        if type(x) is NamedArray and not extra:
            d = x.data
            if type(d) is not _ArrayImpl and isinstance(d, _Tracer):
                out = _reduce_traced(fn, x, d, axis, where, keepdims, kwargs, single)
                if out is not None:
                    return out
    if axis is not None:
        ours, theirs = _env.current().per_element(axis)
        if theirs:
            return _reduce_per_element(fn, x, ours, theirs, where, keepdims, kwargs, extra)
    if type(x) is not NamedArray:
        kw = dict(kwargs, keepdims=True) if keepdims else dict(kwargs)
        return fn(x, *extra, axis=axis, **kw)
    if isinstance(axis, list):
        axis = tuple(axis)
    elif axis is None:
        check_reduces(x, where)
    return run(_reduce_impl, (fn, where, axis, keepdims, kwargs, single), (x, *extra), site, key)


def _reduce_traced(fn: Callable, x: NamedArray, d: Any, axis: Any, where: str, keepdims: bool, kwargs: tuple,
                   single: bool) -> Any:
    """A reduction of a traced value, by the plan an earlier trace of the same layout made (the storage
    axes and the result's names, a function of the key below); None where it takes the general path."""
    env = _env.current()
    if env.resources:  # inside nx.xmap with resources every result is checked (run's traced path)
        return None
    if type(axis) is list:
        axis = tuple(axis)
    key = ("reduce", fn, axis, keepdims, single, x.names, d.aval, None if env is _env.EMPTY else env)
    try:
        found = _REDUCE_PLANS.get(key)
    except TypeError:  # an unhashable axis argument: the general path says what is wrong with it
        return None
    if found is not None:
        data_axes, out_names, shape = found
        out = fn(d, axis=data_axes, **dict(kwargs)) if kwargs else fn(d, axis=data_axes)
        if shape is not None:
            out = out.reshape(shape)
        return _make(out, out_names)
    if axis is not None and env.per_element(axis)[1]:
        return None
    if axis is None:
        check_reduces(x, where)
    plan: list = []
    out = _reduce_named((fn, where, axis, keepdims, kwargs, single), x, (), plan)
    if plan:
        data_axes, out_names, shape = plan[0]
        if type(data_axes) is tuple and len(data_axes) == 1:
            data_axes = data_axes[0]  # jax.numpy traces one axis given as an int in 4% less time
        _REDUCE_PLANS.put(key, (data_axes, out_names, shape))
    return out


# Under a trace: each reduction's storage axes and result names, by its layout
_REDUCE_PLANS = kernels.plans


# Inside a positional nx.xmap body a value is one element of the map: a reduction over the map's names is
# the collective that combines the elements (xmap lowered jnp.sum(x, "i") to psum the same way).
_PER_ELEMENT = {"sum": jax.lax.psum, "_sum": jax.lax.psum, "mean": jax.lax.pmean, "max": jax.lax.pmax,
                "amax": jax.lax.pmax, "min": jax.lax.pmin, "amin": jax.lax.pmin}


def _reduce_per_element(fn: Callable, x: Any, ours: tuple, theirs: tuple, where: str, keepdims: bool,
                        kwargs: tuple, extra: tuple) -> Any:
    collective = _PER_ELEMENT.get(getattr(fn, "__name__", ""))
    if collective is None or extra or kwargs:
        raise PerElementAxisError(
            f"{where}: reduces over {fmt_names(theirs)}, names of the positional nx.xmap body around it, "
            "where values are per element along them: sum, mean, max and min (without further arguments) "
            "reduce over such names; for anything else gather the elements (jax.lax.all_gather) first")
    if ours:
        x = reduce(fn, x, ours, where, keepdims)
    return collective(x, theirs)


def check_reduces(x: Any, where: str) -> None:
    """Refuse ``axis=None`` on a value whose axes are all named, outside ``nx.xmap`` bodies.

    ``axis=None`` reduces the positional axes only (xmap's rule), so on such a value it would reduce nothing
    and return it unchanged: ``logits - logsumexp(logits)`` would be zeros. Inside an ``nx.xmap`` body, where
    values are per-example views and xmap's rule is the contract, it holds as it is.

    >>> import namedarray as nx
    >>> check_reduces(nx.zeros((3,), named_shape={"b": 2}), "nx.sum")   # a positional axis to reduce: fine
    """
    if type(x) is NamedArray and x.names and x.data.ndim == len(x.names) and not _env.current().sizes:
        names = x.names
        raise AxisSpecError(
            f"{where}: axis=None reduces the positional axes only (named axes are reduced only when named), "
            f"and this value has none: its axes are all named ({fmt_names(names)}). Name the axes to reduce: "
            f"axis={names[0]!r}" + (f", or axis={tuple(names)!r} for all of them" if len(names) > 1 else ""))


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
    """``f`` on storages, vmapped over ``names``: its outputs end with the named axes in the order ``names``.

    ``named_flags`` are the operands' storage names (None for a plain operand). Each map stacks its results
    last, so the first name is the innermost map and the last the outermost; a map finds its name among the
    operand's trailing named axes that the maps outside it have not taken yet.
    """
    fn = f
    for j, name in enumerate(names):
        outer = names[j + 1:]
        in_axes = []
        for ns in named_flags:
            if ns is None or name not in ns:
                in_axes.append(None)
            else:
                left = [n for n in ns if n not in outer]
                in_axes.append(left.index(name) - len(left))  # counted from the end: names are last
        fn = jax.vmap(fn, in_axes=tuple(in_axes), out_axes=-1, axis_name=name)
    return fn


def _lift_impl(static, *dyn):
    f, treedef, slots, where = static
    try:
        join(dyn, where)
    except AxisSizeError:  # say which argument (and where in its pytree), not which dynamic leaf
        join_sizes([named_sizes(v) if type(v) is NamedArray else None for v in dyn], where,
                   _dyn_labels(treedef, slots))
        raise
    names = union(dyn)
    flags = [v.names if type(v) is NamedArray else None for v in dyn]

    def body(*datas):
        leaves = list(slots)
        it = iter(datas)
        for i, s in enumerate(leaves):
            if s is _DYN:
                leaves[i] = next(it)
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        return f(*args, **kwargs)

    datas = [v.data if type(v) is NamedArray else v for v in dyn]
    if any(isinstance(d, _Tracer) for d in datas):  # Explicit layouts live in traced types
        datas = placement.align_explicit_layouts(datas, flags, _env.current().mapping())
    out = vectorize(body, flags, names)(*datas)
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


_DYN = _DynSlot()


def call_lifted(f: Callable, args: tuple, kwargs: dict, where: str) -> Any:
    """Call positional ``f`` vectorised over every named axis of the NamedArrays among its arguments.

    Arrays anywhere in ``args``/``kwargs`` are operands; every other leaf is static configuration (it keys
    the eager kernel). Without a NamedArray among them this is just ``f(*args, **kwargs)``. When the call
    fails on an argument of a plainly wrong kind by ``f``'s annotations (:func:`mistyped`), the error names
    that argument.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> call_lifted(jnp.linalg.norm, (nx.wrap(jnp.ones((4, 3)), ["b", ...]),), {}, "norm").named_shape
    {'b': 4}
    """
    try:
        return _lift(f, args, kwargs, where)
    except NamedAxisError:
        raise
    except Exception as e:
        wrong = mistyped(f, args, kwargs, where, e)
        if wrong is not None:
            raise wrong from e
        raise


def _lift(f: Callable, args: tuple, kwargs: dict, where: str) -> Any:
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
