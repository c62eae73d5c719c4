"""``nx.along``: run a positional function along named axes.

Functions written for positional arrays take the axis they work along as a position, usually the last one
(optax's losses, ``jax.nn.softmax(x, axis=-1)``, a hand-written sampler). Lifted with ``nx.nmap`` they see
one element of every named axis and no positional axis at all, and fail with "axis -1 is out of bounds for
array of dimension 0". ``nx.along("vocab", f)`` is the spelling that works: every argument carrying
``vocab`` has it moved to its last positional axis, ``f`` is mapped over the remaining names as by
``nx.nmap``, and an output that still ends in an axis of ``vocab``'s size gets the name back. The names given
are the function's core axes (a gufunc's core dimensions, xarray's ``input_core_dims``); every other name
is a batch axis. Storage order never shows: the moved axes are placed in the order listed.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> logits = nx.wrap(jnp.array([[0.0, 1.0], [2.0, 2.0]]), ["batch", "vocab"])
>>> nx.along("vocab", jax.nn.softmax)(logits).named_shape
{'batch': 2, 'vocab': 2}
>>> nx.along("vocab", jax.nn.logsumexp)(logits).named_shape  # the axis is consumed
{'batch': 2}
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, overload

import jax

from ..core.array import NamedArray, is_named
from ..core.shape import join_sizes
from ..engine import dispatch as engine
from ..errors import AxisSpecError, DuplicateAxisError, RankError, UnboundAxisError, fmt_names
from ..ops.surgery import tag, untag

__all__ = ["along"]


@overload
def along(axis: str | Sequence[str], f: Callable, *, keep: bool | None = None) -> Callable: ...
@overload
def along(axis: str | Sequence[str], f: None = None, *,
          keep: bool | None = None) -> Callable[[Callable], Callable]: ...


def along(axis: str | Sequence[str], f: Callable | None = None, *,
          keep: bool | None = None) -> Callable:
    """Return ``f`` run along the named axes ``axis``: each argument that carries them has them moved to
    its last positional axes (in the order given), ``f`` is mapped over every other name (as by
    :func:`nx.nmap <namedarray.nmap>`), and outputs that end in axes of their sizes get the names back.

    Write ``f`` for arrays whose last axes are ``axis`` (``axis=-1`` in most jax and optax functions).
    Arguments that carry none of the names (integer labels, a temperature) pass through as they are; one
    that carries some but not all of them is an error, since ``f`` would see a different rank than the
    others. Without a decorator argument, ``nx.along("vocab")`` is a decorator.

    ``keep`` says which outputs get the names back. ``None`` (the default): an output whose positional axes
    end in the sizes of ``axis`` and number at least as many as the arguments had after the move (``f`` kept
    the axes, as ``softmax`` does; a reduction such as ``logsumexp`` returns fewer and stays unnamed).
    ``True`` requires it of every array output (an error otherwise); ``False`` never names them back.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> logits = nx.wrap(jnp.zeros((3, 4)), ["vocab", "batch"])
    >>> labels = nx.wrap(jnp.array([0, 1, 2, 0]), ["batch"])
    >>> def cross_entropy(logits, labels):  # positional: the classes are the last axis
    ...     return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], axis=-1)[..., 0]
    >>> loss = nx.along("vocab", cross_entropy)(logits, labels)
    >>> loss.named_shape, round(float(loss.sum("batch")), 4)
    ({'batch': 4}, 4.3944)
    """
    core = _core_names(axis)
    if keep is not None and not isinstance(keep, bool):
        raise TypeError(f"nx.along: keep= takes True, False or None, got {keep!r}")
    if f is None:
        return lambda fn: along(core, fn, keep=keep)
    if not callable(f):
        raise TypeError(f"nx.along: the second argument is the function to run along {fmt_names(core)}, "
                        f"got {type(f).__name__} {f!r}")
    where = f"nx.along({core[0] if len(core) == 1 else core!r}, {getattr(f, '__name__', 'f')})"

    @functools.wraps(f)
    def run_along(*args: Any, **kwargs: Any) -> Any:
        moved, sizes, rank = _move_in((args, kwargs), core, where)
        margs, mkwargs = moved
        out = engine.call_lifted(f, margs, mkwargs, where)
        return _name_back(out, core, sizes, rank, keep, where)

    return run_along


def _core_names(axis: Any) -> tuple[str, ...]:
    names = (axis,) if isinstance(axis, str) else axis
    if not isinstance(names, Sequence) or not names or not all(isinstance(n, str) for n in names):
        raise AxisSpecError(f"nx.along: axis takes an axis name or a sequence of them (the named axes the "
                            f"function works along), got {axis!r}")
    names = tuple(names)
    if len(set(names)) != len(names):
        raise DuplicateAxisError(f"nx.along: an axis is listed twice in {names!r}")
    return names


def _label(path) -> str:
    """``argument 1``, ``keyword argument 'y'[0]``: a leaf of ``(args, kwargs)``, for messages."""
    where, key, rest = path[0].idx, path[1], jax.tree_util.keystr(tuple(path[2:]))
    return f"argument {key.idx}{rest}" if where == 0 else f"keyword argument {key.key!r}{rest}"


def _move_in(tree: Any, core: tuple[str, ...], where: str) -> tuple[Any, dict[str, int], int]:
    """The arguments with the core names moved to trailing positions; their sizes; the largest positional
    rank of a moved argument."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_named)
    out, shapes, labels, seen = [], [], [], []
    rank = 0
    for path, leaf in leaves:
        if type(leaf) is NamedArray:
            has = [n for n in core if n in leaf.names]
            if has and len(has) < len(core):
                lacks = [n for n in core if n not in leaf.names]
                raise AxisSpecError(
                    f"{where}: {_label(path)} carries {fmt_names(has)} but not {fmt_names(lacks)}; every "
                    f"argument carries all of {fmt_names(core)} or none of them, so that the function sees "
                    "the same trailing axes in each")
            if has:
                shapes.append({n: leaf.named_shape[n] for n in core})
                labels.append(_label(path))
                leaf = untag(leaf, *core)
                rank = max(rank, len(leaf.shape))
            else:
                seen.extend(leaf.names)
        out.append(leaf)
    if not shapes:
        carried = fmt_names(dict.fromkeys(seen)) or "no named axes"
        raise UnboundAxisError(f"{where}: no argument carries {fmt_names(core)} (they carry {carried}); "
                               "nx.along runs a function along names its arguments have")
    sizes = join_sizes(shapes, where, labels)
    return jax.tree.unflatten(treedef, out), sizes, rank


def _name_back(out: Any, core: tuple[str, ...], sizes: dict[str, int], rank: int, keep: bool | None,
               where: str) -> Any:
    k = len(core)
    want = tuple(sizes[n] for n in core)

    def back(path, o):
        if type(o) is not NamedArray:
            return o
        shape = o.shape
        ends = len(shape) >= k and tuple(shape[len(shape) - k:]) == want and not set(core) & set(o.names)
        if keep is None:
            ends = ends and len(shape) >= rank
        elif keep and not ends:
            raise RankError(
                f"{where}: output{jax.tree_util.keystr(path)} has positional shape {tuple(shape)}, which "
                f"does not end in the sizes {want} of {fmt_names(core)}; keep=True asks every output to "
                "keep them")
        if not (ends and keep is not False):
            return o
        return tag(o, *([None] * (len(shape) - k) + list(core)))

    return jax.tree_util.tree_map_with_path(back, out, is_leaf=is_named)
