"""Arguments of the wrong kind: which argument of a failed call was plainly wrong, read from its signature.

A jax function given ``None``, a string, a set or NaN where it takes an array or an int fails deep inside:
jax's tracing says "Error interpreting argument to <function ...> as an abstract array", NumPy says
"'NoneType' object cannot be interpreted as an integer", Python says "'float' object is not iterable".
None of it names the argument the caller got wrong, and nx's kernels add their own internal function names.

So once a call has failed (never before: a valid call pays nothing and is never refused), :func:`mistyped`
reads the signature of the function that was called and finds the first argument whose value cannot be of
any kind its annotation allows (jax annotates its functions: ``ArrayLike``, ``int | None``, ``DTypeLike``,
``Callable``, ...). The caller then raises the ``TypeError`` it returns, which names the operation, the
argument, what it takes and what it got. Only plainly wrong kinds are refused (a set or a dict where arrays
go, a string where no string goes, None where None is not allowed, a float where an int goes, a list where
neither an array-like nor a sequence goes), so a value that merely might be wrong is never blamed; an
argument whose annotation says nothing usable is not judged by it. Where jax itself says which argument it
could not take ("... was passed to the function at path b") or which object had no ``shape``, that
argument is named.

>>> import jax.numpy as jnp
>>> print(mistyped(jnp.polyder, (jnp.ones(3), "zz"), {}, "nx.polyder"))
nx.polyder: m must be an int, got the string 'zz'
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..core.array import NamedArray
from ..errors import wrong_type

__all__ = ["mistyped", "call"]

# What each alternative of an annotation takes, tried in this order (the first full match wins); an
# alternative that none matches leaves the parameter unjudged.
_KINDS = (
    ("none", re.compile(r"None|NoneType|<class 'NoneType'>"), "None"),
    ("callable", re.compile(r"(collections\.abc\.)?Callable(\[.*\])?|<class 'collections\.abc\.Callable'>"),
     "a function"),
    ("seq", re.compile(r"(Sequence|collections\.abc\.Sequence|tuple|list)\[.*\]|(core\.)?Shape"),
     "a sequence"),
    ("intarray", re.compile(r"IntegerArray"), "an integer or an integer array"),
    ("arraylike", re.compile(r"ArrayLike|RealArray|DuckTypedArray|Supports\w+|"
                             r"numpy\.(bool|number)|complex|<class 'complex'>"), "an array or scalar"),
    ("array", re.compile(r"([\w.]*\.)?(Array|ndarray)|<class '[\w.]*\.(ArrayImpl|Array|ndarray)'>"),
     "an array"),
    ("dtype", re.compile(r"DTypeLike\w*|DType|dtypes\.ExtendedDType|Union\[.*SupportsDType.*\]"), "a dtype"),
    ("int", re.compile(r"int|DimSize|<class 'int'>"), "an int"),
    ("float", re.compile(r"float|<class 'float'>"), "a float"),
    ("bool", re.compile(r"bool|<class 'bool'>"), "a bool"),
    ("str", re.compile(r"str|<class 'str'>"), "a string"),
)

# annotations that stand for several kinds
_ALIASES = {"Axis": ("int", "seq", "none")}


def _alternatives(annotation: Any) -> list[str]:
    """The top-level alternatives of an annotation (``a | b``, ``Union[a, b]``, ``Optional[a]``)."""
    text = annotation if isinstance(annotation, str) else repr(annotation)
    text = re.sub(r"(?<![\w.])typing\.", "", text)
    if text.startswith("Union[") and text.endswith("]") and "SupportsDType" in text:
        return [text]  # DTypeLike spelled out: one alternative (see _KINDS)
    for wrapper in ("Union[", "Optional["):
        if text.startswith(wrapper) and text.endswith("]"):
            text = text[len(wrapper):-1] + (", None" if wrapper == "Optional[" else "")
            return _split(text, ",")
    return _split(text, "|")


def _split(text: str, sep: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += 1 if c in "[(" else -1 if c in "])" else 0
        if c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def kinds_of(param: inspect.Parameter) -> tuple[str, ...] | None:
    """The kinds of value ``param`` takes by its annotation; None when the annotation says nothing usable.

    >>> import jax.numpy as jnp
    >>> kinds_of(inspect.signature(jnp.round).parameters["decimals"])
    ('int',)
    """
    if param.annotation is param.empty or param.kind is param.VAR_KEYWORD:
        return None
    kinds: list[str] = []
    for alt in _alternatives(param.annotation):
        if alt in _ALIASES:
            kinds.extend(_ALIASES[alt])
            continue
        kind = next((k for k, pattern, _ in _KINDS if pattern.fullmatch(alt)), None)
        if kind is None:
            return None
        kinds.append(kind)
    if param.default is None:
        kinds.append("none")
    return tuple(dict.fromkeys(kinds))


def _is_dtype(value: Any) -> bool:
    try:
        np.dtype(value)
    except (TypeError, ValueError):
        return False
    return True


def fits(value: Any, kinds: tuple[str, ...]) -> bool:
    """Whether ``value`` can be of one of ``kinds``: False only for plainly wrong kinds.

    >>> fits(None, ("int",)), fits("float32", ("dtype",)), fits([1, 2], ("arraylike",)), fits(2, ("int",))
    (False, True, False, True)
    """
    k = set(kinds)
    if value is None:
        return "none" in k
    if type(value) is NamedArray or hasattr(value, "__jax_array__"):
        return True  # arrays: their shapes and dtypes are judged by the function itself
    if isinstance(value, (set, frozenset, bytes, Mapping)):
        return False
    if isinstance(value, str):
        return "str" in k or ("dtype" in k and _is_dtype(value))
    if isinstance(value, type) or isinstance(value, np.dtype):
        return bool(k & {"dtype", "callable"})
    if callable(value) and not hasattr(value, "shape"):
        return "callable" in k
    if isinstance(value, (list, tuple)):
        return bool(k & {"seq"}) or ("dtype" in k and _is_dtype(value))
    if hasattr(value, "shape"):  # jax and NumPy arrays (0-d arrays stand for ints too)
        return bool(k & {"arraylike", "intarray", "array", "int", "float", "bool", "seq"})
    if isinstance(value, float):
        return bool(k & {"arraylike", "float"})
    if isinstance(value, (bool, int, np.integer)):
        return bool(k & {"arraylike", "intarray", "int", "float", "bool", "seq"})  # (a shape may be one int)
    if isinstance(value, complex):
        return "arraylike" in k
    return True


def _expected(kinds: tuple[str, ...]) -> str:
    words = [w for k, _, w in _KINDS if k in kinds and k != "none"]
    return " or ".join(words) + (" or None" if "none" in kinds else "")


# jax's own account of the argument it could not take, and accounts of an object that lacked what was used:
# (pattern, what the argument must be); the argument blamed is the first of the type the pattern's group
# names (or, for a pattern without a group, of the type given third)
_JAX_PATH = re.compile(r"passed to the function at path (\w+)")
_ACCOUNTS = (
    (re.compile(r"'(\w+)' object has no attribute '(?:shape|ndim|size|dtype)'"), "an array", None),
    (re.compile(r"'(\w+)' object is not iterable"), "a sequence", None),
    (re.compile(r"'(\w+)' object is not callable"), "a function", None),
    (re.compile(r"'(\w+)' object cannot be interpreted as an integer"), "an int", None),
    (re.compile(r"unsupported operand type\(s\) for [^:]+: '(\w+)' and"), "a number", None),
    (re.compile(r"hash an object of type <class '(\w+)'>"), "hashable (a tuple, not a list)", None),
    (re.compile(r"must be a (?:scalar )?integer"), "an int", "float"),  # jax: "k must be a scalar integer"
)


def mistyped(f: Callable, args: tuple, kwargs: dict, where: str,
             error: BaseException | None = None) -> TypeError | None:
    """The error naming the first argument of ``f(*args, **kwargs)`` of a plainly wrong kind, if any.

    Asked once the call has failed with ``error``: by the annotations of ``f``, then by what ``error``
    says (jax's "at path <argument>", Python's "'<type>' object has no attribute 'shape'").

    >>> import jax.numpy as jnp
    >>> print(mistyped(jnp.round, (jnp.ones(3), None), {}, "nx.round"))
    nx.round: decimals must be an int, got None
    """
    try:
        signature = inspect.signature(f)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):  # no signature, or a call that does not fit it: the error says so
        return None
    for name, value in bound.arguments.items():
        param = signature.parameters[name]
        kinds = kinds_of(param)
        if kinds is None:
            continue
        if param.kind is param.VAR_POSITIONAL:
            start = list(signature.parameters).index(name)
            for i, v in enumerate(value):
                if not fits(v, kinds):
                    return wrong_type(where, f"argument {start + i}", v, _expected(kinds))
        elif not fits(value, kinds):
            return wrong_type(where, name, value, _expected(kinds))
    text = str(error) if error is not None else ""
    m = _JAX_PATH.search(text)
    if m and m.group(1) in bound.arguments:
        return wrong_type(where, m.group(1), bound.arguments[m.group(1)], "an array or scalar")
    for pattern, expected, culprit in _ACCOUNTS:
        m = pattern.search(text)
        if m is None:
            continue
        culprit = culprit or m.group(1)  # the type of the argument the message is about
        for name, value in bound.arguments.items():
            if type(value).__name__ == culprit and signature.parameters[name].kind not in (
                    inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                return wrong_type(where, name, value, expected)
    return None


def call(fn: Callable, args: tuple, kwargs: dict, where: str) -> Any:
    """``fn(*args, **kwargs)`` (a jax function on plain values), with the error naming a mistyped argument
    (:func:`mistyped`) when it fails.

    >>> import jax.numpy as jnp
    >>> call(jnp.zeros, ((2,), "zz"), {}, "nx.zeros")
    Traceback (most recent call last):
    ...
    TypeError: nx.zeros: dtype must be a dtype or None, got the string 'zz'
    """
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        wrong = mistyped(fn, args, kwargs, where, e)
        if wrong is not None:
            raise wrong from e
        raise
