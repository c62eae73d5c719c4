"""The NamedArray type: a jax array whose trailing axes have names.

Storage layout (the one invariant everything else relies on): ``data`` holds the positional axes first and
the named axes last, the named axes sorted by name (``names``). The positional shape is derived from
``data``, so transforms that slice a leading positional axis (``vmap``, ``scan``, ``lax.map``) keep a
NamedArray valid; and two NamedArrays with the same positional shape, named shape and dtype have the same
pytree structure whatever order their axes were given in, so ``lax.cond`` branches, ``scan`` carries and
``tree_map`` over differently built arrays just work.

A NamedArray flattens to exactly one leaf (``data``); its names are the pytree's static aux data. A
transform's ``in_axes``/``out_axes`` therefore count *storage* axes: map a positional axis, counted from
the front (``0 <= axis < x.ndim``). A negative or larger axis reaches the named axes; when that leaves too
few axes for the names it is an error, otherwise the names silently label other axes.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.zeros((4, 3, 5)), {0: "batch", 2: "k"})
>>> x.shape, x.named_shape
((3,), {'batch': 4, 'k': 5})
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optree

from .errors import AxisSpecError, DuplicateAxisError, PositionalMisuseError, fmt_names
from .shape import NamedShape, canonical, check_name, duplicates

__all__ = ["NamedArray", "is_named", "as_storage", "from_storage"]


class NamedArray:
    """An array with positional axes (``shape``) and unordered named axes (``named_shape``).

    Build one with :func:`namedarray.wrap`; get a positional array back with :func:`namedarray.unwrap`.
    Operations broadcast by name (the result's named shape is the union of the operands'), reduce by name
    (``x.sum("batch")``) and never let positional and named axes interact implicitly.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
    >>> y = nx.wrap(jnp.arange(3.0), ["b"])
    >>> (x * y).sum("b").unwrap(["a"]).tolist()
    [5.0, 14.0]
    """

    __slots__ = ("data", "names")
    # Python operators and NumPy's protocols reach the methods below; JAX's do not (no __jax_array__, on
    # purpose: it would make `jnp_array + x` silently drop the names).
    __array_priority__ = 1000

    def __init__(self, data: Any, names: tuple[str, ...] = ()):
        """Low-level constructor: ``data``'s last ``len(names)`` axes are named ``names``, in that order.

        Prefer :func:`namedarray.wrap`. Names in any order are accepted and stored sorted.
        """
        if isinstance(data, NamedArray):
            raise PositionalMisuseError("NamedArray(data, names): data is already a NamedArray; use "
                                        "nx.wrap(x, ...) to name more of its positional axes")
        data = as_storage(data)
        names = (names,) if isinstance(names, str) else tuple(names)  # a string is one name, however long
        out = from_storage(data, names, "NamedArray")
        self.data = out.data
        self.names = out.names

    # ---- type ------------------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The positional shape (named axes excluded, as in xmap)."""
        d = self.data
        return d.shape[: d.ndim - len(self.names)]

    @property
    def named_shape(self) -> NamedShape:
        """The named axes: an unordered mapping name -> size."""
        d = self.data
        k = len(self.names)
        return NamedShape(zip(self.names, d.shape[d.ndim - k:] if k else ()))

    @property
    def ndim(self) -> int:
        """Number of positional axes."""
        return self.data.ndim - len(self.names)

    @property
    def size(self) -> int:
        """Number of elements of the positional part (``prod(shape)``), as in xmap."""
        return math.prod(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """The element type of the storage."""
        return self.data.dtype

    @property
    def weak_type(self) -> bool:
        """Whether the storage is weakly typed (built from a Python scalar), as jax arrays say."""
        return bool(getattr(self.data, "weak_type", False))

    @property
    def sharding(self) -> Any:
        """The sharding of the storage array (positional axes first, then named axes sorted by name)."""
        return self.data.sharding

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a NamedArray with no positional axes")
        return shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __hash__(self):
        raise TypeError("NamedArray is unhashable (like jax and NumPy arrays)")

    # ---- conversion ------------------------------------------------------------------------------------

    def _check_no_names(self, what: str) -> None:
        if self.names:
            raise PositionalMisuseError(
                f"{what} of a NamedArray with named axes {fmt_names(self.names)}: reduce them first (e.g. "
                f"x.sum({self.names[0]!r})) or move them to positions with x.unwrap([...])")

    def __bool__(self) -> bool:
        self._check_no_names("bool()")
        return bool(self.data)

    def __int__(self) -> int:
        self._check_no_names("int()")
        return int(self.data)

    def __float__(self) -> float:
        self._check_no_names("float()")
        return float(self.data)

    def __complex__(self) -> complex:
        self._check_no_names("complex()")
        return complex(self.data)

    def __index__(self) -> int:
        self._check_no_names("operator.index()")
        return self.data.__index__()

    def __array__(self, dtype=None, copy=None):
        if self.names:
            raise PositionalMisuseError(
                f"converting a NamedArray with named axes {fmt_names(self.names)} to a positional array "
                "(np.asarray, jnp.asarray, a jax.numpy function, ...) would have to guess where to put them; "
                "use x.unwrap([...]) or nx.unwrap(x, {position: name}), or nx.<f> / nx.nmap(f) to keep them")
        out = np.asarray(self.data, dtype=dtype)
        return out.copy() if copy else out

    def item(self) -> Any:
        """The single element as a Python scalar (no named axes allowed, like ``int(x)``)."""
        self._check_no_names("item()")
        return self.data.item()

    def tolist(self) -> Any:
        """The positional values as nested Python lists (no named axes allowed: unwrap them first)."""
        self._check_no_names("tolist()")
        return np.asarray(self.data).tolist()

    def block_until_ready(self) -> NamedArray:
        """Wait for the storage to be computed; returns ``self`` (like ``jax.Array.block_until_ready``)."""
        self.data.block_until_ready()
        return self

    def unwrap(self, axes: Any = None) -> jax.Array:
        """The positional array with named axes placed by ``axes`` (see :func:`namedarray.unwrap`).

        >>> import namedarray as nx, jax.numpy as jnp
        >>> nx.wrap(jnp.zeros((2, 3)), ["a", "b"]).unwrap({0: "b", 1: "a"}).shape
        (3, 2)
        """
        from .wrapping import unwrap

        return unwrap(self, axes)

    def astype(self, dtype: Any) -> NamedArray:
        """The same named array with another element type (``nx.astype``).

        >>> import namedarray as nx, jax.numpy as jnp
        >>> nx.wrap(jnp.zeros(3), ["k"]).astype("int8").dtype
        dtype('int8')
        """
        from .mirror import FUNCTIONS

        return FUNCTIONS["astype"](self, dtype)

    def rename(self, mapping: Mapping[str, str] | None = None, /, **names: str) -> NamedArray:
        """Rename named axes: ``x.rename({"old": "new"})`` or ``x.rename(old="new")``."""
        from .wrapping import rename

        return rename(self, {**(mapping or {}), **names})

    # ---- pytree ----------------------------------------------------------------------------------------

    @classmethod
    def tree_unflatten(cls, names, children):
        # No validation: JAX passes object(), None and tracers here.
        obj = object.__new__(cls)
        obj.data = children[0]
        obj.names = names
        return obj

    # ---- display ---------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        from .render import text_repr

        return text_repr(self)

    def __format__(self, spec: str) -> str:
        """``f"{x:.3f}"`` of a value without named axes formats its storage, as jax arrays do."""
        if not spec:
            return str(self)
        self._check_no_names(f"format(x, {spec!r})")
        return format(self.data, spec)

    def _repr_html_(self) -> str:
        from .render import html_repr

        return html_repr(self)


def _make(data, names: tuple[str, ...]) -> NamedArray:
    """Internal constructor: ``names`` already canonical and matching ``data``'s trailing axes."""
    obj = object.__new__(NamedArray)
    obj.data = data
    obj.names = names
    return obj


def is_named(v: Any) -> bool:
    """Whether ``v`` is a NamedArray (an ``is_leaf`` for ``jax.tree`` functions that stop at them).

    >>> import namedarray as nx, jax, jax.numpy as jnp
    >>> jax.tree.leaves({"w": nx.wrap(jnp.ones(2), ["k"])}, is_leaf=is_named)[0].named_shape
    {'k': 2}
    """
    return type(v) is NamedArray


def as_storage(data: Any) -> Any:
    """A positional value as storage: jax arrays (tracers, abstract values) as they are, the rest converted.

    NumPy arrays and scalars, Python scalars and lists become jax arrays, so that a NamedArray never holds
    host data.

    >>> import numpy as np
    >>> type(as_storage(np.float32(2.0))).__name__
    'ArrayImpl'
    """
    if hasattr(data, "ndim") and not isinstance(data, (np.ndarray, np.generic)):
        return data
    return jnp.asarray(data)


def from_storage(data, axis_names: tuple[str, ...], where: str) -> NamedArray:
    """A NamedArray from ``data`` whose last axes are named ``axis_names`` in any order (sorted here)."""
    for n in axis_names:
        check_name(n, where)
    dup = duplicates(axis_names)
    if dup:
        raise DuplicateAxisError(f"{where}: axis names must be unique, but {fmt_names(dup)} appears twice "
                                 f"in {list(axis_names)!r}")
    k = len(axis_names)
    if data.ndim < k:
        raise AxisSpecError(f"{where}: {k} axis names {fmt_names(axis_names)} for data of rank {data.ndim}")
    names = canonical(axis_names)
    if names != axis_names:
        p = data.ndim - k
        perm = tuple(range(p)) + tuple(p + axis_names.index(n) for n in names)
        data = transpose(data, perm)
    return _make(data, names)


def transpose(data, perm: tuple[int, ...]):
    """``data.transpose(perm)``, eagerly as one cached kernel (``jnp.transpose`` is a slow eager path)."""
    if perm == tuple(range(len(perm))):
        return data
    if isinstance(data, jax.core.Tracer):
        return jnp.transpose(data, perm)
    kernel = _TRANSPOSES.get(perm)
    if kernel is None:
        kernel = _TRANSPOSES[perm] = jax.jit(lambda d: jnp.transpose(d, perm))
    return kernel(data)


_TRANSPOSES: dict = {}


def _flatten_with_keys(x: NamedArray):
    return ((jax.tree_util.GetAttrKey("data"), x.data),), x.names


def _flatten(x: NamedArray):
    return (x.data,), x.names


jax.tree_util.register_pytree_with_keys(
    NamedArray, _flatten_with_keys, NamedArray.tree_unflatten, flatten_func=_flatten)
optree.register_pytree_node(
    NamedArray,
    lambda x: ((x.data,), x.names, ("data",)),
    NamedArray.tree_unflatten,
    namespace="namedarray",
)
