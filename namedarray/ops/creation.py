"""Building arrays by named shape: ``zeros``, ``ones``, ``empty``, ``full``, ``arange``, ``linspace`` & co.

``nx.zeros``, ``nx.ones``, ``nx.empty`` and ``nx.full`` take ``shape`` (the positional shape, as in
``jax.numpy``) and ``named_shape``, spelled as everywhere in nx (``nx.random.normal(..., named_shape=...)``):
a mapping ``{name: size}``, or a sequence of names whose sizes an enclosing ``nx.xmap`` binds. A mapping
passed as ``shape`` names every axis. ``nx.arange``, ``nx.linspace``, ``nx.logspace`` and ``nx.geomspace``
take ``name=`` for their one result axis. ``nx.broadcast_to`` takes ``shape`` and ``named_shape`` the same way
and adds the named axes to a value's own. Without any name they are exactly ``jax.numpy``'s functions.

The named axes are stored in the order given (the layout rule keeps the order the program wrote), after the
positional ones. Eagerly each function is the one ``jax.numpy`` call that fills the storage, and under ``jit``
it traces to the same ``broadcast_in_dim``/``iota``: naming costs nothing.

>>> import namedarray as nx
>>> nx.zeros((3,), named_shape={"batch": 2}).named_shape
{'batch': 2}
>>> nx.ones({"batch": 2, "embed": 4}, "int32").dtype
dtype('int32')
>>> nx.arange(4, name="i").unwrap(["i"]).tolist()
[0, 1, 2, 3]
>>> nx.broadcast_to(nx.arange(4, name="i"), (), named_shape={"b": 2}).named_shape
{'b': 2, 'i': 4}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ..core import env as _env
from ..core.array import NamedArray, _make, to_storage
from ..core.layout import align, named_sizes
from ..core.shape import check_name
from ..core.wrapping import position_to_name
from ..engine import dispatch as engine
from ..engine.arguments import call
from ..engine.registry import implements
from ..errors import AxisSizeError, AxisSpecError, DuplicateAxisError, fmt_names

__all__ = ["zeros", "ones", "empty", "full", "broadcast_to", "arange", "linspace", "logspace", "geomspace",
           "named_shape_arg", "shape_args", "NamedShapeLike"]

NamedShapeLike = Mapping[str, int] | Sequence[str] | str | None
ShapeLike = int | Sequence[int] | Mapping[str, int]


def named_shape_arg(named_shape: NamedShapeLike, where: str) -> dict[str, int]:
    """A ``named_shape=`` argument as an ordered dict ``{name: size}``.

    A mapping gives the sizes; a sequence of names (or one name) takes them from the enclosing ``nx.xmap``.
    A size that disagrees with the one an enclosing ``nx.xmap`` binds is an :class:`AxisSizeError`.

    >>> named_shape_arg({"b": 2, "a": 3}, "example")
    {'b': 2, 'a': 3}
    """
    if named_shape is None:
        return {}
    env = _env.current()
    if isinstance(named_shape, Mapping):
        out = {}
        for n, s in named_shape.items():
            check_name(n, where)
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
                raise AxisSpecError(f"{where}: the size of axis {n!r} in named_shape must be a non-negative "
                                    f"int, got {s!r}")
            out[n] = int(s)
    else:
        names = (named_shape,) if isinstance(named_shape, str) else tuple(named_shape)
        if len(set(names)) != len(names):
            raise DuplicateAxisError(f"{where}: named_shape lists an axis twice: {list(names)!r}")
        out = {check_name(n, where): env.size(n, where) for n in names}
    for n, s in out.items():
        if env.is_bound(n) and env.size(n, where) != s:
            raise AxisSizeError(f"{where}: The shape of axis {n} was specified as {s}, but it really is "
                                f"{env.size(n)} (axis {n!r} is bound by an enclosing nx.xmap)")
    env.require_whole(out, where)  # inside nx.shard_map, values hold blocks of a split name: not new axes
    return out


def shape_args(shape: Any, named_shape: NamedShapeLike,
            where: str) -> tuple[tuple[int, ...], dict[str, int] | None]:
    """(positional shape, named sizes or None when no name was asked for) of ``shape=`` and ``named_shape=``
    (a mapping as ``shape`` names every axis).

    >>> shape_args((2,), {"b": 3}, "example"), shape_args({"b": 3}, None, "example")
    (((2,), {'b': 3}), ((), {'b': 3}))
    """
    if isinstance(shape, Mapping):
        if named_shape is not None:
            raise AxisSpecError(f"{where}: shape is a mapping {dict(shape)!r}, which names every axis, and "
                                f"named_shape={named_shape!r} is given too; give the named axes once")
        return (), named_shape_arg(shape, where)
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        pshape: tuple[int, ...] = (int(shape),)
    else:
        try:
            pshape = tuple(operator_index(s, where) for s in shape)
        except TypeError:
            raise TypeError(f"{where}: shape must be an int, a sequence of ints or a mapping {{name: size}}, "
                            f"got {shape!r}") from None
    if named_shape is None:
        return pshape, None
    return pshape, named_shape_arg(named_shape, where)


def operator_index(s: Any, where: str) -> int:
    """``s`` as a size (an int or integer scalar), or a TypeError."""
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
        raise TypeError(f"{where}: sizes must be ints, got {s!r}")
    return int(s)


def _filled(fn, shape: Any, named_shape: NamedShapeLike, dtype: Any, kwargs: dict, where: str,
            *fill: Any) -> Any:
    pshape, named = shape_args(shape, named_shape, where)
    if named is None:
        return call(fn, (pshape, *fill, dtype), kwargs, where)
    return _make(call(fn, (pshape + tuple(named.values()), *fill, dtype), kwargs, where), tuple(named))


# the result is a NamedArray when a name is asked for (a mapping as shape, or named_shape), else jnp.zeros's
@overload
def zeros(shape: Mapping[str, int], dtype: DTypeLike | None = None, *, named_shape: NamedShapeLike = None,
          **kwargs: Any) -> NamedArray: ...
@overload
def zeros(shape: int | Sequence[int] = (), dtype: DTypeLike | None = None, *,
          named_shape: Mapping[str, int] | Sequence[str] | str, **kwargs: Any) -> NamedArray: ...
@overload
def zeros(shape: int | Sequence[int] = (), dtype: DTypeLike | None = None, *, named_shape: None = None,
          **kwargs: Any) -> jax.Array: ...


@implements(jnp.zeros)
def zeros(shape: ShapeLike = (), dtype: Any = None, *, named_shape: NamedShapeLike = None,
          **kwargs: Any) -> NamedArray | jax.Array:
    """Zeros of positional ``shape`` and named shape ``named_shape`` (``jnp.zeros`` when nothing is named).

    >>> import namedarray as nx
    >>> x = nx.zeros((2,), named_shape={"batch": 3})
    >>> x.shape, x.named_shape, x.dtype
    ((2,), {'batch': 3}, dtype('float32'))
    """
    return _filled(jnp.zeros, shape, named_shape, dtype, kwargs, "nx.zeros")


# the result is a NamedArray when a name is asked for (a mapping as shape, or named_shape), else jnp.ones's
@overload
def ones(shape: Mapping[str, int], dtype: DTypeLike | None = None, *, named_shape: NamedShapeLike = None,
          **kwargs: Any) -> NamedArray: ...
@overload
def ones(shape: int | Sequence[int] = (), dtype: DTypeLike | None = None, *,
          named_shape: Mapping[str, int] | Sequence[str] | str, **kwargs: Any) -> NamedArray: ...
@overload
def ones(shape: int | Sequence[int] = (), dtype: DTypeLike | None = None, *, named_shape: None = None,
          **kwargs: Any) -> jax.Array: ...


@implements(jnp.ones)
def ones(shape: ShapeLike = (), dtype: Any = None, *, named_shape: NamedShapeLike = None,
         **kwargs: Any) -> NamedArray | jax.Array:
    """Ones of positional ``shape`` and named shape ``named_shape`` (``jnp.ones`` when nothing is named).

    >>> import namedarray as nx
    >>> nx.ones({"k": 3}).sum("k").item()
    3.0
    """
    return _filled(jnp.ones, shape, named_shape, dtype, kwargs, "nx.ones")


# the result is a NamedArray when a name is asked for (a mapping as shape, or named_shape), else jnp.empty's
@overload
def empty(shape: Mapping[str, int], dtype: DTypeLike | None = None, *, named_shape: NamedShapeLike = None,
          **kwargs: Any) -> NamedArray: ...
@overload
def empty(shape: int | Sequence[int] = (), dtype: DTypeLike | None = None, *,
          named_shape: Mapping[str, int] | Sequence[str] | str, **kwargs: Any) -> NamedArray: ...
@overload
def empty(shape: int | Sequence[int] = (), dtype: DTypeLike | None = None, *, named_shape: None = None,
          **kwargs: Any) -> jax.Array: ...


@implements(jnp.empty)
def empty(shape: ShapeLike = (), dtype: Any = None, *, named_shape: NamedShapeLike = None,
          **kwargs: Any) -> NamedArray | jax.Array:
    """An array of positional ``shape`` and named shape ``named_shape`` (zeros, as ``jnp.empty`` gives).

    >>> import namedarray as nx
    >>> nx.empty({"k": 3}, "int8").named_shape
    {'k': 3}
    """
    return _filled(jnp.empty, shape, named_shape, dtype, kwargs, "nx.empty")


# a NamedArray when a name is asked for or fill_value has names, else jnp.full's
@overload
def full(shape: Mapping[str, int], fill_value: NamedArray | ArrayLike, dtype: DTypeLike | None = None, *,
         named_shape: NamedShapeLike = None, **kwargs: Any) -> NamedArray: ...
@overload
def full(shape: int | Sequence[int], fill_value: NamedArray | ArrayLike, dtype: DTypeLike | None = None, *,
         named_shape: Mapping[str, int] | Sequence[str] | str, **kwargs: Any) -> NamedArray: ...
@overload
def full(shape: int | Sequence[int], fill_value: NamedArray, dtype: DTypeLike | None = None, *,
         named_shape: None = None, **kwargs: Any) -> NamedArray: ...
@overload
def full(shape: int | Sequence[int], fill_value: ArrayLike, dtype: DTypeLike | None = None, *,
         named_shape: None = None, **kwargs: Any) -> jax.Array: ...


@implements(jnp.full)
def full(shape: ShapeLike, fill_value: Any, dtype: Any = None, *, named_shape: NamedShapeLike = None,
         **kwargs: Any) -> NamedArray | jax.Array:
    """``fill_value`` broadcast to positional ``shape`` and named shape ``named_shape``.

    ``fill_value`` may be a NamedArray: its names must be among the requested ones (they broadcast by name),
    and its positional shape must broadcast to ``shape``, as ``jnp.full`` asks.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> row = nx.wrap(jnp.arange(3.0), ["k"])
    >>> nx.full({"b": 2, "k": 3}, row).unwrap(["b", "k"]).tolist()
    [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
    """
    where = "nx.full"
    if type(fill_value) is not NamedArray:
        if np.ndim(fill_value) == 0 or (named_shape is None and not isinstance(shape, Mapping)):
            return _filled(jnp.full, shape, named_shape, dtype, kwargs, where, fill_value)
        # an array fill broadcasts against the positional shape only, as in jnp.full, never against the
        # named axes that come after it in storage
        fill_value = _make(jnp.asarray(fill_value), ())
    pshape, named = shape_args(shape, named_shape, where)
    named = named or {}
    extra = [n for n in fill_value.names if n not in named]
    if extra:
        raise AxisSpecError(f"{where}: fill_value has named axes {fmt_names(extra)} that the requested named "
                            f"shape {named} lacks; the result has exactly the named shape asked for")
    for n in fill_value.names:
        if fill_value.named_shape[n] != named[n]:
            raise AxisSizeError(f"{where}: axis {n!r} has size {fill_value.named_shape[n]} in fill_value but "
                                f"size {named[n]} in the requested named shape")
    try:
        fits = np.broadcast_shapes(fill_value.shape, pshape) == pshape
    except ValueError:
        fits = False
    if not fits:
        raise AxisSizeError(f"{where}: fill_value's positional shape {fill_value.shape} does not "
                            f"broadcast to shape {pshape} (to fill along named axes, give a NamedArray "
                            f"carrying them, e.g. nx.wrap(values, [...names]))")
    static = (pshape, tuple(named.items()), dtype, tuple(sorted(kwargs.items())))
    return engine.run(_full_impl, static, (fill_value,))


def _full_impl(static, fill):
    pshape, named, dtype, kwargs = static
    names = tuple(n for n, _ in named)
    d = align(fill, names, dict(named), pos=len(pshape))
    return _make(jnp.full(pshape + tuple(s for _, s in named), d, dtype, **dict(kwargs)), names)


# a NamedArray when array has names or a name is asked for, else jnp.broadcast_to's
@overload
def broadcast_to(array: NamedArray, shape: ShapeLike = (), *, named_shape: NamedShapeLike = None,
                 out_sharding: Any = None) -> NamedArray: ...
@overload
def broadcast_to(array: ArrayLike, shape: Mapping[str, int], *, named_shape: NamedShapeLike = None,
                 out_sharding: Any = None) -> NamedArray: ...
@overload
def broadcast_to(array: ArrayLike, shape: int | Sequence[int] = (), *,
                 named_shape: Mapping[str, int] | Sequence[str] | str,
                 out_sharding: Any = None) -> NamedArray: ...
@overload
def broadcast_to(array: ArrayLike, shape: int | Sequence[int] = (), *, named_shape: None = None,
                 out_sharding: Any = None) -> jax.Array: ...


@implements(jnp.broadcast_to)
def broadcast_to(array: Any, shape: ShapeLike = (), *, named_shape: NamedShapeLike = None,
                 out_sharding: Any = None) -> NamedArray | jax.Array:
    """``array`` broadcast to positional ``shape`` and, by name, to ``named_shape``.

    The result carries ``array``'s names and those of ``named_shape`` (a mapping as ``shape`` names every
    axis of the result, so the result has no positional axis); a name both have must have one size, else
    :class:`~namedarray.errors.AxisSizeError`. A new name repeats the value along it. The positional shape
    broadcasts as in ``jnp.broadcast_to``: ``array``'s must broadcast to ``shape`` (NumPy's rules), which
    is the result's. Without any name (``array`` plain, no ``named_shape``) this is ``jnp.broadcast_to``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3.0), ["k"])
    >>> y = nx.broadcast_to(x, (2,), named_shape={"b": 4})
    >>> y.shape, y.named_shape
    ((2,), {'b': 4, 'k': 3})
    >>> nx.broadcast_to(x, {"b": 2, "k": 3}).unwrap(["b", "k"]).tolist()
    [[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]
    """
    where = "nx.broadcast_to"
    if type(array) is not NamedArray and named_shape is None and not isinstance(shape, Mapping):
        return call(jnp.broadcast_to, (array, shape), {"out_sharding": out_sharding}, where)
    if out_sharding is not None:
        raise TypeError(f"{where}: out_sharding lays out positional storage; a value with names is laid out "
                        "by name: broadcast, then x.shard(...) (or nx.shard)")
    pshape, named = shape_args(shape, named_shape, where)
    named = named or {}
    x = array if type(array) is NamedArray else _make(to_storage(array, where, "array"), ())
    own = named_sizes(x)
    for n, s in named.items():
        if n in own and own[n] != s:
            raise AxisSizeError(f"{where}: axis {n!r} has size {own[n]} in the array but size {s} in the "
                                f"requested named shape")
    try:
        fits = np.broadcast_shapes(x.shape, pshape) == pshape
    except ValueError:
        fits = False
    if not fits:
        hint = ""
        if isinstance(shape, Mapping):
            hint = (f"; a mapping as shape names every axis of the result, so the positional ones must go: "
                    f"to keep them, nx.broadcast_to(x, {x.shape}, named_shape={dict(shape)!r})")
        raise AxisSizeError(f"{where}: the array's positional shape {x.shape} (named axes "
                            f"{fmt_names(x.names) or 'none'}) does not broadcast to shape {pshape}{hint}")
    new = tuple((n, s) for n, s in named.items() if n not in own)
    if not new and pshape == x.shape:
        return x
    return engine.run(_broadcast_impl, (pshape, new), (x,))


def _broadcast_impl(static, x):
    pshape, new = static
    names = x.names + tuple(n for n, _ in new)
    d = align(x, names, pos=len(pshape))  # x's positional axes right-aligned, size 1 where new
    k = len(x.names)
    full = pshape + tuple(d.shape[len(pshape):len(pshape) + k]) + tuple(s for _, s in new)
    return _make(jnp.broadcast_to(d, full), names)


# --------------------------------------------------------------------------------------------------------
# Ranges: one named result axis


def _check_new_name(name: str, size: int, where: str) -> None:
    check_name(name, where)
    env = _env.current()
    env.require_whole((name,), where)
    if env.is_bound(name) and env.size(name, where) != size:
        raise AxisSizeError(f"{where}: The shape of axis {name} was specified as {size}, but it really is "
                            f"{env.size(name)} (axis {name!r} is bound by an enclosing nx.xmap)")


# a NamedArray when its axis is named, else jnp.arange's
@overload
def arange(start: ArrayLike, stop: ArrayLike | None = None, step: ArrayLike | None = None,
           dtype: DTypeLike | None = None, *, name: str, **kwargs: Any) -> NamedArray: ...
@overload
def arange(start: ArrayLike, stop: ArrayLike | None = None, step: ArrayLike | None = None,
           dtype: DTypeLike | None = None, *, name: None = None, **kwargs: Any) -> jax.Array: ...


@implements(jnp.arange)
def arange(start: Any, stop: Any = None, step: Any = None, dtype: Any = None, *, name: str | None = None,
           **kwargs: Any) -> NamedArray | jax.Array:
    """``jnp.arange``; with ``name`` its one axis is that named axis.

    >>> import namedarray as nx
    >>> q, k = nx.arange(3, name="q"), nx.arange(3, name="k")
    >>> (q >= k).unwrap(["q", "k"]).astype(int).tolist()   # a causal mask, by name
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    out = call(jnp.arange, (start, stop, step, dtype), kwargs, "nx.arange")
    if name is None:
        return out
    _check_new_name(name, out.shape[0], "nx.arange")
    return _make(out, (name,))


def _spaced(fn, where: str, start: Any, stop: Any, num: int, name: str | None, axis: int | None,
            kwargs: dict) -> Any:
    if name is None:
        return engine.call_lifted(fn, (start, stop), dict(kwargs, num=num, axis=0 if axis is None else axis),
                                  where)
    if axis is not None:
        raise AxisSpecError(f"{where}: give the new axis either a position (axis={axis!r}) or a name "
                            f"(name={name!r}), not both")
    _check_new_name(name, num, where)
    for i, v in enumerate((start, stop)):
        if type(v) is NamedArray and name in v.names:
            raise DuplicateAxisError(f"{where}: argument {i} already has an axis {name!r}")
    out = engine.call_lifted(fn, (start, stop), dict(kwargs, num=num, axis=-1), where)
    if isinstance(out, tuple):  # linspace(retstep=True): (samples, step)
        return (_name_last(out[0], name, where),) + out[1:]
    return _name_last(out, name, where)


def _name_last(samples: Any, name: str, where: str) -> NamedArray:
    # the samples' axis is the last positional one: naming it moves no data (it becomes the first name)
    return position_to_name(samples if type(samples) is NamedArray else _make(samples, ()), -1, name, where)


# a NamedArray when the samples' axis is named or start or stop has names, else jnp.linspace's
@overload
def linspace(start: NamedArray | ArrayLike, stop: NamedArray | ArrayLike, num: int = 50,
             endpoint: bool = True, retstep: Literal[False] = False,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: str) -> NamedArray: ...
@overload
def linspace(start: NamedArray, stop: NamedArray | ArrayLike, num: int = 50,
             endpoint: bool = True, retstep: Literal[False] = False,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: str | None = None) -> NamedArray: ...
@overload
def linspace(start: ArrayLike, stop: NamedArray, num: int = 50,
             endpoint: bool = True, retstep: Literal[False] = False,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: str | None = None) -> NamedArray: ...
@overload
def linspace(start: ArrayLike, stop: ArrayLike, num: int = 50,
             endpoint: bool = True, retstep: Literal[False] = False,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: None = None) -> jax.Array: ...
@overload
def linspace(start: NamedArray | ArrayLike, stop: NamedArray | ArrayLike, num: int = 50,
             endpoint: bool = True, *, retstep: Literal[True], dtype: DTypeLike | None = None,
             axis: int | None = None, name: str | None = None) -> tuple[Any, Any]: ...


@implements(jnp.linspace)
def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype: Any = None, axis: int | None = None, *, name: str | None = None) -> Any:
    """``jnp.linspace``; with ``name`` the samples' axis is that named axis (``start``/``stop`` may carry
    other names, or positional axes, which the result keeps).

    >>> import namedarray as nx
    >>> nx.linspace(0.0, 1.0, 5, name="t").unwrap(["t"]).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    return _spaced(jnp.linspace, "nx.linspace", start, stop, num, name, axis,
                   dict(endpoint=endpoint, retstep=retstep, dtype=dtype))


# a NamedArray when the samples' axis is named or start or stop has names, else jnp.logspace's
@overload
def logspace(start: NamedArray | ArrayLike, stop: NamedArray | ArrayLike, num: int = 50,
             endpoint: bool = True, base: NamedArray | ArrayLike = 10.0,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: str) -> NamedArray: ...
@overload
def logspace(start: NamedArray, stop: NamedArray | ArrayLike, num: int = 50,
             endpoint: bool = True, base: NamedArray | ArrayLike = 10.0,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: str | None = None) -> NamedArray: ...
@overload
def logspace(start: ArrayLike, stop: NamedArray, num: int = 50,
             endpoint: bool = True, base: NamedArray | ArrayLike = 10.0,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: str | None = None) -> NamedArray: ...
@overload
def logspace(start: ArrayLike, stop: ArrayLike, num: int = 50,
             endpoint: bool = True, base: NamedArray | ArrayLike = 10.0,
             dtype: DTypeLike | None = None, axis: int | None = None, *,
             name: None = None) -> jax.Array: ...


@implements(jnp.logspace)
def logspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, base: Any = 10.0,
             dtype: Any = None, axis: int | None = None, *, name: str | None = None) -> Any:
    """``jnp.logspace``; with ``name`` the samples' axis is that named axis.

    >>> import namedarray as nx
    >>> nx.logspace(0.0, 2.0, 3, name="t").unwrap(["t"]).tolist()
    [1.0, 10.0, 100.0]
    """
    return _spaced(jnp.logspace, "nx.logspace", start, stop, num, name, axis,
                   dict(endpoint=endpoint, base=base, dtype=dtype))


# a NamedArray when the samples' axis is named or start or stop has names, else jnp.geomspace's
@overload
def geomspace(start: NamedArray | ArrayLike, stop: NamedArray | ArrayLike, num: int = 50,
              endpoint: bool = True, dtype: DTypeLike | None = None,
              axis: int | None = None, *,
              name: str) -> NamedArray: ...
@overload
def geomspace(start: NamedArray, stop: NamedArray | ArrayLike, num: int = 50,
              endpoint: bool = True, dtype: DTypeLike | None = None,
              axis: int | None = None, *,
              name: str | None = None) -> NamedArray: ...
@overload
def geomspace(start: ArrayLike, stop: NamedArray, num: int = 50,
              endpoint: bool = True, dtype: DTypeLike | None = None,
              axis: int | None = None, *,
              name: str | None = None) -> NamedArray: ...
@overload
def geomspace(start: ArrayLike, stop: ArrayLike, num: int = 50,
              endpoint: bool = True, dtype: DTypeLike | None = None,
              axis: int | None = None, *,
              name: None = None) -> jax.Array: ...


@implements(jnp.geomspace)
def geomspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None,
              axis: int | None = None, *, name: str | None = None) -> Any:
    """``jnp.geomspace``; with ``name`` the samples' axis is that named axis.

    >>> import namedarray as nx
    >>> nx.geomspace(1.0, 8.0, 4, name="t").named_shape
    {'t': 4}
    """
    return _spaced(jnp.geomspace, "nx.geomspace", start, stop, num, name, axis,
                   dict(endpoint=endpoint, dtype=dtype))

