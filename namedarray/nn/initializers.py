"""``nx.nn.initializers``: ``jax.nn.initializers`` whose initializers also take ``named_shape=``.

Every initializer is called as jax's are, ``init(key, shape, dtype)``, and also takes ``named_shape`` (a
mapping ``{name: size}``, or names an enclosing ``nx.xmap`` binds; a mapping passed as ``shape`` names every
axis). Without names it is exactly jax's initializer. With names the result is a NamedArray drawn by
``nx.random`` (independent along every name), and the variance-scaling family (``glorot_*``, ``lecun_*``,
``he_*``, ``variance_scaling``) computes its fans from ``in_axis``, ``out_axis`` and ``batch_axis`` given
as positions *or names*, as xmap-era code did: ``variance_scaling(1.0, "fan_in", "normal", in_axis="i",
out_axis="o")(key, (), named_shape={"i": 64, "o": 32})``.

>>> import jax, namedarray as nx
>>> init = nx.nn.initializers.glorot_uniform(in_axis="embed", out_axis="hidden")
>>> w = init(jax.random.key(0), (), named_shape={"embed": 16, "hidden": 64})
>>> w.named_shape, bool(nx.all(nx.abs(w) <= (6 / 80) ** 0.5, axis=("embed", "hidden")))
({'embed': 16, 'hidden': 64}, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .. import random as _random
from ..errors import AxisSpecError, fmt_names
from ..ops import creation
from ..ops.creation import NamedShapeLike, shape_args

__all__ = ["zeros", "ones", "constant", "uniform", "normal", "truncated_normal", "variance_scaling",
           "glorot_uniform", "glorot_normal", "lecun_uniform", "lecun_normal", "he_uniform", "he_normal",
           "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal",
           "delta_orthogonal", "Initializer"]

Initializer = jax.nn.initializers.Initializer
AxisLike = int | str | Sequence[int | str]
_INIT = jax.nn.initializers


def zeros(key: Any, shape: Any, dtype: Any = None, *, named_shape: NamedShapeLike = None) -> Any:
    """Zeros of ``shape`` and ``named_shape`` (``jax.nn.initializers.zeros`` when nothing is named).

    >>> import jax, namedarray as nx
    >>> nx.nn.initializers.zeros(jax.random.key(0), (2,), named_shape={"k": 3}).named_shape
    {'k': 3}
    """
    pshape, named = shape_args(shape, named_shape, "nx.nn.initializers.zeros")
    if named is None:
        return _INIT.zeros(key, pshape, dtype)
    return creation.zeros(pshape, dtype, named_shape=named)


def ones(key: Any, shape: Any, dtype: Any = None, *, named_shape: NamedShapeLike = None) -> Any:
    """Ones of ``shape`` and ``named_shape`` (``jax.nn.initializers.ones`` when nothing is named).

    >>> import jax, namedarray as nx
    >>> nx.nn.initializers.ones(jax.random.key(0), {"k": 3}).named_shape
    {'k': 3}
    """
    pshape, named = shape_args(shape, named_shape, "nx.nn.initializers.ones")
    if named is None:
        return _INIT.ones(key, pshape, dtype)
    return creation.ones(pshape, dtype, named_shape=named)


def _init(plain: Callable, sample: Callable, default_dtype: Any, name: str) -> Callable:
    """An initializer: jax's ``plain`` without names, ``sample(key, shape, dtype, named)`` with them."""
    where = f"nx.nn.initializers.{name}"

    def init(key: Any, shape: Any, dtype: Any = default_dtype, *, named_shape: NamedShapeLike = None) -> Any:
        pshape, named = shape_args(shape, named_shape, where)
        if named is None:
            return plain(key, pshape, dtype)
        dtype = _float_dtype(dtype, where)
        return sample(key, pshape, dtype, named)

    return init


def _float_dtype(dtype: Any, where: str) -> Any:
    dtype = jnp.zeros((), dtype).dtype  # None: jax's default float
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{where}: a named initializer draws real floating-point values, got dtype {dtype}")
    return dtype


def constant(value: Any, dtype: Any = None) -> Callable:
    """``jax.nn.initializers.constant``; its initializer also takes ``named_shape=``.

    >>> import jax, namedarray as nx
    >>> nx.nn.initializers.constant(-7.0)(jax.random.key(0), (), named_shape={"k": 2}).unwrap(["k"]).tolist()
    [-7.0, -7.0]
    """
    return _init(_INIT.constant(value, dtype),
                 lambda key, p, dt, named: creation.full(p, value, dt, named_shape=named), dtype, "constant")


def _scaled(draw: Callable, factor: Any) -> Callable:
    """A named sampler: ``draw``'s standard samples times ``factor``, as jax's initializer computes them."""
    def sample(key, p, dt, named):
        return draw(key, p, dt, named_shape=named) * jnp.array(factor, dt)

    return sample


def uniform(scale: Any = 1e-2, dtype: Any = None) -> Callable:
    """``jax.nn.initializers.uniform`` (values in ``[0, scale)``); its initializer takes ``named_shape=`` too.

    >>> import jax, namedarray as nx
    >>> nx.nn.initializers.uniform()(jax.random.key(0), (2,), named_shape={"k": 3}).named_shape
    {'k': 3}
    """
    return _init(_INIT.uniform(scale, dtype), _scaled(_random.uniform, scale), dtype, "uniform")


def normal(stddev: Any = 1e-2, dtype: Any = None) -> Callable:
    """``jax.nn.initializers.normal``; its initializer also takes ``named_shape=``.

    >>> import jax, namedarray as nx
    >>> nx.nn.initializers.normal()(jax.random.key(0), (2,), named_shape={"k": 3}).named_shape
    {'k': 3}
    """
    return _init(_INIT.normal(stddev, dtype), _scaled(_random.normal, stddev), dtype, "normal")


def truncated_normal(stddev: Any = 1e-2, dtype: Any = None, lower: Any = -2.0, upper: Any = 2.0) -> Callable:
    """``jax.nn.initializers.truncated_normal``; its initializer also takes ``named_shape=``.

    >>> import jax, namedarray as nx
    >>> nx.nn.initializers.truncated_normal()(jax.random.key(0), (2,), named_shape={"k": 3}).named_shape
    {'k': 3}
    """
    def sample(key, p, dt, named):
        x = _random.truncated_normal(key, lower, upper, p, dt, named_shape=named)
        return x * jnp.array(stddev, dt)

    return _init(_INIT.truncated_normal(stddev, dtype, lower, upper), sample, dtype, "truncated_normal")


def _size(axes: AxisLike, pshape: tuple[int, ...], named: dict[str, int], what: str, where: str) -> int:
    items = axes if isinstance(axes, (tuple, list)) else (axes,)
    out = 1
    for a in items:
        if isinstance(a, str):
            if a not in named:
                raise AxisSpecError(f"{where}: {what}={axes!r} names axis {a!r}, which the named shape "
                                    f"{fmt_names(named) or '(none)'} lacks")
            out *= named[a]
        else:
            if not -len(pshape) <= a < len(pshape):
                raise AxisSpecError(f"{where}: {what}={axes!r}: positional axis {a} is out of range for "
                                    f"shape {pshape} (the named axes {fmt_names(named) or '(none)'} go by "
                                    "name)")
            out *= pshape[a]
    return out


def compute_fans(pshape: tuple[int, ...], named: dict[str, int], in_axis: AxisLike, out_axis: AxisLike,
                 batch_axis: AxisLike, where: str = "compute_fans") -> tuple[float, float]:
    """(fan_in, fan_out) of a weight of positional shape ``pshape`` and named shape ``named``; the axes are
    positions or names, and the axes none of them lists form the receptive field, as in jax.

    >>> compute_fans((3, 3), {"i": 16, "o": 32}, "i", "o", ())
    (144.0, 288.0)
    """
    in_size = _size(in_axis, pshape, named, "in_axis", where)
    out_size = _size(out_axis, pshape, named, "out_axis", where)
    batch_size = _size(batch_axis, pshape, named, "batch_axis", where) if batch_axis != () else 1
    receptive = math.prod(pshape) * math.prod(named.values()) / in_size / out_size / batch_size
    return in_size * receptive, out_size * receptive


def variance_scaling(scale: float, mode: str, distribution: str, in_axis: AxisLike = -2,
                     out_axis: AxisLike = -1, batch_axis: AxisLike = (), dtype: Any = None) -> Callable:
    """``jax.nn.initializers.variance_scaling`` whose axes may be names; its initializer takes
    ``named_shape=``.

    >>> import jax, namedarray as nx
    >>> init = nx.nn.initializers.variance_scaling(2.0, "fan_in", "normal", in_axis="i", out_axis="o")
    >>> w = init(jax.random.key(0), (), named_shape={"i": 512, "o": 256})
    >>> round(float(nx.std(w, axis=("i", "o"))) ** 2 * 512, 1)   # variance 2 / fan_in
    2.0
    """
    names_in_axes = any(isinstance(a, str) for ax in (in_axis, out_axis, batch_axis)
                        for a in (ax if isinstance(ax, (tuple, list)) else (ax,)))
    plain = None if names_in_axes else _INIT.variance_scaling(scale, mode, distribution, in_axis, out_axis,
                                                              batch_axis, dtype)
    where = "nx.nn.initializers.variance_scaling"

    def init(key: Any, shape: Any, dtype: Any = dtype, *, named_shape: NamedShapeLike = None) -> Any:
        pshape, named = shape_args(shape, named_shape, where)
        if named is None and plain is not None:
            return plain(key, pshape, dtype)
        named = named or {}
        dtype = _float_dtype(dtype, where)
        fan_in, fan_out = compute_fans(pshape, named, in_axis, out_axis, batch_axis, where)
        denominator = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2,
                       "fan_geo_avg": (fan_in * fan_out) ** 0.5}.get(mode)
        if denominator is None:
            raise ValueError(f"invalid mode for variance scaling initializer: {mode}")
        variance = scale / denominator
        if distribution == "truncated_normal":
            # .8796... is the standard deviation of the standard normal truncated to (-2, 2)
            x = _random.truncated_normal(key, -2, 2, pshape, dtype, named_shape=named)
            return x * jnp.array(variance ** 0.5 / .87962566103423978, dtype)
        if distribution == "normal":
            return _random.normal(key, pshape, dtype, named_shape=named) * jnp.array(variance ** 0.5, dtype)
        if distribution == "uniform":
            x = _random.uniform(key, pshape, dtype, -1, named_shape=named)
            return x * jnp.array((3 * variance) ** 0.5, dtype)
        raise ValueError(f"invalid distribution for variance scaling initializer: {distribution}")

    return init


def _preset(name: str, scale: float, mode: str, distribution: str) -> Callable:
    def factory(in_axis: AxisLike = -2, out_axis: AxisLike = -1, batch_axis: AxisLike = (),
                dtype: Any = None) -> Callable:
        return variance_scaling(scale, mode, distribution, in_axis, out_axis, batch_axis, dtype)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = (f"``jax.nn.initializers.{name}``: :func:`variance_scaling` ({scale}, {mode!r}, "
                       f"{distribution!r}); the axes may be names.\n\n"
                       f"    >>> import jax, namedarray as nx\n"
                       f"    >>> init = nx.nn.initializers.{name}(in_axis='i', out_axis='o')\n"
                       f"    >>> init(jax.random.key(0), (), named_shape={{'i': 2, 'o': 3}}).named_shape\n"
                       f"    {{'i': 2, 'o': 3}}\n")
    return factory


glorot_uniform = xavier_uniform = _preset("glorot_uniform", 1.0, "fan_avg", "uniform")
glorot_normal = xavier_normal = _preset("glorot_normal", 1.0, "fan_avg", "truncated_normal")
lecun_uniform = _preset("lecun_uniform", 1.0, "fan_in", "uniform")
lecun_normal = _preset("lecun_normal", 1.0, "fan_in", "truncated_normal")
he_uniform = kaiming_uniform = _preset("he_uniform", 2.0, "fan_in", "uniform")
he_normal = kaiming_normal = _preset("he_normal", 2.0, "fan_in", "truncated_normal")


def _positional_only(name: str) -> Callable:
    build = getattr(_INIT, name)
    where = f"nx.nn.initializers.{name}"

    def factory(*args: Any, **kwargs: Any) -> Callable:
        plain = build(*args, **kwargs)

        def init(key: Any, shape: Any, dtype: Any = None, *, named_shape: NamedShapeLike = None) -> Any:
            if named_shape is not None or isinstance(shape, Mapping):
                raise AxisSpecError(f"{where} builds matrices along positional axes: give it a positional "
                                    "shape, then name the axes (x.tag(...), nx.wrap)")
            return plain(key, shape, *(() if dtype is None else (dtype,)))

        return init

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"``jax.nn.initializers.{name}`` (positional shapes only)."
    return factory


orthogonal = _positional_only("orthogonal")
delta_orthogonal = _positional_only("delta_orthogonal")
