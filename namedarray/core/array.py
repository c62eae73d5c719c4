"""The NamedArray type: a jax array whose trailing axes have names.

Storage layout (the one invariant everything else relies on): ``data`` holds the positional axes first and
the named axes last, in the order ``names`` gives. The positional shape is derived from ``data``, so
transforms that slice a leading positional axis (``vmap``, ``scan``, ``lax.map``) keep a NamedArray valid.
The order of the named axes is free inside a computation and canonical at the pytree boundary (see
:mod:`namedarray.core.layout`): a NamedArray flattens to exactly one leaf, its storage with the names in the
boundary order of their set (:mod:`namedarray.core.orders`: the order the set first flattened in, in this
job),
and those names are the pytree's static aux data and its key (``.data[a,b]``, so that checkpoints keyed by
path record what each leaf means). A pickle holds the storage as it is and the names. So two NamedArrays
with the same positional shape, named shape and dtype have the same pytree structure whatever order their
axes were given in, and ``lax.cond`` branches, ``scan`` carries and ``tree_map`` over differently built
arrays just work.

A transform's ``in_axes``/``out_axes`` count axes of that flattened leaf: map a positional axis, counted
from the front (``0 <= axis < x.ndim``). A negative or larger axis reaches the named axes; when that leaves
too few axes for the names it is an error, otherwise the names silently label other axes.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.zeros((4, 3, 5)), {0: "batch", 2: "k"})
>>> x.shape, x.named_shape
((3,), {'batch': 4, 'k': 5})
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optree

from ..errors import (
    AxisSpecError,
    NamedAxisError,
    PositionalMisuseError,
    RankError,
    fmt_names,
    not_an_array,
)
from . import caches, kernels, orders
from .context import made_hook as _made_hook
from .orders import canonical, check_job, order_key
from .shape import NamedShape, check_names

__all__ = ["NamedArray", "is_named", "tree_map", "tree_leaves", "as_storage", "from_storage"]


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

    __slots__ = ("data", "names", "_flat")
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
        where, names_arg = "NamedArray(data, names)", names
        data = to_storage(data, where, "data")
        if isinstance(names, str):
            names = (names,)  # a string is one name, however long
        else:
            bad = names is None or isinstance(names, (bytes, bytearray, Mapping, set, frozenset))
            try:
                names = None if bad else tuple(names)
            except TypeError:
                names = None
            if names is None:
                raise TypeError(f"{where}: names must be an axis name (a str) or a sequence of them, one for "
                                f"each of data's last axes in order; got {names_arg!r} "
                                f"({type(names_arg).__name__}); to name axes by position use "
                                "nx.wrap(data, {position: name})")
        for i, n in enumerate(names):
            if not isinstance(n, str) or not n:
                raise AxisSpecError(f"{where}: axis names must be non-empty strings, got {n!r} at index {i} "
                                    f"of {list(names)!r}; to name axes by position use "
                                    "nx.wrap(data, {position: name})")
        if len(names) > data.ndim:
            raise RankError(f"{where}: {len(names)} axis names {fmt_names(names)} for data of shape "
                            f"{tuple(data.shape)} (rank {data.ndim}); names label data's last "
                            "len(names) axes")
        names = tuple(str(n) for n in names)  # NumPy string scalars as plain str
        out = from_storage(data, names, where)
        self.data = out.data
        self.names = out.names
        self._flat = None

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
    def named_size(self) -> int:
        """Number of elements along the named axes (``prod(named_shape.values())``); ``x.size *
        x.named_size`` counts every element, as when counting a model's parameters.

        >>> import namedarray as nx
        >>> w = nx.zeros((), named_shape={"embed": 4, "mlp": 8})
        >>> w.size, w.named_size, w.nbytes
        (1, 32, 128)
        """
        d = self.data
        k = len(self.names)
        return math.prod(d.shape[d.ndim - k:]) if k else 1

    @property
    def nbytes(self) -> int:
        """Bytes of the whole value, named axes included (the storage array's ``nbytes``)."""
        return int(self.data.size) * self.data.dtype.itemsize

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
        """The sharding of the storage array (positional axes first, then the named axes as ``names``)."""
        return self.data.sharding

    @property
    def is_fully_addressable(self) -> bool:
        """Whether this process holds every shard of the storage (``jax.Array.is_fully_addressable``)."""
        return self.data.is_fully_addressable

    def devices(self) -> set:
        """The devices that hold the storage (``jax.Array.devices()``)."""
        return self.data.devices()

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

    def __reduce__(self):
        # A pickle holds the storage as it is and the names in that order: it means the same in a process
        # whose boundary orders differ, and it holds no cached flattened copy (see canonical_storage).
        return _unpickle, (self.data, self.names)

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

    # unwrap, astype, rename, __repr__ and _repr_html_ are installed from above, by the layer that sits above
    # the modules they call (wrapping, the numpy mirror, render): this module imports none of them.

    # ---- pytree ----------------------------------------------------------------------------------------

    @classmethod
    def tree_unflatten(cls, names, children):
        """The NamedArray named ``names`` that holds ``children[0]`` as its storage (JAX's pytree hook)."""
        # Little validation: JAX passes object(), None and tracers here.
        data = children[0]
        if type(data) is NamedArray:
            raise PositionalMisuseError(
                f"a NamedArray with names {fmt_names(names)} would hold another NamedArray (named "
                f"{fmt_names(data.names)}) as its storage: jax.jacfwd/jacrev/hessian of a function whose "
                "inputs and outputs are both NamedArrays nest one structure in the other. Differentiate "
                "with respect to positional arrays (x.unwrap([...]) in, nx.wrap inside), or use jax.grad of "
                "a scalar")
        obj = object.__new__(cls)
        obj.data = data
        obj.names = names
        obj._flat = None
        return obj

    # ---- display ---------------------------------------------------------------------------------------

    def __format__(self, spec: str) -> str:
        """``f"{x:.3f}"`` of a value without named axes formats its storage, as jax arrays do."""
        if not spec:
            return str(self)
        self._check_no_names(f"format(x, {spec!r})")
        return format(self.data, spec)


def _make(data, names: tuple[str, ...]) -> NamedArray:
    """Internal constructor: ``names`` (unique, any order) match ``data``'s trailing axes."""
    obj = object.__new__(NamedArray)
    obj.data = data
    obj.names = names
    obj._flat = None
    hook = _made_hook()  # None unless a block listens for the values made (core.context.hearing_made)
    if hook is not None:
        hook(obj)
    return obj


def _unpickle(data, names: tuple[str, ...]) -> NamedArray:
    return _make(as_storage(data), tuple(names))


# This module was ``namedarray.array`` before the layers became folders, and pickles written then name
# ``namedarray.array._unpickle``: that name stays importable, so they load (and mean what they meant: a
# pickle holds the storage and its names in that order).
sys.modules.setdefault("namedarray.array", sys.modules[__name__])


def is_named(v: Any) -> bool:
    """Whether ``v`` is a NamedArray (an ``is_leaf`` for ``jax.tree`` functions that stop at them).

    >>> import namedarray as nx, jax, jax.numpy as jnp
    >>> jax.tree.leaves({"w": nx.wrap(jnp.ones(2), ["k"])}, is_leaf=is_named)[0].named_shape
    {'k': 2}
    """
    return type(v) is NamedArray


def tree_map(f: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """``jax.tree.map`` that stops at NamedArrays: ``f`` gets each NamedArray whole (and every other leaf),
    not the storage array inside it, whose axis order is the library's business.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> params = {"w": nx.ones((), named_shape={"in": 3, "out": 2}),
    ...           "b": nx.zeros((), named_shape={"out": 2})}
    >>> nx.tree_map(lambda p: p.size * p.named_size, params)
    {'b': 2, 'w': 6}
    """
    if not callable(f):
        raise TypeError(f"nx.tree_map: the first argument is the function to apply, got {type(f).__name__} "
                        f"{f!r}")
    return jax.tree.map(f, tree, *rest, is_leaf=is_named)


def tree_leaves(tree: Any) -> list:
    """``jax.tree.leaves`` that stops at NamedArrays (each is one leaf).

    >>> import namedarray as nx
    >>> params = {"w": nx.ones((), named_shape={"in": 3, "out": 2}),
    ...           "b": nx.zeros((), named_shape={"out": 2})}
    >>> sum(p.size * p.named_size for p in nx.tree_leaves(params))
    8
    """
    return jax.tree.leaves(tree, is_leaf=is_named)


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


def to_storage(value: Any, where: str, what: str) -> Any:
    """``as_storage(value)``, or a ``TypeError`` naming the argument ``what`` when it is not an array.

    >>> to_storage(None, "nx.wrap", "array")
    Traceback (most recent call last):
    ...
    TypeError: nx.wrap: array must be an array or scalar, got None
    """
    if value is None or isinstance(value, (str, bytes, Mapping)):
        raise not_an_array(where, what, value)
    try:
        return as_storage(value)
    except NamedAxisError:  # e.g. a list holding a NamedArray with named axes: its own message says why
        raise
    except TypeError:
        raise not_an_array(where, what, value) from None
    except ValueError as e:  # a ragged nested list
        raise ValueError(f"{where}: {what} cannot be converted to an array: {e}") from None


def from_storage(data, axis_names: tuple[str, ...], where: str) -> NamedArray:
    """A NamedArray from ``data`` whose last axes are named ``axis_names``, kept in that order (validated)."""
    check_names(axis_names, where)
    k = len(axis_names)
    if data.ndim < k:
        raise AxisSpecError(f"{where}: {k} axis names {fmt_names(axis_names)} for data of rank {data.ndim}")
    return _make(data, tuple(axis_names))


def transpose(data, perm: tuple[int, ...]):
    """``data.transpose(perm)``, eagerly as one cached kernel (``jnp.transpose`` is a slow eager path)."""
    if perm == tuple(range(len(perm))):
        return data
    if isinstance(data, jax.core.Tracer):
        return jax.lax.transpose(data, perm)
    return kernels.kernel_for(_transpose_impl, perm, ((None, len(perm)),), None, _make, unpack)([data], pack)


def _transpose_impl(perm, d):
    return jax.lax.transpose(d, perm)


# --------------------------------------------------------------------------------------------------------
# Results of eager kernels: storage leaves out of the trace, NamedArrays back on the caller's side


def unpack(out: Any) -> tuple[Any, tuple]:
    """(storage leaves, structure) of an implementation's result: what crosses an eager kernel's boundary.

    The structure (names of each NamedArray, the pytree around them) is static; :func:`pack` rebuilds the
    result from it and the kernel's outputs. NamedArrays cross as their storage, in the order they hold it.
    """
    if type(out) is NamedArray:
        return out.data, (_ONE, out.names)
    if hasattr(out, "ndim") and not isinstance(out, (tuple, list)):
        return out, (_RAW,)
    leaves, tree = jax.tree.flatten(out, is_leaf=is_named)
    names = tuple(v.names if type(v) is NamedArray else None for v in leaves)
    return [v.data if type(v) is NamedArray else v for v in leaves], (_TREE, tree, names)


def pack(out: Any, structure: tuple) -> Any:
    """The result :func:`unpack` took apart, from the kernel's outputs."""
    kind = structure[0]
    if kind is _ONE:
        return _make(out, structure[1])
    if kind is _RAW:
        return out
    _, tree, names = structure
    return jax.tree.unflatten(tree, [v if n is None else _make(v, n) for v, n in zip(out, names)])


_ONE, _RAW, _TREE = "one", "raw", "tree"


# --------------------------------------------------------------------------------------------------------
# The pytree boundary: canonical storage (nx.canonical_order), whatever order the value holds them in


@caches.cache("boundary permutations", 4096)  # derived from the order table: reset with it
def _canonical_perm(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...]] | None:
    """(canonical names, their positions in ``names``), or None when ``names`` is already canonical."""
    canon = canonical(names)
    if canon == names:
        return None
    return canon, tuple(names.index(n) for n in canon)


def _permuted_struct(d: jax.ShapeDtypeStruct, perm: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """``d`` with its dimensions in the order ``perm``, its sharding's spec permuted alike (a sharding that
    is not a NamedSharding over some dimensions, the same on every order, is kept; any other is dropped,
    leaving the layout to the caller)."""
    sharding = d.sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = tuple(sharding.spec) + (None,) * (d.ndim - len(sharding.spec))
        permuted = jax.sharding.PartitionSpec(*(spec[i] for i in perm))
        sharding = jax.sharding.NamedSharding(sharding.mesh, permuted, memory_kind=sharding.memory_kind)
    elif sharding is not None and not isinstance(sharding, jax.sharding.SingleDeviceSharding):
        sharding = None
    return jax.ShapeDtypeStruct(tuple(d.shape[i] for i in perm), d.dtype, sharding=sharding,
                                weak_type=d.weak_type)


def canonical_storage(x: NamedArray) -> tuple[Any, tuple[str, ...]]:
    """(storage with the names in canonical order, those names): what ``x`` flattens to.

    Under a trace this is one ``transpose`` where the value leaves it (XLA fuses it into the producer);
    for a concrete value it runs once and is kept, so passing the same value to a jitted function again
    costs nothing.
    """
    names = x.names
    if len(names) < 2:
        return x.data, names
    check_job()  # before the cached permutation: joining a job may change an order given before it
    d = x.data
    # JAX unflattens a structure with placeholders (object(), None, 0) and flattens it again (an array or a
    # tracer is told apart by its type first: every jit boundary and optimizer update flattens here)
    if type(d) not in _ARRAY_TYPES and not isinstance(d, jax.core.Tracer) and not hasattr(d, "ndim"):
        return _placeholder(d, names)
    plan = _canonical_perm(names)
    if plan is None:
        return x.data, names
    canon, order = plan
    flat = x._flat
    # kept from an earlier flatten of this very storage: unless it was donated to a jitted call, or the
    # orders were reset since
    if flat is not None and flat[2] is x.data and flat[1] == canon and not flat[0].is_deleted():
        return flat[:2]
    if isinstance(d, jax.core.AbstractValue):
        # a structure jax rebuilt from a record (jax.export's deserialize) keeps the order it recorded: a
        # caller flattening in another order is then refused (see _placeholder) instead of transposed
        return d, names
    p = d.ndim - len(names)
    perm = tuple(range(p)) + tuple(p + i for i in order)
    if isinstance(d, jax.ShapeDtypeStruct):  # an abstract argument (lower, trace, export, eval_shape)
        return _permuted_struct(d, perm), canon
    out = (transpose(d, perm), canon)
    if not isinstance(out[0], jax.core.Tracer):  # a tracer (flattened inside a trace) must not outlive it
        x._flat = (*out, d)
    return out


try:  # the concrete jax array type, told apart from a placeholder by one type check
    from jax._src.array import ArrayImpl as _ArrayImpl

    _ARRAY_TYPES: frozenset = frozenset({_ArrayImpl})
except ImportError:  # pragma: no cover - a jax without it only loses the shortcut
    _ARRAY_TYPES = frozenset()


def _placeholder(d: Any, names: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
    """What a NamedArray holding a placeholder instead of storage flattens to: its names as they are.

    A structure made in this program already holds this program's orders, so it comes back unchanged. One
    recorded elsewhere (a function deserialized with ``jax.export``) holds the order of the program that
    recorded it, and that order is what its arrays mean: it must not be turned into this program's order.
    Where this program orders the set otherwise (jax compares such a structure with the arguments of a
    call, flattening both with placeholders), no value of this program can take its place, and jax's own
    report finds no difference between the two; say it here, with the names, both orders and the fix. Asking
    for the order gives a set none.
    """
    known = orders.canonical_order(names)
    if known is not None and known != names:
        raise AxisSpecError(
            f"nx: the exported function takes the names {sorted(names)} in the order {names} (the order "
            f"they crossed its boundary in the program that exported it), but this program passes them as "
            f"{known}: NamedArrays with these names cross the pytree boundary (jax.export, jit) in one order "
            f"per program, whatever order each value stores them in, so transposing an argument changes "
            f"nothing. Call it from a program that gives these names the exported order before anything "
            f"flattens them: nx.fix_canonical_order({list(names)}) at start-up (or export the function "
            f"again from a program that orders them {known})")
    return d, names


def _flatten_with_keys(x: NamedArray):
    # The key names the order (``.data[embed,mlp]``): a checkpoint keyed by path records what each leaf
    # means, and a target laid out in another order finds no matching path instead of a transposed leaf.
    d, names = canonical_storage(x)
    key = _plans.get(("path key", names))
    if key is None:  # every trace flattens its arguments with paths: the key is built once per order
        key = jax.tree_util.GetAttrKey(order_key(names))
        _plans.put(("path key", names), key)
    return ((key, d),), names


_plans = kernels.plans  # the path key of each order met (a function of the names alone)


def _flatten(x: NamedArray):
    d, names = canonical_storage(x)
    return (d,), names


def _optree_flatten(x: NamedArray):
    d, names = canonical_storage(x)
    return (d,), names, (order_key(names),)


jax.tree_util.register_pytree_with_keys(
    NamedArray, _flatten_with_keys, NamedArray.tree_unflatten, flatten_func=_flatten)
optree.register_pytree_node(
    NamedArray,
    _optree_flatten,
    NamedArray.tree_unflatten,
    namespace="namedarray",
)

orders.on_reset(_canonical_perm.cache_clear)


def _serialize_names(names: tuple[str, ...]) -> bytes:
    return json.dumps(list(names)).encode()


def _deserialize_names(blob: bytes) -> tuple[str, ...]:
    return tuple(json.loads(blob))


# ``jax.export`` records the calling convention (the pytree of arguments and results) in what it serializes:
# a NamedArray's part is its names, in the boundary order the value flattened in. A caller whose values
# flatten in another order is refused (an AxisSpecError, see _placeholder), never given a transposed
# argument.
try:
    from jax import export as _export

    _export.register_pytree_node_serialization(
        NamedArray, serialized_name="namedarray.NamedArray", serialize_auxdata=_serialize_names,
        deserialize_auxdata=_deserialize_names)
except (ImportError, AttributeError):  # pragma: no cover - a jax without serializable pytree nodes
    pass
