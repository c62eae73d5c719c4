"""``nx.typing``: array annotations in the language of the xmap tutorial, checked at call time.

``f32[(5,), {"batch": 20}]`` is a float32 value with positional shape ``(5,)`` and named shape
``{"batch": 20}``. Each part may be loose:

* dims: an int (exact), a string (a dimension variable, shared by every annotation of one call), ``None`` or
  ``Any`` (any size); ``...`` inside the positional tuple stands for any number of dims;
* ``f32[(5,)]`` means no named axes, ``f32[(5,), ...]`` any named axes, ``f32[{"b": 3}]`` shape ``()`` with
  named axis ``b``, ``f32[...]`` any shape at all;
* dtypes: ``bool_ i8 i16 i32 i64 u8 u16 u32 u64 bf16 f16 f32 f64 c64 c128``, and ``Array`` for any dtype.

:func:`check` verifies a function's annotated arguments and result whenever it is called, also under
``jit``/``xmap`` tracing (shapes and dtypes are static), and reports the argument, the axis and what was
expected as an :class:`~namedarray.errors.AnnotationError`.

>>> import namedarray as nx, jax.numpy as jnp
>>> from namedarray.typing import f32
>>> @nx.typing.check
... def norm(x: f32[("n",), {"batch": "b"}]) -> f32[(), {"batch": "b"}]:
...     return nx.sqrt((x * x).sum())
>>> norm(nx.wrap(jnp.ones((3, 4)), [None, "batch"])).named_shape
{'batch': 4}
>>> isinstance(jnp.ones(5, jnp.float32), f32[(5,)])
True

Static type checkers accept no dict or tuple in an annotation, so code they check writes
the same annotation as the metadata of ``typing.Annotated``: they read the type, :func:`check` the shape.

>>> from typing import Annotated
>>> Rows = Annotated[nx.NamedArray, f32[("d",), {"rows": "n"}]]
>>> @nx.typing.check
... def center(x: Rows) -> Rows:
...     return x - x.mean("rows")
>>> center(nx.wrap(jnp.ones((4, 3)), ["rows", ...])).named_shape
{'rows': 4}
"""

from __future__ import annotations

import functools
import inspect
import types
import typing as _t
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jax.numpy as jnp
import numpy as np

from .adapter.xmap import LOOP_CHUNK_SUFFIX
from .core.array import NamedArray
from .errors import AnnotationError

__all__ = ["ArrayType", "OneOf", "DType", "check", "Any", "Array", "bool_", "i8", "i16", "i32", "i64", "u8",
           "u16", "u32", "u64", "bf16", "f16", "f32", "f64", "c64", "c128"]


# a checked function keeps its signature for type checkers
F = TypeVar("F", bound=Callable[..., Any])


def _dim_text(d: Any) -> str:
    if d is Ellipsis:
        return "..."
    if d is Any:
        return "Any"
    return repr(d)


class ArrayType:
    """An annotation: dtype (``None``: any), positional dims (``None``: any) and named dims (``None``: any).

    Build one by indexing a dtype (``f32[(5,), {"batch": 20}]``). ``isinstance(x, t)`` and ``t.matches(x)``
    test a value; :func:`check` verifies annotated functions.

    >>> import jax.numpy as jnp, namedarray as nx
    >>> t = f32[("n",), {"batch": 4}]
    >>> t.matches(nx.wrap(jnp.zeros((4, 3)), ["batch", ...])), t.matches(jnp.zeros(3))
    (True, False)
    """

    __slots__ = ("dtype", "dtype_name", "shape", "named")

    def __init__(self, dtype, dtype_name: str, shape: tuple | None, named: Mapping[str, Any] | None):
        self.dtype = dtype
        self.dtype_name = dtype_name
        self.shape = shape
        self.named = dict(named) if named is not None else None

    def __repr__(self) -> str:
        if self.shape is None and self.named is None:
            return f"{self.dtype_name}[...]"
        if self.shape is None:
            shape = "..."
        else:
            inner = ", ".join(_dim_text(d) for d in self.shape)
            shape = f"({inner},)" if len(self.shape) == 1 else f"({inner})"
        named = "..." if self.named is None else "{" + ", ".join(
            f"{k!r}: {_dim_text(v)}" for k, v in self.named.items()) + "}"
        return f"{self.dtype_name}[{shape}, {named}]"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ArrayType) and self.dtype == other.dtype and self.shape == other.shape
                and self.named == other.named)

    def __hash__(self) -> int:
        # the fields __eq__ compares: annotations equal under == hash alike
        named = None if self.named is None else tuple(sorted(self.named.items()))
        return hash((self.dtype, self.shape, named))

    def matches(self, value: Any) -> bool:
        """Whether ``value`` fits (dimension variables are free: each is bound by its first use)."""
        try:
            self.verify(value, "the value", {})
        except AnnotationError:
            return False
        return True

    def __instancecheck__(self, value: Any) -> bool:
        return self.matches(value)

    def __or__(self, other: Any) -> OneOf:
        return OneOf((self, *_options(other)))

    def __ror__(self, other: Any) -> OneOf:
        return OneOf((*_options(other), self))

    def verify(self, value: Any, label: str, bindings: dict[str, tuple[int, str]],
               where: str = "nx.typing") -> None:
        """Raise :class:`AnnotationError` unless ``value`` fits; binds dimension variables in ``bindings``."""
        shape, named, dtype = _describe(value)
        if shape is None:
            raise AnnotationError(
                f"{where}: {label} is a {type(value).__name__}, not an array; expected {self!r}")
        if self.dtype is not None and dtype != self.dtype:
            raise AnnotationError(f"{where}: {label} has dtype {dtype}, expected {self.dtype_name} "
                                  f"({np.dtype(self.dtype)}) (annotation {self!r})")
        if self.shape is not None:
            self._verify_positional(shape, label, bindings, where)
        if self.named is not None:
            missing = [n for n in self.named if n not in named]
            if missing:
                raise AnnotationError(
                    f"{where}: {label} lacks named axis {missing[0]!r} (it has named shape {dict(named)}, "
                    f"the annotation {self!r} expects {{{', '.join(repr(n) for n in self.named)}}})")
            extra = [n for n in named if n not in self.named]
            if extra:
                raise AnnotationError(
                    f"{where}: {label} has named axis {extra[0]!r} (size {named[extra[0]]}) that the "
                    f"annotation {self!r} does not allow (write `...` as the named part to allow any names)")
            for n, d in self.named.items():
                _match_dim(d, named[n], f"named axis {n!r}", label, bindings, self, where)

    def _verify_positional(self, shape: tuple[int, ...], label: str, bindings, where: str) -> None:
        dims = self.shape
        if Ellipsis in dims:
            i = dims.index(Ellipsis)
            head, tail = dims[:i], dims[i + 1:]
            if len(shape) < len(head) + len(tail):
                raise AnnotationError(
                    f"{where}: {label} has positional shape {shape} (rank {len(shape)}), expected at least "
                    f"{len(head) + len(tail)} positional axes (annotation {self!r})")
            pairs = list(zip(range(len(head)), head)) + [
                (len(shape) - len(tail) + j, d) for j, d in enumerate(tail)]
        else:
            if len(shape) != len(dims):
                raise AnnotationError(
                    f"{where}: {label} has positional shape {shape} (rank {len(shape)}), expected rank "
                    f"{len(dims)} (annotation {self!r})")
            pairs = list(enumerate(dims))
        for axis, d in pairs:
            _match_dim(d, shape[axis], f"positional axis {axis}", label, bindings, self, where)


class OneOf:
    """``f32[(3,)] | None``: an annotation that any of its options fits (``typing.Optional[...]`` and
    ``typing.Union[...]`` of annotations mean the same).

    >>> from namedarray.typing import f32, i32
    >>> t = f32[(3,)] | i32[(3,)] | None
    >>> t.matches(None), t.matches(np.zeros(3, np.int32)), t.matches(np.zeros(4, np.float32))
    (True, True, False)
    """

    __slots__ = ("options",)

    def __init__(self, options: tuple):
        self.options = tuple(None if o is type(None) else o for o in options)

    def __or__(self, other: Any) -> OneOf:
        return OneOf((*self.options, *_options(other)))

    def __ror__(self, other: Any) -> OneOf:
        return OneOf((*_options(other), *self.options))

    def __repr__(self) -> str:
        return " | ".join("None" if o is None else repr(o) for o in self.options)

    def matches(self, value: Any) -> bool:
        try:
            _verify_tree(self, value, "the value", {}, "nx.typing")
        except AnnotationError:
            return False
        return True


def _options(ann: Any) -> tuple:
    return ann.options if isinstance(ann, OneOf) else (ann,)


def _union_options(ann: Any) -> tuple | None:
    """The options of ``ann`` when it is a union (``a | b``, ``Optional[a]``, ``Union[a, b]``), else None."""
    if isinstance(ann, OneOf):
        return ann.options
    if _t.get_origin(ann) in (_t.Union, types.UnionType):
        return tuple(None if a is type(None) else a for a in _t.get_args(ann))
    return None


def _match_dim(expected: Any, actual: int, axis: str, label: str, bindings, ann: ArrayType,
               where: str) -> None:
    if expected is None or expected is Any or expected is Ellipsis:
        return
    if isinstance(expected, str):
        prev = bindings.get(expected)
        if prev is None:
            bindings[expected] = (actual, f"{label} {axis}")
        elif prev[0] != actual:
            raise AnnotationError(
                f"{where}: {label} {axis} has size {actual}, but dimension variable {expected!r} is "
                f"{prev[0]} (bound by {prev[1]}) (annotation {ann!r})")
        return
    if actual != expected:
        raise AnnotationError(
            f"{where}: {label} {axis} has size {actual}, expected {expected} (annotation {ann!r})")


def _describe(value: Any):
    """(positional shape, named shape, dtype) of a value, or (None, None, None) if it is not an array."""
    if isinstance(value, NamedArray):
        # inside a serial loop the body sees one chunk of a looped axis, under a marked name: check it as
        # the axis it is a chunk of (with the chunk's size, as xmap did)
        named = {n.removesuffix(LOOP_CHUNK_SUFFIX): s for n, s in value.named_shape.items()}
        return tuple(value.shape), named, np.dtype(value.dtype)
    if isinstance(value, (bool, int, float, complex, np.generic)):
        a = jnp.asarray(value)
        return (), {}, np.dtype(a.dtype)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return tuple(value.shape), {}, np.dtype(value.dtype)
    return None, None, None


def _check_dim(d: Any, where: str) -> Any:
    if d is None or d is Any or d is Ellipsis or isinstance(d, str):
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
        return int(d)
    raise TypeError(f"{where}: a dimension is an int, a variable name (str), None or Any; got {d!r}")


class DType:
    """A dtype to index into an :class:`ArrayType`: ``f32[(5,), {"batch": 20}]``.

    >>> import numpy as np
    >>> DType("f32", np.float32)[(5,), {"batch": 20}] == f32[(5,), {"batch": 20}]
    True
    """

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype):
        self.name = name
        self.dtype = None if dtype is None else np.dtype(dtype)

    def __repr__(self) -> str:
        return self.name

    def __getitem__(self, item: Any) -> ArrayType:
        where = f"{self.name}[...]"
        if item is Ellipsis:
            return ArrayType(self.dtype, self.name, None, None)
        if isinstance(item, Mapping):
            shape, named = (), item
        elif (isinstance(item, tuple) and len(item) == 2
              and (isinstance(item[0], (tuple, list)) or item[0] is Ellipsis)
              and (isinstance(item[1], Mapping) or item[1] is Ellipsis)):
            shape, named = item
        else:
            shape, named = item, {}
        if shape is Ellipsis:
            shape_t = None
        else:
            dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
            if sum(d is Ellipsis for d in dims) > 1:
                raise TypeError(f"{where}: at most one `...` in the positional shape, got {shape!r}")
            shape_t = tuple(_check_dim(d, where) for d in dims)
        if named is Ellipsis:
            named_d = None
        else:
            named_d = {}
            for k, v in named.items():
                if not isinstance(k, str) or not k:
                    raise TypeError(f"{where}: named axes are keyed by non-empty strings, got {k!r}")
                if v is Ellipsis:
                    v = None
                named_d[k] = _check_dim(v, where)
        return ArrayType(self.dtype, self.name, shape_t, named_d)


Array = DType("Array", None)
bool_ = DType("bool_", np.bool_)
i8, i16, i32, i64 = (DType(f"i{b}", f"int{b}") for b in (8, 16, 32, 64))
u8, u16, u32, u64 = (DType(f"u{b}", f"uint{b}") for b in (8, 16, 32, 64))
bf16 = DType("bf16", jnp.bfloat16)
f16, f32, f64 = (DType(f"f{b}", f"float{b}") for b in (16, 32, 64))
c64, c128 = DType("c64", np.complex64), DType("c128", np.complex128)


# --------------------------------------------------------------------------------------------------------
# Checking annotated functions


def _resolve(fn: Callable) -> dict[str, Any]:
    """``fn``'s annotations, evaluating string annotations (``from __future__ import annotations``)."""
    raw = dict(getattr(fn, "__annotations__", {}) or {})
    if not any(isinstance(v, str) for v in raw.values()):
        return raw
    glb = dict(getattr(fn, "__globals__", {}))
    closure = getattr(fn, "__closure__", None) or ()
    for name, cell in zip(getattr(getattr(fn, "__code__", None), "co_freevars", ()), closure):
        try:
            glb[name] = cell.cell_contents
        except ValueError:
            pass
    out = {}
    for k, v in raw.items():
        if isinstance(v, str):
            try:
                v = eval(v, glb)  # noqa: S307 - the function's own annotation text
            except Exception:
                continue  # not an nx annotation we can resolve: not checked
        out[k] = v
    return out


def _checked(ann: Any) -> Any:
    """The nx annotation an ``Annotated[T, f32[...]]`` carries (the spelling static type checkers accept:
    they read ``T``, :func:`check` reads the metadata), else ``ann``."""
    if _t.get_origin(ann) is _t.Annotated:
        for m in ann.__metadata__:
            if _is_annotation(m):
                return m
    return ann


def _is_annotation(ann: Any) -> bool:
    ann = _checked(ann)
    if isinstance(ann, ArrayType):
        return True
    if isinstance(ann, (tuple, list)):
        return any(_is_annotation(a) for a in ann)
    if isinstance(ann, Mapping):
        return any(_is_annotation(a) for a in ann.values())
    options = _union_options(ann)
    if options is not None:
        return any(_is_annotation(a) for a in options)
    if isinstance(ann, types.GenericAlias):  # tuple[...], list[...], dict[...]
        return any(_is_annotation(a) for a in _t.get_args(ann) if a is not Ellipsis)
    return False


def _verify_tree(ann: Any, value: Any, label: str, bindings, where: str) -> None:
    ann = _checked(ann)
    if isinstance(ann, ArrayType):
        ann.verify(value, label, bindings, where)
        return
    options = _union_options(ann)
    if options is not None:
        if any(o is not None and not _is_annotation(o) for o in options):
            return  # an option nx does not check (int, a class): the value may be that
        failures = []
        for option in options:
            if option is None:
                if value is None:
                    return
                failures.append(f"it is not None (it is of type {type(value).__name__})")
                continue
            trial = dict(bindings)  # an option that fails binds nothing
            try:
                _verify_tree(option, value, label, trial, where)
            except AnnotationError as e:
                failures.append(str(e).removeprefix(f"{where}: "))
                continue
            bindings.update(trial)
            return
        raise AnnotationError(f"{where}: {label} fits none of {OneOf(options)!r}: " + "; ".join(failures))
    if isinstance(ann, types.GenericAlias):
        origin, args = _t.get_origin(ann), _t.get_args(ann)
        if origin is dict and len(args) == 2:
            if not isinstance(value, Mapping):
                raise AnnotationError(f"{where}: {label} is a {type(value).__name__}, expected a dict")
            for k, v in value.items():
                _verify_tree(args[1], v, f"{label}[{k!r}]", bindings, where)
            return
        if origin in (tuple, list) and len(args) == 2 and args[1] is Ellipsis:
            if not isinstance(value, (tuple, list)):
                raise AnnotationError(
                    f"{where}: {label} is a {type(value).__name__}, expected a {origin.__name__}")
            for i, v in enumerate(value):
                _verify_tree(args[0], v, f"{label}[{i}]", bindings, where)
            return
        if origin is tuple:
            ann = tuple(args)
        elif origin is list and len(args) == 1:
            if not isinstance(value, (tuple, list)):
                raise AnnotationError(f"{where}: {label} is a {type(value).__name__}, expected a list")
            for i, v in enumerate(value):
                _verify_tree(args[0], v, f"{label}[{i}]", bindings, where)
            return
        else:
            return
    if isinstance(ann, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(ann):
            got = (f"a {type(value).__name__} of length {len(value)}" if isinstance(value, (tuple, list))
                   else f"a {type(value).__name__}")
            raise AnnotationError(f"{where}: {label} is {got}, expected a sequence of {len(ann)} values")
        for i, (a, v) in enumerate(zip(ann, value)):
            _verify_tree(a, v, f"{label}[{i}]", bindings, where)
        return
    if isinstance(ann, Mapping):
        if not isinstance(value, Mapping):
            raise AnnotationError(f"{where}: {label} is a {type(value).__name__}, expected a mapping")
        for k, a in ann.items():
            if k not in value:
                raise AnnotationError(f"{where}: {label} has no key {k!r}")
            _verify_tree(a, value[k], f"{label}[{k!r}]", bindings, where)


def check(fn: F) -> F:
    """Decorate ``fn`` so that its ``nx.typing`` annotations are verified on every call.

    Arguments are checked before the call, the result after it; dimension variables (string dims) must
    have one size across all of them. Works on traced values (inside ``jit``, ``grad``, ``nx.xmap``).

    >>> import jax.numpy as jnp
    >>> @check
    ... def f(x: f32[(2,)]) -> f32[(2,)]:
    ...     return x * 2
    >>> try:
    ...     f(jnp.ones(3, jnp.float32))
    ... except AnnotationError as e:
    ...     print(e)
    nx.typing.check(f): argument 'x' positional axis 0 has size 3, expected 2 (annotation f32[(2,), {}])
    """
    sig = inspect.signature(fn)
    annotations = _resolve(fn)
    params = {k: a for k, a in annotations.items() if k != "return" and _is_annotation(a)}
    ret = annotations.get("return")
    ret = ret if _is_annotation(ret) else None
    where = f"nx.typing.check({getattr(fn, '__name__', 'f')})"
    kinds = {name: p.kind for name, p in sig.parameters.items()}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bindings: dict[str, tuple[int, str]] = {}
        if params:
            bound = sig.bind(*args, **kwargs)
            for name, value in bound.arguments.items():
                ann = params.get(name)
                if ann is None:
                    continue
                kind = kinds.get(name)
                if kind is inspect.Parameter.VAR_POSITIONAL:
                    for i, v in enumerate(value):
                        _verify_tree(ann, v, f"argument {name!r}[{i}]", bindings, where)
                elif kind is inspect.Parameter.VAR_KEYWORD:
                    for k, v in value.items():
                        _verify_tree(ann, v, f"argument {k!r}", bindings, where)
                else:
                    _verify_tree(ann, value, f"argument {name!r}", bindings, where)
        out = fn(*args, **kwargs)
        if ret is not None:
            _verify_tree(ret, out, "the result", bindings, where)
        return out

    wrapper.__nx_annotations__ = params  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]  # fn's signature, checked
