"""``nx.nn``: ``jax.nn`` for NamedArrays, with names allowed wherever an ``axis`` is.

* Elementwise activations (``relu``, ``gelu``, ``sigmoid``, ``silu``, ``softplus``, ``tanh``, ...; also
  ``relu_squared``, which jax.nn lacks) broadcast by name like every elementwise ``nx`` function.
* ``softmax``, ``log_softmax``, ``logsumexp``, ``logmeanexp``, ``standardize`` and ``glu`` take ``axis`` as
  an int, a name, or a tuple mixing both; a string is always one name, however long.
* ``one_hot(x, n, axis="classes")`` adds the class axis as a *named* axis.
* ``layer_norm(x, axis, scale, bias)`` and ``rms_norm(x, axis, scale)`` normalize along names;
  ``dot_product_attention`` takes the names of the sequences and head features
  (:mod:`namedarray.nn.attention`); ``nx.nn.initializers`` also take ``named_shape=``
  (:mod:`namedarray.nn.initializers`).
* ``dropout(key, rate, x, broadcast_axes=...)`` shares its mask along the names given and draws it
  independently along the others, whatever order ``x`` stores them in
  (:mod:`namedarray.nn.regularization`).
* Every other function of ``jax.nn`` is lifted over the names (:mod:`namedarray.engine.lifting`).

A name the value lacks but an enclosing ``nx.xmap`` binds is one along which the value is constant (xmap's
rule): ``logsumexp`` over it adds ``log(size)``, ``softmax`` divides by the size, ``standardize`` ignores it.
None of them adds the name to the result, since the result does not vary along it either.

>>> import namedarray as nx, jax.numpy as jnp
>>> logits = nx.wrap(jnp.zeros((2, 4)), ["batch", "classes"])
>>> p = nx.nn.softmax(logits, axis="classes")
>>> p.named_shape, nx.sum(p, "classes").unwrap(["batch"]).tolist()
({'batch': 2, 'classes': 4}, [1.0, 1.0])
>>> nx.nn.one_hot(jnp.array([2, 0]), 3, axis="classes").named_shape
{'classes': 3}
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import sys
from collections.abc import Callable
from typing import Any, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike, DTypeLike

from ..core import env as _env
from ..core import kernels
from ..core.array import NamedArray, _make, from_storage
from ..core.layout import union
from ..core.wrapping import wrap
from ..engine import dispatch as engine
from ..engine import registry
from ..engine.arguments import call
from ..engine.docstrings import follows_arguments, named_signature
from ..engine.lifting import rest_of
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    PerElementAxisError,
    PositionalAxisError,
    describe,
    fmt_names,
)
from . import initializers
from .attention import dot_product_attention
from .regularization import dropout

__all__ = ["relu", "relu6", "gelu", "sigmoid", "silu", "swish", "softplus", "tanh", "elu", "celu", "selu",
           "leaky_relu", "log_sigmoid", "soft_sign", "hard_sigmoid", "hard_silu", "hard_swish", "hard_tanh",
           "mish", "squareplus", "sparse_plus", "sparse_sigmoid", "log1mexp", "identity", "relu_squared",
           "softmax", "log_softmax", "logsumexp", "logmeanexp", "standardize", "glu", "one_hot", "layer_norm",
           "rms_norm", "dot_product_attention", "dropout", "initializers"]

Axis = int | str | tuple[int | str, ...] | None


# --------------------------------------------------------------------------------------------------------
# Elementwise activations


def _is_array(v: Any) -> bool:
    return type(v) is NamedArray or hasattr(v, "shape")


def _activation(fn: Callable) -> Callable:
    """``fn`` (a function of jax.nn, or one written here in its terms) broadcast over named axes, documented
    by ``fn``'s own docstring when it is written here, else by one that says so."""
    name = fn.__name__
    where = f"nx.nn.{name}"
    params = list(inspect.signature(fn).parameters)[1:]
    static = kernels.Static((fn, where, ()))

    @functools.wraps(fn)
    def f(x, *args, **kwargs):
        if type(x) is not NamedArray and not any(type(v) is NamedArray for v in (*args, *kwargs.values())):
            return call(fn, (x, *args), kwargs, where)
        if not args and not kwargs:  # the usual call, with its key built once
            return engine.elementwise(fn, (x,), where, static=static)
        kwargs.update(zip(params, args))
        if any(_is_array(v) for v in kwargs.values()):
            # an array-valued parameter (e.g. a per-feature negative_slope): vectorise over all names
            return engine.call_lifted(fn, (x,), kwargs, where)
        return engine.elementwise(fn, (x,), where, tuple(sorted(kwargs.items())))

    signature = named_signature(fn)
    if signature is not None:
        f.__signature__ = signature  # type: ignore[attr-defined]  # jax's, in nx's terms: what help() shows
    follows_arguments(f)
    f.__doc__ = fn.__doc__ if fn.__module__ == __name__ else (
        f"``jax.nn.{name}`` broadcast over named axes (the named shape is unchanged).\n\n"
        f"    >>> import namedarray as nx, jax.numpy as jnp\n"
        f"    >>> nx.nn.{name}(nx.wrap(jnp.zeros(3), ['b'])).named_shape\n"
        f"    {{'b': 3}}\n")
    return f


# jax.nn's activations, each made on first use (__getattr__ below) with the documentation _activation writes
_ACTIVATIONS = frozenset("""relu relu6 gelu sigmoid silu swish softplus tanh elu celu selu leaky_relu
log_sigmoid soft_sign hard_sigmoid hard_silu hard_swish hard_tanh mish squareplus sparse_plus sparse_sigmoid
log1mexp identity""".split())


@_activation
def relu_squared(x: ArrayLike) -> Array:
    """``relu(x) ** 2`` (squared ReLU), elementwise: broadcast over
    named axes (the named shape is unchanged).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.nn.relu_squared(nx.wrap(jnp.array([-2.0, 0.5, 3.0]), ["b"])).unwrap(["b"]).tolist()
    [0.0, 0.25, 9.0]
    """
    return jnp.square(jax.nn.relu(x))


# --------------------------------------------------------------------------------------------------------
# Functions along axes: the operands are broadcast together by name, then the jax.nn function runs on the
# storage with the named axes translated to storage positions.


def _has_name(axis: Any) -> bool:
    if isinstance(axis, str):
        return True
    return isinstance(axis, (tuple, list)) and any(isinstance(a, str) for a in axis)


def _static_axis(axis: Any) -> Any:
    return tuple(axis) if isinstance(axis, list) else axis


_PY_SCALARS = (int, float, complex, bool)


def _per_element_axes(axis: Any) -> tuple[tuple, tuple[str, ...]] | None:
    """Inside a positional ``nx.xmap`` body, an ``axis`` naming the map's names (JAX axis names there, along
    which values are per element): (the rest of ``axis``, those names); else None."""
    rest, theirs = _env.current().per_element(axis)
    return (rest, theirs) if theirs else None


def _only_positional(rest: tuple, names: tuple[str, ...], where: str) -> tuple[int, ...]:
    if any(isinstance(a, str) for a in rest):
        raise PerElementAxisError(
            f"{where}: axis mixes names of the positional nx.xmap body around it ({fmt_names(names)}) with "
            f"other names ({fmt_names([a for a in rest if isinstance(a, str)])}); reduce those first")
    return tuple(operator.index(a) for a in rest)


def _per_element_softmax(x: Any, axis: Any, log: bool, where: str) -> Any:
    """softmax / log_softmax over map names on per-element values: the collectives combine the elements."""
    rest, names = _per_element_axes(axis)
    pos = _only_positional(rest, names, where)
    x = jnp.asarray(x)
    top = jax.lax.pmax(jax.lax.stop_gradient(jnp.max(x, axis=pos, keepdims=True)), names)  # pmax has no JVP
    shifted = x - top
    total = jax.lax.psum(jnp.sum(jnp.exp(shifted), axis=pos, keepdims=True), names)
    return shifted - jnp.log(total) if log else jnp.exp(shifted) / total


def _per_element_logsumexp(a: Any, axis: Any, keepdims: bool, where: str) -> Any:
    rest, names = _per_element_axes(axis)
    pos = _only_positional(rest, names, where)
    a = jnp.asarray(a)
    top = jax.lax.pmax(jax.lax.stop_gradient(jnp.max(a, axis=pos, keepdims=True)), names)
    top = jnp.where(jnp.isfinite(top), top, 0)
    out = jnp.log(jax.lax.psum(jnp.sum(jnp.exp(a - top), axis=pos, keepdims=True), names)) + top
    return out if keepdims else jnp.squeeze(out, pos)


def _plain(fn: Callable, x: Any, axis: Any, kwargs: dict, where: str) -> Any:
    """``fn(x, axis=axis, **kwargs)`` on a value without names; an error naming the argument when it fails
    on a mistyped one (:func:`~namedarray.engine.arguments.mistyped`) or on an axis ``x`` does not have."""
    try:
        return call(fn, (x,), dict(kwargs, axis=axis), where)
    except (IndexError, ValueError) as e:
        nd = getattr(x, "ndim", None) if not isinstance(x, _PY_SCALARS) else 0
        for a in (axis if isinstance(axis, (tuple, list)) else (axis,)):
            if isinstance(nd, int) and isinstance(a, (int, np.integer)) and not -nd <= a < nd:
                raise PositionalAxisError(f"{where}: axis={axis!r} is out of range for x, which has "
                                          f"{nd or 'no'} ax{'i' if nd == 1 else 'e'}s (got {describe(x)})"
                                          ) from e
        raise


def _full(operands: tuple, where: str, labels: tuple[str, ...]) -> tuple[list, tuple[str, ...], int]:
    """The operands broadcast to one full storage shape (positional broadcast shape, then every name).

    ``labels`` name the operands (``"x"``, ``"where"``, ...) in the error for positional shapes that do not
    broadcast.
    """
    sizes = engine.join(operands, where)
    names = union(operands)
    shapes = [(v.shape if type(v) is NamedArray else np.shape(v), label)
              for v, label in zip(operands, labels) if v is not None]
    try:
        pshape = tuple(np.broadcast_shapes(*(s for s, _ in shapes)))
    except ValueError:
        raise AxisSizeError(f"{where}: the positional shapes do not broadcast: "
                            + ", ".join(f"{s} in {label!r}" for s, label in shapes if s)
                            + " (named axes broadcast by name, positional ones as in NumPy)") from None
    full = pshape + tuple(sizes[n] for n in names)
    out = []
    for v in operands:
        if v is None:
            out.append(None)
            continue
        if isinstance(v, _PY_SCALARS):
            out.append(v)  # a Python scalar broadcasts by itself and keeps its weak type
            continue
        d = engine.align(v, names, sizes) if type(v) is NamedArray else engine.align(jnp.asarray(v), names)
        out.append(jnp.broadcast_to(d, full))
    return out, names, len(pshape)


def _storage_axes(axis: Any, x: NamedArray, where: str,
                  blocks: bool = False) -> tuple[tuple[int, ...], int, tuple[str, ...]]:
    """(storage axes of ``axis`` in ``x``, product of the sizes of the bound names ``x`` lacks, the mesh axes
    holding blocks of the carried names when ``nx.shard_map`` splits them -- only allowed with ``blocks``)."""
    if axis is None:
        engine.check_reduces(x, where)
    ints, named = engine.normalize_axis(axis, x, where, allow_unbound=True, blocks=blocks)
    p = engine.pos_ndim(x)
    carried = tuple(p + x.names.index(n) for n in named if n in x.names)
    env = _env.current()
    missing = math.prod(env.size(n, where) for n in named if n not in x.names)
    mesh_axes = tuple(a for n in named if n in x.names for a in env.split.get(n, ()))
    return ints + carried, missing, mesh_axes


def _block_max_and_sum(d, axes: tuple[int, ...], mesh_axes: tuple[str, ...]):
    """(max, sum of exp(d - max)) over ``axes``, kept as size-1 dims, combined over the devices holding the
    blocks (inside ``nx.shard_map``): what a softmax or logsumexp over a split name needs."""
    # any shift gives the same values: the maximum keeps exp() in range, and needs no gradient
    m = jax.lax.pmax(jax.lax.stop_gradient(jnp.max(d, axis=axes, keepdims=True)), mesh_axes)
    s = jax.lax.psum(jnp.sum(jnp.exp(d - m), axis=axes, keepdims=True), mesh_axes)
    return m, s


def _softmax_key(log: bool, axis: Any, x: NamedArray) -> tuple | None:
    """What the storage axes of a softmax of traced ``x`` without a mask are a function of: the axis, the
    names, the abstract value and the environment; None for a concrete value, or where every result is
    checked (inside ``nx.xmap`` with resources)."""
    d = x.data
    if type(d) is engine.ArrayImpl or not isinstance(d, jax.core.Tracer):
        return None
    env = _env.current()
    if env.resources:
        return None
    return ("softmax", log, axis, x.names, d.aval, None if env is _env.EMPTY else env)


def _softmax_planned(log: bool, axis: Any, x: NamedArray) -> Any:
    """Under a trace, a softmax over axes an earlier trace of the same layout resolved (the plan
    :func:`_softmax_impl` keeps), without resolving them again; None where there is no plan."""
    key = _softmax_key(log, axis, x)
    if key is None:
        return None
    try:
        axes = kernels.plans.get(key)
    except TypeError:  # an unhashable axis: the general path says what is wrong with it
        return None
    if axes is None:
        return None
    return _make((jax.nn.log_softmax if log else jax.nn.softmax)(x.data, axis=axes), x.names)


def _softmax_impl(static, x, mask):
    log, axis, where = static
    if mask is None and type(x) is NamedArray:  # the common case: no broadcasting to do
        d, m, names = x.data, None, x.names
        key = _softmax_key(log, axis, x)
    else:
        (d, m), names, _ = _full((x, mask), where, ("x", "where"))
        x = _make(d, names)
        key = None
    axes, missing, mesh_axes = _storage_axes(axis, x, where, blocks=m is None)
    if mesh_axes:  # inside nx.shard_map, over a split name: the blocks' maxima and sums combined
        top, total = _block_max_and_sum(d, axes, mesh_axes)
        out = d - top - jnp.log(total) if log else jnp.exp(d - top) / total
    else:
        out = (jax.nn.log_softmax if log else jax.nn.softmax)(d, axis=axes, where=m)
        if key is not None and missing == 1:  # kept once it succeeded: the next trace resolves nothing
            kernels.plans.put(key, axes)
    if missing == 1:
        return _make(out, names)
    return _make(out - math.log(missing) if log else out / missing, names)


@follows_arguments
def softmax(x: NamedArray | ArrayLike, axis: Axis = -1,
            where: NamedArray | ArrayLike | None = None) -> NamedArray | jax.Array:
    """``jax.nn.softmax`` over positional and/or named axes (``axis`` an int, a name or a tuple of both).

    ``axis=None`` means every positional axis (named axes are reduced only when named, as in xmap);
    ``where`` may be a NamedArray, broadcast by name.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.array([[0.0, 0.0], [1.0, 1.0]]), ["batch", "classes"])
    >>> nx.nn.softmax(x, axis="classes").unwrap(["batch", "classes"]).tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    if type(x) is NamedArray and where is None:  # under a trace, a layout met before: its plan
        out = _softmax_planned(False, _static_axis(axis), x)
        if out is not None:
            return out
    if type(x) is not NamedArray and type(where) is not NamedArray and not _has_name(axis):
        return _plain(jax.nn.softmax, x, axis, {"where": where}, "nx.nn.softmax")
    if where is None and _per_element_axes(axis) is not None:
        return _per_element_softmax(x, axis, False, "nx.nn.softmax")
    engine.require_operands("nx.nn.softmax", (x, where), ("x", "where"), optional=("where",))
    return engine.run(_softmax_impl, (False, _static_axis(axis), "nx.nn.softmax"), (x, where))


@follows_arguments
def log_softmax(x: NamedArray | ArrayLike, axis: Axis = -1,
                where: NamedArray | ArrayLike | None = None) -> NamedArray | jax.Array:
    """``jax.nn.log_softmax`` over positional and/or named axes.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.zeros(4), ["classes"])
    >>> float(nx.nn.log_softmax(x, axis="classes").sum("classes"))  # 4 * log(1/4)
    -5.545177459716797
    """
    if type(x) is NamedArray and where is None:  # under a trace, a layout met before: its plan
        out = _softmax_planned(True, _static_axis(axis), x)
        if out is not None:
            return out
    if type(x) is not NamedArray and type(where) is not NamedArray and not _has_name(axis):
        return _plain(jax.nn.log_softmax, x, axis, {"where": where}, "nx.nn.log_softmax")
    if where is None and _per_element_axes(axis) is not None:
        return _per_element_softmax(x, axis, True, "nx.nn.log_softmax")
    engine.require_operands("nx.nn.log_softmax", (x, where), ("x", "where"), optional=("where",))
    return engine.run(_softmax_impl, (True, _static_axis(axis), "nx.nn.log_softmax"), (x, where))


def _keep_positional(out, named_axes: set[int], keepdims: bool):
    """With keepdims, the reduced *named* axes still leave the value (keepdims keeps positional dims only)."""
    if not keepdims:
        return out
    return out.reshape(tuple(s for i, s in enumerate(out.shape) if i not in named_axes))


def _lse_impl(static, x, b, mask):
    mean, axis, keepdims, return_sign, where = static
    (d, bd, m), names, p = _full((x, b, mask), where, ("a", "b", "where"))
    plain = not mean and bd is None and m is None and not return_sign
    axes, missing, mesh_axes = _storage_axes(axis, _make(d, names), where, blocks=plain)
    reduced = {a for a in axes if a >= p}
    out_names = tuple(n for i, n in enumerate(names) if p + i not in reduced)
    if mesh_axes:  # inside nx.shard_map, over a split name: the blocks' maxima and sums combined
        top, total = _block_max_and_sum(d, axes, mesh_axes)
        out = jnp.log(total) + top
        out = out if keepdims else jnp.squeeze(out, axes)
        if missing != 1:
            out = out + math.log(missing)
        return _make(_keep_positional(out, reduced, keepdims), out_names)
    if mean:
        out = jax.nn.logmeanexp(d, axis=axes, where=m, keepdims=keepdims)
        sign = None
    else:
        res = jax.nn.logsumexp(d, axis=axes, b=bd, keepdims=keepdims, return_sign=return_sign, where=m)
        out, sign = res if return_sign else (res, None)
        if missing != 1:  # the value is constant along the missing names: each adds `size` equal terms
            out = out + math.log(missing)
    out = _make(_keep_positional(out, reduced, keepdims), out_names)
    if sign is None:
        return out
    return out, _make(_keep_positional(sign, reduced, keepdims), out_names)


@follows_arguments
def logsumexp(a: NamedArray | ArrayLike, axis: Axis = None, b: NamedArray | ArrayLike | None = None,
              keepdims: bool = False, return_sign: bool = False,
              where: NamedArray | ArrayLike | None = None) -> NamedArray | jax.Array:
    """``jax.nn.logsumexp`` over positional and/or named axes; ``axis=None`` reduces the positional axes
    only (named axes survive, as in xmap). The reduced names leave the named shape.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.zeros((2, 4)), ["batch", "classes"])
    >>> nx.nn.logsumexp(x, "classes").named_shape
    {'batch': 2}
    """
    if not any(type(v) is NamedArray for v in (a, b, where)) and not _has_name(axis):
        return _plain(jax.nn.logsumexp, a, axis, {"b": b, "keepdims": keepdims, "return_sign": return_sign,
                                                  "where": where}, "nx.nn.logsumexp")
    if b is None and where is None and not return_sign and _per_element_axes(axis) is not None:
        return _per_element_logsumexp(a, axis, keepdims, "nx.nn.logsumexp")
    engine.require_operands("nx.nn.logsumexp", (a, b, where), ("a", "b", "where"), optional=("b", "where"))
    static = (False, _static_axis(axis), bool(keepdims), bool(return_sign), "nx.nn.logsumexp")
    return engine.run(_lse_impl, static, (a, b, where))


@follows_arguments
def logmeanexp(x: NamedArray | ArrayLike, axis: Axis = None, where: NamedArray | ArrayLike | None = None,
               keepdims: bool = False) -> NamedArray | jax.Array:
    """``jax.nn.logmeanexp`` over positional and/or named axes (``axis=None``: positional axes only).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.zeros((2, 4)), ["batch", "classes"])
    >>> nx.nn.logmeanexp(x, "classes").unwrap(["batch"]).tolist()
    [0.0, 0.0]
    """
    if type(x) is not NamedArray and type(where) is not NamedArray and not _has_name(axis):
        return _plain(jax.nn.logmeanexp, x, axis, {"where": where, "keepdims": keepdims}, "nx.nn.logmeanexp")
    engine.require_operands("nx.nn.logmeanexp", (x, where), ("x", "where"), optional=("where",))
    static = (True, _static_axis(axis), bool(keepdims), False, "nx.nn.logmeanexp")
    return engine.run(_lse_impl, static, (x, None, where))


def _standardize_impl(static, x, mean, variance, epsilon, mask):
    axis, algorithm, where = static
    (d, mu, var, eps, m), names, _ = _full((x, mean, variance, epsilon, mask), where,
                                          ("x", "mean", "variance", "epsilon", "where"))
    plain = mu is None and var is None and m is None
    # missing names: x is constant there, no-op
    axes, _, mesh_axes = _storage_axes(axis, _make(d, names), where, blocks=plain)
    if mesh_axes:  # inside nx.shard_map, over a split name: the means combine the blocks
        centred = d - engine.block_mean(d, axes, mesh_axes)
        out = centred * jax.lax.rsqrt(engine.block_mean(jnp.square(centred), axes, mesh_axes) + eps)
    else:
        out = jax.nn.standardize(d, axis=axes, mean=mu, variance=var, epsilon=eps, where=m,
                                 algorithm=algorithm)
    return _make(out, names)


@follows_arguments
def standardize(x: NamedArray | ArrayLike, axis: Axis = -1, mean: NamedArray | ArrayLike | None = None,
                variance: NamedArray | ArrayLike | None = None, epsilon: Any = 1e-5,
                where: NamedArray | ArrayLike | None = None, *,
                algorithm: str = "fast") -> NamedArray | jax.Array:
    """``jax.nn.standardize`` over positional and/or named axes (zero mean, unit variance along them).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.array([[1.0, 3.0], [2.0, 6.0]]), ["batch", "feature"])
    >>> y = nx.nn.standardize(x, axis="feature", epsilon=0.0)
    >>> y.unwrap(["batch", "feature"]).tolist()
    [[-1.0, 1.0], [-1.0, 1.0]]
    """
    ops = (x, mean, variance, epsilon, where)
    if not any(type(v) is NamedArray for v in ops) and not _has_name(axis):
        options = dict(mean=mean, variance=variance, epsilon=epsilon, where=where, algorithm=algorithm)
        return _plain(jax.nn.standardize, x, axis, options, "nx.nn.standardize")
    engine.require_operands("nx.nn.standardize", ops, ("x", "mean", "variance", "epsilon", "where"),
                            optional=("mean", "variance", "where"))
    return engine.run(_standardize_impl, (_static_axis(axis), algorithm, "nx.nn.standardize"), ops)


def _glu_impl(static, x):
    axis, where = static
    x = wrap(x)
    axes, _, _ = _storage_axes(axis, x, where)
    if len(axes) != 1:
        raise AxisSpecError(f"{where}: axis must be one positional axis or one name the value carries, "
                            f"got axis={axis!r}")
    size = x.data.shape[axes[0]]
    if size % 2:
        raise AxisSizeError(f"{where}: axis {axis!r} has size {size}, which cannot be split into two "
                            "halves (glu needs an even size)")
    return _make(jax.nn.glu(x.data, axis=axes[0]), x.names)


@follows_arguments
def glu(x: NamedArray | ArrayLike, axis: int | str = -1) -> NamedArray | jax.Array:
    """``jax.nn.glu``: split ``axis`` (a position or a name, which keeps half its size) in two halves
    ``a, b`` and return ``a * sigmoid(b)``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.nn.glu(nx.wrap(jnp.ones((2, 4)), ["b", "hidden"]), axis="hidden").named_shape
    {'b': 2, 'hidden': 2}
    """
    if type(x) is not NamedArray and not _has_name(axis):
        return _plain(jax.nn.glu, x, axis, {}, "nx.nn.glu")
    engine.require_operands("nx.nn.glu", (x,), ("x",))
    return engine.run(_glu_impl, (axis, "nx.nn.glu"), (x,))


# --------------------------------------------------------------------------------------------------------
# one_hot


def _one_hot_impl(static, x):
    num_classes, dtype, name, where = static
    x = wrap(x)
    env = _env.current()
    axes = env.split.get(name)
    if axes:  # inside nx.shard_map, this device's block of the classes: indices shifted to the block's start
        local = env.local_size(name)
        start = jax.lax.axis_index(axes if len(axes) > 1 else axes[0]) * local
        out = jax.nn.one_hot(x.data - start.astype(x.data.dtype), local, dtype=dtype, axis=-1)
    else:
        out = jax.nn.one_hot(x.data, num_classes, dtype=dtype, axis=-1)
    return from_storage(out, x.names + (name,), where)


# the class axis comes out named when axis is a name, so the result is a NamedArray then
@overload
def one_hot(x: NamedArray, num_classes: int, *, dtype: DTypeLike | None = None,
            axis: int | str = -1) -> NamedArray: ...
@overload
def one_hot(x: ArrayLike, num_classes: int, *, dtype: DTypeLike | None = None, axis: str) -> NamedArray: ...
@overload
def one_hot(x: ArrayLike, num_classes: int, *, dtype: DTypeLike | None = None,
            axis: int = -1) -> jax.Array: ...


def one_hot(x: NamedArray | ArrayLike, num_classes: int, *, dtype: DTypeLike | None = None,
            axis: int | str = -1) -> NamedArray | jax.Array:
    """``jax.nn.one_hot``; with a name for ``axis`` the class axis becomes that *named* axis.

    Out-of-range indices give all zeros. When an enclosing ``nx.xmap`` binds the name, ``num_classes`` must
    equal its size. With an int ``axis`` the class axis is positional and named axes are batch axes.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> y = nx.nn.one_hot(nx.wrap(jnp.array([1, 0]), ["batch"]), 3, axis="classes")
    >>> y.named_shape, y.unwrap(["batch", "classes"]).tolist()
    ({'batch': 2, 'classes': 3}, [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    """
    where = "nx.nn.one_hot"
    if not isinstance(axis, str):
        if type(x) is not NamedArray:
            return call(jax.nn.one_hot, (x, num_classes), {"dtype": dtype, "axis": axis}, where)
        return engine.call_lifted(jax.nn.one_hot, (x, num_classes), {"dtype": dtype, "axis": axis}, where)
    try:
        num_classes = operator.index(num_classes)  # as jax.nn.one_hot: 3.5 is an error, not 3 classes
    except TypeError:
        raise TypeError(f"{where}: num_classes must be a static int, got {num_classes!r}") from None
    env = _env.current()
    if axis in env.jax_names and type(x) is not NamedArray:
        # inside a positional nx.xmap body the class axis is the map's name: this element's class
        if env.jax_names[axis] != num_classes:
            raise AxisSizeError(f"{where}: Expected num_classes to match the size of axis {axis}, but "
                                f"{num_classes} != {env.jax_names[axis]} (axis {axis!r} is a name of the "
                                "enclosing nx.xmap)")
        hit = jnp.asarray(x) == jax.lax.axis_index(axis)
        return hit.astype(jnp.result_type(float) if dtype is None else dtype)
    if env.is_bound(axis) and env.size(axis, where) != num_classes:
        raise AxisSizeError(f"{where}: Expected num_classes to match the size of axis {axis}, but "
                            f"{num_classes} != {env.size(axis)} (axis {axis!r} is bound by an enclosing "
                            "nx.xmap)")
    if type(x) is NamedArray and axis in x.names:
        raise DuplicateAxisError(f"{where}: the indices already carry axis {axis!r}; the class axis needs "
                                 "a new name")
    engine.require_operands(where, (x,), ("x",))
    return engine.run(_one_hot_impl, (num_classes, dtype, axis, where), (x,))


# --------------------------------------------------------------------------------------------------------
# Normalization layers


def _norm_impl(static, x, scale, bias):
    rms, axis, eps, where = static
    x = wrap(x)
    ints, names = engine.normalize_axis(axis, x, where, blocks=True)
    mesh_axes = engine.split_mesh_axes(names)  # inside nx.shard_map: the means combine the blocks
    for what, v in (("scale", scale), ("bias", bias)):
        extra = [n for n in (v.names if type(v) is NamedArray else ()) if n not in x.names]
        if extra:
            raise AxisSpecError(f"{where}: the {what} has axes {fmt_names(extra)} that x lacks (x has "
                                f"{fmt_names(x.names) or 'no named axes'}); it would add them to the result")
    p = engine.pos_ndim(x)
    axes = ints + tuple(p + x.names.index(n) for n in names)
    d = x.data
    # statistics in at least float32, as flax and PyTorch compute them for half-precision inputs
    floating = jnp.issubdtype(d.dtype, jnp.floating)
    compute = jnp.promote_types(d.dtype, jnp.float32) if floating else jnp.float32
    xf = d.astype(compute)
    if rms:
        y = xf * jax.lax.rsqrt(engine.block_mean(jnp.square(xf), axes, mesh_axes) + eps)
    else:
        centred = xf - engine.block_mean(xf, axes, mesh_axes)
        y = centred * jax.lax.rsqrt(engine.block_mean(jnp.square(centred), axes, mesh_axes) + eps)
    out = _make(y.astype(d.dtype if floating else compute), x.names)
    if scale is not None:
        out = engine.elementwise(jnp.multiply, (out, scale), where)
    if bias is not None:
        out = engine.elementwise(jnp.add, (out, bias), where)
    return out


def _normalize(rms: bool, x: Any, axis: Axis, scale: Any, bias: Any, eps: float, where: str) -> Any:
    engine.require_operands(where, (x, scale, bias), ("x", "scale", "bias"), optional=("scale", "bias"))
    if axis is None:
        engine.check_reduces(x, where)
    return engine.run(_norm_impl, (rms, _static_axis(axis), float(eps), where), (x, scale, bias))


@follows_arguments
def layer_norm(x: NamedArray | ArrayLike, axis: Axis, scale: NamedArray | ArrayLike | None = None,
               bias: NamedArray | ArrayLike | None = None, eps: float = 1e-5) -> NamedArray | jax.Array:
    """Layer normalization over ``axis`` (names and/or positions): ``(x - mean) / sqrt(var + eps)``, then
    times ``scale`` plus ``bias``, which broadcast by name (they may carry only names ``x`` has).

    The statistics are computed in at least float32; the result has ``x``'s dtype (before ``scale``).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.array([[1.0, 3.0], [2.0, 6.0]]), ["batch", "embed"])
    >>> nx.nn.layer_norm(x, "embed", eps=0.0).unwrap(["batch", "embed"]).tolist()
    [[-1.0, 1.0], [-1.0, 1.0]]
    """
    return _normalize(False, x, axis, scale, bias, eps, "nx.nn.layer_norm")


@follows_arguments
def rms_norm(x: NamedArray | ArrayLike, axis: Axis, scale: NamedArray | ArrayLike | None = None,
             eps: float = 1e-5) -> NamedArray | jax.Array:
    """RMS normalization over ``axis`` (names and/or positions): ``x / sqrt(mean(x**2) + eps)``, then times
    ``scale`` (broadcast by name; it may carry only names ``x`` has).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.array([[2.0, -2.0], [3.0, 3.0]]), ["batch", "embed"])
    >>> nx.nn.rms_norm(x, "embed", eps=0.0).unwrap(["batch", "embed"]).tolist()
    [[1.0, -1.0], [1.0, 1.0]]
    """
    return _normalize(True, x, axis, scale, None, eps, "nx.nn.rms_norm")


# --------------------------------------------------------------------------------------------------------
# Everything else in jax.nn

_rest, __dir__ = rest_of(jax.nn, globals())


def __getattr__(name: str) -> Any:
    """``nx.nn.<name>`` for the activations (made here once, then bound) and jax.nn's other functions.

    The activations are made on first use rather than bound by assignment at import: an editor shows the
    documentation of a name's definition in the source, and an assignment has none, while without one it
    shows the stub's (generated from these functions' own)."""
    if name not in _ACTIVATIONS:
        return _rest(name)
    # two threads making one at once build two equal functions and both keep the one bound first
    return globals().setdefault(name, _activation(getattr(jax.nn, name)))
# nx.nn is where jax.nn's functions have their named versions (nx.xmap asks it for them)
registry.declare_fallback("jax.nn", functools.partial(getattr, sys.modules[__name__]))
