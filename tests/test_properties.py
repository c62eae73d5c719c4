"""Property tests: every named operation equals a positional NumPy reference on explicitly aligned arrays.

Each example draws a few axis names (multi-character ones included) with sizes, a positional shape, a dtype
and a *storage order* per operand (where its named axes sit among the positional ones when it is given to
``nx.wrap``, and which of xmap's axis-map forms names them). The reference aligns every operand by hand:
positional axes first, then every name of the example in sorted order, size 1 where an operand lacks it,
and runs the plain NumPy function. Results must match it whatever the storage order.
"""

from __future__ import annotations

import math
import operator
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from conftest import storage_order
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx

NAMES = ("a", "batch", "k", "feat", "x1")
FLOATS = (np.float32,)
INTS = (np.int32, np.uint8)
NUMERIC = FLOATS + INTS
BITS = INTS + (np.bool_,)
ALL = NUMERIC + (np.bool_,)


# --------------------------------------------------------------------------------------------------------
# Building operands


class Operand:
    """A NamedArray (or positional value) plus its reference: positional axes, then ``universe`` names."""

    def __init__(self, value, ref):
        self.value = value
        self.ref = ref

    def __repr__(self):
        v = self.value
        if isinstance(v, nx.NamedArray):
            return f"named({v.dtype}, shape={v.shape}, named_shape={dict(v.named_shape)})"
        return f"positional({type(v).__name__}, {np.shape(v)}, {getattr(v, 'dtype', v)})"


def _values(rng, dtype, shape, nonzero=False, small=False):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        # multiples of 1/2: exact in float32, so // and % agree with float64 NumPy exactly
        v = rng.integers(-4, 5, shape) / 2
        if nonzero:
            v = np.where(v == 0, 1.5, v)
        return v.astype(dtype)
    lo = 0 if (dtype.kind == "u" or small) else -3
    hi = 3 if small else 5
    v = rng.integers(lo, hi + 1, shape)
    if nonzero:
        v = np.where(v == 0, 2, v)
    return v.astype(dtype)


@st.composite
def universes(draw, min_names=0, max_names=3):
    """Some distinct names with sizes (1..3)."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=min_names, max_size=max_names, unique=True))
    return {n: draw(st.integers(1, 3)) for n in names}


def _wrap_spec(draw, slots: dict[int, str], rank: int):
    """One of xmap's axis-map forms naming storage positions ``slots``."""
    form = draw(st.sampled_from(["dict", "list...", "list", "tuple"]))
    if form == "dict" or not slots:
        return dict(slots) if form == "dict" or not slots else [...]
    if form == "list...":
        top = max(slots) + 1
        return [slots.get(i) for i in range(top)] + [...]
    entries = [slots.get(i) for i in range(rank)]
    return entries if form == "list" else tuple(entries)


@st.composite
def named_operands(draw, universe, pos_shape, dtype, *, nonzero=False, small=False, min_names=0):
    """A NamedArray carrying some of ``universe``'s names, stored in a random order."""
    own = draw(st.lists(st.sampled_from(sorted(universe)), min_size=min(min_names, len(universe)),
                        unique=True)) if universe else []
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    p = len(pos_shape)
    # logical layout: positional axes, then the names in `own`'s (random) order
    logical = _values(rng, dtype, tuple(pos_shape) + tuple(universe[n] for n in own), nonzero, small)
    rank = p + len(own)
    perm, slots = storage_order(draw, p, own)
    storage = np.transpose(logical, perm)
    as_jax = draw(st.booleans())
    value = nx.wrap(jnp.asarray(storage) if as_jax else storage, _wrap_spec(draw, slots, rank))
    # the reference: positional axes, then every universe name sorted, 1 where this operand lacks it
    ref = np.transpose(logical, list(range(p)) + [p + own.index(n) for n in sorted(own)])
    ref = ref.reshape(tuple(pos_shape) + tuple(universe[n] if n in own else 1 for n in sorted(universe)))
    return Operand(value, ref)


@st.composite
def positional_operands(draw, universe, pos_shape, dtype, *, nonzero=False, small=False):
    """A plain jax array, NumPy array, Python scalar or NumPy scalar: a positional operand."""
    kind = draw(st.sampled_from(["jax", "numpy", "scalar", "numpy-scalar"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    k = len(universe)
    if kind in ("scalar", "numpy-scalar"):
        dt = np.dtype(dtype)
        if dt == np.bool_:
            v = True
        elif dt.kind == "f":
            v = draw(st.sampled_from([0.5, 1.5, 2.0]))
        else:
            v = draw(st.sampled_from([1, 2, 3]))
        if kind == "numpy-scalar":  # strongly typed, unlike a Python scalar
            v = dt.type(v)
        return Operand(v, v)
    # NumPy broadcasting against the positional shape: a suffix of it, some axes 1, maybe a new leading axis
    start = draw(st.integers(0, len(pos_shape)))
    shape = tuple(s if draw(st.booleans()) else 1 for s in pos_shape[start:])
    if start == 0 and len(shape) < 2 and draw(st.booleans()):
        shape = (2,) + shape
    data = _values(rng, dtype, shape, nonzero, small)
    value = jnp.asarray(data) if kind == "jax" else data
    return Operand(value, data.reshape(shape + (1,) * k))


def _names_last(x):
    """The positional array of NamedArray ``x`` with its names after the positional axes, sorted."""
    names = sorted(x.named_shape)
    return np.asarray(nx.unwrap(x, {len(x.shape) + i: n for i, n in enumerate(names)}))


def assert_matches(got, ref, *, rtol=2e-5, atol=2e-5):
    """``got`` (a NumPy array) equals ``ref`` in value; integers compared after wrapping to got's dtype."""
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if got.dtype.kind in "fc" or ref.dtype.kind in "fc":
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True)
    else:
        # fixed-width integer arithmetic wraps identically in any wider width
        np.testing.assert_array_equal(got, ref.astype(got.dtype))


def check_result(result, universe_used, pos_shape, ref, expected_dtype=None):
    assert isinstance(result, nx.NamedArray), type(result)
    assert result.named_shape == universe_used
    assert result.shape == tuple(pos_shape)
    assert result.ndim == len(pos_shape) and result.size == math.prod(pos_shape)
    if expected_dtype is not None:
        assert result.dtype == expected_dtype, (result.dtype, expected_dtype)
    assert_matches(_names_last(result), ref)


def _shapes():
    return st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


# --------------------------------------------------------------------------------------------------------
# Elementwise operators


def _tdiv(a, b):
    return a / b


BINARY = {
    # name: (operator, NumPy reference, dtypes, second operand nonzero, second operand small/non-negative)
    "+": (operator.add, np.add, NUMERIC, False, False),
    "-": (operator.sub, np.subtract, NUMERIC, False, False),
    "*": (operator.mul, np.multiply, NUMERIC, False, False),
    "/": (_tdiv, np.true_divide, NUMERIC, True, False),
    "//": (operator.floordiv, np.floor_divide, NUMERIC, True, False),
    "%": (operator.mod, np.remainder, NUMERIC, True, False),
    "**": (operator.pow, np.power, NUMERIC, False, True),
    "&": (operator.and_, np.bitwise_and, BITS, False, False),
    "|": (operator.or_, np.bitwise_or, BITS, False, False),
    "^": (operator.xor, np.bitwise_xor, BITS, False, False),
    "<": (operator.lt, np.less, ALL, False, False),
    "<=": (operator.le, np.less_equal, ALL, False, False),
    ">": (operator.gt, np.greater, ALL, False, False),
    ">=": (operator.ge, np.greater_equal, ALL, False, False),
    "==": (operator.eq, np.equal, ALL, False, False),
    "!=": (operator.ne, np.not_equal, ALL, False, False),
    "nx.maximum": (nx.maximum, np.maximum, NUMERIC, False, False),
    "nx.arctan2": (nx.arctan2, np.arctan2, FLOATS, False, False),
    "nx.logaddexp": (nx.logaddexp, np.logaddexp, FLOATS, False, False),
}


@st.composite
def binary_cases(draw):
    op_name = draw(st.sampled_from(sorted(BINARY)))
    _, _, kinds, nonzero, small = BINARY[op_name]
    universe = draw(universes())
    dt_a, dt_b = draw(st.sampled_from(kinds)), draw(st.sampled_from(kinds))
    shape_a, shape_b = draw(_shapes()), draw(_shapes())
    # positional shapes broadcast NumPy's way: make shape_b a broadcastable suffix of shape_a or vice versa
    if len(shape_b) > len(shape_a):
        shape_a, shape_b = shape_b, shape_a
    shape_b = tuple(s if draw(st.booleans()) else 1 for s in shape_a[len(shape_a) - len(shape_b):])
    layout = draw(st.sampled_from(["named-named", "named-positional", "positional-named"]))
    if layout == "named-named":
        left = draw(named_operands(universe, shape_a, dt_a))
        right = draw(named_operands(universe, shape_b, dt_b, nonzero=nonzero, small=small))
        pos = shape_a
    elif layout == "named-positional":
        left = draw(named_operands(universe, shape_a, dt_a))
        right = draw(positional_operands(universe, shape_a, dt_b, nonzero=nonzero, small=small))
        pos = np.broadcast_shapes(shape_a, np.shape(right.value))
    else:
        left = draw(positional_operands(universe, shape_a, dt_a))
        right = draw(named_operands(universe, shape_a, dt_b, nonzero=nonzero, small=small))
        pos = np.broadcast_shapes(shape_a, np.shape(left.value))
    return op_name, universe, left, right, tuple(pos)


def _used(*operands):
    """The named shape of the result: the union of the NamedArray operands' named shapes."""
    out = {}
    for o in operands:
        if isinstance(o.value, nx.NamedArray):
            out.update(o.value.named_shape)
    return out


def _expected_dtype(fn, *operands):
    """The dtype the positional program ``fn`` gives, run eagerly as the named op is, on the aligned operands
    (JAX's promotion rules; eagerly, ``x ** 3`` with a concrete 0-d integer exponent keeps ``x``'s dtype,
    where a traced exponent would promote)."""
    def concrete(o):
        if isinstance(o.value, (bool, int, float)):
            return o.value  # stays a weakly typed Python scalar
        if not isinstance(o.value, nx.NamedArray) and np.ndim(o.value) == 0:
            return jnp.asarray(o.value)  # a 0-d array, as the positional program has it
        dtype = o.value.dtype if isinstance(o.value, nx.NamedArray) else jnp.asarray(o.value).dtype
        if isinstance(o.value, nx.NamedArray) and not o.value.names and not o.value.shape:
            return jnp.zeros((), dtype)  # a 0-d value without names is the 0-d array it holds
        return jnp.zeros(o.ref.shape, dtype)

    return fn(*[concrete(o) for o in operands]).dtype


def reference(np_fn, universe, pos, *operands):
    """``np_fn`` on the aligned operands, laid out as the result: positional axes, then used names sorted."""
    used = _used(*operands)
    with np.errstate(all="ignore"):
        ref = np_fn(*[o.ref for o in operands])
    full = tuple(pos) + tuple(universe[n] if n in used else 1 for n in sorted(universe))
    return np.broadcast_to(ref, full).reshape(tuple(pos) + tuple(used[n] for n in sorted(used)))


@settings(max_examples=100)
@given(binary_cases())
def test_binary_operators_match_numpy(case):
    op_name, universe, left, right, pos = case
    op, np_op, *_ = BINARY[op_name]
    ref = reference(np_op, universe, pos, left, right)
    result = op(left.value, right.value)
    check_result(result, _used(left, right), pos, ref, _expected_dtype(op, left, right))


UNARY = {
    "-": (operator.neg, np.negative, NUMERIC),
    "+": (operator.pos, np.positive, NUMERIC),
    "abs": (abs, np.abs, NUMERIC),
    "~": (operator.invert, np.invert, BITS),
    "nx.exp": (nx.exp, np.exp, FLOATS + (np.int32,)),  # NumPy computes exp(uint8) in float16
    "nx.sin": (nx.sin, np.sin, FLOATS),
    "nx.sqrt": (nx.sqrt, np.sqrt, FLOATS),
    "nx.tanh": (nx.tanh, np.tanh, FLOATS),
    "nx.floor": (nx.floor, np.floor, FLOATS),
    "nx.sign": (nx.sign, np.sign, FLOATS + (np.int32,)),
    "nx.square": (nx.square, np.square, NUMERIC),
    "nx.logical_not": (nx.logical_not, np.logical_not, ALL),
    "nx.isfinite": (nx.isfinite, np.isfinite, NUMERIC),
}


@st.composite
def unary_cases(draw):
    op_name = draw(st.sampled_from(sorted(UNARY)))
    dtype = draw(st.sampled_from(UNARY[op_name][2]))
    universe = draw(universes())
    pos = draw(_shapes())
    return op_name, universe, draw(named_operands(universe, pos, dtype)), pos


@settings(max_examples=60)
@given(unary_cases())
def test_unary_operators_match_numpy(case):
    op_name, universe, x, pos = case
    op, np_op, _ = UNARY[op_name]
    ref = reference(np_op, universe, pos, x)
    check_result(op(x.value), _used(x), pos, ref, _expected_dtype(op, x))


@st.composite
def where_cases(draw):
    universe = draw(universes())
    pos = draw(_shapes())
    dtype = draw(st.sampled_from(NUMERIC))
    cond = draw(named_operands(universe, pos, np.bool_))
    x = draw(named_operands(universe, pos, dtype))
    y = draw(st.one_of(named_operands(universe, pos, dtype), positional_operands(universe, pos, dtype)))
    pos = np.broadcast_shapes(pos, np.shape(y.value)) if not isinstance(y.value, nx.NamedArray) else pos
    return universe, cond, x, y, tuple(pos)


@settings(max_examples=30)
@given(where_cases())
def test_where_broadcasts_three_operands_by_name(case):
    universe, cond, x, y, pos = case
    ref = reference(np.where, universe, pos, cond, x, y)
    result = nx.where(cond.value, x.value, y.value)
    check_result(result, _used(cond, x, y), pos, ref, _expected_dtype(jnp.where, cond, x, y))


# --------------------------------------------------------------------------------------------------------
# Reductions and operations along an axis


def _argsort(a, axis):
    return np.argsort(a, axis=axis, kind="stable")


def _sort(a, axis):
    return np.sort(a, axis=axis, kind="stable")


# name: (NumPy reference, dtypes, kind); kind "multi" takes any mix of axes and keepdims, "single" one axis
# (None: the flattened positional part) and keepdims, "along" one axis that it keeps
REDUCTIONS = {
    "sum": (np.sum, ALL, "multi"),
    "prod": (np.prod, ALL, "multi"),
    "max": (np.max, ALL, "multi"),
    "min": (np.min, ALL, "multi"),
    "amax": (np.amax, NUMERIC, "multi"),
    "mean": (np.mean, NUMERIC, "multi"),
    "var": (np.var, NUMERIC, "multi"),
    "std": (np.std, NUMERIC, "multi"),
    "median": (np.median, NUMERIC, "multi"),
    "ptp": (np.ptp, NUMERIC, "multi"),
    "nansum": (np.nansum, NUMERIC, "multi"),
    "nanmean": (np.nanmean, FLOATS, "multi"),
    "any": (np.any, ALL, "multi"),
    "all": (np.all, ALL, "multi"),
    "count_nonzero": (np.count_nonzero, ALL, "multi"),
    "argmax": (np.argmax, ALL, "single"),
    "argmin": (np.argmin, ALL, "single"),
    "cumsum": (np.cumsum, ALL, "along"),
    "cumprod": (np.cumprod, NUMERIC, "along"),
    "sort": (_sort, ALL, "along"),
    "argsort": (_argsort, ALL, "along"),
}
METHODS = {"sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "argmax", "argmin", "ptp",
           "cumsum", "cumprod", "sort", "argsort"}


@st.composite
def axis_args(draw, p: int, names: list[str], kind: str):
    """``axis=`` as None, an int (maybe negative), a name, or (multi only) a shuffled tuple of both.

    A reduction (and a cumulative operation, a flip, a roll) refuses ``axis=None`` on a value whose axes
    are all named (it would act on nothing), so None is drawn only where there is a positional axis or no
    name.
    """
    none = p or not names
    choices = (["none"] if none else []) + (["int"] if p else []) + (["name"] if names else [])
    if kind == "multi":
        choices.append("tuple")
    c = draw(st.sampled_from(choices))
    if c == "none":
        return None
    if c == "int":
        return draw(st.integers(-p, p - 1))
    if c == "name":
        return draw(st.sampled_from(names))
    ints = draw(st.lists(st.integers(0, p - 1), unique=True, max_size=p)) if p else []
    ints = [i - p if draw(st.booleans()) else i for i in ints]
    picked = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names))) if names else []
    return tuple(draw(st.permutations(ints + picked)))


@st.composite
def reduction_cases(draw):
    fname = draw(st.sampled_from(sorted(REDUCTIONS)))
    _, dtypes, kind = REDUCTIONS[fname]
    universe = draw(universes())
    pos = draw(_shapes())
    x = draw(named_operands(universe, pos, draw(st.sampled_from(dtypes)), min_names=len(universe)))
    axis = draw(axis_args(len(pos), sorted(universe), kind))
    keepdims = kind != "along" and draw(st.booleans())
    style = draw(st.sampled_from(["nx", "nx-positional", "numpy"] + (["method"] if fname in METHODS else [])))
    return fname, universe, x, tuple(pos), axis, keepdims, style


def _call(fname, style, x, axis, keepdims):
    kw = {"keepdims": True} if keepdims else {}
    if style == "nx":
        return getattr(nx, fname)(x, axis=axis, **kw)
    if style == "nx-positional":
        return getattr(nx, fname)(x, axis, **kw)
    if style == "method":
        return getattr(x, fname)(axis, **kw)
    return getattr(np, fname)(x, axis=axis, **kw)


def _reduction_reference(fname, ref, pos, names, axis, keepdims):
    """The NumPy result laid out as the named result, with its positional shape and remaining names."""
    np_fn, _, kind = REDUCTIONS[fname]
    p = len(pos)
    kw = {"keepdims": True} if keepdims else {}
    if axis is None and kind != "multi":  # the flattened positional part
        flat = ref.reshape((math.prod(pos),) + ref.shape[p:])
        out = np_fn(flat, axis=0, **kw)
        if keepdims:
            out = out.reshape((1,) * p + out.shape[1:])
        return out, tuple(out.shape[: out.ndim - len(names)]), list(names)
    items = tuple(range(p)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    axes = tuple(p + names.index(a) if isinstance(a, str) else a % p for a in items)
    out = np_fn(ref, axis=axes if kind == "multi" else axes[0], **kw)
    if kind == "along":
        return out, pos, list(names)
    left = [n for n in names if n not in items]
    reduced = {a for a in axes if a < p}
    out_pos = tuple((1 if keepdims else None) if i in reduced else s for i, s in enumerate(pos))
    out_pos = tuple(s for s in out_pos if s is not None)
    if keepdims:  # NumPy's keepdims also kept the reduced names (size 1): the named result drops them
        out = out.reshape(out_pos + tuple(s for n, s in zip(names, out.shape[p:]) if n in left))
    return out, out_pos, left


@settings(max_examples=120)
@given(reduction_cases())
def test_reductions_match_numpy(case):
    fname, universe, x, pos, axis, keepdims, style = case
    names = sorted(universe)
    with np.errstate(all="ignore"):
        ref, out_pos, left = _reduction_reference(fname, x.ref, pos, names, axis, keepdims)
    result = _call(fname, style, x.value, axis, keepdims)
    check_result(result, {n: universe[n] for n in left}, out_pos, ref)
    # the dtype is the one jnp gives on the aligned array
    jfn = getattr(jnp, fname)
    struct = jax.ShapeDtypeStruct(x.ref.shape, x.value.dtype)
    expected = jax.eval_shape(lambda a: jfn(a, axis=None), struct).dtype
    assert result.dtype == expected


@settings(max_examples=20)
@given(st.data())
def test_quantile_over_names_and_positions(data):
    universe = data.draw(universes(min_names=1))
    pos = data.draw(_shapes())
    x = data.draw(named_operands(universe, pos, np.float32, min_names=len(universe)))
    axis = data.draw(axis_args(len(pos), sorted(universe), "multi"))
    q = data.draw(st.sampled_from([0.25, (0.1, 0.5, 0.9)]))
    keepdims = data.draw(st.booleans())
    names = sorted(universe)
    result = nx.quantile(x.value, jnp.asarray(q), axis=axis, keepdims=keepdims)
    p = len(pos)
    items = tuple(range(p)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    axes = tuple(p + names.index(a) if isinstance(a, str) else a % p for a in items)
    ref = np.quantile(x.ref, q, axis=axes, keepdims=keepdims)
    left = {n: universe[n] for n in names if n not in items}
    if keepdims:  # NumPy kept the reduced names as size-1 axes too; the named result drops them
        lead = np.ndim(q) + p
        ref = ref.reshape(ref.shape[:lead] + tuple(left[n] for n in sorted(left)))
    check_result(result, left, ref.shape[: ref.ndim - len(left)], ref)


# --------------------------------------------------------------------------------------------------------
# nx.nmap of positional functions


def _np_softmax(a):
    e = np.exp(a - a.max())
    return e / e.sum()


def _jnp_softmax(a):
    e = jnp.exp(a - a.max())
    return e / e.sum()


# name: (positional jax function, NumPy reference, positional shapes of its arguments given sizes n, m)
NMAP_FUNCTIONS = {
    "norm": (jnp.linalg.norm, np.linalg.norm, lambda n, m: [(n,)]),
    "dot": (jnp.dot, np.dot, lambda n, m: [(n,), (n,)]),
    "matvec": (lambda a, b: a @ b, lambda a, b: a @ b, lambda n, m: [(m, n), (n,)]),
    "outer": (lambda a: jnp.outer(a, a), lambda a: np.outer(a, a), lambda n, m: [(n,)]),
    "sort-and-max": (lambda a: (jnp.sort(a), jnp.max(a)), lambda a: (np.sort(a), np.max(a)),
                     lambda n, m: [(n,)]),
    "transpose": (lambda a: a.T, lambda a: a.T, lambda n, m: [(m, n)]),
    "reversed-cumsum": (lambda a: jnp.cumsum(a)[::-1], lambda a: np.cumsum(a)[::-1], lambda n, m: [(n,)]),
    "scale-and-shift": (lambda a, s: a * s + a.sum(), lambda a, s: a * s + a.sum(), lambda n, m: [(n,), ()]),
    "softmax": (_jnp_softmax, _np_softmax, lambda n, m: [(n,)]),
    "flip-axis-kwarg": (lambda a, axis=0: jnp.flip(a, axis=axis), lambda a, axis=0: np.flip(a, axis=axis),
                        lambda n, m: [(m, n)]),
}


@st.composite
def nmap_cases(draw):
    fname = draw(st.sampled_from(sorted(NMAP_FUNCTIONS)))
    universe = draw(universes(min_names=1))
    n, m = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    operands = []
    for i, shape in enumerate(NMAP_FUNCTIONS[fname][2](n, m)):
        if i > 0 and draw(st.integers(0, 2)) == 0:  # a plain positional operand: not mapped at all
            rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
            data = _values(rng, np.float32, shape)
            operands.append(Operand(jnp.asarray(data), data.reshape(shape + (1,) * len(universe))))
        else:
            operands.append(draw(named_operands(universe, shape, np.float32, min_names=1 if i == 0 else 0)))
    kwargs = {"axis": draw(st.sampled_from([0, 1, -1]))} if fname == "flip-axis-kwarg" else {}
    return fname, universe, operands, kwargs


def _nmap_reference(np_fn, universe, used, operands, kwargs):
    """The positional function applied slice by slice over every combination of the used names."""
    names = sorted(universe)
    grid = [universe[n] if n in used else 1 for n in names]
    outs = {}
    for idx in np.ndindex(*grid):
        args = []
        for o in operands:
            k = len(names)
            tail = o.ref.shape[o.ref.ndim - k:]
            args.append(o.ref[(Ellipsis,) + tuple(i if s > 1 else 0 for i, s in zip(idx, tail))])
        outs[idx] = np_fn(*args, **kwargs)
    first = outs[next(iter(outs))]
    parts = first if isinstance(first, tuple) else (first,)
    stacked = []
    for j in range(len(parts)):
        arr = np.stack([np.asarray(outs[idx][j] if isinstance(first, tuple) else outs[idx])
                        for idx in np.ndindex(*grid)])
        stacked.append(arr.reshape(tuple(used[n] for n in sorted(used)) + arr.shape[1:]))
    return tuple(stacked) if isinstance(first, tuple) else stacked[0]


@settings(max_examples=60)
@given(nmap_cases())
def test_nmap_of_positional_functions_matches_slice_by_slice(case):
    fname, universe, operands, kwargs = case
    jfn, np_fn, _ = NMAP_FUNCTIONS[fname]
    used = _used(*operands)
    ref = _nmap_reference(np_fn, universe, used, operands, kwargs)
    result = nx.nmap(jfn)(*[o.value for o in operands], **kwargs)
    results = result if isinstance(result, tuple) else (result,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(results) == len(refs)
    for r, want in zip(results, refs):
        assert isinstance(r, nx.NamedArray) and r.named_shape == used
        got = np.asarray(nx.unwrap(r, sorted(used) + [...]))
        assert_matches(got, want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------------------
# Storage order never shows


@st.composite
def two_storage_orders(draw):
    universe = draw(universes(min_names=1))
    pos = draw(_shapes())
    dtype = draw(st.sampled_from(NUMERIC))
    a = draw(named_operands(universe, pos, dtype, min_names=len(universe)))
    # the same logical array again, its names stored after the positional axes in another order
    p = len(pos)
    names = sorted(universe)
    order = draw(st.permutations(list(range(len(names)))))
    b = nx.wrap(np.transpose(a.ref, list(range(p)) + [p + i for i in order]),
                {p + j: names[i] for j, i in enumerate(order)})
    other = draw(named_operands(universe, pos, dtype))
    return a.value, b, other.value


@settings(max_examples=40)
@given(two_storage_orders())
def test_results_never_depend_on_storage_order(case):
    a, b, other = case
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert a.named_shape == b.named_shape and a.shape == b.shape
    for f in (lambda v: v + other, lambda v: other * v, lambda v: nx.sum(v, tuple(v.named_shape)),
              lambda v: nx.cumsum(v, axis=sorted(v.named_shape)[-1])):
        ra, rb = f(a), f(b)
        assert jax.tree.structure(ra) == jax.tree.structure(rb)
        # the pytree leaves are the canonical storage: equal values whatever order each result holds
        np.testing.assert_array_equal(np.asarray(jax.tree.leaves(ra)[0]), np.asarray(jax.tree.leaves(rb)[0]))


@settings(max_examples=30)
@given(st.data())
def test_masked_reductions_broadcast_the_mask_by_name(data):
    universe = data.draw(universes(min_names=1))
    pos = data.draw(_shapes())
    x = data.draw(named_operands(universe, pos, np.float32, min_names=len(universe)))
    mask = data.draw(named_operands(universe, pos, np.bool_))  # carries some of x's names
    fname = data.draw(st.sampled_from(["sum", "mean", "max", "any"]))
    axis = data.draw(axis_args(len(pos), sorted(universe), "multi"))
    kw = {"initial": -10.0} if fname == "max" else {}
    names = sorted(universe)
    p = len(pos)
    items = tuple(range(p)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    axes = tuple(p + names.index(a) if isinstance(a, str) else a % p for a in items)
    with warnings.catch_warnings():  # NumPy warns on an all-masked mean (nan), as JAX returns
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = getattr(np, fname)(x.ref, axis=axes, where=np.broadcast_to(mask.ref, x.ref.shape), **kw)
    result = getattr(nx, fname)(x.value, axis=axis, where=mask.value, **kw)
    left = {n: universe[n] for n in names if n not in items}
    check_result(result, left, ref.shape[: ref.ndim - len(left)], ref)


@settings(max_examples=40)
@given(st.data())
def test_roll_and_flip_over_a_mixed_tuple_of_axes(data):
    universe = data.draw(universes(min_names=1))
    pos = data.draw(_shapes())
    x = data.draw(named_operands(universe, pos, np.int32, min_names=len(universe)))
    names = sorted(universe)
    p = len(pos)
    axis = data.draw(axis_args(p, names, "multi").filter(lambda a: isinstance(a, tuple) and a))
    shifts = tuple(data.draw(st.integers(-3, 3)) for _ in axis)
    axes = tuple(p + names.index(a) if isinstance(a, str) else a % p for a in axis)
    check_result(nx.roll(x.value, shifts, axis=axis), universe, pos, np.roll(x.ref, shifts, axis=axes))
    check_result(nx.flip(x.value, axis=axis), universe, pos, np.flip(x.ref, axis=axes))
