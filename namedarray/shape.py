"""Named shapes: the unordered name -> size part of a NamedArray's type.

Names are unordered. A :class:`NamedShape` compares and hashes as a set of ``(name, size)`` pairs, and equals
a plain ``dict`` with the same items. Storage order is a separate, internal matter (see
:mod:`namedarray.layout`): a NamedArray flattens to its named axes in the one canonical order of their set
(:func:`canonical`), so two arrays with equal named shapes have equal pytree structure.

>>> from namedarray import NamedShape
>>> NamedShape({"a": 2, "b": 5}) == NamedShape({"b": 5, "a": 2}) == {"b": 5, "a": 2}
True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .errors import AxisSizeError, AxisSpecError, DuplicateAxisError, fmt_names

__all__ = ["NamedShape", "check_name", "check_names", "canonical", "canonical_order", "fix_canonical_order",
           "duplicates", "join_sizes"]


class NamedShape(Mapping):
    """An immutable, unordered mapping from axis name to size; iterates in canonical (sorted) order.

    >>> s = NamedShape({"k": 5, "batch": 4})
    >>> s, list(s), s | {"h": 2}
    ({'batch': 4, 'k': 5}, ['batch', 'k'], {'batch': 4, 'h': 2, 'k': 5})
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, int] | Iterable[tuple[str, int]] = ()):
        d = dict(items)
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


def canonical(names: Iterable[str]) -> tuple[str, ...]:
    """The canonical storage order of a set of names at the pytree boundary (what flattening gives).

    It is the order the set had the first time this process asked (the first flatten of a value with exactly
    these names, usually a parameter or a batch as the program built it), unless
    :func:`fix_canonical_order` gave one before; it never changes afterwards. So equal named shapes always
    flatten alike, and values cross jit, ``scan`` and ``cond`` boundaries in the order the program made
    them in, not in an order that depends on how the names are spelled.

    >>> canonical(("seq_doc", "batch_doc")), canonical(("batch_doc", "seq_doc"))
    (('seq_doc', 'batch_doc'), ('seq_doc', 'batch_doc'))
    """
    names = tuple(names)
    key = frozenset(names)
    order = _ORDERS.get(key)
    if order is None:
        order = _ORDERS.setdefault(key, names)  # atomic: two threads agree on one order
    return order


# name set -> its canonical order; only ever added to, so that every cached trace and treedef stays valid
_ORDERS: dict[frozenset, tuple[str, ...]] = {}


def canonical_order(names: Iterable[str]) -> tuple[str, ...] | None:
    """The order in which NamedArrays with exactly these names flatten (``jax.tree.leaves``, jit arguments),
    or None while none has flattened yet and no order was fixed (asking fixes nothing).

    >>> import namedarray as nx, jax, jax.numpy as jnp
    >>> _ = jax.tree.leaves(nx.wrap(jnp.zeros((2, 3)), ["mlp_doc", "embed_doc"]))
    >>> nx.canonical_order(["embed_doc", "mlp_doc"])
    ('mlp_doc', 'embed_doc')
    """
    names = _name_set(names, "nx.canonical_order")
    return _ORDERS.get(frozenset(names))


def _name_set(names: Iterable[str], where: str) -> tuple[str, ...]:
    if isinstance(names, str):
        raise AxisSpecError(f"{where}: expected a sequence of names, got the string {names!r} (write "
                            f"[{names!r}, ...] for a set with more than one name)")
    return check_names(tuple(names), where)


def fix_canonical_order(*orders: Iterable[str]) -> None:
    """Fix the canonical order of each set of names before anything flattens it.

    The order a set gets by default is the one it first flattens in, which a deterministic program gives
    the same on every run and every process. A program whose processes build values in different orders
    (process 0 alone evaluating something, say), or that restores a checkpoint written by another program,
    fixes the orders it relies on first, so that flattened leaves agree. Fixing a set again to the same
    order is a no-op; to another order, an error (values already flattened would be misread).

    >>> import namedarray as nx
    >>> nx.fix_canonical_order(["batch_doc2", "seq_doc2"])
    >>> nx.canonical_order(["seq_doc2", "batch_doc2"])
    ('batch_doc2', 'seq_doc2')
    """
    for order in orders:
        order = _name_set(order, "nx.fix_canonical_order")
        got = _ORDERS.setdefault(frozenset(order), order)
        if got != order:
            raise AxisSpecError(
                f"nx.fix_canonical_order: the names {set(order)} already flatten in the order {got}, not "
                f"{order}: fix it before the first value with these names is flattened (passed to jit, "
                "jax.tree.leaves, ...)")


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
