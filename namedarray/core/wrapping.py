"""Moving axes between positions and names: ``wrap``, ``unwrap``, ``rename``, and one axis at a time
(``position_to_name``, ``name_to_position``).

``wrap``/``unwrap`` take xmap's axis specifications (:mod:`namedarray.core.specs`); ``unwrap`` uses
``out_axes``
semantics: positions are positions in the result.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.zeros((2, 3, 4)), {0: "a", 2: "b"})
>>> x.shape, x.named_shape
((3,), {'a': 2, 'b': 4})
>>> nx.unwrap(x, {2: "a", 0: "b"}).shape
(4, 3, 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from ..errors import (
    AxisSpecError,
    DuplicateAxisError,
    RankError,
    UnboundAxisError,
    UnplacedAxisError,
    fmt_names,
    no_axis,
)
from . import env as _env
from .array import NamedArray, _make, from_storage, to_storage, transpose
from .layout import align, named_sizes
from .shape import check_name, duplicates
from .specs import AxisSpec, parse

__all__ = ["wrap", "unwrap", "rename", "position_to_name", "name_to_position"]


def wrap(array: Any, axes: Any = None, *, where: str = "nx.wrap") -> NamedArray:
    """Name some positional axes of ``array``.

    ``axes`` is an xmap axis map: ``{0: "batch", 2: "k"}``, a list of names for the leading axes ending with
    ``...`` (``["batch", "k", ...]``), or a list without ``...`` that also asserts the rank
    (``["batch", None]``). On a NamedArray, the positions refer to its positional axes.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.wrap(jnp.ones((5, 20)), [None, "batch"]).named_shape
    {'batch': 20}
    """
    spec = _parse_spec(axes, where)
    if isinstance(array, NamedArray):
        data, old = array.data, array.names
    else:
        data, old = to_storage(array, where, "array"), ()
    p = data.ndim - len(old)
    if p < 0:
        named_sizes(array)  # raises: a transform (vmap, lax.scan) sliced one of its named axes
    _check_rank(spec, p, where, data.shape[:p])
    new = dict((n, pos) for pos, n in spec.axes)
    _env.current().require_whole(new, where)  # inside nx.shard_map a split name is a block, not a new axis
    clash = sorted(set(new) & set(old))
    if clash:
        raise DuplicateAxisError(f"{where}: the array already has named axes {fmt_names(clash)}")
    if not new:
        return array if isinstance(array, NamedArray) else _make(data, ())
    # the source order: the new names in the order of their positions, then the names it had
    added = sorted(new, key=new.__getitem__)
    positional = [i for i in range(p) if i not in set(new.values())]
    perm = tuple(positional) + tuple(new[n] for n in added) + tuple(range(p, data.ndim))
    return _make(transpose(data, perm), tuple(added) + tuple(old))


_SPEC_FORMS = ("a dict {position: name} (e.g. {0: 'batch'}), a list of names for the leading axes ending "
               "with ... (e.g. ['batch', ...]), or a list of names without ... that also asserts the rank "
               "(e.g. ['batch', None])")


def _parse_spec(axes: Any, where: str) -> AxisSpec:
    """``parse(axes)``, with a message saying which forms are accepted for a value of the wrong type."""
    if isinstance(axes, AxisSpec):
        return axes
    if axes is None or isinstance(axes, (Mapping, list, tuple, str)):
        return parse(axes, where)
    # an int, a NumPy scalar or array, a set, ...: xmap does not accept them either
    hint = ""
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        hint = f"; to name positional axis {int(axes)}, write {{{int(axes)}: 'name'}}"
    elif isinstance(axes, np.ndarray) and axes.ndim == 1 and axes.dtype.kind == "U":
        hint = f"; write the names as a list, e.g. [{', '.join(map(repr, axes.tolist()))}, ...]"
    elif isinstance(axes, (set, frozenset)):
        hint = "; a set has no order: use a list, or a dict {position: name}"
    raise AxisSpecError(f"{where}: axes must be an axis specification: {_SPEC_FORMS}; but got: {axes!r} "
                        f"({type(axes).__name__}){hint}")


def _check_rank(spec: AxisSpec, rank: int, where: str, shape: tuple[int, ...]) -> None:
    if spec.rank is not None and spec.rank != rank:
        raise RankError(f"{where}: the argument has shape {tuple(shape)} (rank {rank}), but its axis "
                        f"specification {_spec_text(spec)} asserts that it should be of rank {spec.rank}")
    need = spec.min_rank()
    if need > rank:
        raise RankError(f"{where}: the axis specification {_spec_text(spec)} implies that the argument has "
                        f"at least {need} positional dimensions, but it has shape {tuple(shape)}")


def _spec_text(spec: AxisSpec) -> str:
    if spec.rank is not None:
        lst = [None] * spec.rank
        for pos, n in spec.axes:
            lst[pos] = n
        return repr(lst)
    return repr(spec.as_dict())


def unwrap(x: Any, axes: Any = None, *, where: str = "nx.unwrap",
           sizes: Mapping[str, int] | None = None) -> jax.Array:
    """The positional array of ``x``, with its named axes placed at the positions ``axes`` gives.

    Positions are positions in the result (xmap's ``out_axes`` semantics). Every name of ``x`` must be
    placed. A name in ``axes`` that ``x`` lacks is broadcast when its size is known (bound by an enclosing
    ``nx.xmap``, or given in ``sizes``), else an error.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(2, 3), ["a", "b"])
    >>> nx.unwrap(x, ["b", "a"]).shape
    (3, 2)
    """
    spec = _parse_spec(axes, where)
    if sizes is not None and not isinstance(sizes, Mapping):
        raise TypeError(f"{where}: sizes must be a dict {{name: size}}, got {sizes!r} "
                        f"({type(sizes).__name__})")
    if isinstance(x, NamedArray):
        data, names = x.data, x.names
    else:
        data, names = to_storage(x, where, "x"), ()
    p = data.ndim - len(names)
    placed = dict((n, pos) for pos, n in spec.axes)
    unplaced = [n for n in names if n not in placed]
    unknown = [n for n in placed if n not in names and not (sizes and n in sizes)
               and not _env.current().is_bound(n)]
    if unplaced and unknown:  # most likely a misspelling: say both halves
        raise UnplacedAxisError(
            f"{where}: the specification {_spec_text(spec)} places {fmt_names(unknown)}, which the value "
            f"does not carry, and leaves its axes {fmt_names(unplaced)} unplaced (the value has named axes "
            f"{fmt_names(names)})")
    if unplaced:
        raise UnplacedAxisError(
            f"{where}: the value is mapped along named axes {fmt_names(unplaced)} that the specification "
            f"{_spec_text(spec) if spec.axes else repr(axes)} does not place; give each a position, or "
            f"reduce it first")
    missing = [n for n in placed if n not in names]
    if missing:
        env = _env.current()
        own = dict(zip(names, data.shape[p:]))
        for n in missing:
            if sizes is not None and n in sizes:
                own[n] = sizes[n]
            elif env.is_bound(n):
                own[n] = env.local_size(n)  # one block of it inside nx.shard_map
            else:
                raise UnboundAxisError(
                    f"{where}: the value does not carry axis {n!r} and its size is unknown here; a name is "
                    f"broadcast by unwrap only inside nx.xmap, where its size is bound")
        names_full = names + tuple(missing)
        data = align(_make(data, names), names_full, own)
        names = names_full
    rank = p + len(names)
    if spec.rank is not None and spec.rank != rank:
        raise RankError(f"{where}: the specification {_spec_text(spec)} asserts a result of rank "
                        f"{spec.rank}, but the value has {p} positional axes and {len(names)} named ones "
                        f"(rank {rank})")
    need = spec.min_rank()
    if need > rank:
        raise RankError(
            f"{where}: the specification {_spec_text(spec)} requires the value to have at least "
            f"{need - len(names)} positional dimensions, but it only has {p} (shape {data.shape[:p]})")
    at = spec.as_dict()
    positional = iter(range(p))
    perm = tuple(p + names.index(at[r]) if r in at else next(positional) for r in range(rank))
    return transpose(data, perm)


def rename(x: NamedArray, mapping: Mapping[str, str], where: str = "rename") -> NamedArray:
    """``x`` with named axes renamed (``{"old": "new"}``); sizes and values unchanged.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.rename(nx.wrap(jnp.zeros((2, 3)), ["a", "b"]), {"a": "b", "b": "a"}).named_shape
    {'a': 3, 'b': 2}
    """
    if not isinstance(x, NamedArray):
        raise AxisSpecError(f"{where}: expected a NamedArray, got {type(x).__name__}")
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{where}: the renaming must be a dict {{old_name: new_name}}, got {mapping!r} "
                        f"({type(mapping).__name__})")
    for old, new in mapping.items():
        check_name(new, where)
        if old not in x.names:
            raise no_axis(where, old, x.names)
    # inside nx.shard_map a split name is a block of an axis: renamed, it would no longer be known as one
    _env.current().require_whole(list(mapping) + list(mapping.values()), where)
    new_names = tuple(mapping.get(n, n) for n in x.names)
    dup = duplicates(new_names)
    if dup:
        raise DuplicateAxisError(f"{where}: renaming {dict(mapping)!r} gives axis {fmt_names(dup)} twice")
    return from_storage(x.data, new_names, where)


def name_to_position(x: NamedArray, name: str, position: int | None = None,
                     where: str = "name_to_position") -> NamedArray:
    """Turn named axis ``name`` into a positional axis at ``position`` (default: last positional).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> from namedarray.core.wrapping import name_to_position
    >>> y = name_to_position(nx.wrap(jnp.zeros((2, 3, 4)), {0: "a", 2: "b"}), "b", 0)
    >>> y.shape, y.named_shape
    ((4, 3), {'a': 2})
    """
    if name not in x.names:
        raise no_axis(where, name, x.names)
    d = x.data
    p = d.ndim - len(x.names)
    position = p if position is None else position
    src = p + x.names.index(name)
    order = list(range(p))
    order.insert(position, src)
    order += [p + i for i, n in enumerate(x.names) if n != name]
    return _make(transpose(d, tuple(order)), tuple(n for n in x.names if n != name))


def position_to_name(x: NamedArray, position: int, name: str, where: str = "position_to_name") -> NamedArray:
    """Turn positional axis ``position`` into a named axis ``name`` (``nx.wrap`` of one axis).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> from namedarray.core.wrapping import position_to_name
    >>> position_to_name(nx.wrap(jnp.zeros((2, 3))), -1, "k").named_shape
    {'k': 3}
    """
    check_name(name, where)
    if name in x.names:
        raise DuplicateAxisError(f"{where}: the array already has an axis {name!r}")
    d = x.data
    p = d.ndim - len(x.names)
    if not -p <= position < p:
        raise AxisSpecError(f"{where}: positional axis {position} out of range for shape {x.shape}")
    position %= p
    order = [i for i in range(p) if i != position] + [position] + list(range(p, d.ndim))
    d = transpose(d, tuple(order))
    return from_storage(d, (name,) + x.names, where)
