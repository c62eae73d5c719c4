"""Axis surgery by name: merge and split named axes, cut along them, move axes between positions and names.

* :func:`flatten` merges named axes into one (row-major, in the order given) and :func:`unflatten` splits one
  named axis into several: ``heads x head_dim <-> embed``;
* :func:`split` cuts along a name into pieces that keep it, :func:`unbind` into the slices, without it;
* :func:`tag` names positional axes and :func:`untag` makes named axes positional (also ``x.tag(...)``,
  ``x.untag(...)``);
* :func:`rearrange` does any of these at once from an einops-style spec over positions and names.

Each is one engine operation: eagerly one cached kernel, under ``jit`` the ``reshape``/``transpose`` a
positional programmer would write. Results keep the natural storage order (:mod:`namedarray.core.layout`): a
merge or split of adjacent axes is a reshape that moves no data.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.zeros({"batch": 2, "embed": 8})
>>> h = nx.unflatten(x, "embed", {"heads": 2, "head_dim": 4})
>>> h.named_shape, nx.flatten(h, ("heads", "head_dim"), "embed").named_shape
({'batch': 2, 'head_dim': 4, 'heads': 2}, {'batch': 2, 'embed': 8})
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core import caches
from ..core import env as _env
from ..core.array import NamedArray, _make, to_storage, transpose
from ..core.layout import pos_ndim
from ..core.shape import as_names, check_name, check_names
from ..core.wrapping import wrap
from ..engine import dispatch as engine
from ..engine.registry import implements
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    RankError,
    fmt_names,
    no_axis,
    wrong_type,
)
from .mirror import FUNCTIONS

__all__ = ["flatten", "unflatten", "split", "unbind", "tag", "untag", "rearrange"]


def _named(x: Any, where: str) -> NamedArray:
    if type(x) is not NamedArray:
        raise AxisSpecError(f"{where}: expected a NamedArray, got {type(x).__name__}; name its axes first "
                            "(nx.wrap)")
    if pos_ndim(x) < 0:
        engine.named_sizes(x)  # raises: a transform mapped one of its named axes
    return x


def _reshape(d, shape: tuple[int, ...]):
    return d if tuple(d.shape) == shape else jax.lax.reshape(d, shape)


# --------------------------------------------------------------------------------------------------------
# flatten / unflatten


def flatten(x: NamedArray, names: Sequence[str], new_name: str) -> NamedArray:
    """Merge the named axes ``names`` into one named axis ``new_name``, row-major in the order given.

    The new axis sits where the first of ``names`` was stored; when ``names`` are stored next to each other
    in that order, nothing moves (a reshape). ``new_name`` may be one of ``names``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(2, 3), ["heads", "head_dim"])
    >>> nx.flatten(x, ("heads", "head_dim"), "embed").unwrap(["embed"]).tolist()
    [0, 1, 2, 3, 4, 5]
    >>> nx.flatten(x, ("head_dim", "heads"), "embed").unwrap(["embed"]).tolist()
    [0, 3, 1, 4, 2, 5]
    """
    where = "nx.flatten"
    x = _named(x, where)
    names = as_names(names, where, "names")
    if not names:
        raise AxisSpecError(f"{where}: give at least one name to merge")
    check_names(names, where)
    check_name(new_name, where)
    for n in names:
        if n not in x.names:
            raise no_axis(where, n, x.names)
    if new_name in x.names and new_name not in names:
        raise DuplicateAxisError(f"{where}: the array already has an axis {new_name!r}; the merged axis "
                                 "needs a new name (or one of the merged ones)")
    _env.current().require_whole(names + (new_name,), where)
    return engine.run(_flatten_impl, (names, new_name), (x,))


def _flatten_impl(static, x):
    names, new_name = static
    d, own = x.data, x.names
    p = d.ndim - len(own)
    at = min(own.index(n) for n in names)
    rest = [n for n in own if n not in names]
    order = rest[:at] + list(names) + rest[at:]
    d = transpose(d, tuple(range(p)) + tuple(p + own.index(n) for n in order))
    sizes = dict(zip(own, x.data.shape[p:]))
    merged = math.prod(sizes[n] for n in names)
    shape = d.shape[:p] + tuple(sizes[n] for n in rest[:at]) + (merged,) + tuple(sizes[n] for n in rest[at:])
    return _make(_reshape(d, shape), tuple(rest[:at]) + (new_name,) + tuple(rest[at:]))


def _parts(parts: Any, size: int, where: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """``parts`` ({name: size} or [(name, size), ...], one size may be -1) as (names, sizes) with product
    ``size``."""
    items = list(parts.items()) if isinstance(parts, Mapping) else list(parts)
    names, sizes = [], []
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise AxisSpecError(f"{where}: the parts must be a dict {{name: size}} or a list of (name, size) "
                                f"pairs, got {parts!r}")
        n, s = item
        check_name(n, where)
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or (s < 0 and s != -1):
            raise AxisSpecError(f"{where}: the size of part {n!r} must be a non-negative int (or -1 for the "
                                f"one size to infer), got {s!r}")
        names.append(n)
        sizes.append(int(s))
    if not names:
        raise AxisSpecError(f"{where}: give at least one part")
    check_names(tuple(names), where)
    return tuple(names), _infer(tuple(names), sizes, size, where, "the parts")


def _infer(names: tuple[str, ...], sizes: list[int], size: int, where: str, what: str) -> tuple[int, ...]:
    """``sizes`` with the one unknown (-1) inferred so that their product is ``size``, or an AxisSizeError."""
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise AxisSizeError(f"{where}: the sizes of {fmt_names(names[i] for i in unknown)} in {what} are all "
                            "unknown; give all but one")
    known = math.prod(s for s in sizes if s != -1)
    if unknown:
        if known == 0 or size % known:
            raise AxisSizeError(f"{where}: an axis of size {size} cannot be split into {what} "
                                f"{_fmt_sizes(names, sizes)}: {size} is not a multiple of {known}")
        sizes = list(sizes)
        sizes[unknown[0]] = size // known
    elif known != size:
        raise AxisSizeError(f"{where}: {what} {_fmt_sizes(names, sizes)} have {known} elements, but the axis "
                            f"has size {size}")
    return tuple(sizes)


def _fmt_sizes(names: Sequence[str], sizes: Sequence[int]) -> str:
    return "(" + ", ".join(f"{n}={'?' if s == -1 else s}" for n, s in zip(names, sizes)) + ")"


def unflatten(x: NamedArray, name: str, parts: Mapping[str, int] | Sequence[tuple[str, int]]) -> NamedArray:
    """Split the named axis ``name`` into named axes ``parts`` (row-major, in the order given): the inverse
    of :func:`flatten`. ``parts`` is a dict ``{name: size}`` or a list of ``(name, size)``; one size may be
    ``-1`` (inferred). A reshape: no data moves.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6), ["embed"])
    >>> nx.unflatten(x, "embed", {"heads": 2, "head_dim": -1}).unwrap(["heads", "head_dim"]).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    where = "nx.unflatten"
    x = _named(x, where)
    check_name(name, where)
    if name not in x.names:
        raise no_axis(where, name, x.names)
    _env.current().require_whole((name,), where)
    names, sizes = _parts(parts, x.named_shape[name], where)
    _env.current().require_whole(names, where)
    clash = [n for n in names if n in x.names and n != name]
    if clash:
        raise DuplicateAxisError(f"{where}: the array already has axes {fmt_names(clash)}; the parts need "
                                 "new names")
    return engine.run(_unflatten_impl, (name, names, sizes), (x,))


def _unflatten_impl(static, x):
    name, names, sizes = static
    d, own = x.data, x.names
    j = d.ndim - len(own) + own.index(name)
    i = own.index(name)
    return _make(_reshape(d, d.shape[:j] + sizes + d.shape[j + 1:]), own[:i] + names + own[i + 1:])


# --------------------------------------------------------------------------------------------------------
# split / unbind


_split = FUNCTIONS["split"]
_NO_SECTIONS = object()


@implements(jnp.split)
def split(ary: Any, indices_or_sections: Any, axis: Any = _NO_SECTIONS) -> list:
    """``jnp.split``, along a position or a name; ``nx.split(x, "seq", sections)`` is the named spelling.

    Along a name the pieces keep it (each with its own size). ``sections`` is a number of equal pieces or
    the indices where to cut, as in ``jnp.split``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6), ["seq"])
    >>> [p.named_shape["seq"] for p in nx.split(x, "seq", 3)]
    [2, 2, 2]
    >>> [p.unwrap(["seq"]).tolist() for p in nx.split(x, "seq", [2, 5])]
    [[0, 1], [2, 3, 4], [5]]
    """
    if isinstance(indices_or_sections, str):  # split(x, name, sections)
        if axis is _NO_SECTIONS:
            raise TypeError(f"nx.split(x, {indices_or_sections!r}, sections): give the number of pieces or "
                            "the indices where to cut")
        sections, axis = axis, indices_or_sections
    else:
        sections, axis = indices_or_sections, 0 if axis is _NO_SECTIONS else axis
    if isinstance(sections, np.integer):
        sections = int(sections)
    elif isinstance(sections, np.ndarray) and sections.ndim == 1:
        sections = sections.tolist()  # cuts are static: a list, as jnp.split wants them
    if type(ary) is NamedArray and isinstance(axis, str) and axis in ary.names:
        size = ary.named_shape[axis]
        if isinstance(sections, (int, np.integer)) and not isinstance(sections, bool):
            if sections < 1 or size % sections:
                raise AxisSizeError(
                    f"nx.split: axis {axis!r} has size {size}, which does not split into {int(sections)} "
                    f"equal pieces; give the indices where to cut (a list), or use nx.array_split")
        elif isinstance(sections, Sequence) and (not all(0 <= c <= size for c in sections)
                                                 or list(sections) != sorted(sections)):
            # as NumPy: piece i is x[cut[i-1]:cut[i]] by Python's slicing rules (cuts past the end give empty
            # pieces, negative ones count from the end), which jnp.split refuses
            cuts = [0, *sections, None]
            return [ary[{axis: slice(a, b)}] for a, b in zip(cuts[:-1], cuts[1:])]
    return _split(ary, sections, axis=axis)


def unbind(x: NamedArray, axis: str | int) -> list[NamedArray]:
    """The slices of ``x`` along ``axis`` (a name, or a positional axis), which they no longer carry.

    ``nx.stack(nx.unbind(x, "layer"), "layer")`` gives ``x`` back.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6).reshape(2, 3), ["layer", "k"])
    >>> [v.unwrap(["k"]).tolist() for v in nx.unbind(x, "layer")]
    [[0, 1, 2], [3, 4, 5]]
    """
    where = "nx.unbind"
    x = _named(x, where)
    if isinstance(axis, bool) or not isinstance(axis, (str, int, np.integer)):
        raise wrong_type(where, "axis", axis, "one axis: an axis name or a positional axis (int)")
    if isinstance(axis, str):
        if axis not in x.names:
            raise no_axis(where, axis, x.names)
        _env.current().require_whole((axis,), where)
    else:
        engine.normalize_axis(axis, x, where)  # an int in range, with the error naming the positional shape
    return engine.run(_unbind_impl, (axis,), (x,))


def _unbind_impl(static, x):
    (axis,) = static
    p = pos_ndim(x)
    if isinstance(axis, str):
        j, names = p + x.names.index(axis), tuple(n for n in x.names if n != axis)
    else:
        j, names = int(axis) % p, x.names
    return [_make(jax.lax.index_in_dim(x.data, i, j, keepdims=False), names) for i in range(x.data.shape[j])]


# --------------------------------------------------------------------------------------------------------
# tag / untag


def tag(x: Any, *names: str | None | Mapping[int, str]) -> NamedArray:
    """Name the positional axes of ``x``: one name (or ``None``, to leave it positional) per axis, in order,
    or a dict ``{position: name}``. ``x.tag(...)`` is the same.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.zeros((2, 3, 4)))
    >>> x.tag("batch", None, "k").shape, x.tag({0: "batch"}).named_shape
    ((3,), {'batch': 2})
    """
    where = "x.tag"
    if type(x) is not NamedArray:
        x = _tag_operand(x, names)
    if len(names) == 1 and isinstance(names[0], (Mapping, list, tuple)):
        spec = names[0]
    else:
        spec = list(names)
        for n in spec:
            if n is not None and not isinstance(n, str):
                raise AxisSpecError(f"{where}: give one name (or None) per positional axis, or a dict "
                                    f"{{position: name}}; got {n!r}")
        p = len(x.shape)
        if len(spec) != p:
            raise RankError(f"{where}: {len(spec)} names {spec!r} for {p} positional axes (shape "
                            f"{tuple(x.shape)}); give one per axis, None for an axis that stays positional")
    return wrap(x, spec, where=where)


def _tag_operand(x: Any, names: tuple) -> Any:
    """``x`` as a positional array, or a TypeError naming it (and saying where the names go, when ``x`` holds
    names: ``nx.tag(["a", "b"])`` forgot the array)."""
    try:
        return to_storage(x, "nx.tag", "x")
    except TypeError as e:
        if isinstance(x, (list, tuple)) and x and all(isinstance(n, str) for n in x) and not names:
            raise TypeError(f"{e}; the names come after the array: nx.tag(x, {', '.join(map(repr, x))}) or "
                            f"x.tag({', '.join(map(repr, x))})") from None
        raise


def untag(x: NamedArray, *names: str | Mapping[int, str]) -> NamedArray:
    """Make named axes positional: ``x.untag("a", "b")`` appends them, in that order, after the positional
    axes; ``x.untag({0: "a"})`` puts each at the position given (a position of the result). The other names
    stay named. The inverse of :func:`tag`.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.zeros((3,), named_shape={"a": 2, "b": 4})
    >>> x.untag("b").shape, x.untag({0: "b"}).shape, x.untag({0: "b"}).named_shape
    ((3, 4), (4, 3), {'a': 2})
    """
    where = "x.untag"
    x = _named(x, where)
    p = pos_ndim(x)
    if len(names) == 1 and isinstance(names[0], Mapping):
        placed = dict(names[0])
        rank = p + len(placed)
        at = {}
        for pos, n in placed.items():
            if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) or not -rank <= pos < rank:
                raise AxisSpecError(f"{where}: position {pos!r} for axis {n!r} is out of range for a result "
                                    f"with {rank} positional axes")
            if int(pos) % rank in at:
                raise DuplicateAxisError(f"{where}: two axes for position {pos}: {at[int(pos) % rank]!r} and "
                                         f"{n!r}")
            at[int(pos) % rank] = n
        order = [at[i] if i in at else None for i in range(rank)]
        moved = tuple(placed.values())
    else:
        if len(names) == 1 and isinstance(names[0], (list, tuple)):
            names = tuple(names[0])
        moved = tuple(names)
        order = [None] * p + list(moved)
    check_names(moved, where)
    for n in moved:
        if n not in x.names:
            raise no_axis(where, n, x.names)
    return engine.run(_untag_impl, (tuple(order),), (x,))


def _untag_impl(static, x):
    (order,) = static
    own = x.names
    p = pos_ndim(x)
    free = iter(range(p))
    perm = [p + own.index(n) if n is not None else next(free) for n in order]
    rest = tuple(n for n in own if n not in order)
    perm += [p + own.index(n) for n in rest]
    return _make(transpose(x.data, tuple(perm)), rest)


# --------------------------------------------------------------------------------------------------------
# rearrange


class _Axis(NamedTuple):
    """One term of a spec: ``parts`` are its elementary identifiers (one for ``a``, several for ``(a b)``,
    none for ``()``); ``name`` is the axis name of a term in braces (None outside them)."""

    text: str
    parts: tuple[str, ...]
    name: str | None
    group: bool


class _Side(NamedTuple):
    positional: tuple  # _Axis terms and the string "..." in order
    named: tuple[_Axis, ...]


_ELLIPSIS = "..."
_SPECIAL = set("(){},:")


def _tokens(text: str, spec: str) -> list[str]:
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in _SPECIAL:
            out.append(c)
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _spec_error(spec: str, msg: str, cls: type = AxisSpecError) -> Exception:
    return cls(f"nx.rearrange({spec!r}): {msg}")


def _parse_group(toks: list[str], i: int, spec: str) -> tuple[tuple[str, ...], int]:
    """The identifiers of ``( a b ... )`` starting at ``toks[i] == "("``; returns (parts, index after)."""
    parts = []
    j = i + 1
    while True:
        if j >= len(toks):
            raise _spec_error(spec, "a '(' is never closed")
        t = toks[j]
        if t == ")":
            return tuple(parts), j + 1
        if t in _SPECIAL or t == _ELLIPSIS:
            raise _spec_error(spec, f"{t!r} inside '( ... )': a group holds axis identifiers only")
        parts.append(t)
        j += 1


def _parse_side(text: str, spec: str) -> _Side:
    toks = _tokens(text, spec)
    positional: list = []
    named: list[_Axis] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "(":
            parts, j = _parse_group(toks, i, spec)
            positional.append(_Axis("(" + " ".join(parts) + ")", parts, None, True))
            i = j
        elif t == "{":
            i += 1
            while True:
                if i >= len(toks):
                    raise _spec_error(spec, "a '{' is never closed")
                t = toks[i]
                if t == "}":
                    i += 1
                    break
                if t == ",":
                    i += 1
                    continue
                if t in _SPECIAL or t == _ELLIPSIS:
                    raise _spec_error(spec, f"{t!r} inside braces: write names, or name:(part part) to make "
                                            "one named axis of several")
                if i + 1 < len(toks) and toks[i + 1] == ":":
                    if i + 2 >= len(toks) or toks[i + 2] != "(":
                        raise _spec_error(spec, f"after '{t}:' comes a group of parts, e.g. '{t}:(a b)'")
                    parts, i = _parse_group(toks, i + 2, spec)
                    named.append(_Axis(f"{t}:(" + " ".join(parts) + ")", parts, t, True))
                else:
                    named.append(_Axis(t, (t,), t, False))
                    i += 1
        elif t == _ELLIPSIS:
            if _ELLIPSIS in positional:
                raise _spec_error(spec, f"'...' twice in {text.strip()!r}")
            positional.append(_ELLIPSIS)
            i += 1
        elif t in _SPECIAL:
            raise _spec_error(spec, f"unexpected {t!r} in {text.strip()!r}")
        else:
            positional.append(_Axis(t, (t,), None, False))
            i += 1
    seen: dict[str, str] = {}
    for term in [a for a in positional if a != _ELLIPSIS] + named:
        for part in term.parts:
            if part in seen:
                raise _spec_error(spec, f"axis {part!r} appears twice in {text.strip()!r} (terms "
                                        f"{seen[part]!r} and {term.text!r})", DuplicateAxisError)
            seen[part] = term.text
    return _Side(tuple(positional), tuple(named))


@caches.cache("rearrange specs", 512)
def _parse(spec: str) -> tuple[_Side, _Side]:
    if not isinstance(spec, str):
        raise AxisSpecError(f"nx.rearrange: the spec must be a string like '{{a, b}} -> a b', got {spec!r}")
    sides = spec.split("->")
    if len(sides) != 2:
        raise _spec_error(spec, "the spec needs exactly one '->' between the input and the result")
    lhs, rhs = _parse_side(sides[0], spec), _parse_side(sides[1], spec)
    if _ELLIPSIS in rhs.positional and _ELLIPSIS not in lhs.positional:
        raise _spec_error(spec, "'...' on the right stands for positional axes that the left side's '...' "
                                "matched, but the left side has none")
    for side, other, label in ((lhs, rhs, "result"), (rhs, lhs, "input")):
        there = {p for t in _terms(other) for p in t.parts}
        for t in _terms(side):
            for part in t.parts:
                if part not in there:
                    raise _spec_error(spec, f"axis {part!r} (term {t.text!r}) is missing from the {label} "
                                            "side; every axis of one side must appear on the other")
    return lhs, rhs


def _terms(side: _Side) -> list[_Axis]:
    return [a for a in side.positional if a != _ELLIPSIS] + list(side.named)


def rearrange(x: NamedArray, spec: str, /, **sizes: int) -> NamedArray:
    """Move, merge and split axes, positional and named, as ``spec`` says (einops-style).

    The spec is ``input -> result``. Each side is a list of terms separated by spaces:

    * **positional terms**, outside braces, stand for the positional axes in order: ``a`` is one axis,
      ``(a b)`` one axis made of ``a`` and ``b`` (row-major), ``()`` an axis of size 1, and ``...`` (once
      per side) the positional axes the other terms leave;
    * **named terms**, inside braces, stand for named axes (in any order, separated by spaces or commas):
      ``{name}`` is the named axis ``name``; ``{name:(a b)}`` is the named axis ``name`` made of ``a`` and
      ``b`` (row-major).

    An identifier is one elementary axis; each appears exactly once on each side, and the spec moves it from
    where it is on the left to where it is on the right. So on the left, a positional identifier labels a
    positional axis of ``x`` and a named one is an axis name ``x`` carries (``{embed:(h d)}`` splits axis
    ``embed`` into ``h`` and ``d``); on the right, a positional identifier makes that axis positional and one
    in braces makes it the named axis of that name (``{embed:(h d)}`` merges ``h`` and ``d`` into ``embed``).
    Named axes of ``x`` that the left side does not mention are kept as they are. Sizes that a split needs
    come from ``**sizes`` (one unknown per group is inferred). ``x`` and ``spec`` are positional-only, so
    any identifier (``x``, ``spec``, ...) can be given a size.

    ========================================  ===============================================
    ``"{batch, seq} -> batch seq"``            names to positions
    ``"b s d -> {b, s} d"``                    positions to names
    ``"{embed:(heads hd)} -> {heads, hd}"``    split a name (``heads=4``)
    ``"{heads, hd} -> {embed:(heads hd)}"``    merge names into one
    ``"(h d) -> {h} d"``                       split a positional axis, name a part (``h=4``)
    ``"{heads, seq} -> seq (heads)"``          ...or the reverse; ``a b -> b a`` transposes
    ========================================  ===============================================

    Errors name the term of the spec that is wrong.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(24).reshape(2, 3, 4), ["batch", "seq", "embed"])
    >>> y = nx.rearrange(x, "{batch, embed:(heads hd)} -> batch {heads, hd}", heads=2)
    >>> y.shape, y.named_shape
    ((2,), {'hd': 2, 'heads': 2, 'seq': 3})
    >>> bool(nx.all(nx.rearrange(y, "b {heads, hd} -> {batch:(b), embed:(heads hd)}") == x,
    ...             axis=("batch", "seq", "embed")))
    True
    >>> nx.rearrange(nx.ones({"H": 6}), "{H:(x y)} -> {x, y}", x=2).named_shape
    {'x': 2, 'y': 3}
    """
    where = "nx.rearrange"
    x = _named(x, where)
    if not isinstance(spec, str):
        raise wrong_type(where, "spec", spec, "a string such as '{batch, seq} -> batch seq'")
    lhs, rhs = _parse(spec)
    known = {p for t in _terms(lhs) for p in t.parts}
    for k, s in sizes.items():
        if k not in known:
            raise _spec_error(spec, f"size given for {k!r}, which is not an axis of the spec")
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise _spec_error(spec, f"the size of {k!r} must be a non-negative int, got {s!r}")
    for t in lhs.named:
        if t.name not in x.names:
            raise _spec_error(spec, f"term {t.text!r}: the array has no axis {t.name!r} (it has "
                                    f"{fmt_names(x.names) or 'no named axes'})")
    _env.current().require_whole([t.name for side in (lhs, rhs) for t in side.named], where)
    return engine.run(_rearrange_impl, (spec, tuple(sorted((k, int(s)) for k, s in sizes.items()))), (x,))


def _rearrange_impl(static, x):
    spec, sizes = static
    sizes = dict(sizes)
    lhs, rhs = _parse(spec)
    d, own = x.data, x.names
    p = d.ndim - len(own)
    pshape = d.shape[:p]
    # 1. the input's storage axes, each as the terms that stand for it
    terms = [a for a in lhs.positional if a != _ELLIPSIS]
    if _ELLIPSIS in lhs.positional:
        if len(terms) > p:
            raise _spec_error(spec, f"the left side has {len(terms)} positional terms besides '...', but the "
                                    f"array has {p} positional axes (shape {pshape}; named axes "
                                    f"{fmt_names(own) or 'none'})", RankError)
        at = lhs.positional.index(_ELLIPSIS)
        n_ell = p - len(terms)
    elif len(terms) != p:
        raise _spec_error(spec, f"the left side has {len(terms)} positional terms "
                                f"({' '.join(t.text for t in terms) or 'none'}), but the array has {p} "
                                f"positional axes (shape {pshape}; named axes {fmt_names(own) or 'none'})",
                          RankError)
    else:
        at, n_ell = len(terms), 0
    ellipsis = tuple(f"...{i}" for i in range(n_ell))  # cannot clash: '...' is never part of an identifier
    axes: list[_Axis] = [*terms[:at], *(_Axis("...", (e,), None, False) for e in ellipsis), *terms[at:]]
    by_name = {t.name: t for t in lhs.named}
    kept = [n for n in own if n not in by_name]  # named axes the spec leaves alone
    for n in kept:
        if any(n in t.parts for t in _terms(lhs)):
            raise _spec_error(spec, f"axis {n!r} of the spec is also a named axis of the array that the left "
                                    f"side does not mention; write it in braces ('{{{n}}}') or use another "
                                    "identifier", DuplicateAxisError)
    axes += [by_name.get(n) or _Axis(n, (n,), n, False) for n in own]
    # 2. sizes of the elementary axes, splitting groups
    elem: list[str] = []
    elem_size: dict[str, int] = {}
    for t, size in zip(axes, d.shape):
        if not t.group:
            (part,) = t.parts
            if part in sizes and sizes[part] != size:
                raise _spec_error(spec, f"term {t.text!r} has size {size}, but {part}={sizes[part]} was "
                                        "given", AxisSizeError)
            elem.append(part)
            elem_size[part] = size
        elif not t.parts:
            if size != 1:
                raise _spec_error(spec, f"term {t.text!r} stands for an axis of size 1, but the axis has "
                                        f"size {size}", AxisSizeError)
        else:
            got = _infer(t.parts, [sizes.get(q, -1) for q in t.parts], size, f"nx.rearrange({spec!r})",
                         f"term {t.text!r}")
            elem += t.parts
            elem_size.update(zip(t.parts, got))
    # 3. the result: positional terms in order, then the named terms in the order their data comes in
    out_pos: list[tuple[str, ...]] = []
    for t in rhs.positional:
        if t == _ELLIPSIS:
            out_pos += [(e,) for e in ellipsis]
        else:
            out_pos.append(t.parts)
    out_named = [(t.name, t.parts, t.text) for t in rhs.named] + [(n, (n,), n) for n in kept]
    seen: dict[str, str] = {}
    for n, _, text in out_named:
        if n in seen:
            raise _spec_error(spec, f"term {text!r}: the result would have axis {n!r} twice (term "
                                    f"{seen[n]!r} makes it too)", DuplicateAxisError)
        seen[n] = text
    rank = {e: i for i, e in enumerate(elem)}
    out_named.sort(key=lambda item: min((rank[q] for q in item[1]), default=-1))
    order = [q for parts in out_pos for q in parts] + [q for _, parts, _ in out_named for q in parts]
    d = _reshape(d, tuple(elem_size[e] for e in elem))
    d = transpose(d, tuple(rank[q] for q in order))
    shape = tuple(math.prod(elem_size[q] for q in parts) for parts in out_pos)
    shape += tuple(math.prod(elem_size[q] for q in parts) for _, parts, _ in out_named)
    names = tuple(n for n, _, _ in out_named)
    return _make(_reshape(d, shape), names)
