"""Regularization layers of ``nx.nn``: dropout by name, ``nx.nn.dropout(key, rate, x, broadcast_axes=...)``.

Each element of ``x`` is zeroed with probability ``rate`` and the survivors are scaled by ``1 / (1 - rate)``,
so the mean is kept in expectation. The mask is one :func:`namedarray.random.bernoulli` draw over the axes
of ``x`` less ``broadcast_axes``: it is constant along those (one decision shared by every index of them,
as Flax's ``broadcast_dims`` and Haliax's ``broadcast_axes`` share it) and independent along the others.

Like every ``nx.random`` draw, the mask is drawn with the names in sorted order and then aligned to ``x``
by name, so the same key and named shape give the same mask whatever order ``x`` stores its axes in,
eagerly and under ``jit``. A key that carries names (``nx.random.split(key, named_shape={"batch": 8})``)
draws each index's mask with its own key; its names must be names of ``x`` that are not broadcast.
Inside ``nx.shard_map``, a name split into per-device blocks may be broadcast or carried by the key, but
a mask drawn along it would depend on the split, so that is an error.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> x = nx.ones({"batch": 2, "embed": 6})
>>> y = nx.nn.dropout(jax.random.key(0), 0.5, x, broadcast_axes="batch")
>>> bool(nx.all(y[{"batch": 0}] == y[{"batch": 1}], axis="embed"))  # one mask for every batch index
True
>>> sorted(set(y.unwrap(["batch", "embed"]).ravel().tolist()))  # dropped or scaled by 1 / (1 - rate)
[0.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import random as _random
from ..core import env as _env
from ..core.array import NamedArray, to_storage
from ..engine import dispatch as engine
from ..engine.docstrings import follows_arguments
from ..errors import AxisSizeError, AxisSpecError, fmt_names, wrong_type

__all__ = ["dropout"]

BroadcastAxes = int | str | Sequence[int | str] | None


def _apply(x: Any, keep_mask: Any, keep: Any) -> Any:
    out = jnp.where(keep_mask, x / keep, 0)
    return out.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.inexact) else out


def _dropout_impl(static, key, x, rate):
    positions, shared, keep, where = static
    if keep is None:  # a traced rate
        keep = 1 - rate
    pshape = tuple(1 if i in positions else s for i, s in enumerate(x.shape))
    sizes = engine.named_sizes(x) if type(x) is NamedArray else {}
    keyed = key.names if type(key) is NamedArray else ()  # one draw per key: the sampler maps over them
    drawn = {n: sizes[n] for n in sorted(sizes) if n not in shared and n not in keyed}
    keep_mask = _random.bernoulli(key, keep, pshape, named_shape=drawn)
    return engine.elementwise(_apply, (x, keep_mask, keep), where)


def _broadcast_spec(broadcast_axes: BroadcastAxes, x: Any,
                    where: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(positional axes, names of ``x``) along which the mask is shared."""
    if broadcast_axes is None:
        return (), ()
    items = (broadcast_axes,) if isinstance(broadcast_axes, (str, int, np.integer)) else tuple(broadcast_axes)
    names = x.names if type(x) is NamedArray else ()
    p = len(x.shape)
    positions, shared = set(), set()
    for a in items:
        if isinstance(a, str):
            if a in names:
                shared.add(a)
            elif not _env.current().is_bound(a):  # a bound name x lacks: x is constant along it already
                raise AxisSpecError(f"{where}: broadcast_axes names axis {a!r}, which x does not carry "
                                    f"(x has {fmt_names(names) or 'no named axes'})")
        elif isinstance(a, (int, np.integer)) and not isinstance(a, bool):
            if not -p <= a < p:
                raise AxisSpecError(f"{where}: broadcast_axes position {a} is out of range for the {p} "
                                    f"positional axes of x (positional shape {tuple(x.shape)}; give a name "
                                    "to share the mask along a named axis)")
            positions.add(int(a) % p)
        else:
            raise AxisSpecError(f"{where}: broadcast_axes holds names (str) and positions (int), got {a!r}")
    return tuple(sorted(positions)), tuple(sorted(shared))


def _check_key(key: Any, x: Any, shared: tuple[str, ...], where: str) -> None:
    if key is None:
        raise ValueError(f"{where}: a key is needed to drop elements (rate > 0 and deterministic=False)")
    if type(key) is not NamedArray:
        if not hasattr(key, "dtype"):
            raise wrong_type(where, "key", key, "a PRNG key (jax.random.key(seed)) or a named key array")
        return
    sizes = engine.named_sizes(x) if type(x) is NamedArray else {}
    for n, s in engine.named_sizes(key).items():
        if n not in sizes:
            raise AxisSpecError(f"{where}: the key carries axis {n!r}, which x does not (x has "
                                f"{fmt_names(tuple(sizes)) or 'no named axes'}); a key's names select a "
                                "key per index of x")
        if sizes[n] != s:
            raise AxisSizeError(f"{where}: axis {n!r} has size {s} in the key but size {sizes[n]} in x")
        if n in shared:
            raise AxisSpecError(f"{where}: broadcast_axes shares the mask along {n!r}, but the key carries "
                                f"{n!r} (one key, and so one mask, per index of it)")


@follows_arguments
def dropout(key: ArrayLike, rate: ArrayLike, x: NamedArray | ArrayLike, *, broadcast_axes: BroadcastAxes = (),
            deterministic: bool = False) -> NamedArray | jax.Array:
    """Zero each element of ``x`` with probability ``rate`` and scale the others by ``1 / (1 - rate)``; by
    name: the mask is shared along the names (and positions) in ``broadcast_axes`` and drawn independently
    along every other axis of ``x``, whatever order ``x`` stores its names in. The result has ``x``'s
    named shape, positional shape and dtype.

    ``rate`` is a scalar in ``[0, 1)`` (a traced rate cannot be checked); with ``rate == 0`` or
    ``deterministic=True`` ``x`` is returned unchanged (no key needed). ``key`` is a typed or a uint32 key,
    or a named key array (one key per index of some of ``x``'s names, see :func:`namedarray.random.split`).
    ``broadcast_axes`` is a name, a position, or a sequence of both.

    >>> import jax, namedarray as nx
    >>> x = nx.ones({"batch": 3, "seq": 4, "embed": 8})
    >>> y = nx.nn.dropout(jax.random.key(0), 0.25, x, broadcast_axes=("seq",))
    >>> y.named_shape == x.named_shape, bool(nx.all(y == y[{"seq": 0}], axis=("batch", "seq", "embed")))
    (True, True)
    >>> nx.nn.dropout(None, 0.25, x, deterministic=True) is x
    True
    """
    where = "nx.nn.dropout"
    if type(rate) is NamedArray:
        raise AxisSpecError(f"{where}: rate must be a scalar, got a NamedArray with named shape "
                            f"{dict(rate.named_shape)}")
    if np.ndim(rate) != 0:
        raise ValueError(f"{where}: rate must be a scalar, got shape {np.shape(rate)}")
    keep = None
    if not isinstance(rate, jax.core.Tracer):
        try:
            r = float(rate)
        except (TypeError, ValueError):
            raise wrong_type(where, "rate", rate,
                             "a number in [0, 1) (the probability of dropping an element)") from None
        if not 0 <= r < 1:
            raise ValueError(f"{where}: rate must be in [0, 1) (the probability of dropping an element), "
                             f"got {rate!r}")
        keep = 1.0 - r
    value = x if type(x) is NamedArray else to_storage(x, where, "x")
    positions, shared = _broadcast_spec(broadcast_axes, value, where)
    if deterministic or keep == 1.0:
        return x
    _check_key(key, value, shared, where)
    if type(value) is NamedArray:  # inside nx.shard_map, a block of a split name cannot draw its own part
        keyed = key.names if type(key) is NamedArray else ()
        _env.current().require_whole([n for n in value.names if n not in shared and n not in keyed], where)
    return engine.run(_dropout_impl, (positions, shared, keep, where),
                      (key, value, None if keep is not None else rate))
