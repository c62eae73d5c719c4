"""``nx.einsum``: Einstein summation over positional letters and named axes in braces.

The grammar is in :func:`einsum`'s docstring (``help(nx.einsum)``). The spec is parsed once (cached) and,
per operand layout, planned once into a single ``jnp.einsum`` call on the storage arrays with a fixed
contraction path; eagerly the whole operation is one cached kernel.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((2, 5, 3)), {0: "b", 2: "k"})  # positional n=5, named b, k
>>> w = nx.wrap(jnp.ones((3, 4)), ["k", "m"])
>>> y = nx.einsum("n{b,k},{k,m}->n{b,m}", x, w)
>>> y.shape, y.named_shape
((5,), {'b': 2, 'm': 4})
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import opt_einsum
from jax.typing import ArrayLike

from ..core import caches, placement
from ..core import env as _env
from ..core.array import NamedArray, _make
from ..core.shape import join_sizes
from ..engine import dispatch as engine
from ..engine.docstrings import follows_arguments
from ..engine.registry import implements
from ..errors import AxisSizeError, EinsumSpecError, fmt_names
from .contract import _operand, _result, sum_blocks

__all__ = ["einsum"]


# --------------------------------------------------------------------------------------------------------
# Parsing: spec text -> terms (cached per spec string)


class Term(NamedTuple):
    """One term of a spec: positional letters (with the ellipsis position), and the names written in it."""

    text: str
    letters: tuple[str, ...]
    ellipsis: int | None  # index into ``letters`` where ``...`` stands, or None
    names: tuple[str, ...]  # in written order


class Spec(NamedTuple):
    text: str
    inputs: tuple[Term, ...]
    output: Term | None  # None: implicit output (no '->')


def _err(spec: str, msg: str) -> EinsumSpecError:
    return EinsumSpecError(f"nx.einsum({spec!r}): {msg}")


@caches.cache("einsum specs", 512)
def parse(spec: str) -> Spec:
    """Parse ``spec`` into its terms, or raise :class:`EinsumSpecError` saying what is wrong and where."""
    terms: list[Term] = []
    letters: list[str] = []
    names: list[str] = []
    ellipsis: int | None = None
    start = 0
    arrow = False
    i = 0
    n = len(spec)

    def close(end: int) -> None:
        nonlocal letters, names, ellipsis
        terms.append(Term(spec[start:end].strip(), tuple(letters), ellipsis, tuple(names)))
        letters, names, ellipsis = [], [], None

    while i < n:
        c = spec[i]
        if c.isspace():
            i += 1
        elif c == "{":
            j = i + 1
            while True:
                if j == n:
                    raise _err(spec, f"unterminated brace: the '{{' at position {i} has no matching '}}'")
                d = spec[j]
                if d == "}":
                    break
                if d == "{" or (d == "-" and spec[j + 1:j + 2] == ">") or d == ">":
                    raise _err(spec, f"unterminated brace: the '{{' at position {i} is not closed before "
                                     f"{spec[j:j + 2] if d == '-' else d!r} at position {j}")
                j += 1
            body = spec[i + 1:j]
            if body.strip():
                for part in body.split(","):
                    name = part.strip()
                    if not name:
                        raise _err(spec, f"empty axis name in braces {spec[i:j + 1]!r} (position {i}); names "
                                         "are separated by single commas")
                    if any(ch.isspace() for ch in name):
                        raise _err(spec, f"axis name {name!r} contains whitespace; separate names with "
                                         "commas")
                    if name in names:
                        raise _err(spec, f"axis name {name!r} appears twice in one term")
                    names.append(name)
            i = j + 1
        elif c == "}":
            raise _err(spec, f"unmatched '}}' at position {i}")
        elif c == ",":
            if arrow:
                raise _err(spec, "the output (after '->') is a single term; it cannot contain ','")
            close(i)
            start = i + 1
            i += 1
        elif c == "-" or c == ">":
            if spec[i:i + 2] != "->":
                raise _err(spec, f"stray {c!r} at position {i}: the output is introduced by '->'")
            if arrow:
                raise _err(spec, "'->' appears more than once")
            close(i)
            arrow = True
            start = i + 2
            i += 2
        elif c == ".":
            if spec[i:i + 3] != "...":
                raise _err(spec, f"'.' at position {i} is not part of an ellipsis '...'")
            if ellipsis is not None:
                raise _err(spec, "'...' appears more than once in one term")
            ellipsis = len(letters)
            i += 3
        elif c.isascii() and c.isalpha():  # a-z and A-Z, as in NumPy
            letters.append(c)
            i += 1
        else:
            raise _err(spec, f"invalid character {c!r} at position {i}: a term holds the letters a-z and "
                             "A-Z, '...' and named axes in braces")
    close(n)
    if arrow:
        *inputs, output = terms
        seen: set[str] = set()
        for letter in output.letters:
            if letter in seen:
                raise _err(spec, f"output subscript {letter!r} appears more than once")
            seen.add(letter)
    else:
        inputs, output = terms, None
    return Spec(spec, tuple(inputs), output)


# --------------------------------------------------------------------------------------------------------
# Aliases and the short forms: spec + operands' names -> a spec in the full grammar (cached per layout)

# jnp.einsum's keywords that nx.einsum does not take: passed by a caller of jnp.einsum, never aliases
_JNP_ONLY_KEYWORDS = frozenset({"out", "optimize", "out_sharding", "_dot_general"})
# what a name in braces cannot hold (parse ends or splits it there)
_UNSPELLABLE = re.compile(r"[\s,{}>]")
_BRACES = re.compile(r"\{([^{}]*)\}")


def _shown(spec: str, aliases: tuple[tuple[str, str], ...]) -> str:
    """The call as the user wrote it, for messages: ``nx.einsum('{x}->{}', x='H')``."""
    return f"nx.einsum({spec!r}{''.join(f', {k}={v!r}' for k, v in aliases)})"


def _written(spec: str) -> set[str]:
    """The names written in ``spec``'s braces."""
    p = parse(spec)
    return {n for t in (*p.inputs, *((p.output,) if p.output is not None else ())) for n in t.names}


def _spellable(name: str) -> bool:
    return bool(name) and not _UNSPELLABLE.search(name)


def _resolve(spec: str, aliases: tuple[tuple[str, str], ...], where: str) -> str:
    """``spec`` with each aliased name in braces replaced by its axis name."""
    p = parse(spec)
    terms = [*p.inputs] + ([p.output] if p.output is not None else [])
    used = _written(spec)
    amap = dict(aliases)
    for key, value in aliases:
        if key not in used:
            written = fmt_names(sorted(used)) or "no names"
            raise EinsumSpecError(f"{where}: alias {key}={value!r} is used nowhere: the spec's braces "
                                  f"write {written}; write {{{key}}} where axis {value!r} belongs, or drop "
                                  "the alias")
        if not _spellable(value):
            raise EinsumSpecError(f"{where}: alias {key}={value!r} is not an axis name braces can hold (no "
                                  "whitespace, ',', '{', '}' or '>'); rename the axis first (.rename(...))")
    for k, t in enumerate(terms):
        seen: dict[str, str] = {}
        what = "the output" if k == len(p.inputs) else f"term {k}"
        for n in t.names:
            axis = amap.get(n, n)
            if axis in seen:
                both = " and ".join(f"{w}={axis!r}" if w in amap else repr(w) for w in (seen[axis], n))
                raise EinsumSpecError(f"{where}: {what} {t.text!r} names axis {axis!r} twice ({both}); a "
                                      "term writes an axis once: drop one of them, or alias it to another "
                                      "axis")
            seen[axis] = n

    def repl(m: re.Match) -> str:
        parts = (s.strip() for s in m.group(1).split(","))
        return "{" + ",".join(amap.get(s, s) for s in parts if s) + "}"

    return _BRACES.sub(repl, spec)


def _form(p: Spec, nops: int) -> str | None:
    """Which short form ``p`` is for ``nops`` operands: "output" (``"->{H,W}"``: no input terms), "shared"
    (one input term for several operands), or None (the full grammar)."""
    if len(p.inputs) != 1 or not nops:
        return None
    if not p.inputs[0].text and p.output is not None and "{" in p.output.text:
        return "output"
    return "shared" if nops > 1 else None


@caches.cache("einsum forms", 2048)
def rewrite(spec: str, aliases: tuple[tuple[str, str], ...],
            carried: tuple[tuple[str, ...] | None, ...]) -> str:
    """``spec`` in the full grammar for operands that carry the names ``carried`` (``None``: a plain array):
    aliases resolved, then the output-only form (``"->{H,W}"``) and the one-term-for-all form
    (``"{D}->{}"`` with several operands) written out term by term. A spec in the full grammar comes back
    as it is (with aliases resolved).

    >>> rewrite("->{H}", (), (("H", "D"), ("D",)))
    '...{H,D},...{D}->...{H}'
    >>> rewrite("{x}->{}", (("x", "D"),), (("H", "D"), ("D",), None))
    '{D},{D},{}->{}'
    """
    where = _shown(spec, aliases)
    resolved = _resolve(spec, aliases, where) if aliases else spec
    if resolved != spec:
        where += f" (read as {resolved!r})"
    p = parse(resolved)
    form = _form(p, len(carried))
    if form is None:
        return resolved
    nops = len(carried)
    have = sorted({n for names in carried if names for n in names})
    held = f"the operands carry {fmt_names(have)}" if have else "no operand carries a named axis"
    out = p.output
    if form == "output":
        assert out is not None
        for k, names in enumerate(carried):
            for n in names or ():
                if not _spellable(n):
                    raise EinsumSpecError(f"{where}: operand {k} carries axis {n!r}, which braces cannot "
                                          "write (it holds whitespace, ',', '{', '}' or '>'); rename it "
                                          "first (.rename(...)) or reduce it with nx.sum or nx.dot by name")
        full = (",".join("...{" + ",".join(names or ()) + "}" for names in carried)
                + "->...{" + ",".join(out.names) + "}")
        if out.letters:
            raise EinsumSpecError(f"{where}: the output-only form ('->{{names}}', no input terms) keeps "
                                  "every positional axis as the operands broadcast it, so its output takes "
                                  f"no letters (it has {fmt_names(out.letters)}); write input terms, one per "
                                  f"operand, to use letters: without them this spec means {full!r}")
        missing = [n for n in out.names if n not in have]
        if missing:
            raise EinsumSpecError(f"{where}: the output lists {fmt_names(missing)}, which no operand "
                                  f"carries ({held}); list only names the operands carry")
        return full
    term = p.inputs[0]
    if term.letters:
        each = ",".join([term.text] * nops) + ("->" + out.text if out is not None else "")
        raise EinsumSpecError(f"{where}: one input term {term.text!r} for {nops} operands is ambiguous: its "
                              "letters could mean the same or different positional axes in each operand; "
                              f"write one input term per operand, separated by ',' (e.g. {each!r})")
    if not term.text:
        raise EinsumSpecError(f"{where}: no input terms for {nops} operands: list the named axes to keep "
                              "in braces after '->' ('->{}' sums every named axis), or write one input term "
                              "per operand, separated by ','")
    if out is None:
        raise EinsumSpecError(f"{where}: one input term {term.text!r} for {nops} operands needs an output: "
                              f"write it after '->' (e.g. {term.text + '->{}'!r} contracts the listed "
                              "names)")
    missing = [n for n in term.names if n not in have]
    if missing:
        raise EinsumSpecError(f"{where}: the input term {term.text!r} applies to every operand, and no "
                              f"operand carries {fmt_names(missing)} ({held}); drop "
                              f"{'it' if len(missing) == 1 else 'them'} from the term")
    unlisted = [n for n in out.names if n not in term.names]
    ell = "..." if term.ellipsis is not None else ""
    if unlisted:
        fixed = ell + "{" + ",".join(term.names + tuple(unlisted)) + "}"
        raise EinsumSpecError(f"{where}: the output keeps {fmt_names(unlisted)}, which the input term "
                              f"{term.text!r} does not list; list {'it' if len(unlisted) == 1 else 'them'} "
                              f"there too ({fixed + '->' + out.text!r}), or leave "
                              f"{'it' if len(unlisted) == 1 else 'them'} out of the output: a name written "
                              "nowhere is kept anyway, broadcast by name")
    terms = [ell + "{" + ",".join(n for n in term.names if n in (names or ())) + "}" for names in carried]
    return ",".join(terms) + "->" + out.text


# --------------------------------------------------------------------------------------------------------
# Planning: spec + operand layouts -> one jnp.einsum call on the storage arrays (cached per layout)


class Plan(NamedTuple):
    subscripts: str  # over storage axes; output names in the contraction's natural order
    path: Any  # a fixed contraction path: no search at call time
    out_names: tuple[str, ...]


def _labels(i: int) -> str:
    return opt_einsum.get_symbol(i)


@caches.cache("einsum plans", 2048)
def plan(spec: str, layouts: tuple[tuple[tuple[int, ...], tuple[str, ...] | None], ...]) -> Plan:
    """Plan ``spec`` for operands with the given storage ``(shape, names)`` (names ``None``: plain array)."""
    p = parse(spec)
    nops = len(layouts)
    if len(p.inputs) != nops:
        raise _err(spec, f"the spec has {len(p.inputs)} input term{'s' * (len(p.inputs) != 1)} but "
                         f"{nops} operand{'s' * (nops != 1)} {'were' if nops != 1 else 'was'} given")
    where = f"nx.einsum({spec!r})"

    # ---- positional axes: letters and the ellipsis --------------------------------------------------------
    letter_size: dict[str, tuple[int, int]] = {}  # letter -> (size, operand) of its first non-1 occurrence
    ell_shapes: list[tuple[int, ...]] = []
    pos_of: list[tuple[int, ...]] = []
    for k, ((shape, names), term) in enumerate(zip(layouts, p.inputs)):
        npos = len(shape) - len(names or ())
        pshape = tuple(shape[:npos])
        pos_of.append(pshape)
        nl = len(term.letters)
        if term.ellipsis is None:
            if nl != npos:
                hint = ("named axes are written in braces, not as letters" if nl > npos else
                        "cover them with letters, or with '...' (kept where the output writes '...' too)")
                raise _err(spec, f"term {k} {term.text!r} has {nl} positional subscript{'s' * (nl != 1)} but "
                                 f"operand {k} has {npos} positional ax{'es' if npos != 1 else 'is'} (shape "
                                 f"{pshape}); {hint}")
            ell = ()
        else:
            if nl > npos:
                raise _err(spec, f"term {k} {term.text!r} has {nl} positional subscripts but operand {k} has "
                                 f"only {npos} positional axes (shape {pshape})")
            e = term.ellipsis
            ell = pshape[e:e + npos - nl]
        ell_shapes.append(ell)
        # the sizes the letters stand for (the ellipsis covers the npos - nl axes at its position)
        lsizes = pshape if term.ellipsis is None else (pshape[:term.ellipsis]
                                                       + pshape[term.ellipsis + npos - nl:])
        own: dict[str, int] = {}
        for letter, size in zip(term.letters, lsizes):
            if letter in own and own[letter] != size:
                raise AxisSizeError(f"{where}: subscript {letter!r} is repeated in term {k} {term.text!r} (a "
                                    f"diagonal) with sizes {own[letter]} and {size} in operand {k}")
            own[letter] = size
            prev = letter_size.get(letter)
            if prev is None or prev[0] == 1:
                letter_size[letter] = (size, k)
            elif size != 1 and size != prev[0]:
                raise AxisSizeError(f"{where}: subscript {letter!r} has size {prev[0]} in operand {prev[1]} "
                                    f"but size {size} in operand {k}")
    ell_rank = max((len(s) for s in ell_shapes), default=0)
    try:
        np.broadcast_shapes(*ell_shapes)
    except ValueError:
        raise AxisSizeError(f"{where}: the positional axes covered by '...' do not broadcast: "
                            + ", ".join(f"{s} in operand {k}" for k, s in enumerate(ell_shapes)
                                        if p.inputs[k].ellipsis is not None)) from None

    # ---- named axes -------------------------------------------------------------------------------------
    carried = [names or () for _, names in layouts]
    for k, term in enumerate(p.inputs):
        for name in term.names:
            if name not in carried[k]:
                have = (f"its named axes are {fmt_names(carried[k])}" if carried[k]
                        else "it has no named axes" + (" (a plain array)" if layouts[k][1] is None else ""))
                raise _err(spec, f"term {k} {term.text!r} names axis {name!r}, but operand {k} does not "
                                 f"carry it ({have})")
    written: dict[str, list[int]] = {}
    for k, term in enumerate(p.inputs):
        for name in term.names:
            written.setdefault(name, []).append(k)
    for k, names in enumerate(carried):
        for name in names:
            if name in written and name not in p.inputs[k].names:
                w = written[name][0]
                raise _err(spec, f"axis {name!r} is written in term {w} {p.inputs[w].text!r}, but "
                                 f"operand {k} also carries it and its term {p.inputs[k].text!r} does not "
                                 f"mention it; write {name!r} in the term of every operand that carries it "
                                 "(to contract or keep it), or in none (to broadcast it by name)")
    sizes = join_sizes([dict(zip(names, shape[len(shape) - len(names):]))
                        for (shape, _), names in zip(layouts, carried)], where,
                       labels=[f"operand {k}" for k in range(nops)])
    broadcast = {n for n in sizes if n not in written}

    # ---- the output -------------------------------------------------------------------------------------
    if p.output is not None:
        out = p.output
        missing = [c for c in out.letters if c not in letter_size]
        if missing:
            raise _err(spec, f"output subscript{'s' * (len(missing) > 1)} {fmt_names(missing)} "
                             f"appear{'s' * (len(missing) == 1)} in no input term")
        missing = [n for n in out.names if n not in written]
        if missing:
            why = [n for n in missing if n in broadcast]
            hint = (f"; operands carry {fmt_names(why)} without writing it: write it in their terms too, or "
                    "leave it out everywhere to broadcast it") if why else ""
            raise _err(spec, f"output axis name{'s' * (len(missing) > 1)} {fmt_names(missing)} "
                             f"appear{'s' * (len(missing) == 1)} in no input term{hint}")
        out_letters, out_ell = out.letters, out.ellipsis
        kept = set(out.names)
    else:
        counts: dict[str, int] = {}
        for term in p.inputs:
            for letter in term.letters:
                counts[letter] = counts.get(letter, 0) + 1
        out_letters = tuple(sorted(c for c, m in counts.items() if m == 1))
        out_ell = 0 if any(t.ellipsis is not None for t in p.inputs) else None
        kept = {n for n, ks in written.items() if len(ks) == 1}
    out_names = _natural(carried, kept | broadcast)

    # ---- symbols on storage axes -----------------------------------------------------------------------
    symbol: dict[Any, str] = {}

    def sym(label: Any) -> str:
        s = symbol.get(label)
        if s is None:
            s = symbol[label] = _labels(len(symbol))
        return s

    ell_syms = [sym(("...", d)) for d in range(ell_rank)]  # right-aligned ellipsis dims
    subs = []
    for k, term in enumerate(p.inputs):
        e = len(ell_shapes[k])
        if term.ellipsis is None:
            pos = [sym(c) for c in term.letters]
        else:
            pos = ([sym(c) for c in term.letters[:term.ellipsis]] + ell_syms[ell_rank - e:]
                   + [sym(c) for c in term.letters[term.ellipsis:]])
        subs.append("".join(pos) + "".join(sym(("{", n)) for n in carried[k]))
    if out_ell is None:
        out_pos = [sym(c) for c in out_letters]
    else:
        out_pos = ([sym(c) for c in out_letters[:out_ell]] + ell_syms
                   + [sym(c) for c in out_letters[out_ell:]])
    out_sub = "".join(out_pos) + "".join(sym(("{", n)) for n in out_names)
    subscripts = ",".join(subs) + "->" + out_sub
    if nops <= 2:
        path: Any = False  # nothing to search
    else:
        shapes = [tuple(shape) for shape, _ in layouts]
        # searched here, once per layout; the cached plan keeps it immutable
        path = tuple(map(tuple, opt_einsum.contract_path(subscripts, *shapes, shapes=True,
                                                         optimize="greedy")[0]))
    return Plan(subscripts, path, out_names)


def _natural(carried: list[tuple[str, ...]], out: set[str]) -> tuple[str, ...]:
    """The output names in the order the contraction produces them (no transpose after it): for two
    operands ``dot_general``'s (names both carry, then the first's own, then the second's own, each in its
    operand's order); otherwise the order of first appearance."""
    if len(carried) == 2:
        both = set(carried[0]) & set(carried[1])
        order = ([n for n in carried[0] if n in both] + [n for n in carried[0] if n not in both]
                 + [n for n in carried[1] if n not in both])
    else:
        order = list(dict.fromkeys(n for names in carried for n in names))
    return tuple(n for n in order if n in out)


# --------------------------------------------------------------------------------------------------------
# The operation


def _einsum_impl(static, *operands):
    _, spec, precision, preferred_element_type = static
    datas = []
    layouts = []
    for v in operands:
        if type(v) is NamedArray:
            datas.append(v.data)
            layouts.append((tuple(v.data.shape), v.names))
        else:
            datas.append(v)
            layouts.append((tuple(np.shape(v)), None))
    pl = plan(spec, tuple(layouts))
    out = jnp.einsum(pl.subscripts, *datas, optimize=pl.path if pl.path is False else list(pl.path),
                     precision=precision, preferred_element_type=preferred_element_type,
                     out_sharding=_out_sharding(pl, datas))
    summed = {n for v in operands if type(v) is NamedArray for n in v.names} - set(pl.out_names)
    return _make(sum_blocks(out, sorted(summed)), pl.out_names)


def _out_sharding(pl: Plan, datas: list) -> Any:
    """On Explicit mesh axes, the result's layout by name where JAX would find it ambiguous
    (:func:`namedarray.core.placement.contraction_sharding`)."""
    inputs, output = pl.subscripts.split("->")
    k = len(output) - len(pl.out_names)
    names = dict(zip(output[k:], pl.out_names))
    return placement.contraction_sharding(datas, inputs.split(","), output, names, _env.current().mapping())


@follows_arguments
@implements(jnp.einsum)
def einsum(spec: str, *operands: NamedArray | ArrayLike, precision: Any = None,
           preferred_element_type: Any = None,
           **aliases: str) -> NamedArray | jax.Array:
    """Einstein summation where letters are positional axes and ``{names}`` are named axes: a name written
    in the inputs and not in the output is contracted, one written in the output is kept, one written
    nowhere is broadcast by name.

    The subscripts are NumPy's, plus brace groups for axis names::

        nx.einsum("n{b,k},{k,m}->n{b,m}", x, w)

    Grammar (whitespace is ignored):

    * terms are separated by ``,``; an optional ``->`` introduces the output term;
    * in a term, letters ``a``-``z`` and ``A``-``Z`` name the positional axes, in order; ``...`` (at most
      once per term) stands for the positional axes the letters do not cover, as in NumPy;
    * ``{name,name,...}`` lists named axes. Names may be multi-character, their order inside the braces is
      irrelevant, and a brace group may sit anywhere in the term (``"n{b}"``, ``"{b}n"`` and ``"{b}n{}"`` are
      the same term): positions come from the letters alone. ``{}`` is an empty group (handy for a scalar
      output, ``"{k},{k}->{}"``);
    * **output only**: ``"->{H,W}"``, with no input terms at all, multiplies the operands (broadcasting by
      name) and sums every named axis the output does not list; the listed names are kept (``"->{}"`` sums
      them all). Positional axes are never touched: they broadcast as in NumPy and are kept, as if each input
      term were ``"...{its names}"`` and the output ``"...{H,W}"``. The output takes no letters (write input
      terms to place positional axes), and each listed name must be carried by some operand. (``"->"``, with
      no braces, stays NumPy's term of one scalar operand);
    * **one term for every operand**: with several operands, a single input term of names only
      (``"{D}->{}"``, ``"{H,W,D}->{H,W}"``) applies to each operand, which writes the listed names it carries:
      a listed name not in the output is contracted, a name listed nowhere broadcasts by name (kept). Each
      listed name must be carried by some operand, the output's names must be listed, and ``'->'`` is
      required; ``...`` in the term covers each operand's positional axes (write ``"...{D}->...{}"`` to keep
      them). With one operand this is the ordinary grammar. A single term with letters for several operands
      is ambiguous, an error: write one term per operand;
    * **aliases**: keyword arguments map a name written in braces to an axis name, in every form:
      ``nx.einsum("{x,y}->{y}", a, b, x="H", y="W")`` reads as ``"{H,W}->{W}"``. Values are strings only (an
      axis name braces can hold); every alias must be used in the spec, and a term may not reach one axis
      twice through them. ``precision`` and ``preferred_element_type`` are nx.einsum's own options and
      cannot be aliases; jnp.einsum's other keywords (``optimize``, ``out``, ...) are not taken.

    Meaning:

    * letters follow NumPy exactly: a letter in several terms and not in the output is contracted; a letter in
      the output is kept, in the output's order (``"ij,jk->ki"`` has shape ``(k, i)``); size-1 dimensions
      broadcast; repeated letters in one input term take a diagonal. Without ``->`` the output holds, after
      ``...``, the letters that occur once, sorted (NumPy's implicit rule);
    * a name written in input terms and not in the output is contracted (summed over); written in the output,
      it is kept. Without ``->`` a name written in exactly one term is kept, one written in several is
      contracted;
    * a name written in no term at all is broadcast by name (a batch axis): the operands that carry it are
      mapped over it, as by every other nx operation;
    * a name written for one operand must be written for every operand that carries it: skipping it in one
      would silently make that operand a batch operand of a contraction (xmap left this undefined);
    * any number of operands. Plain jax/NumPy arrays and scalars are positional operands (no names).

    The result is a NamedArray (a plain array when no operand is a NamedArray) whose positional axes follow
    the output term's letters. Raises :class:`~namedarray.errors.EinsumSpecError` for a malformed or
    inconsistent spec and :class:`~namedarray.errors.AxisSizeError` when one axis has two sizes.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["batch", "k"])
    >>> w = nx.wrap(jnp.ones((3, 4)), ["k", "out"])
    >>> nx.einsum("{k},{k}->{}", x, w).named_shape  # contract k; batch and out broadcast by name
    {'batch': 2, 'out': 4}
    >>> nx.einsum("ij,jk->ki", jnp.ones((2, 3)), jnp.ones((3, 5))).shape
    (5, 2)

    The short forms and aliases, on operands that store their names in different orders:

    >>> a = nx.wrap(jnp.ones((2, 3, 4)), ["H", "W", "D"])
    >>> b = nx.wrap(jnp.full((4, 3, 2), 2.0), ["D", "W", "H"])
    >>> hw = nx.einsum("->{H,W}", a, b)  # D contracted; the same as "{H,W,D},{D,W,H}->{H,W}"
    >>> hw.named_shape, float(hw.unwrap(["H", "W"])[0, 0])
    ({'H': 2, 'W': 3}, 8.0)
    >>> float(nx.einsum("->{}", a, b))  # every named axis summed
    48.0
    >>> nx.einsum("{D}->{}", a, b).named_shape  # one term for both: D contracted, H and W broadcast
    {'H': 2, 'W': 3}
    >>> nx.einsum("{x,y}->{y}", a, b, x="H", y="W").named_shape  # "{H,W}->{W}": H contracted, D broadcast
    {'D': 4, 'W': 3}
    """
    if not isinstance(spec, str):
        raise EinsumSpecError(f"nx.einsum takes the subscripts string first, got {type(spec).__name__} (the "
                              "interleaved operand/sublist form of numpy.einsum is not supported)")
    ops = tuple(_operand(v, k, f"nx.einsum({spec!r})", "operand") for k, v in enumerate(operands))
    full = spec
    named = ()
    if aliases:
        named = tuple(sorted(aliases.items()))
        for key, value in named:
            if key in _JNP_ONLY_KEYWORDS and key not in _written(spec):
                raise TypeError(f"{_shown(spec, ())}: nx.einsum takes no {key}= (a keyword of jnp.einsum): "
                                "it plans the contraction itself, once per layout; its keywords are "
                                "precision, preferred_element_type and aliases of names written in braces")
            if not isinstance(value, str):
                raise TypeError(f"{_shown(spec, ())}: alias {key}={value!r} ({type(value).__name__}) must "
                                f"be a str, the axis name that {{{key}}} stands for in the spec")
    if named or _form(parse(spec), len(ops)) is not None:
        full = rewrite(spec, named, tuple(v.names if type(v) is NamedArray else None for v in ops))
    # the static configuration starts with the op's name: errors raised on the result (a resource
    # conflict inside nx.xmap) say which operation made it
    static = ("nx.einsum", full, precision, preferred_element_type)
    if full == spec:
        return _result(engine.run(_einsum_impl, static, ops), ops)
    try:
        return _result(engine.run(_einsum_impl, static, ops), ops)
    except (EinsumSpecError, AxisSizeError) as e:
        # the full spec's errors, told about the spec as written
        prefix = f"nx.einsum({full!r})"
        msg = str(e)
        if not msg.startswith(prefix):
            raise
        raise type(e)(f"{_shown(spec, named)} (read as {full!r}){msg[len(prefix):]}") from None
