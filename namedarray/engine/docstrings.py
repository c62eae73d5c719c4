"""How each ``nx.<f>`` treats names: the first paragraph of its docstring, so that ``help()`` says it first.

Functions mirrored from ``jax.numpy`` (and lifted from ``jax.lax``, ``jax.nn``, ``jax.random``,
``jax.numpy.linalg``, ``jax.numpy.fft``) keep jax's documentation, after one paragraph stating the nx rule
for their kind. The kinds are the mirror's declarations (:mod:`namedarray.ops.mirror`).

They keep jax's signature too, in nx's terms (:func:`named_signature`): an array argument may be a
NamedArray, an array result is one, and an ``axis`` that takes names says so. ``help()`` and
``inspect.signature`` show it, the function's ``__annotations__`` say the same (not jax's, which
``functools.wraps`` copied), and the type stubs (:mod:`namedarray.surface.stubs`) are generated from it.

>>> import inspect, namedarray as nx
>>> nx.sum.__doc__.splitlines()[0]
'``nx.sum`` reduces the axes given in ``axis``: positions (ints) and names (strings), mixed freely'
>>> inspect.signature(nx.exp)
<Signature (x: 'NamedArray | ArrayLike', /) -> 'NamedArray'>
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable

__all__ = ["RULES", "annotations", "document", "follows_arguments", "jax_name", "named_annotation",
           "named_signature"]

RULES = {
    "elementwise": (
        "works elementwise and broadcasts by name: the result carries every name of its operands (one "
        "size per name), and positional axes broadcast by NumPy's rules."),
    "reduction": (
        "reduces the axes given in ``axis``: positions (ints) and names (strings), mixed freely\n"
        "(``axis=(\"batch\", 0)``); the names not given are kept. ``axis=None`` reduces the positional axes\n"
        "only, as in xmap, and is an error on a value whose axes are all named (except inside ``nx.xmap``).\n"
        "``keepdims=True`` keeps reduced positional axes (size 1); reduced names are dropped even then,\n"
        "since names broadcast by name (``x - x.mean(\"batch\")`` already lines up)."),
    "single": (
        "reduces one axis, given by position or by name in ``axis``; the other names are kept.\n"
        "``axis=None`` reduces the flattened positional axes. ``keepdims=True`` keeps a reduced positional\n"
        "axis (size 1); a reduced name is dropped even then, since names broadcast by name."),
    "along": (
        "acts along the axis given in ``axis``, by position or by name, and keeps it; every other name\n"
        "is a batch axis. Options may be arrays, traced under ``jit`` (``roll``'s shift, ``repeat``'s\n"
        "counts), as in ``jax.numpy``; one with named axes is an error that shows the ``nx.along``\n"
        "spelling."),
    "lifted": (
        "is lifted: it runs as if vmapped over every named axis of its NamedArray arguments, and\n"
        "the result carries their names. Integer axis arguments count positional axes only, and a value\n"
        "whose names leave it too few positional axes is an error."),
    "positional": (
        "is positional only: its output size depends on the values, so it cannot map over names. A\n"
        "NamedArray with named axes is an error (unwrap it first)."),
    "dtype": "looks at dtypes only: a NamedArray counts by its dtype.",
}


def document(f: Callable, kind: str, where: str, source: Callable | None = None) -> Callable:
    """Give ``f`` the docstring: ``where`` and the rule of ``kind``, then ``source``'s documentation.

    >>> g = document(lambda x: x, "lifted", "nx.example", abs)
    >>> g.__doc__.splitlines()[0]
    '``nx.example`` is lifted: it runs as if vmapped over every named axis of its NamedArray arguments, and'
    """
    rule = RULES[kind]
    own = inspect.cleandoc(source.__doc__) if source is not None and source.__doc__ else ""
    tail = f"\n\nThe documentation of ``{jax_name(where)}`` follows.\n\n{own}" if own else ""
    f.__doc__ = f"``{where}`` {rule}{tail}"
    f.__nx_rule__ = kind  # type: ignore[attr-defined]  # the stubs type its result by the rule
    if source is not None:
        signature = named_signature(source, names_in_axis=kind in _NAMED_AXIS_KINDS)
        if signature is not None:
            f.__signature__ = signature  # type: ignore[attr-defined]
            # functools.wraps copied jax's annotations: tools that read them (typing.get_type_hints, editors
            # running the code) see nx's types instead, the ones the signature shows
            f.__annotations__ = annotations(signature)
    return f


def annotations(signature: inspect.Signature) -> dict[str, object]:
    """The ``__annotations__`` a function with ``signature`` has: each annotated parameter's, and ``return``.

    >>> import namedarray as nx
    >>> annotations(inspect.signature(nx.exp)) == nx.exp.__annotations__
    True
    >>> nx.exp.__annotations__
    {'x': 'NamedArray | ArrayLike', 'return': 'NamedArray'}
    """
    out = {p.name: p.annotation for p in signature.parameters.values() if p.annotation is not p.empty}
    if signature.return_annotation is not inspect.Signature.empty:
        out["return"] = signature.return_annotation
    return out


def follows_arguments(f: Callable) -> Callable:
    """Mark ``f`` as a function whose result is a NamedArray when an array argument is one and a plain
    ``jax.Array`` when none is, as the mirror's are: the type stubs give it the overloads that say so.
    ``f``'s annotations name its array arguments (``NamedArray | ArrayLike``, or sequences of them).

    Where ``f`` has a signature of its own (``__signature__``, jax's in nx's terms), its annotations are
    made the signature's, as :func:`document` makes them.
    """
    f.__nx_rule__ = "arguments"  # type: ignore[attr-defined]
    signature = getattr(f, "__dict__", {}).get("__signature__")
    if isinstance(signature, inspect.Signature):
        f.__annotations__ = annotations(signature)
    return f


# the kinds whose ``axis`` takes names as well as positions
_NAMED_AXIS_KINDS = ("reduction", "single", "along")
_ARRAY = re.compile(r"(?<![\w.])(ArrayLike|Array)(?![\w.])")
_INT = re.compile(r"(?<![\w.])int(?![\w.])")
_AXIS = re.compile(r"(?<![\w.])Axis(?![\w.])")


def _public_text(annotation: object) -> str:
    """``annotation`` as text in jax's public names: jax modules without string annotations hold the objects,
    which print by their private homes (``jax.jaxlib._jax.Array``), names no type checker can import.

    >>> import jax
    >>> from jax.typing import ArrayLike, DTypeLike
    >>> _public_text(jax.Array), _public_text(ArrayLike | None), _public_text(DTypeLike | None)
    ('Array', 'ArrayLike | None', 'DTypeLike | None')
    """
    if isinstance(annotation, str):
        return _public_names(annotation)
    import jax
    from jax.typing import ArrayLike, DTypeLike

    if annotation is jax.Array:
        return "Array"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = list(typing.get_args(annotation))
        parts = []
        for alias, name in ((ArrayLike, "ArrayLike"), (DTypeLike, "DTypeLike")):
            members = typing.get_args(alias)
            if all(m in args for m in members):
                args = [a for a in args if a not in members]
                parts.append(name)
        if parts:
            # a duck-typed array (anything with .shape and .dtype) is read as the arrays it stands for
            args = [a for a in args if getattr(a, "__name__", "") != "DuckTypedArray"]
            return " | ".join([*parts, *("None" if a is type(None) else _public_text(a) for a in args)])
    return _public_names(inspect.formatannotation(annotation))


# jaxlib's classes by the public names jax gives them
_PRIVATE = {"Array": "Array", "Device": "jax.Device", "Sharding": "jax.sharding.Sharding"}
_PRIVATE_NAME = re.compile(r"(?<![\w.])(?:jax\.)?jaxlib\._jax\.(\w+)\b")


def _public_names(text: str) -> str:
    return _PRIVATE_NAME.sub(lambda m: _PRIVATE.get(m[1], m[0]), text)


def named_annotation(annotation: object, *, result: bool = False, names_in_axis: bool = False) -> object:
    """jax's annotation in nx's terms: an array argument may be a NamedArray, an array ``result`` is one.

    With ``names_in_axis`` (an ``axis`` argument that takes names) an ``int`` may be a name too.

    >>> named_annotation("tuple[Array, Array]", result=True), named_annotation("ArrayLike | None")
    ('tuple[NamedArray, NamedArray]', 'NamedArray | ArrayLike | None')
    >>> named_annotation("int | None", names_in_axis=True), named_annotation("jax.Array")
    ('int | str | None', 'jax.Array')
    """
    if annotation is inspect.Parameter.empty:
        return annotation
    text = _public_text(annotation)
    text = _ARRAY.sub(lambda m: "NamedArray" if result else f"NamedArray | {m[1]}", text)
    if names_in_axis:
        text = _AXIS.sub("int | Sequence[int] | None", text)
        text = _INT.sub("int | str", text)
    return text


def named_signature(source: Callable, *, names_in_axis: bool = False) -> inspect.Signature | None:
    """``source``'s signature in nx's terms (:func:`named_annotation`), or None where it has none.

    >>> import jax.numpy as jnp
    >>> s = named_signature(jnp.cumsum, names_in_axis=True)
    >>> s.parameters["axis"], s.return_annotation
    (<Parameter "axis: 'int | str | None' = None">, 'NamedArray')
    """
    nin = getattr(source, "nin", None)
    if type(source).__name__ == "ufunc" and isinstance(nin, int):  # jnp.add: a ufunc object, f(x1, x2)
        array = inspect.Parameter.POSITIONAL_ONLY
        return inspect.Signature([inspect.Parameter(f"x{i + 1}", array, annotation="NamedArray | ArrayLike")
                                  for i in range(nin)], return_annotation="NamedArray")
    try:
        signature = inspect.signature(source)
    except (TypeError, ValueError):
        return None
    params = [p.replace(annotation=named_annotation(p.annotation, names_in_axis=names_in_axis
                                                    and p.name.startswith("axis")))
              for p in signature.parameters.values()]
    return signature.replace(parameters=params,
                             return_annotation=named_annotation(signature.return_annotation, result=True))


_JAX_HOMES = {"linalg": "jax.numpy.linalg", "fft": "jax.numpy.fft", "lax": "jax.lax", "nn": "jax.nn",
              "random": "jax.random"}


def jax_name(where: str) -> str:
    """The public jax name an ``nx`` function mirrors: ``nx.sum`` -> ``jax.numpy.sum``.

    >>> jax_name("nx.linalg.det"), jax_name("nx.lax.cumsum"), jax_name("nx.exp")
    ('jax.numpy.linalg.det', 'jax.lax.cumsum', 'jax.numpy.exp')
    """
    parts = where.split(".")[1:]
    if len(parts) > 1 and parts[0] in _JAX_HOMES:
        return f"{_JAX_HOMES[parts[0]]}.{'.'.join(parts[1:])}"
    return "jax.numpy." + ".".join(parts)
