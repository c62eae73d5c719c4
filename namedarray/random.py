"""``nx.random``: ``jax.random`` samplers with named axes.

Every sampler takes jax.random's arguments plus ``named_shape``: a mapping ``{name: size}``, or a sequence of
names whose sizes an enclosing ``nx.xmap`` binds. The result has positional shape ``shape`` and named shape
``named_shape`` together with the names of any NamedArray parameter (``p``, ``minval``, ``logits``, ...).

Samples are independent along named axes: the named axes are drawn as extra trailing dimensions of one
``jax.random`` call, in sorted order, and then stored in the order ``named_shape`` lists them, as
``jax.random.normal(key, (layers, embed))`` would lay them out (names the key carries come last). So a
result's values never depend on the order the names are listed in, are the same eagerly and under ``jit``,
and (JAX's partitionable threefry being the default) do not depend on how it is sharded. A purely
positional ``shape`` gives a value that is the same along every name, as in xmap.

A key may itself carry names (``nx.random.split(key, named_shape={"i": 4})``,
``nx.random.fold_in(key, nx.axis_index("i"))``, or ``nx.wrap(jax.random.split(key, 4), ["i"])``): each
index then samples with its own key, the result carries the key's names after those of ``named_shape``,
and ``named_shape`` may list the key's names with matching sizes.

>>> import jax, namedarray as nx
>>> x = nx.random.normal(jax.random.key(0), (3,), named_shape={"batch": 4})
>>> x.shape, x.named_shape
((3,), {'batch': 4})
>>> y = nx.random.normal(jax.random.key(0), (3,), named_shape={"batch": 4})
>>> bool(nx.all(x == y, axis=(0, "batch")))
True

Other functions of ``jax.random`` are reachable here too: ``key``, ``PRNGKey``, ``key_data``,
``wrap_key_data``, ``split`` and ``fold_in`` work on keys that carry names (``split`` also splits a key
into a named key array, by ``named_shape``, drawn as the samplers draw); anything else is
``jax.random.<f>`` lifted with :func:`namedarray.nmap` (positional semantics: with a key that carries no
names its samples are the same along every name).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.random import PRNGKey, key
from jax.typing import ArrayLike, DTypeLike

from .core.array import NamedArray, from_storage
from .core.shape import join_sizes
from .core.wrapping import name_to_position, wrap
from .engine import dispatch as engine
from .engine.arguments import call
from .engine.docstrings import follows_arguments
from .engine.lifting import rest_of
from .engine.nmap import nmap
from .errors import AxisSizeError, AxisSpecError, PositionalAxisError, describe, fmt_names, wrong_type
from .ops.creation import NamedShapeLike, named_shape_arg

# (key_data, wrap_key_data and fold_in are made by __getattr__, which ruff does not see)
__all__ = ["key", "PRNGKey", "key_data", "wrap_key_data", "split", "fold_in", "normal", "uniform",  # noqa: F822
           "bernoulli", "randint", "truncated_normal", "gumbel", "exponential", "laplace", "logistic",
           "cauchy", "rademacher", "gamma", "beta", "poisson", "categorical", "permutation"]

Shape = Sequence[int] | int | None

# key_data, wrap_key_data and fold_in are jax.random's lifted over a key's names, each bound on first use
# (__getattr__ below); key and PRNGKey are jax's own, imported above
_LIFTED_KEY_FUNCTIONS = frozenset({"key_data", "wrap_key_data", "fold_in"})
_split_positional = nmap(jax.random.split)

_SCALARS = (int, float, bool, np.number, np.bool_)


# --------------------------------------------------------------------------------------------------------
# Arguments


_SHAPE = "a sequence of ints (the positional shape) or an int"


def _shape(shape: Shape, where: str) -> tuple[int, ...] | None:
    if shape is None:
        return None
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        return (int(shape),)
    if isinstance(shape, Mapping):
        raise AxisSpecError(f"{where}: shape is the positional shape; give named axes as named_shape={{...}}")
    if isinstance(shape, (str, bytes, set, frozenset)) or not hasattr(shape, "__iter__"):
        raise wrong_type(where, "shape", shape, _SHAPE)
    try:
        return tuple(operator.index(s) for s in shape)
    except TypeError:
        raise wrong_type(where, "shape", shape, _SHAPE) from None


def _check_key(k: Any, where: str) -> None:
    """A key is an array (a typed key, or uint32 key data) or a NamedArray of them; nothing else is."""
    if type(k) is not NamedArray and not hasattr(k, "dtype"):
        raise wrong_type(where, "key", k, "a PRNG key (jax.random.key(seed)) or a named key array")


def _sizes(v: Any) -> dict[str, int] | None:
    return engine.named_sizes(v) if type(v) is NamedArray else None


def _layout(v: Any, sampled: tuple[str, ...], keyed: tuple[str, ...]):
    """(storage of ``v`` laid out as (positional..., ``sampled`` names with size 1 where absent, the
    ``keyed`` names it carries), those keyed names) so that one jax.random call broadcasts it against the
    sample shape (positional..., sampled sizes) and the keyed names can be vmapped away."""
    if v is None or isinstance(v, _SCALARS):
        return v, None
    if type(v) is not NamedArray:
        d = jnp.asarray(v)
        return d.reshape(d.shape + (1,) * len(sampled)), None
    d = v.data
    p = d.ndim - len(v.names)
    sizes = engine.named_sizes(v)
    sv = [n for n in sampled if n in sizes]
    kv = tuple(n for n in keyed if n in sizes)
    perm = list(range(p)) + [p + v.names.index(n) for n in sv] + [p + v.names.index(n) for n in kv]
    if perm != list(range(d.ndim)):
        d = jnp.transpose(d, perm)
    d = d.reshape(d.shape[:p] + tuple(sizes.get(n, 1) for n in sampled) + tuple(sizes[n] for n in kv))
    return d, kv


def _key_parts(k: Any) -> tuple[Any, tuple[str, ...]]:
    if type(k) is NamedArray:
        return k.data, k.names
    return k, ()


def _plan(k: Any, params: Sequence[Any], named: Mapping[str, int], where: str, labels: Sequence[str]):
    """(sampled names, keyed names, every size) for a key, parameters and a requested named shape."""
    labels = ["named_shape", "the key"] + [f"argument {n!r}" for n in labels]
    sizes = join_sizes([named, _sizes(k), *[_sizes(v) for v in params]], where, labels)
    keyed = k.names if type(k) is NamedArray else ()
    sampled = tuple(sorted(n for n in sizes if n not in keyed))
    return sampled, keyed, sizes


# --------------------------------------------------------------------------------------------------------
# Samplers with a shape


def _sample_impl(static, k, *arrays):
    fn, shape, named, slots, kwargs, where = static
    # parameters in their declared order: Python scalars were kept static, arrays came as operands
    names = [n for n, _ in slots]
    it = iter(arrays)
    values = [next(it) if s is _ARRAY else s for _, s in slots]
    sampled, keyed, sizes = _plan(k, values, dict(named), where, names)
    laid = [_layout(v, sampled, keyed) for v in values]
    pshape = _positional_shape(shape, names, values, where)
    full = pshape + tuple(sizes[n] for n in sampled)
    kdata, _ = _key_parts(k)

    def draw(kd, *datas):
        return fn(kd, **dict(zip(names, datas)), shape=full, **dict(kwargs))

    flags = [keyed] + [fl for _, fl in laid]
    out = engine.vectorize(draw, flags, keyed)(kdata, *[d for d, _ in laid])
    return _stored(out, sampled, keyed, [n for n, _ in named], values, where)


def _stored(out: Any, sampled: tuple[str, ...], keyed: tuple[str, ...], listed: Sequence[str],
            values: Sequence[Any], where: str) -> NamedArray:
    """The draw ``out`` (positional..., ``sampled``..., ``keyed``...) as a NamedArray.

    It was drawn with the sampled names sorted, so its values do not depend on how they were spelled; it is
    stored in the order a positional program would have asked for: the names ``named_shape`` lists, as
    listed, then the parameters' names as they hold them."""
    want = set(sampled)
    order = [n for n in listed if n in want]
    for v in values:
        if type(v) is NamedArray:
            order += [n for n in v.names if n in want and n not in order]
    order = tuple(order + [n for n in sampled if n not in order])
    if order != sampled:
        p = out.ndim - len(sampled) - len(keyed)
        at = {n: p + i for i, n in enumerate(sampled)}
        out = jnp.transpose(out, [*range(p), *(at[n] for n in order), *range(p + len(sampled), out.ndim)])
    return from_storage(out, order + keyed, where)


def _positional_shape(shape: tuple[int, ...] | None, names: Sequence[str], values: Sequence[Any],
                      where: str) -> tuple[int, ...]:
    """``shape``, to which every parameter's positional shape must broadcast (as in jax.random); without
    ``shape``, the parameters' broadcast shape."""
    pos = [tuple(v.shape) if type(v) is NamedArray else np.shape(v) for v in values]
    try:
        out = tuple(np.broadcast_shapes(*pos, *(() if shape is None else (shape,))))
    except ValueError:
        out = None
    if out is None or (shape is not None and out != shape):
        given = ", ".join(f"{n!r} {s}" for n, s in zip(names, pos) if s)
        target = "together" if shape is None else f"to shape={shape}"
        raise AxisSizeError(f"{where}: the positional shapes of the parameters ({given}) do not broadcast "
                            f"{target} (named axes broadcast by name, and are not part of these shapes)")
    return out


class _ArraySlot:
    """Marks a parameter passed as an operand (an array) rather than as static configuration."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<array>"


_ARRAY = _ArraySlot()


def _sample(name: str, k: Any, params: Mapping[str, Any], shape: Shape, named_shape: NamedShapeLike,
            kwargs: Mapping[str, Any]) -> Any:
    where = f"nx.random.{name}"
    fn = getattr(jax.random, name)
    _check_key(k, where)
    named = named_shape_arg(named_shape, where)
    shape = _shape(shape, where)
    kwargs = {n: v for n, v in kwargs.items() if v is not None}
    if not named and type(k) is not NamedArray and not any(type(v) is NamedArray for v in params.values()):
        # nothing named: exactly jax.random
        return call(fn, (k,), {**params, **({} if shape is None else {"shape": shape}), **kwargs}, where)
    engine.require_operands(where, (k, *params.values()), ("key", *params))
    slots = tuple((n, v if isinstance(v, _SCALARS) else _ARRAY) for n, v in params.items())
    arrays = tuple(v for v in params.values() if not isinstance(v, _SCALARS))
    static = (fn, shape, tuple(named.items()), slots, tuple(sorted(kwargs.items())), where)
    return engine.run(_sample_impl, static, (k, *arrays))


@follows_arguments
def normal(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None, *,
           named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Standard normal samples of positional ``shape`` and named shape ``named_shape``.

    >>> import jax, namedarray as nx
    >>> nx.random.normal(jax.random.key(0), named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("normal", key, {}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def uniform(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None,
            minval: NamedArray | ArrayLike = 0.0, maxval: NamedArray | ArrayLike = 1.0, *,
            named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Uniform samples in ``[minval, maxval)``; the bounds may be NamedArrays (their names join in).

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> hi = nx.wrap(jnp.array([1.0, 10.0]), ["scale"])
    >>> nx.random.uniform(jax.random.key(0), (5,), maxval=hi).named_shape
    {'scale': 2}
    """
    return _sample("uniform", key, {"minval": minval, "maxval": maxval}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def bernoulli(key: NamedArray | ArrayLike, p: NamedArray | ArrayLike = 0.5, shape: Shape = None, *,
              named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Boolean samples that are True with probability ``p`` (a scalar, array or NamedArray).

    >>> import jax, namedarray as nx
    >>> nx.random.bernoulli(jax.random.key(0), 0.5, (2,), named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("bernoulli", key, {"p": p}, shape, named_shape, {})


@follows_arguments
def randint(key: NamedArray | ArrayLike, shape: Shape, minval: NamedArray | ArrayLike,
            maxval: NamedArray | ArrayLike, dtype: DTypeLike | None = None, *,
            named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Integers in ``[minval, maxval)``.

    >>> import jax, namedarray as nx
    >>> x = nx.random.randint(jax.random.key(0), (), 0, 10, named_shape={"i": 100})
    >>> bool(nx.all((x >= 0) & (x < 10), axis="i"))
    True
    """
    if shape is None:  # (jax.random.randint needs one: () for scalars)
        raise wrong_type("nx.random.randint", "shape", shape, _SHAPE)
    return _sample("randint", key, {"minval": minval, "maxval": maxval}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def truncated_normal(key: NamedArray | ArrayLike, lower: NamedArray | ArrayLike,
                     upper: NamedArray | ArrayLike, shape: Shape = None, dtype: DTypeLike | None = None, *,
                     named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Standard normal samples truncated to ``(lower, upper)``.

    >>> import jax, namedarray as nx
    >>> x = nx.random.truncated_normal(jax.random.key(0), -1.0, 1.0, named_shape={"i": 50})
    >>> bool(nx.all(nx.abs(x) < 1, axis="i"))
    True
    """
    return _sample("truncated_normal", key, {"lower": lower, "upper": upper}, shape, named_shape,
                   {"dtype": dtype})


@follows_arguments
def gumbel(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None,
           mode: str | None = None, *,
           named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Standard Gumbel samples.

    >>> import jax, namedarray as nx
    >>> nx.random.gumbel(jax.random.key(0), (2,), named_shape={"i": 3}).shape
    (2,)
    """
    return _sample("gumbel", key, {}, shape, named_shape, {"dtype": dtype, "mode": mode})


@follows_arguments
def exponential(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None, *,
                named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """``jax.random.exponential`` samples (rate 1) of positional ``shape`` and named shape
    ``named_shape``.

    >>> import jax, namedarray as nx
    >>> nx.random.exponential(jax.random.key(0), (2,), named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("exponential", key, {}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def laplace(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None, *,
            named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """``jax.random.laplace`` samples (location 0, scale 1) of positional ``shape`` and named
    shape ``named_shape``.

    >>> import jax, namedarray as nx
    >>> nx.random.laplace(jax.random.key(0), (2,), named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("laplace", key, {}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def logistic(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None, *,
             named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """``jax.random.logistic`` samples (location 0, scale 1) of positional ``shape`` and named
    shape ``named_shape``.

    >>> import jax, namedarray as nx
    >>> nx.random.logistic(jax.random.key(0), (2,), named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("logistic", key, {}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def cauchy(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None, *,
           named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """``jax.random.cauchy`` samples (location 0, scale 1) of positional ``shape`` and named
    shape ``named_shape``.

    >>> import jax, namedarray as nx
    >>> nx.random.cauchy(jax.random.key(0), (2,), named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("cauchy", key, {}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def rademacher(key: NamedArray | ArrayLike, shape: Shape = (), dtype: DTypeLike | None = None, *,
               named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Random signs (-1 or +1), each with probability 1/2.

    >>> import jax, namedarray as nx
    >>> nx.random.rademacher(jax.random.key(0), (2,), named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("rademacher", key, {}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def gamma(key: NamedArray | ArrayLike, a: NamedArray | ArrayLike, shape: Shape = None,
          dtype: DTypeLike | None = None, *,
          named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Gamma samples with concentration ``a`` (a scalar, array or NamedArray).

    >>> import jax, namedarray as nx
    >>> nx.random.gamma(jax.random.key(0), 2.0, named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("gamma", key, {"a": a}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def beta(key: NamedArray | ArrayLike, a: NamedArray | ArrayLike, b: NamedArray | ArrayLike,
         shape: Shape = None, dtype: DTypeLike | None = None, *,
         named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Beta samples with parameters ``a`` and ``b``.

    >>> import jax, namedarray as nx
    >>> nx.random.beta(jax.random.key(0), 2.0, 3.0, named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("beta", key, {"a": a, "b": b}, shape, named_shape, {"dtype": dtype})


@follows_arguments
def poisson(key: NamedArray | ArrayLike, lam: NamedArray | ArrayLike, shape: Shape = None,
            dtype: DTypeLike | None = None, *,
            named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Poisson samples with rate ``lam``.

    >>> import jax, namedarray as nx
    >>> nx.random.poisson(jax.random.key(0), 3.0, named_shape={"i": 3}).named_shape
    {'i': 3}
    """
    return _sample("poisson", key, {"lam": lam}, shape, named_shape, {"dtype": dtype})


# --------------------------------------------------------------------------------------------------------
# Keys along names


def _split_impl(static, k):
    shape, named, where = static
    sampled, keyed, sizes = _plan(k, [], dict(named), where, [])
    full = shape + tuple(sizes[n] for n in sampled)
    kdata, _ = _key_parts(k)
    typed = jnp.issubdtype(kdata.dtype, jax.dtypes.prng_key)
    positional = kdata.shape[:kdata.ndim - len(keyed)]
    if positional != (() if typed else (2,)):
        raise AxisSpecError(f"{where}: splits one key per index of the key's names; got a key with "
                            f"positional shape {positional} ({kdata.dtype}); index its positional axes first")

    def draw(kd):
        if not typed:  # a uint32 key: the same bits as a typed key of the default implementation
            kd = jax.random.wrap_key_data(kd)
        return jax.random.split(kd, full)

    out = engine.vectorize(draw, [keyed], keyed)(kdata)
    return _stored(out, sampled, keyed, [n for n, _ in named], (), where)


@follows_arguments
def split(key: NamedArray | ArrayLike, num: int | Sequence[int] | None = None, *,
          named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Split ``key`` into new keys: ``num`` of them positionally (``jax.random.split``), and with
    ``named_shape`` a named key array, one independent key per index of the named axes.

    The result's named shape is ``named_shape`` together with the names the key carries (a key that carries
    names is split per index, ``named_shape`` may list its names with matching sizes), and its positional
    shape is ``num`` (none by default when ``named_shape`` is given, else 2). The new names are drawn as
    the samplers draw them: one ``jax.random.split(key, num + sizes)`` with the names in sorted order, stored
    as ``named_shape`` lists them, so each key depends on its index along each name, never on the order the
    names are listed or stored in. The keys are typed key arrays (a uint32 key is read with the default
    implementation, as ``jax.random.wrap_key_data`` does), which every ``nx.random`` sampler accepts: it
    then draws with each key independently, and its result carries the key's names too.

    >>> import jax, namedarray as nx
    >>> keys = nx.random.split(jax.random.key(0), named_shape={"layer": 4})
    >>> keys.named_shape, keys.shape
    ({'layer': 4}, ())
    >>> nx.random.normal(keys, (3,), named_shape={"embed": 8}).named_shape
    {'embed': 8, 'layer': 4}
    """
    where = "nx.random.split"
    _check_key(key, where)
    named = named_shape_arg(named_shape, where)
    if not named:
        return _split_positional(key, 2 if num is None else num)
    shape = () if num is None else _shape(num, where)
    return engine.run(_split_impl, (shape, tuple(named.items()), where), (key,))


# --------------------------------------------------------------------------------------------------------
# Samplers along an axis


def _categorical_impl(static, k, logits):
    axis, shape, named, kwargs, where = static
    logits = wrap(logits)
    if isinstance(axis, str):
        if axis not in logits.names:
            raise AxisSpecError(f"{where}: the logits do not carry axis {axis!r} (they have "
                                f"{fmt_names(logits.names) or 'no names'})")
        logits = name_to_position(logits, axis, where=where)
        a = logits.ndim - 1
    else:
        a = _positional_axis(axis, logits, where)
    sampled, keyed, sizes = _plan(k, [logits], dict(named), where, ["logits"])
    d, fl = _layout(logits, sampled, keyed)
    batch = logits.shape[:a] + logits.shape[a + 1:]
    full = (batch if shape is None else shape) + tuple(sizes[n] for n in sampled)
    kdata, _ = _key_parts(k)

    def draw(kd, ld):
        return jax.random.categorical(kd, ld, axis=a, shape=full, **dict(kwargs))

    out = engine.vectorize(draw, [keyed, fl], keyed)(kdata, d)
    return _stored(out, sampled, keyed, [n for n, _ in named], [logits], where)


def _positional_axis(axis: Any, x: NamedArray, where: str) -> int:
    p = x.ndim
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -p <= axis < p:
        raise AxisSpecError(f"{where}: axis={axis!r} is out of range for {p} positional axes (positional "
                            f"shape {x.shape}, named axes {fmt_names(x.names) or 'none'}; give a name to act "
                            "along a named axis)")
    return int(axis) % p


@follows_arguments
def categorical(key: NamedArray | ArrayLike, logits: NamedArray | ArrayLike, axis: int | str = -1,
                shape: Shape = None, replace: bool = True,
                mode: str | None = None, *, named_shape: NamedShapeLike = None) -> NamedArray | jax.Array:
    """Sample indices along ``axis`` of ``logits`` (a position or a name, which leaves the result).

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> logits = nx.wrap(jnp.log(jnp.array([[0.0, 1.0], [1.0, 0.0]])), ["batch", "classes"])
    >>> nx.random.categorical(jax.random.key(0), logits, axis="classes").unwrap(["batch"]).tolist()
    [1, 0]
    """
    where = "nx.random.categorical"
    _check_key(key, where)
    named = named_shape_arg(named_shape, where)
    shape = _shape(shape, where)
    kwargs = {"replace": replace, **({"mode": mode} if mode is not None else {})}
    if not named and not isinstance(axis, str) and NamedArray not in (type(key), type(logits)):
        nd = 0 if isinstance(logits, _SCALARS) else getattr(logits, "ndim", None)
        if isinstance(nd, int) and isinstance(axis, (int, np.integer)) and not -nd <= axis < nd:
            raise PositionalAxisError(f"{where}: axis={axis!r} is out of range for logits, which have "
                                      f"{nd or 'no'} ax{'i' if nd == 1 else 'e'}s (got {describe(logits)})")
        return call(jax.random.categorical, (key, logits), dict(axis=axis, shape=shape, **kwargs), where)
    engine.require_operands(where, (key, logits), ("key", "logits"))
    static = (axis, shape, tuple(named.items()), tuple(sorted(kwargs.items())), where)
    return engine.run(_categorical_impl, static, (key, logits))


def _permutation_impl(static, k, x):
    axis, independent, where = static
    sampled, keyed, _ = _plan(k, [x], {}, where, ["x"])
    d, fl = _layout(x, sampled, keyed)
    p = x.ndim
    a = p + sampled.index(axis) if isinstance(axis, str) else _positional_axis(axis, x, where)
    if isinstance(axis, str) and axis not in sampled:
        raise AxisSpecError(f"{where}: cannot permute along {axis!r}, which the key carries")
    kdata, _ = _key_parts(k)

    def draw(kd, xd):
        return jax.random.permutation(kd, xd, axis=a, independent=independent)

    out = engine.vectorize(draw, [keyed, fl], keyed)(kdata, d)
    return _stored(out, sampled, keyed, (), [x], where)


@follows_arguments
def permutation(key: NamedArray | ArrayLike, x: NamedArray | ArrayLike, axis: int | str = 0,
                independent: bool = False) -> NamedArray | jax.Array:
    """Shuffle ``x`` along ``axis`` (a position or a name); an int ``x`` permutes ``arange(x)``.

    Without ``independent`` one permutation is applied to every slice, named or positional; with it every
    slice is shuffled independently.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> x = nx.wrap(jnp.arange(5), ["i"])
    >>> sorted(nx.random.permutation(jax.random.key(0), x, axis="i").unwrap(["i"]).tolist())
    [0, 1, 2, 3, 4]
    """
    where = "nx.random.permutation"
    _check_key(key, where)
    if type(x) is not NamedArray and type(key) is not NamedArray and not isinstance(axis, str):
        return call(jax.random.permutation, (key, x), {"axis": axis, "independent": independent}, where)
    engine.require_operands(where, (key, x), ("key", "x"))
    if isinstance(x, (int, np.integer)):
        x = jnp.arange(int(x))
    x = wrap(x)
    if isinstance(axis, str) and axis not in x.names:
        raise AxisSpecError(f"{where}: the value does not carry axis {axis!r} (it has "
                            f"{fmt_names(x.names) or 'no names'})")
    return engine.run(_permutation_impl, (axis, bool(independent), where), (key, x))


# --------------------------------------------------------------------------------------------------------
# Everything else in jax.random

_rest, __dir__ = rest_of(jax.random, globals())


def __getattr__(name: str) -> Any:
    """``nx.random.<name>`` for the lifted key functions (bound here once made) and jax.random's others.

    The lifted key functions are bound on first use rather than by assignment at import: an editor shows the
    documentation of a name's definition in the source, and an assignment has none, while without one it
    shows the stub's (jax's documentation of the function)."""
    if name not in _LIFTED_KEY_FUNCTIONS:
        return _rest(name)
    # two threads binding one at once build two equal functions and both keep the one bound first
    return globals().setdefault(name, nmap(getattr(jax.random, name)))
