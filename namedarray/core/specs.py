"""Axis specifications: xmap's ``in_axes``/``out_axes`` language, parsed once into :class:`AxisSpec`.

A spec names some positional axes of one array:

* ``{0: "batch", 2: "k"}``: position -> name;
* ``["batch", "k", ...]``: names for the leading axes (``None`` keeps one positional), any rank;
* ``["batch", None]`` (no ``...``): the same, and asserts the rank is exactly ``len(spec)``;
* ``{}`` / ``[...]``: no names.

>>> from namedarray.core.specs import parse
>>> parse({2: "b", 0: "a"}, "wrap")
AxisSpec(axes=((0, 'a'), (2, 'b')), rank=None)
>>> parse(["a", None], "wrap")
AxisSpec(axes=((0, 'a'),), rank=2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AxisSpecError, DuplicateAxisError, fmt_names
from .shape import check_name, duplicates

__all__ = ["AxisSpec", "parse", "is_spec_leaf"]

_SPEC_HELP = (
    "an axis specification is either\n"
    "- a list of axis names (possibly ending with the ellipsis object: ...), or\n"
    "- a dictionary that maps positional axes (integers) to axis names (e.g. {2: 'name'})"
)


@dataclass(frozen=True)
class AxisSpec:
    """Sorted ``(position, name)`` pairs, plus the exact rank a list spec without ``...`` asserts."""

    axes: tuple[tuple[int, str], ...]
    rank: int | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The names, by position."""
        return tuple(n for _, n in self.axes)

    def as_dict(self) -> dict[int, str]:
        """position -> name."""
        return dict(self.axes)

    def min_rank(self) -> int:
        """The smallest rank the positions fit in."""
        return max((p for p, _ in self.axes), default=-1) + 1


def is_spec_leaf(spec: Any) -> bool:
    """Whether ``spec`` is one axis spec (rather than a pytree of them), by xmap's rules.

    >>> is_spec_leaf(["batch", ...]), is_spec_leaf({0: "a"}), is_spec_leaf([["a", ...], {}])
    (True, True, False)
    """
    if isinstance(spec, Mapping):
        return all(isinstance(k, (int, np.integer)) for k in spec)
    if isinstance(spec, (list, tuple)):
        return all(s is None or s is Ellipsis or isinstance(s, str) for s in spec)
    return False


def parse(spec: Any, where: str, *, what: str = "axis specification") -> AxisSpec:
    """Parse one spec, raising :class:`AxisSpecError` on malformed input (``where`` starts messages).

    >>> parse(["a", None, "b", ...], "example")
    AxisSpec(axes=((0, 'a'), (2, 'b')), rank=None)
    """
    if spec is None or (type(spec) is tuple and not spec):  # not `spec == ()`: arrays compare elementwise
        return AxisSpec((), None if spec is None else 0)
    if isinstance(spec, Mapping):
        items = []
        for pos, name in spec.items():
            if not isinstance(pos, (int, np.integer)) or isinstance(pos, bool):
                raise AxisSpecError(f"{where}: {_SPEC_HELP}\nbut got: {spec!r}")
            pos = int(pos)
            if pos < 0:
                raise AxisSpecError(f"{where}: negative axes are not supported in an {what}, got {spec!r} "
                                    f"(position {pos} for axis {name!r})")
            check_name(name, where)
            items.append((pos, name))
        _check_unique([n for _, n in items], spec, where, what)
        return AxisSpec(tuple(sorted(items)), None)
    if isinstance(spec, (list, tuple)):
        entries = list(spec)
        open_ended = bool(entries) and entries[-1] is Ellipsis
        if open_ended:
            entries = entries[:-1]
        items = []
        for i, name in enumerate(entries):
            if name is None:
                continue
            if name is Ellipsis:
                raise AxisSpecError(f"{where}: the ellipsis may only end a list spec, got {spec!r}")
            if not isinstance(name, str):
                raise AxisSpecError(f"{where}: {_SPEC_HELP}\nbut got: {spec!r}")
            check_name(name, where)
            items.append((i, name))
        _check_unique([n for _, n in items], spec, where, what)
        return AxisSpec(tuple(items), None if open_ended else len(entries))
    if isinstance(spec, str):
        raise AxisSpecError(f"{where}: got the bare string {spec!r}; write [{spec!r}, ...] to name the "
                            f"leading axis, or [{spec!r}] to also assert rank 1")
    raise AxisSpecError(f"{where}: {_SPEC_HELP}\nbut got: {spec!r}")


def _check_unique(names: list[str], spec: Any, where: str, what: str) -> None:
    dup = duplicates(names)
    if dup:
        raise DuplicateAxisError(f"{where}: named axes should be unique within each {what}, but "
                                 f"{fmt_names(dup)} appears twice in {spec!r}")
