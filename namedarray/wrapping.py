"""Moving axes between positions and names: ``wrap``, ``unwrap``, ``rename``, ``tag`` and ``untag``.

``wrap``/``unwrap`` take xmap's axis specifications (:mod:`namedarray.specs`); ``unwrap`` uses ``out_axes``
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

import jax.numpy as jnp
import numpy as np

from . import env as _env
from .array import NamedArray, _make, from_storage, transpose
from .errors import (
    AxisSpecError,
    DuplicateAxisError,
    RankError,
    UnboundAxisError,
    UnplacedAxisError,
    fmt_names,
)
from .shape import canonical, check_name
from .specs import AxisSpec, parse

__all__ = ["wrap", "unwrap", "rename", "tag", "untag"]


def _as_data(array: Any):
    if isinstance(array, NamedArray):
        return array
    if isinstance(array, (np.ndarray, np.generic, int, float, complex, bool, list, tuple)):
        return jnp.asarray(array)
    if not hasattr(array, "ndim"):
        return jnp.asarray(array)
    return array


def wrap(array: Any, axes: Any = None, *, where: str = "nx.wrap") -> NamedArray:
    """Name some positional axes of ``array``.

    ``axes`` is an xmap axis map: ``{0: "batch", 2: "k"}``, a list of names for the leading axes ending with
    ``...`` (``["batch", "k", ...]``), or a list without ``...`` that also asserts the rank
    (``["batch", None]``). On a NamedArray, the positions refer to its positional axes.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.wrap(jnp.ones((5, 20)), [None, "batch"]).named_shape
    {'batch': 20}
    """
    spec = axes if isinstance(axes, AxisSpec) else parse(axes, where)
    x = _as_data(array)
    if isinstance(x, NamedArray):
        data, old = x.data, x.names
    else:
        data, old = x, ()
    p = data.ndim - len(old)
    _check_rank(spec, p, where, "argument", getattr(x, "shape", data.shape))
    new = dict((n, pos) for pos, n in spec.axes)
    clash = sorted(set(new) & set(old))
    if clash:
        raise DuplicateAxisError(f"{where}: the array already has named axes {fmt_names(clash)}")
    if not new:
        return x if isinstance(x, NamedArray) else _make(data, ())
    names = canonical(list(old) + list(new))
    positional = [i for i in range(p) if i not in set(new.values())]
    perm = tuple(positional) + tuple(new[n] if n in new else p + old.index(n) for n in names)
    return _make(transpose(data, perm), names)


def _check_rank(spec: AxisSpec, rank: int, where: str, what: str, shape) -> None:
    if spec.rank is not None and spec.rank != rank:
        raise RankError(f"{where}: the {what} has shape {tuple(shape)} (rank {rank}), but its axis "
                        f"specification {_spec_text(spec)} asserts that it should be of rank {spec.rank}")
    need = spec.min_rank()
    if need > rank:
        raise RankError(f"{where}: the axis specification {_spec_text(spec)} implies that the {what} has at "
                        f"least {need} positional dimensions, but it has shape {tuple(shape)}")


def _spec_text(spec: AxisSpec) -> str:
    if spec.rank is not None:
        lst = [None] * spec.rank
        for pos, n in spec.axes:
            lst[pos] = n
        return repr(lst)
    return repr(spec.as_dict())


def unwrap(x: Any, axes: Any = None, *, where: str = "nx.unwrap", sizes: Mapping[str, int] | None = None):
    """The positional array of ``x``, with its named axes placed at the positions ``axes`` gives.

    Positions are positions in the result (xmap's ``out_axes`` semantics). Every name of ``x`` must be
    placed. A name in ``axes`` that ``x`` lacks is broadcast when its size is known (bound by an enclosing
    ``nx.xmap``, or given in ``sizes``), else an error.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(2, 3), ["a", "b"])
    >>> nx.unwrap(x, ["b", "a"]).shape
    (3, 2)
    """
    spec = axes if isinstance(axes, AxisSpec) else parse(axes, where)
    if isinstance(x, NamedArray):
        data, names = x.data, x.names
    else:
        data, names = _as_data(x), ()
    p = data.ndim - len(names)
    placed = dict((n, pos) for pos, n in spec.axes)
    unplaced = [n for n in names if n not in placed]
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
                own[n] = env.size(n)
            else:
                raise UnboundAxisError(
                    f"{where}: the value does not carry axis {n!r} and its size is unknown here; a name is "
                    f"broadcast by unwrap only inside nx.xmap, where its size is bound")
        names_full = canonical(own)
        from .engine import align

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
    perm = []
    pos_iter = iter(range(p))
    for r in range(rank):
        n = spec.as_dict().get(r)
        perm.append(p + names.index(n) if n is not None else next(pos_iter))
    return transpose(data, tuple(perm))


def rename(x: NamedArray, mapping: Mapping[str, str], where: str = "rename") -> NamedArray:
    """``x`` with named axes renamed (``{"old": "new"}``); sizes and values unchanged."""
    if not isinstance(x, NamedArray):
        raise AxisSpecError(f"{where}: expected a NamedArray, got {type(x).__name__}")
    for old, new in mapping.items():
        check_name(new, where)
        if old not in x.names:
            raise AxisSpecError(f"{where}: the array has no axis {old!r} "
                                f"(it has {fmt_names(x.names) or 'none'})")
    new_names = tuple(mapping.get(n, n) for n in x.names)
    if len(set(new_names)) != len(new_names):
        dup = sorted({n for n in new_names if new_names.count(n) > 1})
        raise DuplicateAxisError(f"{where}: renaming {dict(mapping)!r} gives axis {fmt_names(dup)} twice")
    return from_storage(x.data, new_names, where)


def untag(x: NamedArray, name: str, position: int | None = None, where: str = "untag") -> NamedArray:
    """Turn named axis ``name`` into a positional axis at ``position`` (default: last positional)."""
    if name not in x.names:
        raise AxisSpecError(f"{where}: the array has no axis {name!r} "
                            f"(it has {fmt_names(x.names) or 'none'})")
    d = x.data
    p = d.ndim - len(x.names)
    position = p if position is None else position
    src = p + x.names.index(name)
    order = [i for i in range(p)]
    order.insert(position, src)
    order += [p + i for i, n in enumerate(x.names) if n != name]
    return _make(transpose(d, tuple(order)), tuple(n for n in x.names if n != name))


def tag(x: NamedArray, position: int, name: str, where: str = "tag") -> NamedArray:
    """Turn positional axis ``position`` into a named axis ``name``."""
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
