"""Named shapes: the unordered name -> size part of a NamedArray's type.

Names are unordered. A :class:`NamedShape` compares and hashes as a set of ``(name, size)`` pairs, and equals
a plain ``dict`` with the same items. Storage order is a separate, internal matter (see
:mod:`namedarray.core.layout`): a NamedArray flattens to its named axes in the one boundary order of their set
(:mod:`namedarray.core.orders`), so two arrays with equal named shapes have equal pytree structure.

>>> from namedarray import NamedShape
>>> NamedShape({"a": 2, "b": 5}) == NamedShape({"b": 5, "a": 2}) == {"b": 5, "a": 2}
True
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping

from ..errors import AxisSizeError, AxisSpecError, DuplicateAxisError, fmt_names, wrong_type

__all__ = ["NamedShape", "check_name", "check_names", "as_names", "duplicates", "join_sizes"]


class NamedShape(Mapping):
    """An immutable, unordered mapping from axis name to size; iterates in canonical (sorted) order.

    >>> s = NamedShape({"k": 5, "batch": 4})
    >>> s, list(s), s | {"h": 2}
    ({'batch': 4, 'k': 5}, ['batch', 'k'], {'batch': 4, 'h': 2, 'k': 5})
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, int] | Iterable[tuple[str, int]] = ()):
        try:
            d = dict(items)
        except (TypeError, ValueError):
            raise wrong_type("nx.NamedShape", "items", items,
                             "a mapping {name: size} or a sequence of (name, size) pairs") from None
        for name in d:
            check_name(name, "NamedShape")
        self._items = d

    def __getitem__(self, name: str) -> int:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{n!r}: {self._items[n]}" for n in self) + "}"

    @property
    def names(self) -> tuple[str, ...]:
        """The names, in canonical (sorted) order."""
        return tuple(self)

    def __or__(self, other: Mapping[str, int]) -> NamedShape:
        """The union, as broadcasting by name computes it (sizes must agree)."""
        return NamedShape(join_sizes([dict(self), dict(other)]))


def check_name(name: object, where: str) -> str:
    """``name`` if it is an axis name: a non-empty ``str`` (ints mean positions; a tuple would be ambiguous).

    >>> check_name("batch", "example")
    'batch'
    """
    if not isinstance(name, str) or not name:
        raise AxisSpecError(
            f"{where}: axis names must be non-empty strings, got {name!r} "
            "(integers denote positional axes)"
        )
    return name


def check_names(names: tuple[str, ...], where: str) -> tuple[str, ...]:
    """``names`` if each is an axis name and none occurs twice (a :class:`DuplicateAxisError` otherwise).

    >>> check_names(("batch", "seq"), "example")
    ('batch', 'seq')
    """
    for n in names:
        check_name(n, where)
    dup = duplicates(names)
    if dup:
        raise DuplicateAxisError(f"{where}: axis names must be unique, but {fmt_names(dup)} appears twice "
                                 f"in {list(names)!r}")
    return names


def as_names(names: str | Iterable[str], where: str, what: str) -> tuple[str, ...]:
    """``names`` (one name, or a sequence of them) as a tuple of unique axis names; a ``TypeError`` naming the
    argument ``what`` when it is not a sequence (None, a number, or a set, whose order is arbitrary).

    >>> as_names("seq", "example", "names"), as_names(["heads", "hd"], "example", "names")
    (('seq',), ('heads', 'hd'))
    """
    if isinstance(names, str):
        return check_names((names,), where)
    if names is None or isinstance(names, (bytes, set, frozenset)) or not hasattr(names, "__iter__"):
        raise wrong_type(where, what, names, "an axis name or a sequence of them")
    return check_names(tuple(names), where)


def duplicates(names: Iterable[str]) -> list[str]:
    """The names that occur more than once, sorted (empty when every name is unique).

    >>> duplicates(["a", "b", "a"])
    ['a']
    """
    seen: set[str] = set()
    dup: set[str] = set()
    for n in names:
        (dup if n in seen else seen).add(n)
    return sorted(dup)


def join_sizes(shapes: Iterable[Mapping[str, int] | None], where: str = "broadcast",
               labels: Iterable[str] | None = None) -> dict[str, int]:
    """Union of named shapes, raising :class:`AxisSizeError` on the first size conflict.

    ``labels`` name the operands in messages (default: ``argument 0``, ``argument 1``, ...).

    >>> join_sizes([{"a": 2}, None, {"a": 2, "b": 3}])
    {'a': 2, 'b': 3}
    """
    out: dict[str, int] = {}
    origin: dict[str, str] = {}
    labels = list(labels) if labels is not None else None
    for i, shape in enumerate(shapes):
        if not shape:
            continue
        label = labels[i] if labels is not None else f"argument {i}"
        for name, size in shape.items():
            prev = out.get(name)
            if prev is None:
                out[name] = size
                origin[name] = label
            elif prev != size:
                raise AxisSizeError(
                    f"{where}: axis {name!r} has size {prev} in {origin[name]} but size {size} in {label}"
                )
    return out


# This module was ``namedarray.shape`` before the layers became folders; pickles of a NamedShape written
# then name ``namedarray.shape.NamedShape``, which stays importable so that they load.
sys.modules.setdefault("namedarray.shape", sys.modules[__name__])
