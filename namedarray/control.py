"""Control flow with named values: ``nx.lax.cond``, ``switch``, ``fori_loop``, ``while_loop``, ``scan``.

``jax.lax`` requires a loop carry to keep its pytree structure from one iteration to the next, and the
branches of a conditional to return one structure. A NamedArray's names are part of its structure, so code
written for xmap, where a carry may lose a name (a ``psum`` over it in the loop body) or one branch returns a
value that lacks a name, fails there with a pytree-structure ``TypeError``. These wrappers broadcast by name
first, as xmap did:

* loops (``fori_loop``, ``while_loop``, ``scan``): each carry leaf holds the union of the names it enters with
  and the names the body returns it with. A body result lacking a name of the carry is broadcast along it; a
  name the body adds is broadcast into the initial value too, and the body is traced again from there.
* conditionals (``cond``, ``switch``): each output leaf holds the union of the branches' names for it.
* a plain array or scalar counts as a NamedArray without names.
* the same name with two sizes cannot be broadcast away: an :class:`~namedarray.errors.AxisSizeError` names
  the name, both sizes and the leaf.

Storage order never matters (a carry crosses the loop boundary in canonical order, see
:mod:`namedarray.layout`), and values that already agree pass through untouched, traced once. Positional
shapes, dtypes and the rest of the pytree structure are checked by ``jax.lax`` as usual. A predicate or
switch index must have no named axes. ``scan`` and ``map`` loop over the leading *positional* axis of
``xs``, as in ``jax.lax`` (names pass through to the body); to loop over a named axis use ``nx.scan`` and
``nx.map`` (:mod:`namedarray.scan`).

>>> import namedarray as nx, jax.numpy as jnp
>>> body = lambda i, c: nx.psum(c, "i")          # the carry loses 'i': it is broadcast back along it
>>> x = nx.wrap(jnp.arange(4.0), ["i"])
>>> nx.lax.fori_loop(0, 2, body, x).unwrap(["i"]).tolist()
[24.0, 24.0, 24.0, 24.0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
from jax.tree_util import keystr

from .array import NamedArray, _make, as_storage, is_named
from .errors import AxisSpecError, fmt_names
from .layout import align, named_sizes, pos_ndim
from .shape import join_sizes

__all__ = ["cond", "switch", "fori_loop", "while_loop", "scan", "map", "scan_carrying", "broadcast_to_names"]


def broadcast_to_names(v: Any, sizes: Mapping[str, int], order: tuple[str, ...]) -> NamedArray:
    """``v`` (a NamedArray, array or scalar) broadcast along the names of ``sizes`` it lacks, in ``order``.

    ``order`` lists every name of ``sizes`` and of ``v``. A value that already has them all is returned as
    it is.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> broadcast_to_names(2.0, {"k": 3}, ("k",)).unwrap(["k"]).tolist()
    [2.0, 2.0, 2.0]
    """
    x = v if type(v) is NamedArray else _make(as_storage(v), ())
    if len(x.names) == len(order):
        return x
    return _make(align(x, order, dict(sizes)), order)


def _sizes(v: Any) -> dict[str, int] | None:
    return named_sizes(v) if type(v) is NamedArray else None


def _unnamed(v: Any, where: str, what: str) -> Any:
    """A predicate or index: its storage when it is a NamedArray without names; named axes are an error."""
    if type(v) is not NamedArray:
        return v
    if v.names:
        sizes = ", ".join(f"{n!r} (size {s})" for n, s in named_sizes(v).items())
        raise AxisSpecError(
            f"{where}: {what} has named axes {sizes}, but one choice is made for the whole value; reduce "
            f"them first (nx.any(p, {v.names[0]!r}), nx.all(...)) or choose elementwise with nx.where")
    return v.data


# --------------------------------------------------------------------------------------------------------
# Loops: the carry is the fixed point of (initial names) | (names the body returns)


class _Widen(Exception):
    """Raised while tracing a loop body whose carry gains names: the loop restarts from a wider carry."""

    def __init__(self, targets: dict[int, tuple[dict[str, int], tuple[str, ...]]]):
        super().__init__("internal: a loop carry gained named axes")
        self.targets = targets


def _fit_carry(carry: Any, out: Any, where: str, labels: tuple[str, str]) -> Any:
    """``out`` (the body's carry) broadcast to the names of ``carry`` (the body's input).

    Raises :class:`_Widen` when ``out`` has names ``carry`` lacks, and an :class:`AxisSizeError` when a name
    has two sizes. A structure that differs otherwise is returned as it is, for jax to report.
    """
    ins, in_tree = jax.tree.flatten(carry, is_leaf=is_named)
    outs, out_tree = jax.tree_util.tree_flatten_with_path(out, is_leaf=is_named)
    if in_tree != out_tree:
        return out
    widen = {}
    fitted = []
    for k, (c, (path, o)) in enumerate(zip(ins, outs)):
        if type(c) is not NamedArray and type(o) is not NamedArray:
            fitted.append(o)
            continue
        at = keystr(path)
        sizes = join_sizes([_sizes(c), _sizes(o)], where, [labels[0] + at, labels[1] + at])
        if type(c) is NamedArray and len(sizes) == len(c.names):
            fitted.append(broadcast_to_names(o, sizes, c.names))
        else:  # the carry must hold more names (or become a NamedArray): widen it, in its order first
            widen[k] = (sizes, tuple(sizes))
            fitted.append(o)
    if widen:
        raise _Widen(widen)
    return jax.tree.unflatten(out_tree, fitted)


def _until_fixed(run: Callable[[Any], Any], init: Any) -> Any:
    """``run(init)``, widening ``init`` and running again while the body adds names to the carry.

    Each restart adds at least one name to a leaf of a finite set of names, so this ends.
    """
    while True:
        try:
            return run(init)
        except _Widen as w:
            leaves, tree = jax.tree.flatten(init, is_leaf=is_named)
            for k, (sizes, order) in w.targets.items():
                leaves[k] = broadcast_to_names(leaves[k], sizes, order)
            init = jax.tree.unflatten(tree, leaves)


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any, **kwargs: Any) -> Any:
    """``jax.lax.fori_loop`` whose carry broadcasts by name (see the module docstring).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3.0), ["k"])
    >>> nx.lax.fori_loop(0, 3, lambda i, c: c + x, 0.0).named_shape   # the carry gains 'k'
    {'k': 3}
    """
    where = "nx.lax.fori_loop"

    def run(init):
        def body(i, c):
            return _fit_carry(c, body_fun(i, c), where, ("init_val", "body_fun's result"))
        return jax.lax.fori_loop(lower, upper, body, init, **kwargs)

    return _until_fixed(run, init_val)


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``jax.lax.while_loop`` whose carry broadcasts by name; ``cond_fun`` may return a nameless NamedArray.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones(2), ["k"])
    >>> nx.lax.while_loop(lambda c: (c < 5).all(), lambda c: c + x.sum("k"), 0.0).item()
    6.0
    """
    where = "nx.lax.while_loop"

    def run(init):
        def test(c):
            return _unnamed(cond_fun(c), where, "cond_fun's result")

        def body(c):
            return _fit_carry(c, body_fun(c), where, ("init_val", "body_fun's result"))
        return jax.lax.while_loop(test, body, init)

    return _until_fixed(run, init_val)


def _check_positional_xs(xs: Any, where: str) -> None:
    """A NamedArray in ``xs`` without a positional axis: jax would slice one of its named axes."""
    for path, v in jax.tree_util.tree_flatten_with_path(xs, is_leaf=is_named)[0]:
        if type(v) is NamedArray and pos_ndim(v) < 1:
            raise AxisSpecError(
                f"{where}: xs{keystr(path)} has no positional axis to loop over (named axes "
                f"{fmt_names(v.names) or 'none'}): {where} slices the leading positional axis, as jax.lax "
                f"does. To loop over a named axis, use nx.scan(f, init, xs, axis=name) or "
                f"nx.map(f, xs, axis=name)")


def scan_carrying(f: Callable, init: Any, xs: Any, where: str, **kwargs: Any) -> tuple[Any, Any]:
    """``jax.lax.scan(f, init, xs, **kwargs)`` with the carry fitted by name; ``where`` names the caller.

    The loop under both ``nx.lax.scan`` and ``nx.scan``.
    """
    def run(init):
        def body(c, x):
            out = f(c, x)
            if not (isinstance(out, tuple) and len(out) == 2):
                return out  # jax says what a scan body must return
            return _fit_carry(c, out[0], where, ("init", "the carry f returns")), out[1]
        return jax.lax.scan(body, init, xs, **kwargs)

    return _until_fixed(run, init)


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False,
         unroll: int | bool = 1, **kwargs: Any) -> tuple[Any, Any]:
    """``jax.lax.scan`` over the leading positional axis of ``xs``, whose carry broadcasts by name.

    NamedArrays in ``xs`` must have a positional axis: their slices keep every name. For a loop over a named
    axis, ``nx.scan(f, init, xs, axis=name)``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> xs = nx.wrap(jnp.ones((3, 2)), [None, "k"])          # 3 steps of a {'k': 2} value
    >>> total, _ = nx.lax.scan(lambda c, x: (c + x, None), 0.0, xs)
    >>> total.unwrap(["k"]).tolist()
    [3.0, 3.0]
    """
    _check_positional_xs(xs, "nx.lax.scan")
    return scan_carrying(f, init, xs, "nx.lax.scan", length=length, reverse=reverse, unroll=unroll, **kwargs)


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:
    """``jax.lax.map`` over the leading positional axis of ``xs``; a NamedArray without one is a clear error.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.lax.map(lambda r: r.sum("k"), nx.wrap(jnp.ones((3, 2)), [None, "k"])).tolist()
    [2.0, 2.0, 2.0]
    """
    _check_positional_xs(xs, "nx.lax.map")
    return jax.lax.map(f, xs, batch_size=batch_size)


# --------------------------------------------------------------------------------------------------------
# Conditionals: each output leaf holds the union of the branches' names


def _record(out: Any) -> tuple[Any, list[tuple[str, dict[str, int] | None]]]:
    """What a branch returned, without its values: (structure, (path, named sizes) per leaf)."""
    leaves, tree = jax.tree_util.tree_flatten_with_path(out, is_leaf=is_named)
    return tree, [(keystr(path), _sizes(v)) for path, v in leaves]


def _join_branches(records: list, where: str) -> list | None:
    """Per output leaf, the (sizes, order) every branch must give it, or None where names are not at fault.

    None when a branch was not traced, when the structures differ other than by names, or when the names
    already agree (then jax's error stands).
    """
    if any(r is None for r in records) or len({r[0] for r in records}) != 1:
        return None
    targets = []
    changed = False
    for k in range(len(records[0][1])):
        shapes = [r[1][k][1] for r in records]
        if all(s is None for s in shapes):
            targets.append(None)
            continue
        path = records[0][1][k][0]
        sizes = join_sizes(shapes, where, [f"branch {i}'s output{path}" for i in range(len(records))])
        changed = changed or any(s is None or len(s) != len(sizes) for s in shapes)
        targets.append((sizes, tuple(sizes)))
    return targets if changed else None


def _branches(call: Callable[[list[Callable]], Any], branches: Sequence[Callable], where: str) -> Any:
    """``call(branches)`` (a ``jax.lax`` conditional), again with outputs broadcast if names disagreed.

    The first attempt records each branch's output names; only when jax rejects the branches and the names
    are what differs are they traced again, each output broadcast to the union.
    """
    records: list = [None] * len(branches)
    targets: list | None = None

    def fitted(i: int, fn: Callable) -> Callable:
        def branch(*operands):
            out = fn(*operands)
            if targets is None:
                records[i] = _record(out)
                return out
            leaves, tree = jax.tree.flatten(out, is_leaf=is_named)
            return jax.tree.unflatten(tree, [v if t is None else broadcast_to_names(v, *t)
                                             for v, t in zip(leaves, targets)])
        return branch

    try:
        return call([fitted(i, fn) for i, fn in enumerate(branches)])
    except TypeError:
        targets = _join_branches(records, where)
        if targets is None:
            raise
    return call([fitted(i, fn) for i, fn in enumerate(branches)])


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any, **kwargs: Any) -> Any:
    """``jax.lax.cond`` whose branch outputs broadcast by name; ``pred`` may be a NamedArray without names.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3.0), ["k"])
    >>> nx.lax.cond(False, lambda v: v.sum("k"), lambda v: v, x).unwrap(["k"]).tolist()
    [0.0, 1.0, 2.0]
    """
    where = "nx.lax.cond"
    pred = _unnamed(pred, where, "the predicate")
    return _branches(lambda fs: jax.lax.cond(pred, fs[0], fs[1], *operands, **kwargs),
                     (true_fun, false_fun), where)


def switch(index: Any, branches: Sequence[Callable], *operands: Any, **kwargs: Any) -> Any:
    """``jax.lax.switch`` whose branch outputs broadcast by name; ``index`` may be a NamedArray without names.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3.0), ["k"])
    >>> nx.lax.switch(1, [lambda v: v.max("k"), lambda v: v * 2], x).unwrap(["k"]).tolist()
    [0.0, 2.0, 4.0]
    """
    where = "nx.lax.switch"
    index = _unnamed(index, where, "the index")
    return _branches(lambda fs: jax.lax.switch(index, fs, *operands, **kwargs), tuple(branches), where)
