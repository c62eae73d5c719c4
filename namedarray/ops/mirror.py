"""The NumPy mirror: ``nx.<f>`` for every function of ``jax.numpy``.

Each function is *declared* here once, by what its axis arguments mean, and built by the dispatch engine:

* ``UNARY``, ``BINARY`` (and ``where``, ``clip``): elementwise, broadcast by name (``exp``, ``add``, ...);
* ``REDUCTIONS``: ``axis=`` takes ints, names or a mixed tuple; ``axis=None`` reduces positional axes only;
  a ``where=`` mask broadcasts by name like any operand (``trapezoid`` has its own declaration);
* ``ALONG``: operations along one axis that keep it (``cumsum``, ``sort``, ``flip``, ...), by position or
  name;
* ``VALUE_DEPENDENT``: output size depends on values, so they cannot vectorise over names: they take values
  without named axes (a NamedArray without names gives NamedArrays without names);
* ``WHOLE``: predicates about whole values, written out below: ``array_equal``, ``array_equiv`` and
  ``allclose`` compare every axis, named shapes included, and return one 0-d truth value; ``isin`` tests
  membership in the whole of ``test_elements``;
* ``PASSTHROUGH``: not array functions (dtypes, constants, ``finfo``, ...), re-exported as they are;
* ``DTYPE_QUERIES``: ``can_cast``, ``result_type``, ...: they look at a NamedArray's dtype only;
* everything else is lifted with :func:`namedarray.nmap`: it runs as if vmapped over every named axis, and
  its integer axis arguments keep their positional meaning.

Declarations for contractions and other operations with richer axis semantics (``einsum``, ``dot``,
``concatenate``, ``stack``, ``take``, ...) live in their own modules and override the lifted defaults;
``broadcast_to`` (:mod:`~namedarray.ops.creation`) and ``tile`` (:mod:`~namedarray.ops.structural`) take
names too and are re-exported from here, in place of their lifted defaults.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
>>> nx.sum(x, "b").named_shape, nx.cumsum(x, axis="a").named_shape
({'a': 2}, {'a': 2, 'b': 3})
>>> bool(nx.array_equal(x, nx.wrap(jnp.arange(6.0).reshape(2, 3).T, ["b", "a"])))  # any storage order
True
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import sys
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import env as _env
from ..core import kernels
from ..core.array import _ONE, NamedArray, _make, pack, to_storage
from ..core.layout import named_sizes
from ..core.shape import join_sizes
from ..core.wrapping import name_to_position
from ..engine import dispatch as engine
from ..engine import lifting as lifted
from ..engine import registry
from ..engine.arguments import call, mistyped
from ..engine.docstrings import document
from ..errors import AxisSpecError, PositionalMisuseError, fmt_names, wrong_type
from . import norms  # noqa: F401  (declares nx.linalg.norm and vector_norm, which nx.linalg holds)
from .creation import broadcast_to  # noqa: F401  (nx.broadcast_to: exported from here, see WRITTEN_ELSEWHERE)
from .structural import tile  # noqa: F401  (nx.tile: exported from here, see WRITTEN_ELSEWHERE)

UNARY = """
abs absolute acos acosh angle arccos arccosh arcsin arcsinh arctan arctanh around asin asinh atan atanh
bitwise_count bitwise_invert bitwise_not cbrt ceil conj conjugate cos cosh deg2rad degrees exp exp2 expm1
fabs fix floor frexp i0 imag invert iscomplex isfinite isinf isnan isneginf isposinf isreal log log10 log1p
log2 logical_not modf nan_to_num negative positive rad2deg radians real reciprocal rint round sign signbit
sin sinc sinh spacing sqrt square tan tanh trunc
""".split()

BINARY = """
add arctan2 atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor copysign divide
divmod equal float_power floor_divide fmax fmin fmod gcd greater greater_equal heaviside hypot isclose lcm
ldexp left_shift less less_equal logaddexp logaddexp2 logical_and logical_or logical_xor maximum minimum mod
multiply nextafter not_equal pow power remainder right_shift subtract true_divide
""".split()

# name -> whether it reduces several axes at once (else exactly one, or the flattened positional part)
REDUCTIONS = {
    **{n: True for n in """sum prod max min mean var std any all amax amin nansum nanprod nanmax nanmin
       nanmean nanvar nanstd median nanmedian ptp count_nonzero""".split()},
    **{n: True for n in "quantile percentile nanquantile nanpercentile".split()},
    **{n: False for n in "argmax argmin nanargmax nanargmin".split()},
}
TAKES_Q = {"quantile", "percentile", "nanquantile", "nanpercentile"}

ALONG = """
cumsum cumprod nancumsum nancumprod cumulative_sum cumulative_prod sort argsort flip roll diff partition
argpartition repeat split array_split unstack gradient
""".split()

VALUE_DEPENDENT = """
nonzero argwhere flatnonzero unique unique_all unique_counts unique_inverse unique_values extract compress
trim_zeros setdiff1d setxor1d union1d intersect1d
""".split()

PASSTHROUGH = """
promote_types issubdtype isdtype isscalar iterable dtype finfo iinfo broadcast_shapes
einsum_path get_printoptions printoptions set_printoptions load save savez frombuffer fromfile fromiter
fromstring from_dlpack frompyfunc fromfunction ix_ indices diag_indices tril_indices triu_indices
mask_indices bool_ ndarray ufunc generic number integer floating inexact complexfloating signedinteger
unsignedinteger character flexible
""".split()

SUBMODULES = ("linalg", "fft")
DTYPE_QUERIES = "can_cast result_type iscomplexobj isrealobj".split()

# whole-value predicates, written out below (not generated)
WHOLE = ("allclose", "array_equal", "array_equiv", "isin")
# named implementations of other ops modules that the mirror exports in place of a generated default
WRITTEN_ELSEWHERE = ("broadcast_to", "tile")

# jax.numpy names that nx uses for something else: nx.unwrap is the inverse of nx.wrap (phase unwrapping
# stays jnp.unwrap, and np.unwrap of a NamedArray lifts it)
EXCLUDED = {"unwrap"}


def _elementwise(fn: Callable, name: str, arity: int) -> Callable:
    where = f"nx.{name}"
    static = kernels.Static((fn, where, ()))  # the kernel key of every plain call, built once
    site = kernels.site() if arity == 2 else None  # this operator's kernels, by its operands' names

    @functools.wraps(fn)
    def f(*args, **kwargs):
        if not kwargs and len(args) == arity:  # the hot path of every operator
            if site is not None:
                a, b = args
                if type(a) is NamedArray and type(b) is NamedArray:
                    da, db = a.data, b.data
                    if type(da) is _ArrayImpl and type(db) is _ArrayImpl:
                        # both operands' names and the environment determine the kernel run() would call
                        env = _env.current()
                        key = (a.names, b.names, None if env is _EMPTY else env)
                        kernel = site.get(key)
                        if kernel is not None:
                            try:  # engine.fire, written out
                                out = kernel.jitted(da, db)
                            except Exception:  # the general path raises it in nx's terms
                                return engine.elementwise(fn, args, where, static=static)
                            kernel.tick = next(_clock)
                            next(_stats.eager)
                            result = kernel.result
                            structure = result.single if not result.varies else result.lookup([da, db])
                            return _make(out, structure[1]) if structure[0] is _ONE else pack(out, structure)
                        return engine.elementwise(fn, args, where, static=static, site=site, key=key)
            return engine.elementwise(fn, args, where, static=static)
        operands, rest = args[:arity], args[arity:]
        if rest or any(_is_array(v) for v in kwargs.values()):
            return engine.call_lifted(fn, args, kwargs, where)
        return engine.elementwise(fn, operands, where, tuple(sorted(kwargs.items())))

    return f


def _power(generic: Callable, fn: Callable, name: str) -> Callable:
    """``nx.power``: a concrete integer exponent stays static, as ``jnp.power`` needs it.

    ``jnp.power`` lowers a concrete integer exponent to ``integer_pow`` (exact, and ``x1``'s dtype); passed
    to the eager kernel as an operand it would be traced, and give ``lax.pow`` and promoted dtypes instead.
    """
    where = f"nx.{name}"

    @functools.wraps(fn)
    def f(x1, x2, /):
        if type(x1) is NamedArray and type(x2) is NamedArray and not x2.names and x2.data.ndim == 0:
            x2 = x2.data  # a 0-d exponent without names is a scalar exponent, concrete or not, as in jnp
        elif type(x1) is not NamedArray and type(x2) is NamedArray and not x2.names and x2.data.ndim == 0:
            # nothing to map over: jnp's own answer, whose concrete integer exponent keeps x1's dtype
            # (1 ** uint8 is int32 there; run as an operand of a kernel it would promote to uint8)
            return _make(jnp.asarray(fn(x1, x2.data)), ())
        if type(x1) is NamedArray and not isinstance(x2, (NamedArray, jax.core.Tracer)):
            try:
                n = operator.index(x2)
            except TypeError:
                pass
            else:
                return engine.elementwise(_WithArgs(fn, (n,)), (x1,), where)
        return generic(x1, x2)

    return f


def _is_array(v) -> bool:
    if isinstance(v, (type, np.dtype)):  # dtypes have a `shape` attribute but are options
        return False
    return isinstance(v, NamedArray) or hasattr(v, "__array__") or hasattr(v, "shape")


def _reduction(fn: Callable, name: str, multi: bool) -> Callable:
    where = f"nx.{name}"
    takes_q = name in TAKES_Q
    fast = multi and not takes_q
    site = kernels.site() if fast else None  # this reduction's kernels, by the names it reduces over

    @functools.wraps(fn)
    def f(a, *args, axis=None, keepdims=False, **kwargs):
        if fast and not kwargs and type(a) is NamedArray and (  # x.sum("b"): the hot path
                not args or (len(args) == 1 and axis is None)):
            if args:
                axis = args[0]
            d = a.data
            if type(axis) is str and type(d) is _ArrayImpl and (keepdims is False or keepdims is True):
                # the kernel engine.reduce filed under this key: called here, as engine.fire would
                env = _env.current()
                kernel = site.get((axis, keepdims, a.names, None if env is _EMPTY else env))
                if kernel is not None:
                    out = kernel.jitted(d)
                    kernel.tick = next(_clock)
                    next(_stats.eager)
                    result = kernel.result
                    structure = result.single if not result.varies else result.lookup([d])
                    return _make(out, structure[1]) if structure[0] is _ONE else pack(out, structure)
            return engine.reduce(fn, a, axis, where, keepdims, site=site)
        if not isinstance(a, NamedArray):  # jax.numpy's own signature binds the positional arguments
            if axis is not None:
                kwargs["axis"] = axis
            return call(fn, (a, *args), dict(kwargs, **({"keepdims": True} if keepdims else {})), where)
        if takes_q:
            extra, args = args[:1], args[1:]  # q: leading positional axes of the result
            q = extra[0] if extra else kwargs.get("q")
            if isinstance(q, NamedArray) and q.names:
                raise PositionalMisuseError(
                    f"{where}: q has named axes {fmt_names(q.names)}, but its axes become leading positional "
                    f"axes of the result; to map over them: nx.nmap(lambda q: {where}(x, q, axis=...))(q)")
            engine.require_operands(where, (q,), ("q",))
        else:
            extra = ()
        if args:
            if axis is not None:
                raise TypeError(f"{where}() got multiple values for argument 'axis'")
            axis, args = args[0], args[1:]
        if args:
            raise TypeError(f"{where}: pass options by keyword (got extra positional arguments {args!r})")
        op = fn
        if _is_array(kwargs.get("where")):  # a mask broadcast by name, like any other operand
            mask = kwargs.pop("where")
            if isinstance(mask, NamedArray):  # a size conflict names the keyword, not "argument 1"
                join_sizes([engine.named_sizes(a), engine.named_sizes(mask)], where, ("argument 0", "where="))
            a, mask = engine.elementwise(_broadcast_pair, (a, mask), where)
            op, extra = _Masked(fn), extra + (mask,)
        arrays = sorted(k for k, v in kwargs.items() if _is_array(v))
        if arrays:
            raise TypeError(f"{where}: array-valued options {arrays} are not supported on NamedArrays")
        if axis is None:
            engine.check_reduces(a, where)
        if not multi and (axis is None or isinstance(axis, (tuple, list))) and not _has_name(axis):
            # one positional axis or the flattened positional part: exactly the positional semantics
            return engine.call_lifted(op, (a, *extra), dict(kwargs, axis=axis, **(
                {"keepdims": keepdims} if keepdims else {})), where)
        return engine.reduce(op, a, axis, where, keepdims, tuple(sorted(kwargs.items())), extra,
                             single=not multi)

    return f


_ArrayImpl = engine.ArrayImpl
_EMPTY = _env.EMPTY
_clock = kernels.clock
_stats = kernels.stats


def _broadcast_pair(a, b):
    return tuple(jnp.broadcast_arrays(a, b))


class _Masked:
    """``fn(a, ..., where=mask)`` with the mask (already aligned to ``a``) passed as the last operand."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, a, *extra, **kwargs):
        *rest, mask = extra
        return self.fn(a, *rest, where=mask.data if isinstance(mask, NamedArray) else mask, **kwargs)

    def __eq__(self, other):
        return isinstance(other, _Masked) and self.fn is other.fn

    def __hash__(self):
        return hash((_Masked, self.fn))


def _has_name(axis) -> bool:
    if isinstance(axis, str):
        return True
    return isinstance(axis, (tuple, list)) and any(isinstance(a, str) for a in axis)


def _along(fn: Callable, name: str) -> Callable:
    where = f"nx.{name}"
    params = list(inspect.signature(fn).parameters.values())[1:]
    # options after the array that may come by position (shift, n, kth, axis, dtype, ...), in order; a
    # function with *args (gradient's spacings) keeps its positional arguments
    slots = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
    default_axis = next((p.default for p in params if p.name == "axis"), None)
    positional = lifted.lift(fn, where, "", name)  # along positions: the checks of every lifted function

    @functools.wraps(fn)
    def f(a, *args, **kwargs):
        if args and not varargs:
            if len(args) > len(slots):
                raise TypeError(f"{where} takes at most {len(slots) + 1} positional arguments")
            given = dict(zip(slots, args))
            twice = sorted(set(given) & set(kwargs))
            if twice:
                raise TypeError(f"{where} got multiple values for {twice}")
            kwargs.update(given)
            args = ()
        axis = kwargs.get("axis", default_axis)
        if not isinstance(a, NamedArray) or not _has_name(axis):
            if isinstance(a, NamedArray) and axis is not None:
                # jnp would count the axis in the positional part alone and not say why it is missing
                engine.normalize_axis(axis, a, where)
            return positional(a, *args, **kwargs)
        kwargs.pop("axis")
        call = fn
        if args:  # gradient's spacings: positional options, static only
            if any(_is_array(v) for v in args):
                raise TypeError(f"{where}: along a named axis, spacings must be static numbers")
            call = _WithArgs(fn, args)
        arrays = _array_options(kwargs, name, where)
        # static options key the eager kernel cache: a list (split's sections) is hashed as a tuple
        static = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()))
        if arrays:  # traced options (roll's shift under jit) reach fn as operands of the kernel
            return engine.along(_ArrayOptions(call, tuple(arrays)), a, axis, where, static,
                                tuple(arrays.values()))
        return engine.along(call, a, axis, where, static)

    return f


def _array_options(kwargs: dict, name: str, where: str) -> dict:
    """Pop the array-valued options from ``kwargs``: ``{option: storage}``.

    They pair with the axis by position (a shift, a count per index), so one with named axes is refused:
    mapping it over its names is what :func:`nx.along <namedarray.along>` is for. ``repeat``'s counts set the
    output size: concrete counts give it (NumPy's behaviour), traced ones need ``total_repeat_length``, as in
    ``jnp.repeat``.

    >>> import namedarray as nx, jax, jax.numpy as jnp
    >>> x = nx.wrap(jnp.arange(3), ["t"])
    >>> jax.jit(lambda x, s: nx.roll(x, s, "t"))(x, jnp.array(1)).unwrap("t").tolist()
    [2, 0, 1]
    >>> nx.repeat(x, jnp.array([2, 0, 1]), axis="t").unwrap("t").tolist()
    [0, 0, 2]
    """
    arrays = {}
    if name == "repeat" and isinstance(kwargs.get("repeats"), (list, tuple)):  # NumPy takes a list of counts
        kwargs["repeats"] = np.asarray(kwargs["repeats"])
    for k in [k for k, v in kwargs.items() if _is_array(v)]:
        v = kwargs[k]
        if isinstance(v, NamedArray):
            if v.names:
                raise PositionalMisuseError(
                    f"{where}: option {k}= has named axes {fmt_names(v.names)}; along a named axis an array "
                    f"option pairs with positions. To give each index of those names its own {k}, write the "
                    f"positional call and run it along the axis: nx.along(name, lambda a, {k}: "
                    f"jnp.{name}(a, {k}, axis=-1))(x, {k})")
            v = v.data
        if name == "repeat" and k == "repeats" and kwargs.get("total_repeat_length") is None:
            if isinstance(v, jax.core.Tracer):
                raise TypeError(f"{where}: traced repeats need total_repeat_length= (the output size must be "
                                "known when tracing), as in jnp.repeat")
            if not np.ndim(v):
                kwargs[k] = int(v)
                continue
            # concrete counts fix the output size: pass it, and the counts stay an operand
            kwargs["total_repeat_length"] = int(np.sum(np.asarray(v)))
        del kwargs[k]
        arrays[k] = v
    return arrays


class _ArrayOptions:
    """``fn(a, **options)`` with the array options arriving as operands after ``a``, by keyword."""

    __slots__ = ("fn", "keys")

    def __init__(self, fn: Callable, keys: tuple[str, ...]):
        self.fn, self.keys = fn, keys

    def __call__(self, a, *arrays, **kwargs):
        return self.fn(a, **dict(zip(self.keys, arrays)), **kwargs)

    def __eq__(self, other):
        return isinstance(other, _ArrayOptions) and self.fn == other.fn and self.keys == other.keys

    def __hash__(self):
        return hash((self.fn, self.keys))


class _WithArgs:
    """``fn(a, *args, **kw)`` as a hashable callable of ``a``: static options key the eager kernel cache."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable, args: tuple):
        self.fn, self.args = fn, args

    def __call__(self, a, **kwargs):
        return self.fn(a, *self.args, **kwargs)

    def __eq__(self, other):
        return isinstance(other, _WithArgs) and self.fn is other.fn and self.args == other.args

    def __hash__(self):
        return hash((self.fn, self.args))


def _unstack(x, /, *, axis: int | str = 0):
    """``jnp.unstack``; along a name, the pieces are the array indexed at each position of that name."""
    if isinstance(x, NamedArray) and isinstance(axis, str):
        if axis not in x.names:
            engine.normalize_axis(axis, x, "nx.unstack")  # raises the error naming the value's axes
        return tuple(x[{axis: i}] for i in range(x.named_shape[axis]))
    return engine.call_lifted(jnp.unstack, (x,), {"axis": axis}, "nx.unstack")


def _lifted_module(sub: str) -> types.ModuleType:
    """``nx.linalg``/``nx.fft``: every function of ``jax.numpy.<sub>`` lifted over named axes."""
    src = getattr(jnp, sub)
    mod = types.ModuleType(f"namedarray.{sub}", f"``jax.numpy.{sub}``, each function lifted over named axes "
                                                f"(positional arguments keep their meaning).")
    for name in dir(src):
        if not name.startswith("_"):
            obj = getattr(src, name)
            if callable(obj) and not isinstance(obj, type):
                registry.declare_default(obj, _lifted(obj, f"{sub}.{name}"))
                obj = registry.named(obj)  # a named implementation declared elsewhere wins
            setattr(mod, name, obj)
    sys.modules[mod.__name__] = mod  # so that `from namedarray.linalg import det` works too
    return mod


def _dtype_query(fn: Callable) -> Callable:
    """Functions that only look at dtypes (``can_cast``, ``result_type``, ...) see a NamedArray's storage."""
    # can_cast deprecates arrays as its `from_`; the others need the array (weak types, complexness)
    as_dtype = fn is jnp.can_cast
    where = f"nx.{fn.__name__}"

    @functools.wraps(fn)
    def f(*args, **kwargs):
        args = tuple((a.dtype if as_dtype else a.data) if isinstance(a, NamedArray) else a for a in args)
        try:
            return fn(*args, **kwargs)
        except (TypeError, ValueError) as e:
            for i, a in enumerate(args):
                if not _has_dtype(a):
                    raise wrong_type(where, f"argument {i}", a, "an array, a scalar or a dtype") from e
            if type(e) in (TypeError, ValueError):
                raise type(e)(f"{where}: {e}") from e  # jax's message names no function
            raise

    return f


def _has_dtype(v: Any) -> bool:
    """Whether ``v`` is an array, a scalar or a dtype (what the dtype queries take)."""
    if isinstance(v, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
        return True
    if v is None or isinstance(v, (list, tuple, set, frozenset, dict)):
        return False
    try:
        np.dtype(v)
    except (TypeError, ValueError):
        return False
    return True


def _value_dependent(fn: Callable, name: str) -> Callable:
    where = f"nx.{name}"

    @functools.wraps(fn)
    def f(*args, **kwargs):
        return _positional_call(fn, args, kwargs, where)

    return f


def _positional_call(fn: Callable, args: tuple, kwargs: dict, where: str) -> Any:
    """``fn`` on positional values, for functions whose output size depends on the values (``unique``).

    They cannot map over names, and NumPy's flattening (``unique``, ``flatnonzero``, ``setdiff1d``, ...) would
    need an order of the named axes, so an argument with named axes is a :class:`PositionalMisuseError`
    naming it. NamedArrays without names are computed on positionally, and the results are NamedArrays
    without names (tuples and named tuples of them keep their type); plain arrays give jax's results.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.unique(nx.wrap(jnp.array([3, 1, 3]))).tolist()
    [1, 3]
    >>> x = nx.wrap(jnp.array([[3, 1], [1, 2]]), ["a", "b"])
    >>> nx.unique(x.untag("a", "b"), size=3).tolist()   # flattened in the order the names are given
    [1, 2, 3]
    """
    named = False

    def positional(v, label):
        nonlocal named
        if type(v) is not NamedArray:
            return v
        if v.names:
            order = ", ".join(repr(n) for n in v.names)
            raise PositionalMisuseError(
                f"{where}: {label} has named axes {fmt_names(v.names)} (positional shape {v.shape}); its "
                f"output size depends on the values, so it cannot map over names, and where it flattens it "
                f"would need an order for them. Make them positional in the order you mean first: "
                f"x.untag({order})")
        named = True
        return v.data

    axis = kwargs.get("axis")
    if isinstance(axis, str):
        raise AxisSpecError(f"{where}: axis={axis!r} is a name, but {where} takes positional axes only (its "
                            f"output size depends on the values); make the axis positional first: "
                            f"x.untag({axis!r}) puts it last")
    args = tuple(positional(v, f"argument {i}") for i, v in enumerate(args))
    kwargs = {k: positional(v, f"keyword argument {k!r}") for k, v in kwargs.items()}
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        wrong = mistyped(fn, args, kwargs, where, e)
        if wrong is not None:
            raise wrong from e
        raise
    if not named:
        return out
    return jax.tree.map(lambda o: _make(o, ()) if isinstance(o, jax.Array) else o, out)


def _lifted(fn: Callable, name: str) -> Callable:
    module, _, short = name.rpartition(".")
    return lifted.lift(fn, f"nx.{name}", module, short)


def _where(condition, x=None, y=None, /, *, size=None, fill_value=None):
    if x is None and y is None:  # nonzero: its output size depends on the values
        return _positional_call(jnp.where, (condition,), {"size": size, "fill_value": fill_value}, "nx.where")
    return engine.elementwise(jnp.where, (condition, x, y), "nx.where")


def _clip(arr, /, min=None, max=None, *, a_min=None, a_max=None):
    """``jnp.clip`` with its bounds broadcast by name (``a_min``/``a_max``: NumPy's names, for np.clip)."""
    lo = min if a_min is None else a_min
    hi = max if a_max is None else a_max
    return engine.elementwise(jnp.clip, (arr, lo, hi), "nx.clip")


def _trapezoid(y, x=None, dx=1.0, axis: int | str = -1):
    """``jnp.trapezoid``; along a name, sample points ``x`` that carry that name are matched by it."""
    if isinstance(axis, str) and isinstance(y, NamedArray):
        return engine.run(_trapezoid_impl, (axis, "nx.trapezoid"), (y, x, dx))
    return _positional_trapezoid(y, x, dx, axis=axis)


_positional_trapezoid = lifted.lift(jnp.trapezoid, "nx.trapezoid", "", "trapezoid")


def _trapezoid_impl(static, y, x, dx):
    name, where = static
    if name not in y.names:
        engine.normalize_axis(name, y, where)  # raises the error naming the value's axes
    y = name_to_position(y, name, where=where)
    if isinstance(x, NamedArray) and name in x.names:
        x = name_to_position(x, name, where=where)
    return engine.call_lifted(jnp.trapezoid, (y, x, dx), {"axis": -1}, where)


def _shape(a) -> tuple[int, ...]:
    """``jnp.shape``; of a NamedArray, its positional shape (named axes excluded, as in xmap)."""
    return a.shape if isinstance(a, NamedArray) else jnp.shape(a)


def _ndim(a) -> int:
    """``jnp.ndim``; of a NamedArray, its number of positional axes (named axes excluded, as in xmap)."""
    return a.ndim if isinstance(a, NamedArray) else jnp.ndim(a)


def _size(a, axis: int | tuple[int, ...] | None = None) -> int:
    """``jnp.size``; of a NamedArray, the size of its positional part (named axes excluded, as in xmap)."""
    if not isinstance(a, NamedArray):
        return call(jnp.size, (a, axis), {}, "nx.size")
    if axis is None:
        return a.size
    ints, names = engine.normalize_axis(axis, a, "nx.size")  # positions in range, with the error naming them
    if names:
        raise AxisSpecError(f"nx.size: axis counts positional axes only (named axes are not part of the "
                            f"size, as in xmap), got {axis!r}; the size of a named axis is "
                            "x.named_shape[name]")
    return math.prod(a.shape[i] for i in ints)


# --------------------------------------------------------------------------------------------------------
# Whole-value predicates


def _operand(v: Any, where: str, what: str) -> NamedArray:
    return v if type(v) is NamedArray else _make(to_storage(v, where, what), ())


def _free(sizes: dict[str, int]) -> dict[str, int]:
    """The named sizes a predicate compares whole: every name but those an enclosing ``nx.xmap`` or
    ``nx.shard_map`` binds, which stay per element (a body sees one element of each bound name)."""
    bound = _env.current().sizes
    return {n: s for n, s in sizes.items() if n not in bound} if bound else sizes


def _verdict(false: bool, op: Callable, where: str, operands: tuple, kwargs: tuple) -> NamedArray:
    if false:  # the shapes alone decide: a constant, per element of the bound names
        sizes = {n: s for v in operands if type(v) is NamedArray for n, s in named_sizes(v).items()}
        kept = tuple(n for n in sizes if n not in _free(sizes))
        return _make(jnp.zeros(tuple(sizes[n] for n in kept), bool), kept)
    return engine.run(_whole_impl, (op, kwargs, where), operands)


def _whole_impl(static, *operands):
    op, kwargs, where = static
    same = engine.elementwise(op, operands, where, kwargs)
    if type(same) is not NamedArray:
        same = _make(same, ())
    names = tuple(_free(named_sizes(same)))
    return engine.reduce(jnp.all, same, tuple(range(same.ndim)) + names, where)


def _equal_nan(a, b):
    return (a == b) | (jnp.isnan(a) & jnp.isnan(b))


def _broadcastable(*shapes: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        return False
    return True


@registry.implements(jnp.array_equal)
def array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> Any:
    """Whether ``a1`` and ``a2`` are the same value: the same named shape (names and sizes, in any storage
    order), the same positional shape, and equal elements (NaNs equal with ``equal_nan``).

    The result is a 0-d NamedArray without names, as ``jnp.array_equal``'s is a 0-d array, so ``bool()``
    takes it; a different shape gives False, not an error, as in NumPy. Names bound by an enclosing
    ``nx.xmap`` (or ``nx.shard_map``) are per element there, as in xmap: the result keeps them. Without a
    NamedArray operand this is ``jnp.array_equal``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.ones({"a": 2, "b": 3})
    >>> bool(nx.array_equal(x, nx.ones({"b": 3, "a": 2}))), bool(nx.array_equal(x, nx.ones(())))
    (True, False)
    """
    where = "nx.array_equal"
    if type(a1) is not NamedArray and type(a2) is not NamedArray:
        return jnp.array_equal(a1, a2, equal_nan=equal_nan)
    a, b = _operand(a1, where, "a1"), _operand(a2, where, "a2")
    differ = a.shape != b.shape or _free(named_sizes(a)) != _free(named_sizes(b))
    return _verdict(differ, _equal_nan if equal_nan else jnp.equal, where, (a, b), ())


@registry.implements(jnp.array_equiv)
def array_equiv(a1: Any, a2: Any) -> Any:
    """Whether ``a1`` and ``a2`` are equal once one is broadcast to the other, as ``np.array_equiv`` says.

    By name, one operand's named shape must hold the other's (each name of the smaller one, with the same
    size), so that the smaller broadcasts into the larger: values over different names (``{"a": 2}`` and
    ``{"c": 4}``) are not equivalent, whatever their elements. Positional shapes must broadcast together by
    NumPy's rules, as in ``np.array_equiv``. Shapes that do not fit give False, not an error.

    The result is a 0-d NamedArray without names (``bool()`` takes it); names bound by an enclosing
    ``nx.xmap`` stay per element. Without a NamedArray operand this is ``jnp.array_equiv``.

    >>> import namedarray as nx
    >>> x = nx.ones({"a": 2, "b": 3})
    >>> bool(nx.array_equiv(x, nx.ones({"b": 3}))), bool(nx.array_equiv(x, 1.0))
    (True, True)
    >>> bool(nx.array_equiv(x, nx.ones({"c": 4}))), bool(nx.array_equiv(x, nx.ones({"b": 4})))
    (False, False)
    """
    where = "nx.array_equiv"
    if type(a1) is not NamedArray and type(a2) is not NamedArray:
        return jnp.array_equiv(a1, a2)
    a, b = _operand(a1, where, "a1"), _operand(a2, where, "a2")
    sa, sb = _free(named_sizes(a)).items(), _free(named_sizes(b)).items()
    fits = (sa <= sb or sb <= sa) and _broadcastable(a.shape, b.shape)
    return _verdict(not fits, jnp.equal, where, (a, b), ())


@registry.implements(jnp.allclose)
def allclose(a: Any, b: Any, rtol: Any = 1e-05, atol: Any = 1e-08, equal_nan: bool = False) -> Any:
    """Whether ``a`` and ``b`` are close everywhere: ``nx.isclose`` (which broadcasts by name, as
    ``np.allclose`` broadcasts) true at every element of every axis, named and positional.

    Operands broadcast as for any elementwise function: a name one operand lacks is broadcast along, a name
    with two sizes is an :class:`~namedarray.errors.AxisSizeError`, and positional shapes follow NumPy's
    rules. ``rtol`` and ``atol`` may be arrays, broadcast the same way. The result is a 0-d NamedArray
    without names (``bool()`` takes it); names bound by an enclosing ``nx.xmap`` stay per element. Without a
    NamedArray operand this is ``jnp.allclose``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.array([[1.0, 2.0], [3.0, 4.0]]), ["a", "b"])
    >>> bool(nx.allclose(x, nx.wrap(jnp.array([[1.0, 3.0], [2.0, 4.0]]), ["b", "a"]) + 1e-9))  # by name
    True
    >>> bool(nx.allclose(x, nx.wrap(jnp.array([[1.0, 2.0], [3.0, 4.0]]), ["b", "a"])))
    False
    """
    where = "nx.allclose"
    operands = (a, b, rtol, atol)
    if not any(type(v) is NamedArray for v in operands):
        return jnp.allclose(a, b, rtol, atol, equal_nan)
    a, b = _operand(a, where, "a"), _operand(b, where, "b")
    return _verdict(False, jnp.isclose, where, (a, b, rtol, atol), (("equal_nan", bool(equal_nan)),))


@registry.implements(jnp.isin)
def isin(element: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False, *,
         method: str = "auto") -> Any:
    """Elementwise over ``element``: whether each element occurs in ``test_elements``, as a whole.

    ``test_elements`` is a set of values: its positional axes and the names that ``element`` lacks are all
    searched (their order does not matter to membership). A name both carry matches element to element, as
    everywhere: each element is looked for among the test values at its own position along that name. The
    result has ``element``'s named and positional shape (and the shared names). Names bound by an enclosing
    ``nx.xmap`` stay per element.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> x = nx.wrap(jnp.array([1, 2, 3]), ["k"])
    >>> table = nx.wrap(jnp.array([[1, 5], [7, 3]]), ["r", "c"])
    >>> nx.isin(x, table).unwrap(["k"]).tolist()
    [True, False, True]
    """
    where = "nx.isin"
    if type(test_elements) is NamedArray:
        own = element.names if type(element) is NamedArray else ()
        bound = _env.current().sizes
        for n in [n for n in test_elements.names if n not in own and n not in bound]:
            test_elements = name_to_position(test_elements, n, where=where)  # one more axis of the set
    return engine.call_lifted(jnp.isin, (element, test_elements),
                              {"assume_unique": assume_unique, "invert": invert, "method": method}, where)


def _declarations() -> dict[str, tuple[str, Any]]:
    """Every ``nx.<f>`` the mirror declares: name -> (how it is made, from what), in ``jax.numpy``'s order.

    Reading the declarations builds nothing: :data:`FUNCTIONS` makes each function when it is first asked
    for (a program uses a few dozen of some 500, and making one reads jax's signature and documentation).
    """
    out: dict[str, tuple[str, Any]] = {}
    for name in dir(jnp):
        if name.startswith("_") or name in EXCLUDED or name in WHOLE or name in WRITTEN_ELSEWHERE:
            continue
        obj = getattr(jnp, name)
        if isinstance(obj, type) or not callable(obj) or name in PASSTHROUGH:
            out[name] = ("as is", obj)
        elif name in UNARY or name in ("power", "pow") or name in BINARY:
            out[name] = ("elementwise", obj)
        elif name in REDUCTIONS:
            out[name] = ("reduction" if REDUCTIONS[name] else "single", obj)
        elif name in ALONG:
            out[name] = ("along", obj)
        elif name in VALUE_DEPENDENT:
            out[name] = ("positional", obj)
        else:
            out[name] = ("lifted", obj)
    for name in DTYPE_QUERIES:
        out[name] = ("dtype", getattr(jnp, name))
    out["unstack"] = ("along", jnp.unstack)
    for sub in SUBMODULES:
        out[sub] = ("module", getattr(jnp, sub))
    for name in ("where", "clip", "trapezoid", "shape", "ndim", "size"):
        out[name] = ("written out", getattr(jnp, name))
    return out


_WRITTEN_OUT: dict[str, tuple[Callable, str]] = {
    "where": (_where, "elementwise"), "clip": (_clip, "elementwise"), "trapezoid": (_trapezoid, "along")}


def _make_function(name: str, how: str, obj: Any) -> Any:
    """``nx.<name>`` as :func:`_declarations` declares it."""
    if how == "as is":
        return obj
    if how == "module":
        return _lifted_module(name)
    if how == "written out":
        if name in ("shape", "ndim", "size"):
            f = {"shape": _shape, "ndim": _ndim, "size": _size}[name]
            f.__name__ = f.__qualname__ = name
            return f
        impl, kind = _WRITTEN_OUT[name]
        return document(functools.wraps(obj)(impl), kind, f"nx.{name}", obj)
    if how == "dtype":
        return document(_dtype_query(obj), "dtype", f"nx.{name}", obj)
    if name == "unstack":
        return document(functools.wraps(jnp.unstack)(_unstack), "along", "nx.unstack", jnp.unstack)
    if name in ("power", "pow"):
        f = _power(_elementwise(obj, name, 2), obj, name)
    elif how == "elementwise":
        f = _elementwise(obj, name, 1 if name in UNARY else 2)
    elif how in ("reduction", "single"):
        f = _reduction(obj, name, REDUCTIONS[name])
    elif how == "along":
        f = _along(obj, name)
    elif how == "positional":
        f = _value_dependent(obj, name)
    else:
        f = _lifted(obj, name)
    return document(f, how, f"nx.{name}", obj)


class _Functions(Mapping):
    """The mirror's functions by name, each made on first use and kept from then on (``nx.sum`` is always
    the same object: this is a table of the package's functions, not a cache, and nothing clears it)."""

    def __init__(self, declarations: dict[str, tuple[str, Any]]):
        self._declarations = declarations
        self._made: dict[str, Any] = {}
        self._lock = threading.RLock()  # making linalg's functions asks the registry, which may ask here

    def __getitem__(self, name: str) -> Any:
        f = self._made.get(name, _UNMADE)
        if f is _UNMADE:
            how, obj = self._declarations[name]  # KeyError: not the mirror's
            with self._lock:
                f = self._made.get(name, _UNMADE)
                if f is _UNMADE:
                    f = self._made[name] = _make_function(name, how, obj)
        return f

    def __contains__(self, name: object) -> bool:
        return name in self._declarations

    def __iter__(self):
        return iter(self._declarations)

    def __len__(self) -> int:
        return len(self._declarations)


_UNMADE = object()


def build() -> dict[str, Callable]:
    """Every ``nx.<f>`` the mirror declares, by name, made now (:data:`FUNCTIONS` makes each on first use).

    >>> f = build()["cumsum"]; f.__name__, f is FUNCTIONS["cumsum"], build()["float32"] is jnp.float32
    ('cumsum', True, True)
    """
    return dict(FUNCTIONS.items())


_DECLARED = _declarations()
FUNCTIONS: Mapping[str, Any] = _Functions(_DECLARED)
for _sub in SUBMODULES:  # (their functions declare their own defaults as they are made)
    FUNCTIONS[_sub]
for _name, (_how, _obj) in _DECLARED.items():
    if _how != "module" and callable(_obj) and not isinstance(_obj, type):
        # what nx.xmap, the operators and nx.nmap of a jax function find: nx.<f>, made when first asked for
        if _how == "as is":
            registry.declare_default(_obj, _obj)
        else:
            registry.declare_default(_obj, functools.partial(FUNCTIONS.__getitem__, _name), deferred=True)

# The generated mirror and the functions written out here, listed here and nowhere else: the package root
# exports every name, each read from here when first asked for (its named implementations replace some).
__all__ = sorted({*FUNCTIONS, *WHOLE, *WRITTEN_ELSEWHERE})


def __getattr__(name: str):
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *FUNCTIONS})
