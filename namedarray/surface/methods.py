"""NamedArray's operators, array methods and NumPy protocols, all routed to the ``nx.<f>`` functions.

Installed on the class when this module is imported (the package root imports it last), so the class body
stays about storage and types, and every operator goes through the same declared function as its ``nx.<f>``:
each is found in the registry (:mod:`namedarray.engine.registry`), where the layers below declared it.

>>> import namedarray as nx, jax.numpy as jnp, numpy as np
>>> x = nx.wrap(jnp.arange(3.0), ["b"])
>>> (jnp.ones(2)[:, None] + x).named_shape, np.exp(x).named_shape
({'b': 3}, {'b': 3})
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core.array import NamedArray
from ..core.wrapping import rename, unwrap, wrap
from ..engine import registry
from ..engine.docstrings import annotations
from ..errors import PositionalMisuseError, fmt_names
from ..ops import contract, indexing, structural  # noqa: F401  (their declarations replace the mirror's defaults)
from ..ops.mirror import EXCLUDED, FUNCTIONS
from ..ops.surgery import flatten, tag, unflatten, untag

__all__ = ["install"]


class _Namespace:
    """``nx.<name>`` as the layers below declared it: each jax.numpy function by its named implementation
    (the registry), and the nx functions that have no jax counterpart."""

    _OWN = {"wrap": wrap, "unwrap": unwrap, "rename": rename, "flatten": flatten, "unflatten": unflatten,
            "tag": tag, "untag": untag, "linalg": FUNCTIONS["linalg"], "fft": FUNCTIONS["fft"]}

    def __getattr__(self, name: str):
        f = self._OWN.get(name)
        if f is None:
            j = getattr(jnp, name, None)
            f = registry.named(j) if j is not None and not name.startswith("_") else None
        if f is None:
            raise AttributeError(f"nx has no function {name!r}")
        return f

_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "true_divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "power", "matmul": "matmul",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor", "lshift": "left_shift",
    "rshift": "right_shift", "divmod": "divmod",
}
# what an operator accepts on its other side; anything else gets NotImplemented, as jax.Array does
_OPERANDS = (NamedArray, jax.Array, np.ndarray, np.generic, bool, int, float, complex, list, tuple)
_COMPARE = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
            "eq": "equal", "ne": "not_equal"}
_UNARY = {"neg": "negative", "pos": "positive", "abs": "abs", "invert": "invert"}
_OTHER = "NamedArray | ArrayLike"  # an operator's other operand, as help() and the type stubs show it

# array methods: method name -> the nx function it calls with the array first (reshape and transpose,
# which also take their arguments unpacked, are defined in install)
_METHODS = {n: n for n in """sum prod max min mean var std any all argmax argmin ptp cumsum cumprod sort
            argsort argpartition repeat squeeze swapaxes ravel diagonal trace conj conjugate round clip take
            nonzero searchsorted copy dot compress unflatten tag untag""".split()}


def install(nx: object = _Namespace()) -> None:
    """Attach operators and methods to :class:`NamedArray`, using the functions of namespace ``nx``."""
    cls = NamedArray

    def binary(fname):
        f = getattr(nx, fname)  # bound once: operators are the hottest eager path

        def op(self, other):
            if not isinstance(other, _OPERANDS):  # let Python try the other side, or `is` for == and !=
                return NotImplemented
            return f(self, other)

        def rop(self, other):
            if not isinstance(other, _OPERANDS):
                return NotImplemented
            return f(other, self)

        # what help() and the type stubs (namedarray.surface.stubs) show
        ret = "tuple[NamedArray, NamedArray]" if fname == "divmod" else "NamedArray"
        op.__annotations__ = {"other": _OTHER, "return": ret}
        rop.__annotations__ = {"other": _OTHER, "return": ret}
        return op, rop

    for dunder, fname in _BINARY.items():
        op, rop = binary(fname)
        op.__name__, rop.__name__ = f"__{dunder}__", f"__r{dunder}__"
        setattr(cls, f"__{dunder}__", op)
        setattr(cls, f"__r{dunder}__", rop)
    for dunder, fname in _COMPARE.items():
        op, _ = binary(fname)
        op.__name__ = f"__{dunder}__"
        setattr(cls, f"__{dunder}__", op)
    def unary_op(f):
        def unary(self) -> NamedArray:
            return f(self)

        return unary

    for dunder, fname in _UNARY.items():
        unary = unary_op(getattr(nx, fname))  # bound once
        unary.__name__ = f"__{dunder}__"
        setattr(cls, f"__{dunder}__", unary)

    def method(name, fname):
        f = getattr(nx, fname)  # bound once, as the operators are

        def m(self, *args, **kwargs):
            return f(self, *args, **kwargs)

        m.__name__ = name
        m.__doc__ = f"``nx.{fname}(self, ...)``: see :func:`namedarray.{fname}`."
        signature = _method_signature(f)
        if signature is not None:
            m.__signature__ = signature  # help(x.sum) shows nx.sum's arguments
            m.__annotations__ = annotations(signature)  # and tools reading annotations see the same types
        return m

    for name, fname in _METHODS.items():
        setattr(cls, name, method(name, fname))

    def reshape(self, *shape: Any, **kwargs: Any) -> NamedArray:
        """Reshape the positional axes (named axes are untouched)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return nx.reshape(self, shape, **kwargs)

    def transpose(self, *axes: Any) -> NamedArray:
        """Permute the positional axes."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return nx.transpose(self, axes or None)

    def __round__(self, ndigits: int | None = None) -> NamedArray:
        return nx.round(self, ndigits or 0)

    def unwrap(self, *axes: Any) -> jax.Array:
        """The positional array with named axes placed by ``axes`` (see :func:`namedarray.unwrap`).

        Names given as separate arguments are a list: ``x.unwrap("b", "a")`` is ``x.unwrap(["b", "a"])``.

        >>> import namedarray as nx, jax.numpy as jnp
        >>> x = nx.wrap(jnp.zeros((2, 3)), ["a", "b"])
        >>> x.unwrap({0: "b", 1: "a"}).shape, x.unwrap("b", "a").shape
        ((3, 2), (3, 2))
        """
        if len(axes) == 1 and not isinstance(axes[0], str):
            return nx.unwrap(self, axes[0])
        return nx.unwrap(self, list(axes) if axes else None)

    def flatten(self, *args: Any, **kwargs: Any) -> NamedArray:
        """``x.flatten()`` ravels the positional axes (as NumPy's); ``x.flatten(names, new_name)`` merges
        named axes into one (:func:`namedarray.flatten`).

        >>> import namedarray as nx
        >>> nx.zeros({"h": 2, "d": 3}).flatten(("h", "d"), "embed").named_shape
        {'embed': 6}
        """
        if len(args) == 2 and not kwargs:
            return nx.flatten(self, *args)
        return nx.ravel(self, *args, **kwargs)

    def astype(self, dtype: Any) -> NamedArray:
        """The same named array with another element type (``nx.astype``).

        >>> import namedarray as nx, jax.numpy as jnp
        >>> nx.wrap(jnp.zeros(3), ["k"]).astype("int8").dtype
        dtype('int8')
        """
        return nx.astype(self, dtype)

    def rename(self, mapping: Mapping[str, str] | None = None, /, **names: str) -> NamedArray:
        """Rename named axes: ``x.rename({"old": "new"})`` or ``x.rename(old="new")``."""
        return nx.rename(self, {**(mapping or {}), **names})

    from ..interop.render import html_repr, text_repr
    from ..parallel.distribute import shard_method

    cls.unwrap, cls.astype, cls.rename, cls.flatten = unwrap, astype, rename, flatten
    cls.shard = shard_method
    cls.__repr__ = text_repr
    cls._repr_html_ = html_repr
    cls.__round__ = __round__
    cls.reshape = reshape
    cls.transpose = transpose
    def T(self) -> NamedArray:
        """Transpose of the positional axes."""
        return nx.transpose(self)

    def mT(self) -> NamedArray:
        """Swap the last two positional axes."""
        return nx.matrix_transpose(self)

    def real(self) -> NamedArray:
        """The real part (``nx.real``)."""
        return nx.real(self)

    def imag(self) -> NamedArray:
        """The imaginary part (``nx.imag``)."""
        return nx.imag(self)

    cls.T, cls.mT, cls.real, cls.imag = property(T), property(mT), property(real), property(imag)
    from ..ops import updates
    from ..ops.updates import AtIndexer, getitem

    cls.__getitem__ = getitem
    # help(x.at) / help(nx.NamedArray.at) shows the whole contract (jnp.ndarray.at's methods and options,
    # and how names combine), which the updates module's essay states once
    cls.at = property(AtIndexer, doc=updates.__doc__)
    def to_xarray(self, coords: Any = None, **kwargs: Any) -> Any:
        """An ``xarray.DataArray`` whose dims are the names (see
        :func:`namedarray.interop.formats.to_xarray`)."""
        from ..interop.formats import to_xarray

        return to_xarray(self, coords, **kwargs)

    cls.to_xarray = to_xarray

    def __treescope_repr__(self, path, subtree_renderer):
        from ..interop.treescope_support import (
            treescope_repr,  # treescope is imported by then: it called this
        )

        return treescope_repr(self, path, subtree_renderer)

    cls.__treescope_repr__ = __treescope_repr__
    cls.__array_ufunc__ = _array_ufunc(nx)
    cls.__array_function__ = _array_function(nx)


def _array_ufunc(nx):
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out_arrays = kwargs.pop("out", None)
        if out_arrays is not None:
            return _into(nx, ufunc, method, inputs, kwargs, out_arrays)
        if method == "__call__":
            f = getattr(nx, ufunc.__name__, None)
            if f is None:
                return NotImplemented
            dtype = kwargs.pop("dtype", None)  # jax.numpy's elementwise functions take no dtype=
            out = f(*inputs, **kwargs)
            return out if dtype is None else nx.astype(out, dtype)
        table = {"reduce": _UFUNC_REDUCE, "accumulate": _UFUNC_ACCUMULATE}.get(method, {})
        f = table.get(ufunc.__name__)
        if f is not None:
            kwargs.setdefault("axis", 0)  # ufunc.reduce/accumulate default to the first axis, not all
            return getattr(nx, f)(*inputs, **kwargs)
        return NotImplemented

    return __array_ufunc__


def _into(nx, ufunc, method, inputs, kwargs, out_arrays):
    """``np_array += x`` (a ufunc with ``out=``): computed by nx, then stored in the NumPy array, as NumPy
    stores a jax array's result. A result that carries named axes has nowhere to go in a NumPy array: an
    error that says to rebind instead (``a = a + x``)."""
    if method != "__call__" or len(out_arrays) != 1 or not isinstance(out_arrays[0], np.ndarray):
        return NotImplemented
    target = out_arrays[0]
    result = getattr(nx, ufunc.__name__)(*inputs, **kwargs)
    if type(result) is NamedArray and result.names:
        raise PositionalMisuseError(
            f"np.{ufunc.__name__} with out= (an in-place operator such as `a += x` on a NumPy array): the "
            f"result carries named axes {fmt_names(result.names)} (named shape "
            f"{dict(result.named_shape)}), which a NumPy array of shape {target.shape} cannot hold; rebind "
            "instead (`a = a + x` gives a NamedArray), or place the names first (x.unwrap([...]))")
    data = result.data if type(result) is NamedArray else result
    np.copyto(target, np.asarray(data), casting="same_kind")
    return target


_UFUNC_REDUCE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min",
                 "logical_and": "all", "logical_or": "any"}
_UFUNC_ACCUMULATE = {"add": "cumsum", "multiply": "cumprod"}


def _array_function(nx):
    from ..engine.nmap import nmap

    cache: dict = {}

    def counterpart(func):
        """``nx.<f>`` for ``numpy.<f>``, and ``nx.linalg.<f>`` / ``nx.fft.<f>`` for numpy's submodules."""
        name, module = func.__name__, getattr(func, "__module__", None) or ""
        if module == "numpy" and name in EXCLUDED:  # np.unwrap means jnp.unwrap (phases), lifted
            return nmap(getattr(jnp, name))
        namespace = nx if module == "numpy" else getattr(nx, module.removeprefix("numpy."), None)
        if module not in ("numpy", "numpy.linalg", "numpy.fft") or namespace is None:
            return None
        f = getattr(namespace, name, None)
        return f if callable(f) and not isinstance(f, type) else None

    def __array_function__(self, func, types, args, kwargs):
        f = cache.get(func)
        if f is None:
            f = cache[func] = counterpart(func) or _NONE
        if f is _NONE:
            return NotImplemented
        return f(*args, **kwargs)

    return __array_function__


_NONE = object()


def _method_signature(f: Any) -> inspect.Signature | None:
    """``f``'s signature with its first argument as ``self``: the method ``x.f(...)`` calls ``f(x, ...)``."""
    try:
        signature = inspect.signature(f)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        return None
    empty = inspect.Parameter.empty
    first = params[0].replace(name="self", annotation=empty, default=empty)
    return signature.replace(parameters=[first, *params[1:]])


install()
