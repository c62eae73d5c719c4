"""``nx.scan`` and ``nx.map``: loops over a named axis.

``nx.scan(f, init, xs, axis="time")`` is ``jax.lax.scan`` with the scanned axis given by name: each step,
``f`` receives the carry and ``xs`` with ``axis`` removed (one slice), and the per-step outputs come back
stacked under the same name. It is the stacked-layers pattern read by name: ``nx.scan(block, x, params,
axis="layer")``, where ``params`` holds NamedArrays that each carry ``layer``; ``remat=True`` (or a
``jax.checkpoint_policies`` policy) recomputes each step's activations in the backward pass instead of
keeping them. ``nx.map(f, xs, axis=...)`` is the form without a carry: ``nx.nmap`` with bounded memory, one
slice (or ``batch_size`` slices, vectorised) at a time, like ``jax.lax.map``.

The leaves of ``xs``:

* a NamedArray that carries ``axis`` is sliced along it (all of them must agree on its size);
* a NamedArray without ``axis``, a scalar or a non-array leaf reaches every step whole: a value without a name
  is constant along it, as everywhere in nx;
* a positional array (rank >= 1) is an error, since which of its axes is meant would be a guess: name it
  (``nx.wrap(a, [axis, ...])``) to slice it, or close over it to use it whole;
* no leaf carrying ``axis`` is an error naming what the leaves carry.

The carry is fitted by name as in ``nx.lax.scan`` (:mod:`namedarray.transforms.control`): a carry leaf
whose body result
lacks a name is broadcast back along it. Inside, this is what a positional programmer writes: one
``lax.scan`` over the sliced storages with the axis moved to the front (a transpose only when it was not
there already), and outputs stacked in front, named where they lie. Stacked parameters cross ``jit`` in the
canonical order of their names (:mod:`namedarray.core.layout`), the order they were first built in: build them
with the scanned axis first among their names, as a positional program keeps its layer axis in front.

>>> import namedarray as nx, jax.numpy as jnp
>>> xs = nx.wrap(jnp.arange(6.0).reshape(3, 2), ["time", "k"])
>>> total, running = nx.scan(lambda c, x: (c + x, c + x), 0.0, xs, axis="time")
>>> total.unwrap(["k"]).tolist(), running.named_shape
([6.0, 9.0], {'k': 2, 'time': 3})
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import jax
from jax.tree_util import keystr

from ..core import placement
from ..core.array import NamedArray, _make, as_storage, is_named, transpose
from ..core.layout import named_sizes, pos_ndim
from ..core.shape import check_name
from ..errors import AxisSizeError, AxisSpecError, DuplicateAxisError, fmt_names, wrong_type
from .control import built_around, scan_carrying

__all__ = ["scan", "map"]


class _Sliced:
    """``xs`` taken apart for a loop over ``axis``: the storages to slice (the axis in front) and the rest."""

    def __init__(self, xs: Any, axis: str, where: str):
        flat, self.tree = jax.tree_util.tree_flatten_with_path(xs, is_leaf=is_named)
        self.leaves = [v for _, v in flat]
        self.at: list[int] = []  # which leaves are sliced
        self.names: list[tuple[str, ...]] = []  # the names each slice keeps, in storage order
        self.storages: list[Any] = []
        # the layout each slice has when the trace knows its stack's (placement.layouts_known), else None
        self.known: list[tuple | None] = []
        self.length: int | None = None
        first = ""
        for k, (path, v) in enumerate(flat):
            if type(v) is NamedArray:
                if axis not in v.names:
                    continue
                size = named_sizes(v)[axis]
                if self.length is None:
                    self.length, first = size, keystr(path)
                elif size != self.length:
                    raise AxisSizeError(f"{where}: axis {axis!r} has size {self.length} in xs{first} but "
                                        f"size {size} in xs{keystr(path)}")
                p, j = pos_ndim(v), v.names.index(axis)
                rest = tuple(p + i for i in range(len(v.names)) if i != j)
                self.storages.append(transpose(v.data, (p + j, *range(p), *rest)))
                self.names.append(v.names[:j] + v.names[j + 1:])
                self.known.append(_slice_layout(placement.known_layout(v.data), axis))
                self.at.append(k)
            elif getattr(v, "ndim", 0) >= 1:
                raise AxisSpecError(
                    f"{where}: xs{keystr(path)} is a positional array of shape {tuple(v.shape)}, and which "
                    f"of its axes is {axis!r} would be a guess; name it to slice it along {axis!r} "
                    f"(nx.wrap(a, [{axis!r}, ...])), or close over it to use it whole in every step")
        if self.length is None:
            raise AxisSpecError(f"{where}: no leaf of xs carries axis {axis!r}, so there is nothing to loop "
                                f"over; {_carried(flat)}")

    def layout(self) -> tuple[tuple, tuple | None]:
        """(what a step needs besides the slices, a key for it when that is static, else None).

        It is static unless ``xs`` holds arrays that reach every step whole (a step closes over those). The
        key tells ``1`` from ``1.0`` and ``True``, which a step may treat differently.
        """
        sliced = set(self.at)
        leaves = tuple(None if k in sliced else v for k, v in enumerate(self.leaves))
        layout = (self.tree, leaves, tuple(self.at), tuple(self.names), tuple(self.known))
        if any(type(v) is NamedArray or hasattr(v, "ndim") for v in leaves):
            return layout, None
        key = (layout, tuple(type(v) for v in leaves))
        try:
            hash(key)
        except TypeError:
            return layout, None
        return layout, key


def _step_xs(layout: tuple, slices: list[Any]) -> Any:
    """``xs`` as one step sees it: the sliced leaves rebuilt around ``slices``, the rest as they are."""
    tree, leaves, at, names, known = layout
    leaves = list(leaves)
    for k, n, s, key in zip(at, names, slices, known):
        if key is not None:
            placement.note_layout(s, key)  # so that .shard() of it with that layout adds nothing
        leaves[k] = _make(s, n)
    return jax.tree.unflatten(tree, leaves)


def _slice_layout(key: tuple | None, axis: str) -> tuple | None:
    """The layout of a slice along ``axis`` of a value laid out as ``key``: the other names' layout, when no
    mesh axis splits ``axis`` (a step's slice is then whole on every device that holds the stack's block)."""
    if key is None:
        return None
    mesh, entries = key
    if any(n == axis and axes for n, axes in entries):
        return None
    return mesh, tuple((n, axes) for n, axes in entries if n != axis)


def _carried(flat: list) -> str:
    """What the leaves of ``xs`` carry, for the message of a loop over a name none of them has."""
    parts = [f"xs{keystr(path)} has {fmt_names(v.names) or 'no names'}" if type(v) is NamedArray
             else f"xs{keystr(path)} is a {type(v).__name__}" for path, v in flat[:6]]
    if not parts:
        return "xs has no leaves"
    more = f" (and {len(flat) - 6} more leaves)" if len(flat) > 6 else ""
    return "; ".join(parts) + more


class _Stored:
    """One step's output as it is stored: a pytree whose storage keeps its order (a NamedArray flattens to the
    canonical one) and whose names are aux data, so that jax stacks it in front as it lies."""

    __slots__ = ("data", "names")

    def __init__(self, data: Any, names: tuple[str, ...]):
        self.data = data
        self.names = names


jax.tree_util.register_pytree_node(_Stored, lambda s: ((s.data,), s.names),
                                   lambda names, children: _Stored(children[0], names))


def _is_stored(v: Any) -> bool:
    return type(v) is _Stored


def _stored(ys: Any, axis: str, where: str) -> Any:
    """One step's outputs as :class:`_Stored` leaves; an output that already has ``axis`` is an error."""
    def store(path, v):
        if type(v) is not NamedArray:
            return _Stored(as_storage(v), ())
        if axis in v.names:
            raise DuplicateAxisError(
                f"{where}: the output y{keystr(path)} of f already has an axis {axis!r} (named axes "
                f"{fmt_names(v.names)}), but outputs are stacked along {axis!r}; rename it")
        return _Stored(v.data, v.names)

    return jax.tree_util.tree_map_with_path(store, ys, is_leaf=is_named)


def _stacked(ys: Any, axis: str) -> Any:
    """The stacked outputs as NamedArrays: the leading axis jax stacked them along is named ``axis``."""
    def name(s: _Stored) -> NamedArray:
        d = s.data
        p = d.ndim - 1 - len(s.names)  # positional axes after the stacked one
        return _make(transpose(d, (*range(1, p + 1), 0, *range(p + 1, d.ndim))), (axis, *s.names))

    return jax.tree.map(name, ys, is_leaf=_is_stored)


def _check_remat(remat: Any, where: str) -> None:
    if not (remat is None or isinstance(remat, bool) or callable(remat)):
        raise TypeError(f"{where}: remat must be True, False or a jax.checkpoint_policies policy, got "
                        f"{remat!r}")


def _checkpointed(body: Callable, remat: bool | Callable | None) -> Callable:
    if remat is False or remat is None:
        return body
    # inside a loop, common-subexpression elimination cannot undo the recomputation: no need to prevent it
    if remat is True:
        return jax.checkpoint(body, prevent_cse=False)
    return jax.checkpoint(body, prevent_cse=False, policy=remat)


def scan(f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any, axis: str = "time", *,
         reverse: bool = False, unroll: int | bool = 1, remat: bool | Callable = False) -> tuple[Any, Any]:
    """Loop ``f(carry, x) -> (carry, y)`` over the named axis ``axis`` of the NamedArrays in ``xs``.

    Returns ``(final carry, ys)``, each leaf of ``ys`` stacked along ``axis`` (a named axis; plain outputs
    become NamedArrays). ``reverse``, ``unroll`` are ``jax.lax.scan``'s; ``remat=True`` or a
    ``jax.checkpoint_policies`` policy checkpoints ``f``. See the module docstring for the leaves of ``xs``
    and how the carry broadcasts.

    >>> import jax, namedarray as nx, jax.numpy as jnp
    >>> params = {"w": nx.wrap(jnp.ones((4, 3, 3)) / 3, ["layer", "embed", "out"])}
    >>> def block(h, p):
    ...     return nx.rename(nx.dot(h, p["w"], axis="embed"), {"out": "embed"}), None
    >>> h, _ = nx.scan(block, nx.wrap(jnp.ones((2, 3)), ["batch", "embed"]), params, axis="layer", remat=True)
    >>> h.named_shape
    {'batch': 2, 'embed': 3}
    """
    where = "nx.scan"
    if not callable(f):
        raise wrong_type(where, "f", f, "a function f(carry, x) -> (carry, y)")
    check_name(axis, where)
    _check_remat(remat, where)
    sliced = _Sliced(xs, axis, where)
    layout, key = sliced.layout()

    def make(get_f):
        def body(carry, slices):
            out = get_f()(carry, _step_xs(layout, slices))
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TypeError(f"{where}: f must return a pair (carry, y), got {type(out).__name__}")
            return out[0], _stored(out[1], axis, where)
        return _checkpointed(body, remat)

    body = built_around(f, key and (where, axis, remat, key), make)
    carry, ys = scan_carrying(body, init, sliced.storages, where, reverse=reverse, unroll=unroll)
    return carry, _stacked(ys, axis)


def map(f: Callable[[Any], Any], xs: Any, axis: str, *, batch_size: int | None = None) -> Any:
    """``f`` of each slice of ``xs`` along the named axis ``axis``, stacked back along it.

    The result is ``nx.nmap``'s over ``axis``, computed one slice at a time (``batch_size`` slices at a time,
    vectorised, with ``batch_size=k``) so that memory holds one step's intermediates, as ``jax.lax.map``.
    ``f`` sees ``xs`` without ``axis`` (see the module docstring for the leaves of ``xs``).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6.0).reshape(3, 2), ["row", "k"])
    >>> nx.map(lambda r: nx.nn.softmax(r, "k"), x, axis="row", batch_size=2).named_shape
    {'k': 2, 'row': 3}
    """
    where = "nx.map"
    if not callable(f):
        raise wrong_type(where, "f", f, "a function of one slice of xs")
    check_name(axis, where)
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, numbers.Integral) or batch_size < 1):
        raise AxisSpecError(f"{where}: batch_size must be a positive int (how many slices along {axis!r} "
                            f"each step computes), or None for one at a time; got {batch_size!r}")
    sliced = _Sliced(xs, axis, where)
    layout, key = sliced.layout()
    if batch_size is not None:
        ys = jax.lax.map(lambda slices: _stored(f(_step_xs(layout, slices)), axis, where), sliced.storages,
                         batch_size=int(batch_size))
        return _stacked(ys, axis)

    def make(get_f):  # jax.lax.map without batches, with a step found again by jax's cache
        def body(carry, slices):
            return carry, _stored(get_f()(_step_xs(layout, slices)), axis, where)
        return body

    _, ys = jax.lax.scan(built_around(f, key and (where, axis, key), make), (), sliced.storages)
    return _stacked(ys, axis)
