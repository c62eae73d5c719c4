"""Contractions: ``dot``, ``tensordot`` and ``pdot`` by name; ``matmul``, ``vdot``, ``inner``, ``outer``.

Named contractions lower straight to ONE ``lax.dot_general`` on the storage arrays, with dimension numbers
computed from the axis names; the result keeps ``dot_general``'s natural order (batch, then the left
operand's free axes, then the right's), transposed only to bring positional axes first. Eagerly each is one
cached kernel (see :mod:`namedarray.engine.dispatch`), so a named dot costs what ``jnp.dot`` costs.

* ``nx.dot(a, b, axis="k")`` contracts the named axes in ``axis`` (both operands must carry them); every
  other name broadcasts by name and positional axes broadcast as in ``a * b``: it equals
  ``nx.sum(a * b, axis="k")``, computed as a contraction. Without ``axis`` it is ``jnp.dot`` on the
  positional axes, vectorised over names.
* ``nx.tensordot(a, b, axes)``: ``axes`` is ``jnp.tensordot``'s (an int, or a pair ``(axes_a, axes_b)``),
  where any entry may be a name instead of a position, or a single name contracted in both operands.
  Names not contracted broadcast.
* ``nx.pdot(x, y, axis_name, pos_contract, pos_batch)``: xmap's ``lax.pdot``, i.e.
  ``psum(dot_general(x, y, (pos_contract, pos_batch)), axis_name)``: positionally an outer product by
  default, the names in ``axis_name`` summed away.
* ``nx.matmul`` (``@``), ``nx.vdot``, ``nx.inner``, ``nx.outer``: positional semantics of ``jax.numpy``,
  vectorised over names.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((2, 3)), ["batch", "k"])
>>> w = nx.wrap(jnp.ones((3, 4)), ["k", "out"])
>>> nx.dot(x, w, axis="k").named_shape
{'batch': 2, 'out': 4}
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from ..core import caches, kernels, placement
from ..core import env as _env
from ..core.array import _ONE, NamedArray, _make, pack
from ..core.shape import duplicates
from ..core.wrapping import to_storage, wrap
from ..engine import dispatch as engine
from ..engine.docstrings import follows_arguments
from ..engine.registry import implements
from ..errors import AxisSizeError, AxisSpecError, DuplicateAxisError, fmt_names, not_an_array

__all__ = ["dot", "vdot", "matmul", "tensordot", "inner", "outer", "pdot"]


# --------------------------------------------------------------------------------------------------------
# The one lowering: labelled storage axes -> lax.dot_general (+ at most one transpose)


def _dot_labels(a, a_labels: Sequence[Hashable], b, b_labels: Sequence[Hashable],
                out_pos: Sequence[Hashable], out_named: Collection[Hashable], precision,
                preferred_element_type, plan: list | None = None) -> tuple[Any, list]:
    """Contract storage arrays ``a`` and ``b`` whose axes carry (unique) labels, like an einsum.

    A label in both operands and not in the output is contracted; in both and in the output it is a batch
    axis; in one operand and in the output it is a free axis; in one operand and not in the output it is
    summed first (``dot_general`` only contracts axes both sides have). The result holds the positional
    labels ``out_pos`` first, in that order, then the labels of ``out_named`` in ``dot_general``'s natural
    order (batch axes, then ``a``'s free axes, then ``b``'s): returns (result, those named labels in order).
    Where the whole lowering is one traced contraction, it is appended to ``plan`` (a caller's trace-time
    plan: the same labels and abstract operands lower to it again).
    """
    out_set = set(out_pos) | set(out_named)
    a_labels, b_labels = list(a_labels), list(b_labels)
    a_set, b_set = a_set0, b_set0 = set(a_labels), set(b_labels)
    summed = [l[1] for l in a_labels + b_labels if type(l) is tuple and l[0] == "n" and l not in out_set]
    # As jnp.dot: the result has the requested type, else the promoted one. The pre-sums return it too
    # (a bare jnp.sum would promote int8 and bool to int32, unlike the contraction).
    out_type = preferred_element_type if preferred_element_type is not None else jax.dtypes.result_type(a, b)
    drop = tuple(i for i, l in enumerate(a_labels) if l not in out_set and l not in b_set)
    if drop:
        a = jnp.sum(a, axis=drop, dtype=out_type)
        a_labels = [l for i, l in enumerate(a_labels) if i not in drop]
        a_set = set(a_labels)
    drop = tuple(i for i, l in enumerate(b_labels) if l not in out_set and l not in a_set)
    if drop:
        b = jnp.sum(b, axis=drop, dtype=out_type)
        b_labels = [l for i, l in enumerate(b_labels) if i not in drop]
        b_set = set(b_labels)
    contract = [l for l in a_labels if l in b_set and l not in out_set]
    # positional batch axes in the output's order, then named ones in a's order (what positional code picks)
    batch = ([l for l in out_pos if l in a_set and l in b_set]
             + [l for l in a_labels if l in b_set and l in out_set and l not in out_pos])
    dims = ((tuple(a_labels.index(l) for l in contract), tuple(b_labels.index(l) for l in contract)),
            (tuple(a_labels.index(l) for l in batch), tuple(b_labels.index(l) for l in batch)))
    got = batch + [l for l in a_labels if l not in b_set] + [l for l in b_labels if l not in a_set]
    # on Explicit mesh axes a contraction over a split dim needs its result's layout: by name it is known
    out_sharding = placement.contraction_sharding(
        (a, b), (a_labels, b_labels), got, {l: l[1] for l in got if type(l) is tuple and l[0] == "n"},
        _env.current().mapping())
    pos_set = set(out_pos)
    named = [l for l in got if l not in pos_set]
    perm = tuple(got.index(l) for l in out_pos) + tuple(got.index(l) for l in named)
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):
        contraction = _contraction(dims, precision, out_type, out_sharding, perm)
        out = contraction(a, b)
        if (plan is not None and not _env.current().split and len(a_labels) == len(a_set0)
                and len(b_labels) == len(b_set0)):
            plan.append(contraction)  # nothing summed before the contraction, no blocks summed after it
    else:
        out = _contract(a, b, dims, precision, out_type, out_sharding, perm)
    return sum_blocks(out, summed), named


def _contract(a, b, dims, precision, out_type, out_sharding, perm):
    out = lax.dot_general(a, b, dims, precision=precision, preferred_element_type=out_type,
                          out_sharding=out_sharding)
    if perm != tuple(range(len(perm))):
        out = lax.transpose(out, perm)
    return out


@caches.cache("traced contractions", 1024)
def _contraction(dims, precision, out_type, out_sharding, perm):
    # an inline jit: JAX caches its trace and its linearization per signature, as it does jnp.matmul's
    return jax.jit(functools.partial(_contract, dims=dims, precision=precision, out_type=out_type,
                                     out_sharding=out_sharding, perm=perm), inline=True)


def sum_blocks(out: Any, summed: Sequence[str]) -> Any:
    """``out`` summed over the devices holding the blocks of the ``summed`` names that ``nx.shard_map``
    splits: a contraction over such a name adds up each device's partial sum (linear, so it is exact)."""
    split = _env.current().split
    if not split:
        return out
    axes = tuple(dict.fromkeys(a for n in summed for a in split.get(n, ())))
    return lax.psum(out, axes) if axes else out


def _result(out: NamedArray, operands: tuple):
    """Plain arrays in, plain array out (as every nx operation)."""
    for v in operands:
        if type(v) is NamedArray:
            return out
    return out.data


def _name_tuple(axis: Any, where: str) -> tuple[str, ...]:
    names = (axis,) if isinstance(axis, str) else tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    for n in names:
        if not isinstance(n, str):
            raise AxisSpecError(f"{where}: axis must be a name or a tuple of names, got {axis!r} (contract "
                                "positional axes with nx.tensordot, or leave axis out for jnp.dot semantics)")
    dup = duplicates(names)
    if dup:
        raise DuplicateAxisError(f"{where}: axis {fmt_names(dup)} listed twice in {names!r}")
    return names


def _operand(v: Any, k: int, where: str, what: str = "argument") -> Any:
    """Operand ``k`` of ``where`` as a NamedArray or array, or a ``TypeError`` naming it (``None``, a string,
    a dict, ...)."""
    if type(v) is NamedArray or isinstance(v, (jax.Array, bool, int, float, complex)):
        return v
    if isinstance(v, (np.ndarray, np.generic)) and not isinstance(v, (str, bytes)):
        if v.dtype.kind in "OUSV":  # object, string or void arrays: jax would fail inside the kernel
            raise not_an_array(where, f"{what} {k}", v)
        return v
    return to_storage(v, where, f"{what} {k}")


def _operands(args: tuple, where: str) -> tuple:
    a, b = args
    if type(a) is NamedArray and type(b) is NamedArray:  # the hot path: nothing to check
        return args
    return _operand(a, 0, where), _operand(b, 1, where)


def _lift_pair(fn: Callable, operands: tuple, kwargs: dict, where: str) -> Any:
    """``fn`` of two operands lifted over names; jax's shape errors (which count the storage's axes and name
    ``dot_general``) say which nx function failed and the operands' positional shapes."""
    try:
        return engine.call_lifted(fn, operands, kwargs, where)
    except (TypeError, ValueError) as e:
        if type(e) not in (TypeError, ValueError) or str(e).startswith(f"{where}: "):
            raise
        shapes = ", ".join(
            f"argument {i}: positional shape {np.shape(v) if type(v) is not NamedArray else v.shape}"
            + (f", named axes {fmt_names(v.names)}" if type(v) is NamedArray and v.names else "")
            for i, v in enumerate(operands))
        raise type(e)(f"{where}: {e} ({shapes})") from e


def _carries(names: Sequence[str], operands: Sequence[NamedArray], where: str) -> None:
    for n in names:
        for k, v in enumerate(operands):
            if n not in v.names:
                have = fmt_names(v.names) if v.names else "no named axes"
                raise AxisSpecError(f"{where}: contracting axis {n!r}, but argument {k} does not carry it "
                                    f"(it has {have})")


# --------------------------------------------------------------------------------------------------------
# dot


def _dot_impl(static, a, b):
    if type(a) is NamedArray and type(b) is NamedArray:
        da, db = a.data, b.data
        if isinstance(da, _Tracer) and isinstance(db, _Tracer):
            # all the rest decides is a function of this key: the names, the abstract operands (shape,
            # dtype, weak type, sharding), the environment (rules, blocks) and the dtype flags
            env = _env.current()
            key = ("dot", static, a.names, b.names, da.aval, db.aval, None if env is _EMPTY else env,
                   _x64.value)
            try:
                found = _DOT_PLANS.get(key)
            except TypeError:  # an unhashable option: decided on every call
                return _dot_named(static, a, b, None)
            if found is not None:
                return _make(found[0](da, db), found[1])
            plan: list = []
            out = _dot_named(static, a, b, plan)
            if plan:
                _DOT_PLANS.put(key, (plan[0], out.names))
            return out
    return _dot_named(static, a, b, None)


def _dot_named(static, a, b, plan: list | None):
    names, precision, preferred_element_type, where = static
    if type(a) is not NamedArray:
        a = wrap(a)
    if type(b) is not NamedArray:
        b = wrap(b)
    _carries(names, (a, b), where)
    engine.join((a, b), where)  # any name with two sizes (contracted ones included) is an error
    # positional axes broadcast right-aligned, as in a * b; a size-1 axis facing a larger one is squeezed
    # away (it broadcasts), equal ones become batch axes of the dot_general
    pa, pb = engine.pos_ndim(a), engine.pos_ndim(b)
    sa, sb = a.data.shape[:pa], b.data.shape[:pb]
    n = max(pa, pb)
    a_lab: list = []
    b_lab: list = []
    a_keep = []
    b_keep = []
    for j in range(n):
        ia, ib = j - (n - pa), j - (n - pb)
        da = sa[ia] if ia >= 0 else None
        db = sb[ib] if ib >= 0 else None
        if da is not None and db is not None and da != db and da != 1 and db != 1:
            raise AxisSizeError(f"{where}: positional shapes {sa} and {sb} do not broadcast (axis {j}: {da} "
                                f"vs {db}); named dot broadcasts positional axes as a * b does")
        if da is not None:
            if da == 1 and db is not None and db != 1:
                pass  # broadcast: drop it
            else:
                a_lab.append(("p", j))
                a_keep.append(ia)
        if db is not None:
            if db == 1 and da is not None and da != 1:
                pass
            else:
                b_lab.append(("p", j))
                b_keep.append(ib)
    ad, bd = a.data, b.data
    if len(a_keep) != pa or len(b_keep) != pb:
        plan = None  # a reshape before the contraction: not one call
    if len(a_keep) != pa:
        ad = ad.reshape(tuple(sa[i] for i in a_keep) + ad.shape[pa:])
    if len(b_keep) != pb:
        bd = bd.reshape(tuple(sb[i] for i in b_keep) + bd.shape[pb:])
    a_lab += [("n", m) for m in a.names]
    b_lab += [("n", m) for m in b.names]
    contracted = set(names)
    out_named = [("n", m) for m in (set(a.names) | set(b.names)) - contracted]
    out, named = _dot_labels(ad, a_lab, bd, b_lab, [("p", j) for j in range(n)], out_named, precision,
                             preferred_element_type, plan)
    return _make(out, tuple(m for _, m in named))


@follows_arguments
@implements(jnp.dot)
def dot(a: NamedArray | ArrayLike, b: NamedArray | ArrayLike, axis: str | Sequence[str] | None = None, *,
        precision: Any = None,
        preferred_element_type: Any = None) -> NamedArray | jax.Array:
    """Dot product: contract the named axes ``axis``; without ``axis``, ``jnp.dot`` lifted over names.

    With ``axis`` (a name or a tuple of names), both operands must carry every name in it; the result is
    ``nx.sum(a * b, axis=axis)`` (other names broadcast by name, positional axes broadcast as in ``a * b``),
    computed as a single ``dot_general``. Without it, positional axes follow ``jnp.dot`` and every name
    broadcasts (a name both operands carry is a batch axis).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["b", "k"])
    >>> v = nx.wrap(jnp.ones(3), ["k"])
    >>> nx.dot(x, v, axis="k").unwrap(["b"]).tolist()
    [3.0, 12.0]
    >>> r = nx.wrap(jnp.ones((4, 3)), ["b", None])  # per b, a positional vector of 3
    >>> nx.dot(jnp.ones((2, 3)), r).shape  # jnp.dot of (2, 3) and (3,), for each b
    (2,)
    """
    key = None
    if (type(axis) is str and type(a) is NamedArray and type(b) is NamedArray and precision is None
            and preferred_element_type is None):  # nx.dot(x, w, axis="k"): the hot path
        # the name, both operands' names and the environment determine the kernel run() would call
        env = _env.current()
        key = (axis, a.names, b.names, None if env is _EMPTY else env)
        da, db = a.data, b.data
        if type(da) is _ArrayImpl and type(db) is _ArrayImpl:
            kernel = _DOT_SITE.get(key)
            if kernel is not None:  # engine.fire, written out: a call is a tenth of what nx adds here
                out = kernel.jitted(da, db)
                kernel.tick = next(_clock)
                next(_stats.eager)
                result = kernel.result
                structure = result.single if not result.varies else result.lookup([da, db])
                return _make(out, structure[1]) if structure[0] is _ONE else pack(out, structure)
    a, b = ops = _operands((a, b), "nx.dot")
    if axis is None:
        return _lift_pair(jnp.dot, (a, b), {"precision": precision,
                                              "preferred_element_type": preferred_element_type}, "nx.dot")
    names = (axis,) if type(axis) is str else _name_tuple(axis, "nx.dot")
    static = (names, precision, preferred_element_type, "nx.dot")
    return _result(engine.run(_dot_impl, static, ops, _DOT_SITE if key is not None else None, key), ops)


_DOT_SITE = kernels.site()  # named dots' kernels, by the name, the operands' names and the environment
_DOT_PLANS = kernels.plans  # under a trace: the contraction each layout lowers to
_Tracer = jax.core.Tracer
_x64 = jax._src.config.enable_x64  # result types depend on it
_EMPTY = _env.EMPTY
_ArrayImpl = engine.ArrayImpl
_clock = kernels.clock
_stats = kernels.stats


# --------------------------------------------------------------------------------------------------------
# tensordot


def _axis_ref(ref: Any, v: NamedArray, k: int, where: str):
    """A normalised axis reference of argument ``k``: a positional index or a name it carries."""
    if isinstance(ref, str):
        if ref not in v.names:
            have = fmt_names(v.names) if v.names else "no named axes"
            raise AxisSpecError(f"{where}: argument {k} has no axis {ref!r} to contract (it has {have})")
        return ref
    p = engine.pos_ndim(v)
    r = int(ref)
    if not -p <= r < p:
        raise AxisSpecError(f"{where}: positional axis {r} is out of bounds for argument {k} with positional "
                            f"shape {v.shape} (named axes are given by name)")
    return r % p


def _tensordot_impl(static, a, b):
    axes, precision, preferred_element_type, where = static
    a, b = wrap(a), wrap(b)
    pa, pb = engine.pos_ndim(a), engine.pos_ndim(b)
    if isinstance(axes, int):
        if axes < 0 or axes > pa or axes > pb:
            raise AxisSpecError(f"{where}: axes={axes} needs that many positional axes in both arguments, "
                                f"which have positional shapes {a.shape} and {b.shape}")
        ra, rb = tuple(range(pa - axes, pa)), tuple(range(axes))
    else:
        ra = tuple(_axis_ref(r, a, 0, where) for r in axes[0])
        rb = tuple(_axis_ref(r, b, 1, where) for r in axes[1])
    for k, refs in enumerate((ra, rb)):
        if len(set(refs)) != len(refs):
            raise DuplicateAxisError(f"{where}: argument {k} lists an axis twice in axes={axes!r}")

    def size(v, r):
        return v.data.shape[r] if isinstance(r, int) else v.data.shape[engine.pos_ndim(v) + v.names.index(r)]

    for x, y in zip(ra, rb):
        if size(a, x) != size(b, y):
            raise AxisSizeError(f"{where}: contracting axis {x!r} of argument 0 (size {size(a, x)}) with "
                                f"axis {y!r} of argument 1 (size {size(b, y)})")
    a_lab = [("c", ra.index(i)) if i in ra else ("a", i) for i in range(pa)]
    a_lab += [("c", ra.index(n)) if n in ra else ("n", n) for n in a.names]
    b_lab = [("c", rb.index(i)) if i in rb else ("b", i) for i in range(pb)]
    b_lab += [("c", rb.index(n)) if n in rb else ("n", n) for n in b.names]
    free_a = {n: size(a, n) for n in a.names if n not in ra}
    free_b = {n: size(b, n) for n in b.names if n not in rb}
    for n in free_a.keys() & free_b.keys():
        if free_a[n] != free_b[n]:
            raise AxisSizeError(f"{where}: axis {n!r} has size {free_a[n]} in argument 0 but size "
                                f"{free_b[n]} in argument 1")
    out_pos = [("a", i) for i in range(pa) if i not in ra] + [("b", i) for i in range(pb) if i not in rb]
    out_named = [("n", n) for n in free_a.keys() | free_b.keys()]
    out, named = _dot_labels(a.data, a_lab, b.data, b_lab, out_pos, out_named, precision,
                             preferred_element_type)
    return _make(out, tuple(n for _, n in named))


def _normalize_axes(axes: Any, where: str):
    """``axes`` of tensordot as an int, or a pair of tuples of positions and names."""
    if isinstance(axes, str):
        return ((axes,), (axes,))
    if isinstance(axes, (tuple, list)) and len(axes) == 2:
        pair = []
        for side in axes:
            seq = tuple(side) if isinstance(side, (tuple, list, np.ndarray)) else (side,)
            try:
                pair.append(tuple(s if isinstance(s, str) else operator.index(s) for s in seq))
            except TypeError:
                raise AxisSpecError(f"{where}: an axis is a position (an int) or a name, got {side!r} in "
                                    f"axes={axes!r}") from None
        if len(pair[0]) != len(pair[1]):
            raise AxisSpecError(f"{where}: axes={axes!r} pairs {len(pair[0])} axes of argument 0 with "
                                f"{len(pair[1])} of argument 1")
        return tuple(pair)
    if not isinstance(axes, bool) and hasattr(axes, "__index__"):
        return operator.index(axes)
    raise AxisSpecError(f"{where}: axes must be an int, an axis name, or a pair (axes_a, axes_b) of axes "
                        f"(positions or names), got {axes!r}; to contract several names in both arguments "
                        "use nx.dot(a, b, axis=(...))")


@follows_arguments
@implements(jnp.tensordot)
def tensordot(a: NamedArray | ArrayLike, b: NamedArray | ArrayLike, axes: Any = 2, *, precision: Any = None,
              preferred_element_type: Any = None) -> NamedArray | jax.Array:
    """``jnp.tensordot`` where axes may be given by name.

    ``axes`` is an int N (the last N positional axes of ``a`` with the first N of ``b``), a pair
    ``(axes_a, axes_b)`` whose entries are positions or names (so ``(("k",), (0,))`` contracts ``a``'s named
    axis ``k`` with ``b``'s first positional axis), or one name that both operands carry. As in NumPy, a
    pair of two entries means (axis of ``a``, axis of ``b``): ``("k", "j")`` contracts ``a.k`` with ``b.j``.
    The result's positional axes are ``a``'s uncontracted ones then ``b``'s; names not contracted broadcast
    by name.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((3, 2)), ["k", None])
    >>> y = jnp.ones((3, 5))
    >>> nx.tensordot(x, y, axes=(("k",), (0,))).shape
    (2, 5)
    """
    where = "nx.tensordot"
    ax = _normalize_axes(axes, where)
    ops = _operands((a, b), where)
    return _result(engine.run(_tensordot_impl, (ax, precision, preferred_element_type, where), ops), ops)


# --------------------------------------------------------------------------------------------------------
# pdot


def _pos_dims(dims: Sequence[int], p: int, k: int, what: str, where: str) -> tuple[int, ...]:
    out = []
    for d in dims:
        if not -p <= d < p:
            raise AxisSpecError(f"{where}: {what} axis {d} is out of bounds for argument {k} with {p} "
                                f"positional axes")
        d %= p
        if d in out:
            raise DuplicateAxisError(f"{where}: {what} lists axis {d} of argument {k} twice")
        out.append(d)
    return tuple(out)


_NO_AXES = ((), ())


def _pos_pair(dims: Any, what: str, where: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    try:
        dx, dy = dims
        return tuple(map(operator.index, dx)), tuple(map(operator.index, dy))
    except (TypeError, ValueError):
        raise AxisSpecError(f"{where}: {what} is a pair of sequences of positional axes ((x_axes), "
                            f"(y_axes)), got {dims!r}") from None


def _pdot_impl(static, x, y):
    axis_names, pos_contract, pos_batch, precision, preferred_element_type, where = static
    x, y = wrap(x), wrap(y)
    px, py = engine.pos_ndim(x), engine.pos_ndim(y)
    cx = _pos_dims(pos_contract[0], px, 0, "pos_contract", where)
    cy = _pos_dims(pos_contract[1], py, 1, "pos_contract", where)
    bx = _pos_dims(pos_batch[0], px, 0, "pos_batch", where)
    by = _pos_dims(pos_batch[1], py, 1, "pos_batch", where)
    for k, (c, b) in enumerate(((cx, bx), (cy, by))):
        both = sorted(set(c) & set(b))
        if both:
            raise AxisSpecError(f"{where}: axis {both[0]} of argument {k} is both contracted and batched")
    for what, dx, dy in (("pos_contract", cx, cy), ("pos_batch", bx, by)):
        if len(dx) != len(dy):
            raise AxisSpecError(f"{where}: {what} pairs {len(dx)} axes of x with {len(dy)} axes of y")
        for i, j in zip(dx, dy):
            if x.data.shape[i] != y.data.shape[j]:
                raise AxisSizeError(f"{where}: {what} pairs positional axis {i} of x (size "
                                    f"{x.data.shape[i]}) with axis {j} of y (size {y.data.shape[j]})")
    engine.join((x, y), where)
    # a name neither operand carries: psum over it sums identical copies, i.e. multiplies by its bound size
    scale = 1
    for n in axis_names:
        if n not in x.names and n not in y.names:
            scale *= _env.current().size(n, where)
    def labels(p, c, b, free):
        return [("c", c.index(i)) if i in c else ("b", b.index(i)) if i in b else (free, i) for i in range(p)]

    x_lab = labels(px, cx, bx, "x") + [("n", n) for n in x.names]
    y_lab = labels(py, cy, by, "y") + [("n", n) for n in y.names]
    out_named = [("n", n) for n in (set(x.names) | set(y.names)) - set(axis_names)]
    # dot_general's order: batch, then x's free axes, then y's free axes; names last, in natural order
    out_pos = ([("b", k) for k in range(len(bx))]
               + [("x", i) for i in range(px) if i not in cx and i not in bx]
               + [("y", i) for i in range(py) if i not in cy and i not in by])
    out, named = _dot_labels(x.data, x_lab, y.data, y_lab, out_pos, out_named, precision,
                             preferred_element_type)
    if scale != 1:
        out = out * jnp.asarray(scale, out.dtype)
    return _make(out, tuple(n for _, n in named))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5, 6))
def _pdot_per_element(x, y, names, pc, pb, precision, preferred_element_type):
    """xmap's ``pdot`` on per-element values: the psum of the local ``dot_general``. Its transpose is the
    local one's, without a psum (xmap's rule: each element's cotangent is its own), which ``lax.psum``'s
    own transpose would add."""
    return lax.psum(lax.dot_general(x, y, (pc, pb), precision=precision,
                                    preferred_element_type=preferred_element_type), names)


def _pdot_per_element_fwd(x, y, names, pc, pb, precision, preferred_element_type):
    return _pdot_per_element(x, y, names, pc, pb, precision, preferred_element_type), (x, y)


def _pdot_per_element_bwd(names, pc, pb, precision, preferred_element_type, res, g):
    x, y = res
    _, pull = jax.vjp(lambda a, b: lax.dot_general(a, b, (pc, pb), precision=precision,
                                                   preferred_element_type=preferred_element_type), x, y)
    return pull(g)


_pdot_per_element.defvjp(_pdot_per_element_fwd, _pdot_per_element_bwd)


@follows_arguments
def pdot(x: NamedArray | ArrayLike, y: NamedArray | ArrayLike, axis_name: str | Sequence[str],
         pos_contract: Any = _NO_AXES,
         pos_batch: Any = _NO_AXES, precision: Any = None, *,
         preferred_element_type: Any = None) -> NamedArray | jax.Array:
    """xmap's ``lax.pdot``: ``psum(dot_general(x, y, (pos_contract, pos_batch)), axis_name)``.

    Positionally it is ``lax.dot_general`` with the given contracting and batch dimensions (by default none:
    an outer product; result axes are batch, then ``x``'s free, then ``y``'s free). The names in
    ``axis_name`` are summed away: contracted when both operands carry them, summed in the one that does
    otherwise, and, when neither does but an enclosing ``nx.xmap`` binds the name, the result is multiplied
    by its size (as ``psum`` would); an unbound name is an :class:`~namedarray.errors.UnboundAxisError`.
    Other names broadcast by name.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((3, 8)), {1: "i"})
    >>> y = nx.wrap(jnp.ones((8, 5)), {0: "i"})
    >>> nx.pdot(x, y, "i").shape  # == x @ y
    (3, 5)
    """
    where = "nx.pdot"
    names = (axis_name,) if type(axis_name) is str else _name_tuple(axis_name, where)
    pc = _pos_pair(pos_contract, "pos_contract", where)
    pb = _pos_pair(pos_batch, "pos_batch", where)
    if _env.current().per_element(names)[1] and type(x) is not NamedArray and type(y) is not NamedArray:
        # inside a positional nx.xmap body the map's names are JAX axis names and values are per element
        # along them: xmap's own definition of pdot
        return _pdot_per_element(x, y, names, pc, pb, precision, preferred_element_type)
    ops = _operands((x, y), where)
    out = engine.run(_pdot_impl, (names, pc, pb, precision, preferred_element_type, where), ops)
    return _result(out, ops)


# --------------------------------------------------------------------------------------------------------
# Positional products, vectorised over names


@follows_arguments
@implements(jnp.matmul)
def matmul(a: NamedArray | ArrayLike, b: NamedArray | ArrayLike, *, precision: Any = None,
           preferred_element_type: Any = None) -> NamedArray | jax.Array:
    """``jnp.matmul`` on the positional axes, vectorised over names (what ``a @ b`` calls).

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((4, 2, 3)), ["batch", ...])
    >>> (x @ jnp.ones((3, 5))).shape, (x @ jnp.ones((3, 5))).named_shape
    ((2, 5), {'batch': 4})

    Operands need a positional axis each, as in NumPy; to contract a named axis use :func:`dot`.
    """
    a, b = _operands((a, b), "nx.matmul")
    for i, v in enumerate((a, b)):
        if not np.shape(v) if type(v) is not NamedArray else not v.shape:
            names = fmt_names(v.names) if type(v) is NamedArray and v.names else "no named axes either"
            raise AxisSpecError(
                f"nx.matmul: argument {i} has no positional axis to multiply over (named axes: {names}); "
                f"matmul (@) works on positional axes: contract a name with nx.dot(a, b, axis=name)")
    return _lift_pair(jnp.matmul, (a, b), {"precision": precision,
                                             "preferred_element_type": preferred_element_type}, "nx.matmul")


@follows_arguments
@implements(jnp.vdot)
def vdot(a: NamedArray | ArrayLike, b: NamedArray | ArrayLike, *, precision: Any = None,
         preferred_element_type: Any = None) -> NamedArray | jax.Array:
    """``jnp.vdot`` (conjugate ``a``, flatten the positional axes, dot), vectorised over names.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.ones((2, 5)), {0: "left"})
    >>> nx.vdot(x, jnp.ones(5)).named_shape
    {'left': 2}
    """
    a, b = _operands((a, b), "nx.vdot")
    return _lift_pair(jnp.vdot, (a, b), {"precision": precision,
                                           "preferred_element_type": preferred_element_type}, "nx.vdot")


@follows_arguments
@implements(jnp.inner)
def inner(a: NamedArray | ArrayLike, b: NamedArray | ArrayLike, *, precision: Any = None,
          preferred_element_type: Any = None) -> NamedArray | jax.Array:
    """``jnp.inner`` (contract the last positional axes), vectorised over names.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.inner(nx.wrap(jnp.ones((2, 3)), ["b", None]), jnp.ones((4, 3))).shape
    (4,)
    """
    a, b = _operands((a, b), "nx.inner")
    return _lift_pair(jnp.inner, (a, b), {"precision": precision,
                                            "preferred_element_type": preferred_element_type}, "nx.inner")


@follows_arguments
@implements(jnp.outer)
def outer(a: NamedArray | ArrayLike, b: NamedArray | ArrayLike, out: None = None) -> NamedArray | jax.Array:
    """``jnp.outer`` (flattened positional outer product), vectorised over names.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.outer(nx.wrap(jnp.ones((2, 3)), ["b", None]), jnp.ones(4)).shape
    (3, 4)
    """
    if out is not None:
        raise NotImplementedError("nx.outer: the 'out' argument is not supported (JAX arrays are immutable)")
    a, b = _operands((a, b), "nx.outer")
    return _lift_pair(jnp.outer, (a, b), {}, "nx.outer")
