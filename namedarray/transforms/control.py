"""Control flow with named values: ``nx.lax.cond``, ``switch``, ``fori_loop``, ``while_loop``, ``scan``.

``jax.lax`` requires a loop carry to keep its pytree structure from one iteration to the next, and the
branches of a conditional to return one structure. A NamedArray's names are part of its structure, so code
written for xmap, where a carry may lose a name (a ``psum`` over it in the loop body) or one branch returns a
value that lacks a name, fails there with a pytree-structure ``TypeError``. These wrappers broadcast by name
first, as xmap did:

* loops (``fori_loop``, ``while_loop``, ``scan``): each carry leaf holds the union of the names it enters with
  and the names the body returns it with. A body result lacking a name of the carry is broadcast along it; a
  name the body adds is broadcast into the initial value too (found by tracing the body abstractly).
* conditionals (``cond``, ``switch``): each output leaf holds the union of the branches' names for it.
* a plain array or scalar counts as a NamedArray without names.
* the same name with two sizes cannot be broadcast away: an :class:`~namedarray.errors.AxisSizeError` names
  the name, both sizes and the leaf.

Storage order never matters (a carry crosses the loop boundary in canonical order, see
:mod:`namedarray.core.layout`). ``jax.lax`` is called with your functions first, so where names already agree
nothing changes (jax's trace caches included); only when it rejects the carry or the branches, and names are
why, is the call made again with outputs broadcast. Positional shapes and dtypes must agree as in
``jax.lax``; where they do not, a :class:`~namedarray.errors.CarryError` (also a ``TypeError``) names the
leaf with its positional shape, named shape and dtype on each side. A predicate or switch index must have no
named axes. ``scan`` and ``map`` loop over the leading *positional* axis of
``xs``, as in ``jax.lax`` (names pass through to the body); to loop over a named axis use ``nx.scan`` and
``nx.map`` (:mod:`namedarray.transforms.scan`).

>>> import namedarray as nx, jax.numpy as jnp
>>> body = lambda i, c: nx.psum(c, "i")          # the carry loses 'i': it is broadcast back along it
>>> x = nx.wrap(jnp.arange(4.0), ["i"])
>>> nx.lax.fori_loop(0, 2, body, x).unwrap(["i"]).tolist()
[24.0, 24.0, 24.0, 24.0]
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import keystr

from ..core import caches
from ..core.array import NamedArray, _make, as_storage, is_named
from ..core.layout import align, named_sizes, pos_ndim
from ..core.shape import join_sizes
from ..errors import AxisSpecError, CarryError, fmt_names, not_an_array

__all__ = ["cond", "switch", "fori_loop", "while_loop", "scan", "map", "scan_carrying", "broadcast_to_names",
           "built_around"]


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
# Functions built around the user's, found again by jax's caches
#
# jax caches a traced function by the function object (loop bodies, branches, jax.eval_shape), so that an
# eager loop over the same function is traced and compiled once. A function nx builds around a user's
# function is kept per (user function, what else it depends on) while the user's function lives.

# At most 64 per user function: a function built around with ever new keys (new loop structures) drops its
# oldest instead of growing.
_BUILT = caches.WeakTable("functions built around user functions", 64)


def built_around(f: Callable, key: Hashable | None, make: Callable[[Callable[[], Callable]], Callable]
                 ) -> Callable:
    """``make(get_f)`` (``get_f()`` gives ``f``), built once per ``(f, key)`` while ``f`` lives.

    ``key`` holds everything else the result depends on; None when it depends on values that change from
    call to call (then it is built afresh), as when ``f`` cannot be weakly referenced.

    >>> double = lambda x: 2 * x
    >>> twice = built_around(double, "twice", lambda get: lambda x: get()(get()(x)))
    >>> twice(3), twice is built_around(double, "twice", lambda get: None)
    (12, True)
    """
    if key is not None:
        try:
            built = _BUILT.get(f, key)
        except TypeError:  # f cannot be weakly referenced, or key holds something unhashable
            return make(lambda: f)
        if built is None:
            # what is built must not keep f, the table's key, alive: it reaches f through a weak reference
            built = _BUILT.put(f, key, make(weakref.ref(f)))
        return built
    return make(lambda: f)


# --------------------------------------------------------------------------------------------------------
# Loops: the carry is the fixed point of (initial names) | (names the body returns)
#
# Each function first calls jax.lax with the user's own functions: when names already agree (the usual
# case) nothing changes. Only when jax rejects the carry or the branches is their output structure looked
# at (jax.eval_shape) and the call made again, with outputs broadcast.


# Per flattened leaf: None (left alone) or (name -> size items, storage order) to broadcast it to.
Targets = tuple


def _abstract(f: Callable, *args: Any) -> Any:
    """The structure ``f(*args)`` returns (NamedArrays of shape structs), or None when tracing it fails."""
    try:
        return jax.eval_shape(f, *args)
    except Exception:  # noqa: BLE001  (the caller re-raises jax's own error instead)
        return None


def _join(shapes: Sequence[dict[str, int] | None], where: str, labels: Sequence[str]) -> tuple | None:
    """The (sizes, order) a leaf must have to hold every name of ``shapes`` (None: all plain)."""
    if all(s is None for s in shapes):
        return None
    sizes = join_sizes(shapes, where, labels)
    return tuple(sizes.items()), tuple(sizes)


def _to(v: Any, target: tuple) -> NamedArray:
    return broadcast_to_names(v, dict(target[0]), target[1])


def _carry_plan(init: Any, body_shape: Callable[..., Any], extra: tuple, where: str,
                labels: tuple[str, str]) -> tuple[Targets, Any] | None:
    """(per-leaf targets for the body's result, the widened initial carry), or None when names are not what
    makes the carry mismatch (jax's error then stands).

    ``body_shape(carry, *extra)`` is the body's carry result; it is traced abstractly from the carry, and
    from a wider carry while it returns names the carry lacks: each round adds at least one name to a leaf,
    so this ends.
    """
    changed = False
    while True:
        out = _abstract(body_shape, init, *extra)
        if out is None:
            return None
        ins, in_tree = jax.tree.flatten(init, is_leaf=is_named)
        outs, out_tree = jax.tree_util.tree_flatten_with_path(out, is_leaf=is_named)
        if in_tree != out_tree:
            return None
        targets = []
        wider = list(ins)
        for k, (c, (path, o)) in enumerate(zip(ins, outs)):
            at = keystr(path)
            t = _join([_sizes(c), _sizes(o)], where, [labels[0] + at, labels[1] + at])
            targets.append(t)
            if t is None:
                continue
            if type(o) is not NamedArray or len(o.names) != len(t[1]):
                changed = True  # the body's result lacks names (or is plain): broadcast it
            if type(c) is not NamedArray or len(c.names) != len(t[1]):
                wider[k] = _to(c, t)  # the body adds names: the carry has them from the start
        if all(w is c for w, c in zip(wider, ins)):
            return (tuple(targets), init) if changed else None
        changed = True
        init = jax.tree.unflatten(in_tree, wider)


def _leaf_text(v: Any) -> str:
    named = dict(named_sizes(v)) if type(v) is NamedArray else {}
    shape = tuple(v.shape) if hasattr(v, "shape") else ()
    return f"positional shape {shape}, named shape {named}, dtype {jnp.result_type(v)}"


_KEEP = "the carry must keep its positional shape and dtype from one iteration to the next"
_AGREE = "the branches must return equal positional shapes and dtypes"


def _explain(trees: Sequence[Any], labels: Sequence[str], where: str, what: str) -> None:
    """Raise a :class:`CarryError` naming the first leaf whose positional shape (or else dtype) differs
    among ``trees`` (a carry and the body's result, or the branches' outputs); return when none does, or the
    structures differ (jax's error then stands)."""
    if any(t is None for t in trees):
        return
    flat = [jax.tree_util.tree_flatten_with_path(t, is_leaf=is_named) for t in trees]
    if len({tree for _, tree in flat}) != 1:
        return

    def shape(v):
        return tuple(v.shape) if type(v) is NamedArray else tuple(np.shape(v))

    def dtype(v):  # None for a weakly typed value (a Python scalar): jax promotes it to the other side's
        d = v.data if type(v) is NamedArray else v
        weak = isinstance(d, (bool, int, float, complex)) or getattr(d, "weak_type", False)
        return None if weak else jnp.dtype(jnp.result_type(d))

    for key in (shape, dtype):
        for k, (path, _) in enumerate(flat[0][0]):
            leaves = [f[0][k][1] for f in flat]
            if len({key(v) for v in leaves} - {None}) > 1:
                at = keystr(path)
                raise CarryError(
                    f"{where}: {what} (names broadcast, as in xmap; positional axes and dtypes do not), but "
                    + "; ".join(
                        f"{label}{at} has {_leaf_text(v)}" for label, v in zip(labels, leaves)))


def _fitted(out: Any, targets: Targets) -> Any:
    """``out`` with each leaf broadcast to its target (a result that already agrees is left as it is)."""
    leaves, tree = jax.tree.flatten(out, is_leaf=is_named)
    return jax.tree.unflatten(tree, [v if t is None else _to(v, t) for v, t in zip(leaves, targets)])


def _loop(run: Callable[[Targets | None, Any], Any], init: Any, body_shape: Callable[..., Any],
          extra: Callable[[], tuple], where: str, labels: tuple[str, str]) -> Any:
    """``run(None, init)``; when jax rejects the carry and names are why, ``run(targets, wider init)``.

    ``extra()`` gives the abstract arguments that ``body_shape`` takes after the carry.
    """
    try:
        return run(None, init)
    except TypeError as e:
        failure = e
    for path, leaf in jax.tree_util.tree_flatten_with_path(init, is_leaf=is_named)[0]:
        if not (type(leaf) is NamedArray or hasattr(leaf, "dtype")
                or isinstance(leaf, (bool, int, float, complex))):
            raise not_an_array(where, f"{labels[0]}{keystr(path)}", leaf) from failure
    try:
        args = extra()
    except Exception:  # noqa: BLE001  (inputs jax already rejected for another reason)
        raise failure from None
    plan = _carry_plan(init, body_shape, args, where, labels)
    if plan is None:
        _explain([init, _abstract(body_shape, init, *args)], labels, where, _KEEP)
        raise failure
    try:
        return run(*plan)
    except TypeError:
        _explain([init, _abstract(body_shape, plan[1], *args)], labels, where, _KEEP)
        raise


_INDEX = jax.ShapeDtypeStruct((), jnp.int32)  # what a fori_loop body's index looks like, abstractly


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any, **kwargs: Any) -> Any:
    """``jax.lax.fori_loop`` whose carry broadcasts by name (see the module docstring).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3.0), ["k"])
    >>> nx.lax.fori_loop(0, 3, lambda i, c: c + x, 0.0).named_shape   # the carry gains 'k'
    {'k': 3}
    """
    def run(targets, init):
        body = body_fun if targets is None else built_around(
            body_fun, ("fori_loop", targets), lambda get: lambda i, c: _fitted(get()(i, c), targets))
        return jax.lax.fori_loop(lower, upper, body, init, **kwargs)

    shape = built_around(body_fun, "fori_loop shape", lambda get: lambda c, i: get()(i, c))
    return _loop(run, init_val, shape, lambda: (_INDEX,), "nx.lax.fori_loop",
                 ("init_val", "body_fun's result"))


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``jax.lax.while_loop`` whose carry broadcasts by name; ``cond_fun`` may return a nameless NamedArray.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones(2), ["k"])
    >>> nx.lax.while_loop(lambda c: (c < 5).all(), lambda c: c + x.sum("k"), 0.0).item()
    6.0
    """
    where = "nx.lax.while_loop"
    test = built_around(cond_fun, where, lambda get: lambda c: _unnamed(get()(c), where, "cond_fun's result"))

    def run(targets, init):
        body = body_fun if targets is None else built_around(
            body_fun, ("while_loop", targets), lambda get: lambda c: _fitted(get()(c), targets))
        return jax.lax.while_loop(test, body, init)

    return _loop(run, init_val, body_fun, tuple, where, ("init_val", "body_fun's result"))


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
    def run(targets, init):
        body = f
        if targets is not None:
            def make(get):
                def body(c, x):
                    c, y = get()(c, x)
                    return _fitted(c, targets), y
                return body
            body = built_around(f, ("scan", targets), make)
        return jax.lax.scan(body, init, xs, **kwargs)

    def step():  # what one step sees of xs
        return (jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), xs),)

    shape = built_around(f, "scan shape", lambda get: lambda c, x: get()(c, x)[0])
    return _loop(run, init, shape, step, where, ("init", "the carry f returns"))


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


def _branch_plan(branches: Sequence[Callable], operands: tuple, where: str) -> Targets | None:
    """Per output leaf, the (sizes, order) every branch must give it, or None when names are not what makes
    the branches differ (jax's error then stands)."""
    outs = [_abstract(fn, *operands) for fn in branches]
    if any(o is None for o in outs):
        return None
    flat = [jax.tree_util.tree_flatten_with_path(o, is_leaf=is_named) for o in outs]
    if len({tree for _, tree in flat}) != 1:
        return None
    targets = []
    changed = False
    for k, (path, _) in enumerate(flat[0][0]):
        leaves = [f[0][k][1] for f in flat]
        t = _join([_sizes(v) for v in leaves], where,
                  [f"branch {i}'s output{keystr(path)}" for i in range(len(leaves))])
        changed = changed or (t is not None and any(type(v) is not NamedArray or len(v.names) != len(t[1])
                                                    for v in leaves))
        targets.append(t)
    return tuple(targets) if changed else None


def _branches(call: Callable[[Sequence[Callable]], Any], branches: Sequence[Callable], operands: tuple,
              where: str) -> Any:
    """``call(branches)`` (a ``jax.lax`` conditional); when jax rejects the branches and their names are why,
    again with each output broadcast to the union of the branches' names."""
    try:
        return call(branches)
    except TypeError as e:
        failure = e
    targets = _branch_plan(branches, operands, where)
    labels = [f"branch {i}'s output" for i in range(len(branches))]
    if targets is None:
        _explain([_abstract(fn, *operands) for fn in branches], labels, where, _AGREE)
        raise failure
    try:
        return call([built_around(fn, ("branch", targets),
                                  lambda get: lambda *ops: _fitted(get()(*ops), targets)) for fn in branches])
    except TypeError:
        _explain([_abstract(fn, *operands) for fn in branches], labels, where, _AGREE)
        raise


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any, **kwargs: Any) -> Any:
    """``jax.lax.cond`` whose branch outputs broadcast by name; ``pred`` may be a NamedArray without names.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3.0), ["k"])
    >>> nx.lax.cond(False, lambda v: v.sum("k"), lambda v: v, x).unwrap(["k"]).tolist()
    [0.0, 1.0, 2.0]
    """
    where = "nx.lax.cond"
    pred = _unnamed(pred, where, "the predicate")
    if "operand" in kwargs:  # jax's older spelling of one operand
        operands = (*operands, kwargs.pop("operand"))
    return _branches(lambda fs: jax.lax.cond(pred, fs[0], fs[1], *operands, **kwargs),
                     (true_fun, false_fun), operands, where)


def switch(index: Any, branches: Sequence[Callable], *operands: Any, **kwargs: Any) -> Any:
    """``jax.lax.switch`` whose branch outputs broadcast by name; ``index`` may be a NamedArray without names.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3.0), ["k"])
    >>> nx.lax.switch(1, [lambda v: v.max("k"), lambda v: v * 2], x).unwrap(["k"]).tolist()
    [0.0, 2.0, 4.0]
    """
    where = "nx.lax.switch"
    index = _unnamed(index, where, "the index")
    return _branches(lambda fs: jax.lax.switch(index, fs, *operands, **kwargs), tuple(branches), operands,
                     where)
