"""Layout and alignment: where a NamedArray keeps its named axes, and how operands are lined up by name.

**The layout rule.** A NamedArray's storage holds its positional axes first and its named axes last. The
order of the named axes is free: *natural inside, canonical at the pytree boundary*.

* Inside a trace (``jit``, ``grad``, ``scan`` bodies, ``nx.xmap``) and inside an eager kernel, a value keeps
  its names in whatever order the operation that made it produced: the order a positional programmer would
  get. :func:`union` gives elementwise results the leading operand's order (then the names other operands
  add, in their order); contractions keep ``dot_general``'s order (batch, then the left operand's free axes,
  then the right's); reductions and ``along`` operations keep their operand's order; ``nx.wrap`` keeps the
  order of the source axes. An operand is transposed only where the operation itself needs it
  (:func:`align`).
* Flattening (``jax.tree.flatten``, every jit boundary, ``scan`` carries, ``cond`` branches) gives the
  *canonical* storage (:func:`namedarray.core.array.canonical_storage`): the names in the one order fixed for
  their set, ``nx.canonical_order`` (:mod:`namedarray.core.orders`), which is the order the set first
  flattened in, in this job (or one ``nx.fix_canonical_order`` gave), and which every value that leaves
  the job carries with it. So two NamedArrays with equal positional shape,
  named shape and dtype have equal pytree structure however they were built; parameters, batches and
  optimiser state cross jit in the order the program built them in, whatever their names are spelled;
  and a transpose is needed only where a value leaves a trace in another order than its set's (XLA fuses
  it into the producer).

Results never depend on the storage order: every operation reads axes by name.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.zeros((2, 3)), ["y", "x"])
>>> x.names, (x + nx.wrap(jnp.zeros((3, 2)), ["x", "y"])).names   # natural: the first of the largest operands
(('y', 'x'), ('y', 'x'))
>>> import jax
>>> jax.tree.structure(x) == jax.tree.structure(nx.wrap(jnp.zeros((3, 2)), ["x", "y"]))
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ..errors import AxisSpecError, fmt_names
from .array import NamedArray
from .shape import join_sizes

__all__ = ["named_sizes", "pos_ndim", "union", "align", "join"]


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
            f"(vmap/scan/map) mapped one of its named axes. Its flattened leaf holds the positional axes "
            f"first and the {k} named axes last, so map a positional axis, counted from the front "
            "(0 <= in_axes < x.ndim), not a negative one; to loop over a named axis, use "
            "nx.scan(f, init, xs, axis=name) or nx.map(f, xs, axis=name)")
    return dict(zip(x.names, d.shape[d.ndim - k:]))


def pos_ndim(x: NamedArray) -> int:
    """The number of positional axes (negative when a transform mapped a named axis away).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> pos_ndim(nx.wrap(jnp.zeros((2, 3)), ["a", ...]))
    1
    """
    return x.data.ndim - len(x.names)


def union(operands: Sequence[Any]) -> tuple[str, ...]:
    """The names of the operands' broadcast, in natural order: the order of the operand with the most names
    (the first of those), then each name another operand adds, in that operand's order.

    Positional code broadcasts the smaller operands into the layout of the largest (``jnp.where(mask[None],
    logits, -inf)`` keeps ``logits``' layout), and so does this.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> union([nx.wrap(jnp.zeros(2), ["b"]), 1.0, nx.wrap(jnp.zeros((4, 2)), ["c", "b"])])
    ('c', 'b')
    """
    lead: tuple[str, ...] = ()
    mixed = False
    for v in operands:
        if type(v) is NamedArray and v.names != lead:
            if len(v.names) > len(lead):
                mixed = mixed or bool(lead)
                lead = v.names
            else:
                mixed = True
    if not mixed:
        return lead
    names = list(lead)
    seen = set(lead)
    for v in operands:
        if type(v) is NamedArray:
            for n in v.names:
                if n not in seen:
                    seen.add(n)
                    names.append(n)
    return tuple(names)


def align(v: Any, names: tuple[str, ...], sizes: dict[str, int] | None = None, pos: int | None = None) -> Any:
    """Storage of ``v`` laid out as (its positional axes, then ``names``), size 1 where ``v`` lacks a name.

    ``names`` is the target order (any order) and must include every name of ``v``; ``v``'s named axes are
    transposed into it. Missing names are broadcast to ``sizes`` when given. With ``pos``, the positional
    part is left-padded with size-1 axes to ``pos`` axes, so that operands meet with equal ranks (no
    implicit rank promotion: code running with ``jax_numpy_rank_promotion="raise"`` works). Broadcasting
    such storages is then exactly broadcasting by name plus NumPy's positional rules.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> align(nx.wrap(jnp.zeros((5, 3)), [None, "b"]), ("b", "a")).shape
    (5, 3, 1)
    >>> align(nx.wrap(jnp.zeros(3), ["b"]), ("a", "b"), pos=2).shape
    (1, 1, 1, 3)
    """
    if type(v) is NamedArray:
        d = v.data
        own = v.names
        p = d.ndim - len(own)
        if own == names and sizes is None and (pos is None or pos == p):
            return d
        extra = [n for n in own if n not in names]
        if extra:
            raise AxisSpecError(f"cannot align names {fmt_names(own)} to {fmt_names(names)}")
        order = tuple(n for n in names if n in own)
        if order != own:
            d = jax.lax.transpose(d, tuple(range(p)) + tuple(p + own.index(n) for n in order))
        shape_of = dict(zip(order, d.shape[p:]))
        lead = () if pos is None else (1,) * (pos - p)
        shape = lead + d.shape[:p] + tuple(shape_of.get(n, 1) for n in names)
        if shape != d.shape:
            d = jax.lax.reshape(d, shape)  # the primitive: jnp's reshape costs trace time on every op
        if sizes is not None:
            full = shape[:len(shape) - len(names)] + tuple(sizes[n] for n in names)
            if full != shape:
                d = jax.lax.broadcast_in_dim(d, full, tuple(range(len(full))))
        return d
    if v is None or isinstance(v, (int, float, complex, bool)) or (not names and pos is None):
        return v
    v = jnp.asarray(v)
    if v.ndim == 0:
        return v
    lead = () if pos is None else (1,) * (pos - v.ndim)
    d = jax.lax.reshape(v, lead + v.shape + (1,) * len(names))
    if sizes is not None:
        full = lead + v.shape + tuple(sizes[n] for n in names)
        d = jax.lax.broadcast_in_dim(d, full, tuple(range(len(full))))
    return d


def join(operands: Sequence[Any], where: str) -> dict[str, int]:
    """The named shape of the broadcast of ``operands``; a name with two sizes is an :class:`AxisSizeError`.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> join([nx.wrap(jnp.zeros(2), ["a"]), 1.0, nx.wrap(jnp.zeros(3), ["b"])], "example")
    {'a': 2, 'b': 3}
    """
    return join_sizes([named_sizes(v) if type(v) is NamedArray else None for v in operands], where)
