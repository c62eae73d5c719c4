"""Errors raised by namedarray.

Every error is a :class:`NamedAxisError` (itself a ``ValueError``), so ``except ValueError`` keeps working
for code written against NumPy, and each message names the axis, the sizes involved and where the mistake
was made (the operation, the argument index or pytree path).

>>> import namedarray as nx, jax.numpy as jnp
>>> try:
...     nx.wrap(jnp.ones(3), ["b"]) + nx.wrap(jnp.ones(4), ["b"])
... except nx.errors.AxisSizeError as e:
...     print(e)
nx.add: axis 'b' has size 3 in argument 0 but size 4 in argument 1
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from jax.errors import JAXTypeError

__all__ = [
    "NamedAxisError",
    "AxisSizeError",
    "UnboundAxisError",
    "PerElementAxisError",
    "AxisSpecError",
    "DuplicateAxisError",
    "RankError",
    "PositionalAxisError",
    "UnplacedAxisError",
    "EinsumSpecError",
    "ResourceError",
    "ResourceConflictError",
    "LoopAxisError",
    "MeshChangeError",
    "DivisibilityError",
    "MissingResourceError",
    "SplitAxisError",
    "PositionalMisuseError",
    "AxisNameShadowingError",
    "AnnotationError",
    "CarryError",
]


class NamedAxisError(ValueError):
    """Base class of every namedarray error."""


class AxisSizeError(NamedAxisError):
    """One axis name used with two different sizes."""


class UnboundAxisError(NamedAxisError, NameError):
    """An axis name that the value does not carry and no enclosing ``nx.xmap`` binds.

    Also a ``NameError``, the class xmap (and JAX's collectives) raise for an unbound axis name.
    """


class PerElementAxisError(UnboundAxisError):
    """Inside a positional ``nx.xmap`` body (values are per element along the map's names, as in xmap), an
    nx operation that needs one of those names as an axis of a value: reduce over it with a collective
    (``jax.lax.psum`` or ``nx.psum``). ``nx.xmap`` reads this error as the sign of a body written on
    NamedArrays, and calls it on NamedArrays instead."""


class AxisSpecError(NamedAxisError):
    """A malformed axis specification (``wrap``/``unwrap``/``in_axes``/``out_axes``/``axis=``)."""


class DuplicateAxisError(AxisSpecError):
    """The same axis name twice where names must be unique."""


class RankError(AxisSpecError):
    """An axis specification that does not fit the rank of the value."""


class PositionalAxisError(RankError, TypeError, IndexError):
    """A function acting on positional axes (a lifted jax function) given a value whose positional axes do not
    fit: too few of them, or an axis argument out of their range.

    Also a ``TypeError`` and an ``IndexError`` (what jax raises for it), so that code catching jax's error
    still catches it.
    """


class UnplacedAxisError(AxisSpecError):
    """A named axis that an ``unwrap``/``out_axes`` specification leaves without a position."""


class EinsumSpecError(NamedAxisError):
    """A malformed or inconsistent ``nx.einsum`` specification."""


class ResourceError(NamedAxisError):
    """Base class of the errors about mapping axis names to devices."""


class ResourceConflictError(ResourceError, JAXTypeError):
    """Two axis names that share a mesh axis occur in one value, or a resource is used twice.

    Also a ``jax.errors.JAXTypeError`` (a ``TypeError``), the class xmap raised for it, so that xmap-era
    ``except`` clauses still catch it.
    """

    # JAXTypeError's own __init__ appends a link to jax's error page for the class, a page that does not
    # describe nx's errors; ValueError's keeps the message (and pickling: args round-trip unchanged).
    # ValueError precedes JAXTypeError in the MRO already; saying it here keeps it so if the bases move.
    def __init__(self, *args: object) -> None:
        ValueError.__init__(self, *args)


class LoopAxisError(ResourceError, RuntimeError):
    """A collective or reduction inside ``nx.xmap`` over a name computed by a serial loop.

    Also a ``RuntimeError``, the class xmap raised for it.
    """


class MeshChangeError(ResourceError, RuntimeError):
    """A different physical mesh inside an ``nx.xmap`` body than the one it runs on.

    Also a ``RuntimeError``, the class xmap raised for it.
    """


class DivisibilityError(ResourceError):
    """An axis size that its resources do not divide."""


class MissingResourceError(ResourceError):
    """A mesh axis or loop that is not in scope."""


class SplitAxisError(ResourceError):
    """Inside ``nx.shard_map``, an operation that needs the whole of an axis that the map splits into
    per-device blocks (a sort along it, indexing it by name, ...): gather it first, or reduce over it."""


class PositionalMisuseError(NamedAxisError, TypeError):
    """A named array passed where only positional arrays are understood."""


class AxisNameShadowingError(NamedAxisError):
    """An inner ``nx.xmap`` reusing an axis name that an enclosing one binds."""


class AnnotationError(NamedAxisError, TypeError):
    """A value that does not match its ``nx.typing`` annotation (dtype, rank, axis names or sizes)."""


class CarryError(NamedAxisError, TypeError):
    """A loop carry, or the branches of a conditional, that change positional shape or dtype: names
    broadcast (as in xmap), positional axes and dtypes must agree. Also a ``TypeError``, as in ``jax.lax``."""


def fmt_names(names: Iterable[str]) -> str:
    """``'a', 'b'`` for messages.

    >>> fmt_names(("batch", "k"))
    "'batch', 'k'"
    """
    return ", ".join(repr(n) for n in names)


def did_you_mean(name: object, names: Iterable[str]) -> str:
    """``"; did you mean 'batch'?"`` when ``name`` looks like a misspelling of one of ``names`` (else "").

    >>> did_you_mean("btach", ("batch", "embed")), did_you_mean("seq", ("batch",))
    ("; did you mean 'batch'?", '')
    """
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [n for n in names if isinstance(n, str)], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def no_axis(where: str, name: str, names: Iterable[str]) -> AxisSpecError:
    """The error for an operation by name on an array that does not carry that name.

    >>> print(no_axis("nx.take", "t", ("a", "b")))
    nx.take: the array has no axis 't' (it has 'a', 'b')
    >>> print(no_axis("x[...]", "btach", ("batch", "embed")))
    x[...]: the array has no axis 'btach' (it has 'batch', 'embed'; did you mean 'batch'?)
    """
    names = tuple(names)
    have = fmt_names(names) or "no named axes"
    hint = did_you_mean(name, names)
    return AxisSpecError(f"{where}: the array has no axis {name!r} (it has {have}{hint})")


def not_an_array(where: str, what: str, value: object) -> TypeError:
    """The error for a value that is neither an array nor a scalar where one is expected.

    >>> print(not_an_array("nx.wrap", "array", None))
    nx.wrap: array must be an array or scalar, got None
    >>> print(not_an_array("nx.dot", "argument 1", {"a": 1}))
    nx.dot: argument 1 must be an array or scalar, got {'a': 1} (dict)
    """
    return wrong_type(where, what, value, "an array or scalar")


def wrong_type(where: str, what: str, value: object, expected: str) -> TypeError:
    """The error for an argument of the wrong kind: the operation, the argument, what it takes, what it got.

    >>> print(wrong_type("nx.unbind", "axis", None, "an axis name or a positional axis (int)"))
    nx.unbind: axis must be an axis name or a positional axis (int), got None
    >>> print(wrong_type("nx.concat", "arrays", 3.0, "a sequence of arrays"))
    nx.concat: arrays must be a sequence of arrays, got 3.0 (float)
    """
    return TypeError(f"{where}: {what} must be {expected}, got {describe(value)}")


def describe(value: object) -> str:
    """A short account of a wrong value for messages: its repr (shortened) and its type.

    >>> describe(None), describe("abc"), describe({"a"})
    ('None', "the string 'abc'", "{'a'} (set)")
    """
    import reprlib

    if value is None:
        return "None"
    if isinstance(value, (str, bytes)):
        return f"the string {reprlib.repr(value)}"
    if hasattr(value, "named_shape") and hasattr(value, "shape"):  # a NamedArray: its shapes, not its data
        return f"a NamedArray (positional shape {value.shape}, named shape {dict(value.named_shape)})"
    return f"{reprlib.repr(value)} ({type(value).__name__})"
