"""jax's functions lifted over named axes, and what positional axes each of them needs.

``nx.lax``, ``nx.nn``, ``nx.random``, ``nx.linalg``, ``nx.fft`` and the plain ``nx.<f>`` of ``jax.numpy``
define the functions whose arguments mean more than positions (collectives, axes by name, named shapes);
every other jax function is :func:`lift`-ed: it runs as if vmapped over the named axes of its NamedArray
arguments, so it sees their *positional* axes only. :func:`rest_of` hands a module's other attributes to it.

A lifted function that acts along axes must not quietly run on the wrong ones: on a value whose names leave
it too few positional axes (``nx.fft.fft`` of an all-named value would transform scalars), or with an axis
argument beyond them, it raises :class:`~namedarray.errors.PositionalAxisError` naming the positional
shape, the named axes and the spelling that works. What each function needs is declared here once:

* every axis argument (``axis``, ``axes``, ``dimension``, ...) counts the positional axes of the array it
  refers to (the first argument unless :data:`AXIS_OF` says otherwise), defaults included;
* :data:`MIN_RANK` lists functions that act on trailing positional axes with no axis argument (matrix
  functions need two, ``lax.dot`` one, convolutions three, ...);
* :data:`ALL_AXES`: functions whose ``axis=None`` means every positional axis, which on a value with names
  and no positional axis would do nothing; outside ``nx.xmap`` bodies that is an error, as for reductions.

Errors jax raises inside a lifted call say which function was lifted over which names.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> nx.lax.cummax(nx.wrap(jnp.array([[1, 3, 2]]), ["b", ...]), axis=0).unwrap(["b", ...]).tolist()
[[1, 3, 3]]
>>> try:
...     nx.fft.fft(nx.wrap(jnp.ones(4), ["t"]))
... except nx.errors.PositionalAxisError as e:
...     print(str(e)[:80])
nx.fft.fft: axis=-1 counts positional axes, and the argument 'a' has none (posit
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from ..core import caches
from ..core import env as _env
from ..core.array import NamedArray
from ..errors import AxisSpecError, NamedAxisError, PositionalAxisError, describe, fmt_names
from . import dispatch as engine
from .docstrings import document

__all__ = ["rest_of", "lift", "has_name", "AXIS_PARAMS", "MIN_RANK", "AXIS_OF", "ALL_AXES"]

#: Parameters through which jax's functions take axis positions.
AXIS_PARAMS = frozenset("""axis axes axis1 axis2 axisa axisb axisc source destination dimension dimensions
reduction_dimension start_dimension stop_dimension""".split())

_MATRIX = """cholesky cond det eig eigh eigvals eigvalsh inv matrix_norm matrix_power matrix_rank
matrix_transpose pinv qr slogdet svd svdvals diagonal trace tensorinv""".split()

#: ``module -> function -> {argument: least positional rank}`` for functions acting on trailing positional
#: axes without an axis argument (module ``""`` is ``jax.numpy``).
MIN_RANK: dict[str, dict[str, dict[str, int]]] = {
    "linalg": {**{f: {"#0": 2} for f in _MATRIX}, "lstsq": {"a": 2, "b": 1}, "solve": {"a": 2, "b": 1},
               "multi_dot": {"arrays": 1},
               "outer": {"#0": 1, "#1": 1}, "matmul": {"#0": 1, "#1": 1}, "tensorsolve": {"a": 1, "b": 1}},
    "lax": {"batch_matmul": {"lhs": 2, "rhs": 2}, "dot": {"lhs": 1, "rhs": 1},
            **{f: {"lhs": 3, "rhs": 3} for f in ("conv", "conv_general_dilated", "conv_general_dilated_local",
                                                 "conv_transpose", "conv_with_general_padding")},
            "conv_general_dilated_patches": {"lhs": 3}, "ragged_dot": {"lhs": 2, "rhs": 3}},
    "nn": {"dot_product_attention": {"query": 3, "key": 3, "value": 3},
           "scaled_matmul": {"lhs": 3, "rhs": 3}},
    "random": {"dirichlet": {"alpha": 1}, "multivariate_normal": {"mean": 1, "cov": 2},
               "multinomial": {"p": 1}},
    "": {"matrix_transpose": {"#0": 2}, "vander": {"#0": 1}, "polyval": {"#0": 1}, "polyder": {"#0": 1},
         "polyint": {"#0": 1},
         **{f: {"#0": 1, "#1": 1} for f in ("polyadd", "polysub", "polymul", "polydiv")},
         "hsplit": {"#0": 1}, "vsplit": {"#0": 2}, "dsplit": {"#0": 3}, "digitize": {"bins": 1},
         "trapezoid": {"x": 1}, "vecdot": {"#0": 1, "#1": 1}, "matvec": {"#0": 2, "#1": 1},
         "vecmat": {"#0": 1, "#1": 2},
         **{f: {"#0": 1, "#1": 1} for f in ("convolve", "correlate", "inner", "kron")}},
}

#: ``(module, function) -> {axis parameter: the argument it counts axes of}``, where that is not the first
#: argument; None: the parameter does not count input axes (``expand_dims``: positions in the result).
AXIS_OF: dict[tuple[str, str], dict[str, str | None]] = {
    ("", "cross"): {"axisb": "b", "axisc": None, "axis": "a"},
    ("", "expand_dims"): {"axis": None},
    ("", "tensordot"): {"axes": None},
    ("linalg", "tensordot"): {"axes": None},
    ("", "lexsort"): {"axis": None},
    ("", "apply_along_axis"): {"axis": "arr"},
    ("", "apply_over_axes"): {"axes": "a"},
    ("", "put_along_axis"): {"axis": "arr"},
    ("lax", "expand_dims"): {"dimensions": None},
    ("lax", "stack"): {"axis": None},
    ("lax", "broadcasted_iota"): {"dimension": None},
    ("random", "choice"): {"axis": "a"},
}

#: ``(module, function) -> parameter`` whose ``None`` means every positional axis of the first argument.
ALL_AXES: dict[tuple[str, str], str] = {
    **{("", f): "axis" for f in ("average", "cumsum", "cumprod", "nancumsum", "nancumprod", "flip", "roll",
                                 "minmax")},  # (minmax: newer jax.numpy's min and max at once)
    **{("fft", f): "axes" for f in ("fftn", "ifftn", "rfftn", "irfftn", "fftshift", "ifftshift")},
}


class _Needs:
    """What one lifted function needs of its arguments' positional axes, read from its signature once."""

    __slots__ = ("signature", "axes", "ranks", "all_axes", "counts", "where")

    def __init__(self, fn: Callable, module: str, name: str, where: str):
        self.where = where
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin without a signature: nothing to check
            self.signature = None
            self.axes, self.ranks, self.all_axes, self.counts = {}, {}, None, None
            return
        params = list(self.signature.parameters)
        first = params[0] if params else None
        targets = AXIS_OF.get((module, name), {})
        self.axes = {p: targets.get(p, first) for p in params if p in AXIS_PARAMS}
        self.axes = {p: t for p, t in self.axes.items() if t is not None}
        self.ranks = {(params[int(a[1:])] if a.startswith("#") else a): r
                      for a, r in MIN_RANK.get(module, {}).get(name, {}).items()}
        self.all_axes = ALL_AXES.get((module, name))
        self.counts = "axes" if name == "tensordot" else None

    def active(self) -> bool:
        return bool(self.axes or self.ranks or self.all_axes or self.counts)

    def check(self, args: tuple, kwargs: dict) -> None:
        """Raise :class:`PositionalAxisError` when the call's arguments lack the positional axes it needs."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return  # a wrong call: jax says so
        bound.apply_defaults()
        values = bound.arguments
        for arg, rank in self.ranks.items():
            for x in _named_arrays(values.get(arg)):
                if x.ndim < rank:
                    raise PositionalAxisError(
                        f"{self.where}: it acts on {rank} positional ax{'is' if rank == 1 else 'es'} of "
                        f"{_arg(arg)}, which has {_shape(x)}: named axes are mapped over, not acted on. Give "
                        f"the axes it needs positions first (x.untag(...), nx.rearrange)")
        if self.counts is not None:
            n = values.get(self.counts)
            if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
                for arg in list(values)[:2]:
                    for x in _named_arrays(values.get(arg)):
                        if x.ndim < n:
                            raise PositionalAxisError(
                                f"{self.where}: {self.counts}={n} contracts {n} positional axes of "
                                f"{_arg(arg)}, which has {_shape(x)}: give the axes positions first "
                                "(x.untag(...)), or contract names with nx.tensordot/nx.dot/nx.einsum")
        for param, arg in self.axes.items():
            value = values.get(param)
            for x in _named_arrays(values.get(arg)):
                if value is None:
                    if self.all_axes == param and x.ndim == 0 and not _env.current().sizes:
                        raise PositionalAxisError(
                            f"{self.where}: {param}=None means every positional axis of {_arg(arg)}, which "
                            f"has none ({_shape(x)}), so it would act on nothing. Say which axes to act "
                            f"along: by name where it takes names ({param}={x.names[0]!r}), else give them "
                            f"positions first (x.untag({x.names[0]!r}))")
                    continue
                for a in (value if isinstance(value, (tuple, list)) else (value,)):
                    if isinstance(a, (int, np.integer)) and not isinstance(a, bool) and not (
                            -x.ndim <= a < x.ndim):
                        raise PositionalAxisError(
                            f"{self.where}: {param}={value!r} counts positional axes, and {_arg(arg)} has "
                            f"{'none' if not x.ndim else x.ndim} ({_shape(x)}): named axes are mapped over, "
                            "not counted. Give the axis a position first (x.untag(name)), or use an nx "
                            "function that takes names in its axis argument")

    def plain_error(self, args: tuple, kwargs: dict) -> PositionalAxisError | None:
        """After a failed call, the :class:`PositionalAxisError` for a plain argument (a scalar, a jax or
        NumPy array) with fewer axes than the function acts on or than an axis argument counts, if any: jax's
        own error for it is an ``IndexError`` or ``len() of unsized object`` from deep inside."""
        if self.signature is None:
            return None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        values = bound.arguments
        for arg, rank in self.ranks.items():
            nd = _plain_ndim(values.get(arg))
            if nd is not None and nd < rank:
                return PositionalAxisError(
                    f"{self.where}: it acts on {rank} ax{'is' if rank == 1 else 'es'} of {_arg(arg)}, which "
                    f"has {nd or 'none'} (got {describe(values.get(arg))})")
        for param, arg in self.axes.items():
            value, nd = values.get(param), _plain_ndim(values.get(arg))
            if nd is None or value is None:
                continue
            for a in (value if isinstance(value, (tuple, list)) else (value,)):
                if isinstance(a, (int, np.integer)) and not isinstance(a, bool) and not -nd <= a < nd:
                    return PositionalAxisError(
                        f"{self.where}: {param}={value!r} is out of range for {_arg(arg)}, which has "
                        f"{nd or 'no'} ax{'i' if nd == 1 else 'e'}s (got {describe(values.get(arg))})")
        return None


def _plain_ndim(v: Any) -> int | None:
    """The number of axes of a plain scalar or array (None for anything else: NamedArrays, lists, None)."""
    if v is None or isinstance(v, bool) or type(v) is NamedArray:
        return None
    if isinstance(v, (int, float, complex, np.generic)):
        return 0
    nd = getattr(v, "ndim", None)
    return nd if isinstance(nd, int) else None


def _named_arrays(v: Any) -> list[NamedArray]:
    """The NamedArrays with names in ``v`` (an argument, or a sequence of them: ``lax.concatenate``)."""
    if type(v) is NamedArray:
        return [v] if v.names else []
    if isinstance(v, (tuple, list)):
        return [x for x in v if type(x) is NamedArray and x.names]
    return []


def _arg(arg: str) -> str:
    return f"the argument {arg!r}"


def _shape(x: NamedArray) -> str:
    return f"positional shape {x.shape}, named axes {fmt_names(x.names)}"


def has_name(v: Any) -> bool:
    """Whether an axis argument holds a name (a str, or a tuple or list with one)."""
    if isinstance(v, str):
        return True
    return isinstance(v, (tuple, list)) and any(isinstance(a, str) for a in v)


_PLAIN_ERRORS = (TypeError, ValueError, IndexError, np.exceptions.AxisError)


def lift(fn: Callable, where: str, module: str = "", name: str | None = None) -> Callable:
    """``fn`` lifted over named axes, checking what positional axes it needs first (see the module doc).

    >>> import jax.numpy as jnp, namedarray as nx
    >>> det = lift(jnp.linalg.det, "nx.linalg.det", "linalg", "det")
    >>> det(nx.wrap(jnp.eye(2)[None].repeat(3, 0), ["b", ...])).named_shape
    {'b': 3}
    """
    needs = _Needs(fn, module, name or getattr(fn, "__name__", ""), where)
    positions = {p: i for i, p in enumerate(needs.signature.parameters)} if needs.signature else {}
    axis_params = [p for p in positions if p in AXIS_PARAMS]
    checked = needs.active()

    @functools.wraps(fn)
    def lifted(*args, **kwargs):
        named = [v for v in (*args, *kwargs.values()) if type(v) is NamedArray and v.names]
        if not named and not any(_named_arrays(v) for v in args if isinstance(v, (tuple, list))):
            try:
                return engine.call_lifted(fn, args, kwargs, where)
            except NamedAxisError:
                raise
            except _PLAIN_ERRORS as e:
                # jax names its own function, or none
                _reraise(e, needs, args, kwargs, where, f"{where}: {e}")
        for p in axis_params:  # a lifted function only sees positional axes: say so, not int(name)
            i = positions[p]
            v = args[i] if i < len(args) else kwargs.get(p)
            if has_name(v):
                raise AxisSpecError(
                    f"{where} is lifted over named axes, so its {p} counts positional axes only; got {v!r}. "
                    "The named axes are mapped over, not addressed: to act along one, give it a position "
                    "first (x.untag(name))")
        if checked:
            needs.check(args, kwargs)
        try:
            return engine.call_lifted(fn, args, kwargs, where)
        except NamedAxisError:
            raise
        except _PLAIN_ERRORS as e:
            shapes = "; ".join(f"{_shape(x)}" for x in named)
            _reraise(e, needs, args, kwargs, where,
                     f"{e} [{where} is lifted over named axes and sees positional axes only: {shapes}]")

    return document(lifted, "lifted", where, fn)


def _reraise(e: Exception, needs: Any, args: tuple, kwargs: dict, where: str, message: str) -> None:
    """Raise what a failed lifted call means: the mistyped argument when one is plainly wrong, else ``e``
    with ``message``; jax's own error classes (ConcretizationTypeError, ...) and nx's messages stay."""
    wrong = needs.plain_error(args, kwargs)
    if wrong is not None:
        raise wrong from e
    if type(e) not in _PLAIN_ERRORS or str(e).startswith(f"{where}: "):
        raise e
    raise type(e)(message) from e


def rest_of(jax_module: types.ModuleType, namespace: Mapping[str, Any],
            passthrough: Collection[str] = (), cache_name: str | None = None,
            ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for a module whose globals are ``namespace``, mirroring ``jax_module``:
    a function becomes :func:`lift` of it (built once), while classes, submodules, constants and the
    ``passthrough`` functions are jax's own. The functions built are a cache registered as ``cache_name``
    (by default "lifted functions of" the module's name: one per mirrored module).

    >>> import jax
    >>> getattr_, dir_ = rest_of(jax.nn, {}, cache_name="doc lifted")
    >>> getattr_("relu") is getattr_("relu"), "relu" in dir_()
    (True, True)
    """
    # At most one per function of jax_module (its bound). A lookup or a store is one dict operation, atomic
    # for threads; two threads lifting the same function at once build two equal wrappers and keep one.
    lifted: dict[str, Callable] = {}
    module_name = namespace.get("__name__", "namedarray")
    caches.register(cache_name or f"lifted functions of {jax_module.__name__}", lifted.clear, lifted.__len__)
    short = module_name.rsplit(".", 1)[-1]

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            obj = getattr(jax_module, name)
        except AttributeError:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r} (nor has "
                                 f"{jax_module.__name__})") from None
        if name in passthrough or isinstance(obj, (type, types.ModuleType)) or not callable(obj):
            return obj
        f = lifted.get(name)
        if f is None:
            f = lifted.setdefault(name, lift(obj, f"nx.{short}.{name}", short, name))
        return f

    def __dir__() -> list[str]:  # the module's public names and jax's, not what it imports
        public = {n for n in dir(jax_module) if not n.startswith("_")}
        return sorted(set(namespace.get("__all__", ())) | public)

    return __getattr__, __dir__
