"""``nx.xmap``: a positional signature for a function of named axes, as ``jax.experimental.maps.xmap``.

``nx.xmap(fun, in_axes, out_axes)`` is the adapter that ``jax.experimental.maps.xmap`` was, rebuilt on
``jax.jit``, ``jax.vmap`` and NamedArrays. Per argument leaf, ``in_axes`` names some positional axes; per
output leaf, ``out_axes`` puts the names back at positions of the result.

>>> import namedarray as nx, jax, jax.numpy as jnp
>>> x = jnp.arange(10).reshape(2, 5)
>>> nx.xmap(jnp.vdot, in_axes=({0: "left"}, {1: "right"}), out_axes=["left", "right", ...])(x, x.T).tolist()
[[30, 80], [80, 255]]
>>> nx.xmap(lambda v: jax.lax.psum(v, "left"), in_axes=["left", ...], out_axes=[...])(x).tolist()
[5, 7, 9, 11, 13]

**Two ways to call the body.** xmap-era code is positional: ``fun`` receives one element of the map (the
arguments with the named axes taken off), as under one ``jax.vmap`` per name with the name as its
``axis_name``, so ``jax.lax`` collectives, ``axis_index``, ``custom_vjp`` rules and haiku or flax modules
work inside, and autodiff inside is per element. Each output keeps exactly the names it varies along: one
``out_axes`` leaves a name out of must not vary along it (JAX's ``out_axes=None``). That is the first way
``nx.xmap`` tries (:func:`_call_positional`). nx's own style is a body on NamedArrays that carry the map's
names (whole axes: the global view): ``x.sum("i")``, ``x.named_shape``; such a body fails on per-element
arrays, and ``nx.xmap`` then calls it on NamedArrays (:func:`_run_body` says which error is raised when
both fail). Inside a positional body the map's names are in the environment's ``jax_names``, so that nx's
collectives and named reductions act per element too.

The call is ``jax.jit`` of: wrap each argument leaf by its spec -> call ``fun`` (one vmap per name, or on
NamedArrays with the axis sizes bound in ``nx.env``) -> check each output and unwrap it by its spec.
Inside, named operations (reductions over bound names, collectives, ``nx.nn.one_hot``, named random) ask
the environment. Specs are xmap's:

* ``{0: "batch", 2: "k"}``: positions of the input (for outputs: positions of the final output);
* ``["batch", "k", ...]``: the leading axes; ``None`` keeps one positional; ``[...]``/``{}``: no names;
* ``["batch", None]`` without ``...``: the same, and asserts the rank;
* a pytree of those, a prefix of the arguments (matched against the tuple of positional arguments; a top-level
  list is read as that tuple) or of the outputs. A tuple or list of names is one spec.

``axis_resources`` maps names to mesh axes of the mesh in context (``jax.set_mesh`` or ``with Mesh(...)``)
and to serial loops (:class:`SerialLoop`, :func:`serial_loop`); it never changes results.

* Mesh axes: every argument and output is constrained by xmap's partitioning rule (a value is split over a
  mesh axis iff its named shape has a name mapped to it, replicated otherwise), and so is every NamedArray
  value of a body on NamedArrays; a positional body's vmaps carry the mesh axes as ``spmd_axis_name``. On
  Explicit mesh axes the body runs on an Auto view of the mesh and the outputs are resharded at the end.
  Calls compile with the arguments' layouts as ``jax.jit``'s in_shardings, so a call costs jit's dispatch.
* A serial loop computes the body over chunks of the looped axis, one after the other (``lax.map``), so
  the body's intermediates are one chunk in size. Inside the body, a chunk of axis ``i`` is named
  ``"i@loop-chunk"``, and referring to ``i`` (a reduction or collective over it, ``axis_index``, named
  random) is an error, as in xmap: the body only sees one chunk at a time.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec
from jax.tree_util import SequenceKey, keystr

from ..core import caches, placement
from ..core import env as _env
from ..core.array import NamedArray, _make, from_storage, is_named, transpose
from ..core.layout import align
from ..core.shape import check_name
from ..core.specs import AxisSpec, is_spec_leaf, parse
from ..core.wrapping import wrap
from ..engine import registry
from ..engine.nmap import nmap
from ..errors import (
    AxisNameShadowingError,
    AxisSizeError,
    AxisSpecError,
    LoopAxisError,
    MissingResourceError,
    NamedAxisError,
    PerElementAxisError,
    RankError,
    ResourceConflictError,
    UnplacedAxisError,
    fmt_names,
)
from ..parallel.distribute import flat_jit, recall, remember
from . import resources as _res
from .resources import SerialLoop, serial_loop

__all__ = ["xmap", "XMapped", "SerialLoop", "serial_loop"]

_WHERE = "nx.xmap"
_Tracer = jax.core.Tracer


# --------------------------------------------------------------------------------------------------------
# Specs


def _is_leaf(s: Any) -> bool:
    # None is read as "no names" (like `{}`); a list/tuple with an ellipsis is always meant as one spec, so a
    # malformed one (`[("a", "b"), ...]`) is reported as a bad spec rather than taken apart as a pytree.
    return (s is None or is_spec_leaf(s)
            or (isinstance(s, (list, tuple)) and any(e is Ellipsis for e in s)))


def _spec_text(entry: Any) -> str:
    """One spec leaf as xmap's messages print it: ``['i', ...]``."""
    if isinstance(entry, (list, tuple)):
        return "[" + ", ".join("..." if e is Ellipsis else repr(e) for e in entry) + "]"
    return repr(entry)


def _tree_text(tree: Any) -> str:
    """A spec tree as the user would write it (``...`` rather than ``Ellipsis``)."""
    if tree is Ellipsis:
        return "..."
    if isinstance(tree, list):
        return "[" + ", ".join(map(_tree_text, tree)) + "]"
    if isinstance(tree, tuple):
        return "(" + ", ".join(map(_tree_text, tree)) + ("," if len(tree) == 1 else "") + ")"
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{k!r}: {_tree_text(v)}" for k, v in tree.items()) + "}"
    return repr(tree)


class _Leaf:
    """One parsed spec leaf and the user's spelling of it (for messages)."""

    __slots__ = ("spec", "text")

    def __init__(self, spec: AxisSpec, text: str):
        self.spec = spec
        self.text = text


def _parse_tree(tree: Any, what: str) -> tuple[list[tuple[tuple, _Leaf]], Any]:
    _check_dict_keys(tree, _is_leaf, f"{_WHERE} {what}", "specification", what == "in_axes")
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_leaf)
    out = []
    for path, entry in leaves:
        where = f"{_WHERE} {what}" + (f" at {keystr(path)}" if path else "")
        _check_negative(entry, what, path)
        try:
            spec = parse(entry, where, what=f"{what} argument specification")
        except AxisSpecError as e:
            if "but got" in str(e) or "bare string" in str(e):
                raise AxisSpecError(
                    f"{where}: a value mapping specification can be either\n"
                    "- a list of axis names (possibly ending with the ellipsis object: ...), or\n"
                    "- a dictionary that maps positional axes (integers) to axis names (e.g. {2: 'name'})\n"
                    f"but got: {_spec_text(entry)}") from None
            raise
        out.append((path, _Leaf(spec, _spec_text(entry))))
    return out, treedef


def _check_negative(entry: Any, what: str, path: tuple) -> None:
    # xmap's own sentence (its tests quote it), before the generic spec parser's, which any nx spec shares
    if not isinstance(entry, Mapping):
        return
    for pos, name in entry.items():
        if isinstance(pos, (int, np.integer)) and not isinstance(pos, bool) and pos < 0:
            at = f" at {keystr(path)}" if path else ""
            raise AxisSpecError(
                f"{_WHERE}: xmap doesn't support negative axes in {what}, got {_tree_text(entry)}{at} "
                f"(position {int(pos)} for axis {name!r}; count positions from the start)")


_DICTS = (dict, collections.defaultdict)  # the dicts JAX flattens in sorted key order


def _unsortable_dict(tree: Any, is_leaf: Callable[[Any], bool]) -> tuple[tuple, Any] | None:
    """The first dict in ``tree`` whose keys cannot be sorted (JAX cannot flatten it): (path, dict)."""
    def stop(x):
        return type(x) in _DICTS or is_leaf(x)

    for path, sub in jax.tree_util.tree_flatten_with_path(tree, is_leaf=stop)[0]:
        if type(sub) not in _DICTS or is_leaf(sub):
            continue
        try:
            keys = sorted(sub)
        except TypeError:
            return tuple(path), sub
        for k in keys:
            found = _unsortable_dict(sub[k], is_leaf)
            if found is not None:
                return tuple(path) + (jax.tree_util.DictKey(k),) + found[0], found[1]
    return None


def _check_dict_keys(tree: Any, is_leaf: Callable[[Any], bool], where: str, kind: str,
                     arguments: bool) -> None:
    """Report a dict with keys of mixed types (``{0: "i", "a": "j"}``) in a spec tree or a value, which
    JAX would only report as a failure to sort pytree dictionary keys."""
    found = _unsortable_dict(tree, is_leaf)
    if found is None:
        return
    path, d = found
    if kind == "specification":
        where += f" at {keystr(path)}" if path else ""
        if arguments and path and isinstance(path[0], SequenceKey):
            where += f" ({_label(path, 'argument')})"
    else:
        where += _label(path, "argument" if arguments else "output")
    types = sorted({type(k).__name__ for k in d})
    keys = ", ".join(repr(k) for k in d)
    if kind == "specification":
        role = "argument" if arguments else "output"
        hint = ("A dictionary spec maps positional axes (integers) to axis names, e.g. {0: 'batch'}; a "
                f"dictionary of specs, matching a dict {role}, needs keys of one sortable type (e.g. all "
                "strings)")
        shown = _tree_text(d)
    else:
        hint = "JAX flattens a dict in sorted key order, so its keys must be of one sortable type"
        shown = "a dict"
    raise AxisSpecError(
        f"{where}: {shown} has keys of mixed types ({', '.join(types)}): {keys}. {hint}") from None


def _label(path: tuple, what: str) -> str:
    """``argument 1 at ['w']`` / ``output 0`` / ``the output``, from a path into the args or outputs."""
    if what == "argument":
        if not path or not isinstance(path[0], SequenceKey):
            return "the arguments" + (f" at {keystr(path)}" if path else "")
        rest = path[1:]
        return f"argument {path[0].idx}" + (f" at {keystr(rest)}" if rest else "")
    return f"output {keystr(path)}" if path else "the output"


def _freeze(tree: Any) -> Any:
    """A hashable stand-in for a spec tree (for the compilation cache)."""
    if isinstance(tree, Mapping):
        return ("dict", tuple(sorted(((repr(k), _freeze(v)) for k, v in tree.items()))))
    if isinstance(tree, (list, tuple)):
        return (type(tree).__name__, tuple(_freeze(v) for v in tree))
    hash(tree)
    return tree


# --------------------------------------------------------------------------------------------------------
# Positional functions of jax passed directly: use their named implementations


def named_function(fun: Callable) -> Callable:
    """``fun`` itself, or, for a function of jax.numpy / jax.nn / jax.lax / jax.scipy, its named version.

    ``jnp.f`` -> ``nx.f``, ``jax.nn.f`` -> ``nx.nn.f``, ``jax.lax.f`` -> ``nx.lax.f``, ``jnp.linalg.f`` ->
    ``nx.linalg.f``, ``logsumexp`` -> ``nx.nn.logsumexp``, as each is declared in the registry
    (:mod:`namedarray.engine.registry`); any other function of those modules -> ``nx.nmap(f)``. A
    ``functools.partial`` of one is mapped the same way.

    >>> import jax.numpy as jnp, namedarray as nx
    >>> named_function(jnp.vdot) is nx.vdot
    True
    """
    if isinstance(fun, functools.partial):
        inner = named_function(fun.func)
        return fun if inner is fun.func else functools.partial(inner, *fun.args, **fun.keywords)
    f = registry.named(fun)
    if callable(f):
        return f
    return nmap(fun) if registry.is_jax_function(fun) else fun


# --------------------------------------------------------------------------------------------------------
# The adapter


def xmap(fun: Callable, in_axes: Any, out_axes: Any, *, axis_sizes: Mapping[str, int] | None = None,
         axis_resources: Mapping[str, Any] | None = None, donate_argnums: int | Sequence[int] = (),
         backend: str | None = None) -> XMapped:
    """Assign a positional signature to ``fun``, a function of one element of the map (xmap's way) or of
    NamedArrays carrying the map's names (nx's); see the module docstring for how the two are told apart.

    ``in_axes``/``out_axes``: xmap axis specifications (see the module docstring), pytree prefixes of the
    arguments / outputs. ``axis_sizes``: sizes of names no argument carries (for ``nx.axis_index``, named
    random, broadcast outputs). ``axis_resources``: name -> mesh axis, tuple of mesh axes (major to minor),
    or a serial loop last. ``donate_argnums``: as in ``jax.jit``. ``backend``: a platform name, checked.

    The result is called with positional arguments, runs compiled (``jax.jit``), and has ``.lower(*args)``.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> f = nx.xmap(lambda x: x.sum("i"), in_axes=["i", ...], out_axes=[...])
    >>> f(jnp.arange(6.0).reshape(3, 2)).tolist()
    [6.0, 9.0]
    >>> nx.xmap(lambda: 2.0, in_axes=(), out_axes=["i"], axis_sizes={"i": 3})().tolist()
    [2.0, 2.0, 2.0]
    """
    return XMapped(fun, in_axes, out_axes, axis_sizes=axis_sizes, axis_resources=axis_resources,
                   donate_argnums=donate_argnums, backend=backend)


class _Config:
    """Everything about one ``nx.xmap(...)`` that does not depend on the call."""

    def __init__(self, fun, in_axes, out_axes, axis_sizes, axis_resources, donate_argnums, backend):
        if not callable(fun):
            raise TypeError(f"{_WHERE}: fun must be callable, got {fun!r}")
        self.raw = fun  # what a positional body runs: the function as given
        self.fun = named_function(fun)  # what a body on NamedArrays runs
        self.name = getattr(fun, "__name__", type(fun).__name__)
        self.orig_in_axes = in_axes
        if isinstance(in_axes, list) and not _is_leaf(in_axes):
            in_axes = tuple(in_axes)  # a top-level list is the argument list (jax issue #2367)
        if isinstance(out_axes, tuple) and out_axes == ():
            raise AxisSpecError(f"{_WHERE}: out_axes=() declares no outputs, but xmapped functions cannot "
                                "have no return values (use out_axes=None for a function that returns None)")
        self.in_axes, self.out_axes = in_axes, out_axes
        self.in_leaves, self.in_tree = _parse_tree(in_axes, "in_axes")
        self.out_leaves, self.out_tree = _parse_tree(out_axes, "out_axes")

        sizes: dict[str, int] = {}
        for name, size in (axis_sizes or {}).items():
            check_name(name, f"{_WHERE} axis_sizes")
            if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 0:
                raise AxisSizeError(
                    f"{_WHERE}: axis_sizes[{name!r}] must be a non-negative int, got {size!r}")
            sizes[name] = int(size)
        self.axis_sizes = sizes
        in_names = {n for _, leaf in self.in_leaves for n in leaf.spec.names}
        self.in_names = in_names
        self.defined = frozenset(in_names | set(sizes))
        out_names = {n for _, leaf in self.out_leaves for n in leaf.spec.names}
        undefined = out_names - self.defined
        if undefined:
            raise UnplacedAxisError(
                f"{_WHERE}: All axis names appearing in out_axes must also appear in in_axes or axis_sizes, "
                f"but the following are missing: {_set_text(undefined)} (an inner nx.xmap cannot place the "
                "names of an enclosing one; they pass through its outputs as named axes)")
        self.resources = _res.parse_resources(axis_resources, _WHERE)
        unres = set(self.resources) - self.defined
        if unres:
            raise MissingResourceError(
                f"{_WHERE}: All axes that were assigned resources have to appear in in_axes or axis_sizes, "
                f"but the following are missing: {_set_text(unres)} (axis_resources assigns "
                f"{ {n: self.resources[n] for n in sorted(unres)} })")
        if isinstance(donate_argnums, (int, np.integer)):
            donate_argnums = (int(donate_argnums),)
        self.donate_argnums = tuple(sorted({int(i) for i in donate_argnums}))
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"{_WHERE}: backend must be a platform name such as 'cpu', got {backend!r}")
        self.backend = backend
        try:
            self.key = (fun, _freeze(self.orig_in_axes), _freeze(out_axes), tuple(sorted(sizes.items())),
                        tuple(sorted(self.resources.items())), self.donate_argnums, backend)
            hash(self.key)
        except TypeError:
            self.key = None


def _set_text(names) -> str:
    return "{" + ", ".join(repr(n) for n in sorted(names)) + "}"


# Compiled callables shared by equal nx.xmap(...) constructions under equal contexts, so that building the
# same xmap twice (or under a new but equal mesh) does not retrace `fun`. Bounded: it keeps `fun` alive.
# An nx.xmap whose configuration cannot be a key (an unhashable `fun` or spec) keeps its own small cache
# instead, one member of a family (a new mesh or rule context is a new entry). Both are locked LRUs of
# core/caches.py: nx.clear_caches() empties them, caches.resize() bounds them.
_SHARED: caches.LRU[tuple, Callable] = caches.LRU("nx.xmap compilations", 256)
# The same compiled call over the arguments' leaves with their layouts as jit's in_shardings, per
# (configuration, context, argument structure): what _place_args decides once, so that a call then costs one
# flatten and jax.jit's own dispatch (jit compares and places the leaves). Keys hold no arrays.
_PLACED: caches.LRU[tuple, Any] = caches.LRU("nx.xmap compilations with argument layouts", 256)
_SLOW = object()  # in _PLACED: arguments of this structure go through _place_args
_OWN = caches.LRUFamily("nx.xmap compilations of configurations that are not keys", 8)


class _HashedKey:
    """A configuration key whose hash is computed once (it is part of every call's cache lookup)."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: tuple):
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _HashedKey) and self._hash == other._hash
                                 and self.key == other.key)


class XMapped:
    """The callable ``nx.xmap`` returns: ``f(*args)`` and ``f.lower(*args)``.

    >>> import jax.numpy as jnp, namedarray as nx
    >>> nx.xmap(lambda x: x.sum("i"), in_axes=["i", ...], out_axes=[...])
    nx.xmap(<lambda>, in_axes=['i', ...], out_axes=[...])
    """

    def __init__(self, fun, in_axes, out_axes, *, axis_sizes=None, axis_resources=None, donate_argnums=(),
                 backend=None):
        self._cfg = _Config(fun, in_axes, out_axes, axis_sizes, axis_resources, donate_argnums, backend)
        self._own = _OWN.new() if self._cfg.key is None else None
        self._hkey = None if self._cfg.key is None else _HashedKey(self._cfg.key)
        self._memo: tuple | None = None  # (environment, mesh token, plan, key) of the last resolve
        self._last = placement.LastCall()
        self._memo_call: tuple | None = None  # what served the last call (distribute.remember)
        self._backend_checked = False
        functools.update_wrapper(self, fun, updated=())

    def __repr__(self) -> str:
        cfg = self._cfg
        return (f"nx.xmap({cfg.name}, in_axes={_tree_text(cfg.orig_in_axes)}, "
                f"out_axes={_tree_text(cfg.out_axes)})")

    def _check_backend(self) -> None:
        backend = self._cfg.backend
        if backend is None or self._backend_checked:
            return
        try:
            jax.devices(backend)
        except RuntimeError as e:
            raise MissingResourceError(f"{_WHERE}: backend {backend!r} is not available here ({e})") from None
        self._backend_checked = True

    def _compiled(self, plan: _res.Plan, key: tuple, outer: _env.AxisEnv):
        cfg = self._cfg
        ctx = (key, None if outer is _env.EMPTY else outer)
        full = (cfg.key, ctx) if cfg.key is not None else None
        cache, k = (_SHARED, full) if self._own is None else (self._own, ctx)
        fn = cache.get(k)
        if fn is not None:
            return fn
        # jax.jit only wraps (it traces on the first call), so building it outside the lock is cheap; if
        # another thread stored one meanwhile, that one is used, so all callers share one compilation.
        return cache.setdefault(k, jax.jit(_named_trace(cfg, plan), donate_argnums=cfg.donate_argnums))

    def _placed(self, plan: _res.Plan, key: tuple, outer: _env.AxisEnv, tree: Any,
                leaves: list) -> tuple[Callable | None, Any]:
        """The compiled call over the arguments' leaves (:func:`~namedarray.parallel.distribute.flat_jit`)
        with jit's in_shardings set to the layouts the arguments' names require, for arguments of this
        structure (``tree``); None where it cannot be used (a multi-process run, whose arguments are
        process-local blocks; an unhashable configuration; donated arguments, which _place_args moves with
        their donation; a structure for which it failed before); and its cache key.

        The layouts are decided for the shapes of the first call of a structure: a later call whose sizes
        that layout does not divide fails jit's check and takes :func:`_place_args` from then on."""
        if self._hkey is None or self._cfg.donate_argnums or jax.process_count() > 1:
            return None, None
        k = (self._hkey, key, None if outer is _env.EMPTY else outer, tree)
        fn = _PLACED.get(k)
        if fn is None:
            cfg = self._cfg
            args = tree.unflatten(leaves)
            targets = _leaf_targets(cfg, plan, args, len(leaves))
            trace = _named_trace(cfg, plan)
            fn = _PLACED.setdefault(k, flat_jit(lambda a: trace(*a), tree, targets, (), {}, trace.__name__))
        return (None if fn is _SLOW else fn), k

    def _resolve(self, outer: _env.AxisEnv) -> tuple[_res.Plan, tuple]:
        """:func:`resources.resolve`, remembered while the mesh context and the environment stay the same
        objects (a loop calling the same xmap resolves once)."""
        token = placement.mesh_token()
        memo = self._memo
        if memo is not None and memo[0] is outer and memo[1] == token:
            return memo[2], memo[3]
        plan, key = _res.resolve(self._cfg.resources, _WHERE)
        self._memo = (outer, token, plan, key)
        return plan, key

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"{_WHERE}: xmapped functions accept positional arguments only, got keyword "
                            f"arguments {sorted(kwargs)}")
        # what served the last call, in this same context: one flatten and jit's own dispatch
        last = recall(self._memo_call, args)
        if last is not None:
            try:
                if _env.in_sync():  # the usual case: no block to enter
                    return last[0](*last[1]) if last[2] else last[0](*args)
                with _env.synced():
                    return last[0](*last[1]) if last[2] else last[0](*args)
            except ValueError as e:
                if isinstance(e, NamedAxisError):
                    raise
                self._memo_call = None  # arguments laid out otherwise this time: the full path below
        outer = _env.current()
        self._check_backend()
        plan, key = self._resolve(outer)
        if outer.sizes or outer.jax_names:
            # Inside an enclosing nx.xmap: already being traced there; run inline (its names pass through).
            return _trace(self._cfg, plan, *args)
        try:
            if self._cfg.backend is not None and plan.mesh is None:
                args = _to_backend(args, self._cfg.backend)
            if plan.mesh is not None and not isinstance(plan.mesh, jax.sharding.AbstractMesh):
                leaves, tree = jax.tree.flatten(args)
                fast, placed_key = self._placed(plan, key, outer, tree, leaves)
                if fast is not None:
                    try:
                        with _env.synced():
                            out = fast(*leaves)
                        self._memo_call = remember(self._last, outer, tree, fast)
                        return out
                    except ValueError as e:
                        if isinstance(e, NamedAxisError):
                            raise
                        # an argument committed to another layout (jit does not move those), or sizes
                        # its layout does not divide: placed one by one below, and said there if wrong
                        _PLACED.put(placed_key, _SLOW)
                args = _place_args(self._cfg, plan, args, donate=True)
                with _env.synced():
                    return self._compiled(plan, key, outer)(*args)
            fn = self._compiled(plan, key, outer)
            with _env.synced():
                out = fn(*args)
            if self._cfg.backend is None:
                self._memo_call = remember(self._last, outer, jax.tree.structure(args), fn, flat=False)
            return out
        except ValueError as e:
            if not isinstance(e, NamedAxisError):  # jax.jit could not flatten the arguments: say why
                _check_value_keys(args, "in_axes")
            raise

    def lower(self, *args: Any) -> jax.stages.Lowered:
        """Lower for these arguments (arrays or ``jax.ShapeDtypeStruct``): ``.compile()``, ``.as_text()``.

        >>> import jax, jax.numpy as jnp, namedarray as nx
        >>> f = nx.xmap(lambda x: x * 2, in_axes=["i", ...], out_axes=["i", ...])
        >>> f.lower(jax.ShapeDtypeStruct((4, 3), jnp.float32)).compile()(jnp.ones((4, 3))).shape
        (4, 3)
        """
        self._check_backend()
        plan, key = _res.resolve(self._cfg.resources, _WHERE)
        try:
            if plan.mesh is not None and not isinstance(plan.mesh, jax.sharding.AbstractMesh):
                args = _place_args(self._cfg, plan, args)
            return self._compiled(plan, key, _env.current()).lower(*args)
        except ValueError as e:
            if not isinstance(e, NamedAxisError):
                _check_value_keys(args, "in_axes")
            raise


def _named_trace(cfg: _Config, plan: _res.Plan) -> Callable:
    def call(*args):
        return _trace(cfg, plan, *args)

    # the compiled module is named after `fun` (jit_xmap_<name>), which is what profiles and HLO dumps show
    call.__name__ = "xmap_" + "".join(c if c.isalnum() else "_" for c in cfg.name)
    call.__qualname__ = call.__name__
    return call


def _leaf_targets(cfg: _Config, plan: _res.Plan, args: tuple, n: int) -> tuple:
    """The sharding each argument leaf must have (None: left as it is), in flattening order."""
    try:
        matched, _ = _match(cfg.in_tree, cfg.in_leaves, args, "in_axes", cfg.in_axes, len(args))
    except AxisSpecError:
        return (None,) * n
    msizes = placement.mesh_sizes(plan.mesh)
    out = []
    for leaf, _, v in matched:
        t = None
        if isinstance(v, (jax.Array, np.ndarray)) and not isinstance(v, _Tracer):
            t = _arg_sharding(leaf.spec, v.shape, plan, msizes)
        out.append(t)
    return tuple(out) if len(out) == n else (None,) * n


def _place_args(cfg: _Config, plan: _res.Plan, args: tuple, donate: bool = False) -> tuple:
    """Arguments laid out as their names require (xmap's in_shardings), so each device receives only its
    block; already placed arguments are untouched. Anything the traced call will reject is left alone so
    that it reports the error. In a multi-process run an argument that holds this process's data only is
    this process's slice of the global argument, as in xmap.

    ``donate`` (a call, not ``.lower``): an argument of ``donate_argnums`` that must be moved is moved with
    ``jax.device_put(..., donate=True)``, so that the caller's buffer is released as the call's donation
    promises, unless the same array is also passed elsewhere in the call."""
    try:
        matched, tree = _match(cfg.in_tree, cfg.in_leaves, args, "in_axes", cfg.in_axes, len(args))
    except AxisSpecError:
        return args
    msizes = placement.mesh_sizes(plan.mesh)
    leaves = []
    changed = False
    donated = set(cfg.donate_argnums) if donate else set()
    ids = collections.Counter(id(v) for _, _, v in matched) if donated else None
    multi = jax.process_count() > 1
    for leaf, path, v in matched:
        if isinstance(v, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)) and not isinstance(v, _Tracer):
            local = multi and placement.is_process_local(v)
            # a process's slice is sized by its devices, so divisibility is checked on the global array
            sharding = _arg_sharding(leaf.spec, v.shape, plan, msizes, check_sizes=not local)
            if local and sharding is None:
                sharding = NamedSharding(plan.mesh, PartitionSpec())
            if sharding is not None and (local or not placement.is_placed(v, sharding)):
                if isinstance(v, jax.ShapeDtypeStruct):
                    v = jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sharding, weak_type=v.weak_type)
                else:
                    give = (isinstance(v, jax.Array) and path and isinstance(path[0], SequenceKey)
                            and path[0].idx in donated and ids[id(v)] == 1)
                    v = placement.place(v, sharding, donate=give, local_blocks=True)
                changed = True
        leaves.append(v)
    return jax.tree.unflatten(tree, leaves) if changed else args


def _arg_sharding(spec: AxisSpec, shape: tuple, plan: _res.Plan, msizes: Mapping[str, int],
                  check_sizes: bool = True):
    if spec.min_rank() > len(shape) or (spec.rank is not None and spec.rank != len(shape)):
        return None
    dims = [_POSITIONAL] * len(shape)
    used: set[str] = set()
    for pos, name in spec.axes:
        axes = plan.mesh_axes(name)
        if not axes or (check_sizes and shape[pos] % math.prod(msizes[a] for a in axes)):
            continue
        if used & set(axes):  # a resource conflict: reported by the traced call, with the names
            return None
        used |= set(axes)
        dims[pos] = name
    if not used:
        return None
    return NamedSharding(plan.mesh, placement.storage_spec(len(dims), tuple(dims), plan.mesh_axes))


def _to_backend(args, backend: str):
    device = jax.local_devices(backend=backend)[0]

    def move(v):
        if isinstance(v, jax.core.Tracer):
            return v
        if isinstance(v, jax.Array) and all(d.platform == device.platform for d in v.devices()):
            return v
        if isinstance(v, (jax.Array, np.ndarray, np.generic)):
            return jax.device_put(v, device)
        return v

    return jax.tree.map(move, args)


# --------------------------------------------------------------------------------------------------------
# Tracing: entry, body, exit


def _match(treedef, leaves: list[tuple[tuple, _Leaf]], value: Any, what: str, user_spec: Any, nargs=None,
           given: Any = None):
    """Broadcast the spec prefix ``treedef`` over ``value``: ([(spec leaf, path, leaf)], value treedef).

    ``given``: the value as the user's function returned it, when ``value`` is that value with a top-level
    list read as a tuple (:func:`_fit_out_tree`); a mismatch shows the structure the user wrote."""
    try:
        subtrees = treedef.flatten_up_to(value)
    except (ValueError, TypeError):
        _check_value_keys(value, what)
        value_tree = jax.tree.structure(value if given is None else given, is_leaf=is_named)
        msg = (f"{_WHERE}: xmap {what} specification must be a tree prefix of the corresponding value, got "
               f"specification {user_spec!r} for value tree {value_tree}.")
        if what == "in_axes":
            msg += (" Note that xmap in_axes that are non-trivial pytrees should always be wrapped in a "
                    "tuple representing the argument list.")
            if nargs == 1:
                msg += (" In particular, you're passing in a single argument which means that xmap in_axes "
                        "might need to be wrapped in a singleton tuple.")
        raise AxisSpecError(msg) from None
    matched = []
    for (spath, leaf), sub in zip(leaves, subtrees):
        try:
            flat = jax.tree_util.tree_flatten_with_path(sub, is_leaf=is_named)[0]
        except ValueError:
            _check_value_keys(value, what)
            raise
        for vpath, v in flat:
            matched.append((leaf, tuple(spath) + tuple(vpath), v))
    return matched, jax.tree.structure(value, is_leaf=is_named)


def _check_value_keys(value: Any, what: str) -> None:
    """Arguments (``what="in_axes"``) or outputs that JAX cannot flatten (a dict with keys of mixed types):
    an AxisSpecError naming where. Cheap for the values xmap meets: it only looks into dicts."""
    arguments = what == "in_axes"
    _check_dict_keys(value, is_named, f"{_WHERE}: ", "value", arguments)


def _pos_shape(v) -> tuple[int, ...]:
    if type(v) is NamedArray:
        return tuple(v.shape)
    return tuple(np.shape(v))


def _infer_sizes(cfg: _Config, matched) -> tuple[dict[str, int], dict[str, str]]:
    sizes = dict(cfg.axis_sizes)
    origin = {n: "given in axis_sizes" for n in sizes}
    for leaf, path, v in matched:
        spec = leaf.spec
        shape = _pos_shape(v)
        label = _label(path, "argument")
        if spec.rank is not None and len(shape) != spec.rank:
            raise RankError(
                f"{_WHERE}: xmap argument has an in_axes specification of {leaf.text}, which asserts that it "
                f"should be of rank {spec.rank}, but the argument has rank {len(shape)} (and shape {shape}). "
                f"It is {label}.")
        need = spec.min_rank()
        if need > len(shape):
            raise RankError(
                f"{_WHERE}: One of xmap arguments has an in_axes specification of {leaf.text}, which implies "
                f"that it has at least {need} dimensions, but the argument has rank {len(shape)}. It is "
                f"{label}, of shape {shape}.")
        for pos, name in spec.axes:
            d = shape[pos]
            if name in sizes and sizes[name] != d:
                raise AxisSizeError(
                    f"{_WHERE}: The size of axis {name} was previously inferred to be {sizes[name]}, but "
                    f"found an argument of shape {shape} with in_axes specification {leaf.text}. Shape "
                    f"mismatch occurs in dimension {pos}: {d} != {sizes[name]}. Axis {name!r} has size "
                    f"{sizes[name]} {origin[name]} and {d} in {label}.")
            if name not in sizes:
                sizes[name] = d
                origin[name] = f"inferred from {label}"
        if type(v) is NamedArray:
            clash = sorted(set(v.names) & cfg.defined)
            if clash:
                raise AxisNameShadowingError(
                    f"{_WHERE}: {label} is a NamedArray that already carries named axes {fmt_names(clash)}, "
                    "which this nx.xmap defines again (disallowed axis name shadowing); rename one of them")
    missing = sorted(cfg.in_names - set(sizes))
    if missing:
        raise AxisSizeError(
            f"{_WHERE}: Failed to infer size of axes: {', '.join(missing)}. You've probably passed in empty "
            "containers in place of arguments that had those axes in their in_axes. Provide the sizes of "
            "missing axes explicitly via axis_sizes to fix this error.")
    return sizes, origin


class _Ctx:
    """What the entry, body and exit of one traced call share."""

    def __init__(self, cfg: _Config, plan: _res.Plan, sizes: dict[str, int], resources: dict[str, tuple],
                 cmesh: Any, outer: _env.AxisEnv):
        self.cfg = cfg
        self.outer = outer  # the environment the call is made in (an enclosing body's names)
        self.plan = plan
        self.sizes = sizes
        self.resources = resources  # every name in scope (outer ones too) -> resource names
        self.cmesh = cmesh  # the mesh constraints refer to (an all-Auto view when the mesh is Explicit)
        self.positional = True  # which way the body is being called (see _run_body)
        self.looped: Mapping[str, int] = {}
        self.out_tree: Any = None  # the treedef of the outputs, once the body ran

    def mesh_axes(self, name: str) -> tuple[str, ...]:
        return self.plan.mesh_axes(name, self.resources)

    def constrain(self, x: NamedArray, label: str = "a value") -> NamedArray:
        if self.cmesh is None:
            return x
        try:
            return _res.constrain_named(x, self.plan, self.cmesh, self.resources)
        except ValueError as e:
            self.enclosing_conflict(e, x.names, lambda a, b: (
                f"an input to an xmapped function {self.cfg.name} (xmap called at {_res.user_location()}): "
                f"{label} varies along {b!r} of an enclosing nx.xmap, and its in_axes map {a!r}"))
            raise

    def enclosing_conflict(self, e: ValueError, names: Sequence[str],
                           what: Callable[[str, str], str]) -> None:
        """Raise xmap's ResourceConflictError for jax's error about a value of an enclosing positional body
        (per element along its names, under their vmaps) that this call lays out over a mesh axis one of
        those names' vmap already splits it over: a value carrying both names. ``names``: the value's names
        here; ``what(inner, outer)``: where the value is. Anything else is left to the caller to re-raise.

        JAX says only which mesh axes clash (its vmap's ``spmd_axis_name``); the names are read back from
        the resources, so that the message names both, as xmap's did."""
        m = _SPMD_CLASH.search(str(e))
        if m is None or isinstance(e, NamedAxisError):
            return
        try:
            spmd = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError):
            return
        clash = set(spmd) if isinstance(spmd, tuple) else {spmd}
        for a in names:
            for b in self.outer.jax_names:
                # the first mesh axis, of those jax named, that the value's name and the enclosing one share
                shared = [r for r in self.mesh_axes(a) if r in clash and r in self.mesh_axes(b)]
                if shared:
                    raise ResourceConflictError(_res.conflict_message(a, b, shared[0], what(a, b))) from None


# JAX's error for a sharding constraint, under a vmap with spmd_axis_name, that uses the vmap's mesh axes
_SPMD_CLASH = re.compile(r"vmap spmd_axis_name (\(.*?\)) cannot appear in with_sharding_constraint spec")


def _trace(cfg: _Config, plan: _res.Plan, *args):
    """The body of the compiled call (also run inline inside an enclosing nx.xmap)."""
    matched, arg_tree = _match(cfg.in_tree, cfg.in_leaves, args, "in_axes", cfg.in_axes, len(args))
    sizes, origin = _infer_sizes(cfg, matched)
    outer = _env.current()
    _res.check_divisible(plan, sizes, _WHERE, origin)
    resources = {**outer.resources, **plan.axes}

    with contextlib.ExitStack() as stack:
        cmesh = plan.mesh
        explicit = plan.explicit
        if explicit:
            # Explicit mesh axes put shardings in the types, where contractions over split names would need
            # out_sharding at every op. The body runs on an all-Auto view of the mesh instead (as
            # jax.sharding.auto_axes does), and the outputs are resharded on the Explicit axes at the end.
            cmesh = plan.mesh.abstract_mesh.update_axis_types({n: AxisType.Auto for n in explicit})
            stack.enter_context(jax.sharding.use_abstract_mesh(cmesh))
            matched = [(leaf, path, jax.sharding.reshard(_as_array(v), PartitionSpec()))
                       if type(v) is not NamedArray else (leaf, path, v) for leaf, path, v in matched]
        ctx = _Ctx(cfg, plan, sizes, resources, cmesh, outer)

        wrapped = []
        for leaf, path, v in matched:
            x = wrap(v, leaf.spec, where=_WHERE)
            label = _label(path, "argument")
            c = _res.conflict(x.names, resources)
            if c is not None:
                raise ResourceConflictError(_res.conflict_message(
                    *c, f"an input to an xmapped function {cfg.name} (xmap called at "
                    f"{_res.user_location()}): {label} carries both"))
            wrapped.append(ctx.constrain(x, label))

        looped = {n: plan.loop[1] for n in plan.looped} if plan.loop is not None else {}
        for n in looped:  # the chunk of a looped axis carries another name inside the loop body
            resources[_hidden(n)] = resources[n]
        ctx.looped = looped
        results = _run_body(ctx, arg_tree, wrapped)

    if explicit:
        results = [_reshard_explicit(ctx, r, spec) for r, spec in results]
    else:
        results = [r for r, _ in results]
    return jax.tree.unflatten(ctx.out_tree, results)


def _run_body(ctx: _Ctx, arg_tree, wrapped: list[NamedArray]) -> list:
    """Call the body and place its outputs: [(result, storage spec)] per output leaf.

    The body is first called as xmap called it, on per-element positional arrays (:func:`_call_positional`).
    If that raises, it is called on NamedArrays (nx's own style: ``x.sum("i")``, ``x.rename``), and the
    first way that runs is used. When both raise, the error of the NamedArray call is raised if the body
    looks written on NamedArrays: the positional call failed with a :class:`PerElementAxisError` (an nx
    operation needed a map name as an axis), or the NamedArray call failed with an nx error (which names
    the body's mistake) and the positional call did not fail one of xmap's own checks (an output varying
    along a name its out_axes leave out, a loop axis referred to). Else the positional call's error. The
    other error is attached as a note. Bodies are pure, so the second call changes nothing but tracing
    time (once per compilation).
    """
    cfg = ctx.cfg
    looped = ctx.looped
    attempts = []
    for positional in (True, False):
        ctx.positional = positional
        try:
            if positional:
                return _enter_and_exit(ctx, arg_tree, wrapped)
            with _env.bind(ctx.sizes, resources=ctx.resources, mesh=ctx.cmesh, loops=looped, where=_WHERE):
                return _enter_and_exit(ctx, arg_tree, wrapped)
        except Exception as e:  # noqa: BLE001 - re-raised below, one of the two
            attempts.append(e)
    first, second = attempts
    named_style = isinstance(first, PerElementAxisError) or (
        isinstance(second, NamedAxisError) and not getattr(first, "xmap_contract", False))
    chosen, other, how = ((second, first, "on per-element positional arrays") if named_style
                          else (first, second, "on NamedArrays (nx's own body style)"))
    chosen.add_note(f"nx.xmap also called {cfg.name} {how}, which raised {type(other).__name__}: "
                    f"{str(other).splitlines()[0] if str(other) else ''}")
    raise chosen


def _enter_and_exit(ctx: _Ctx, arg_tree, wrapped: list[NamedArray]) -> list:
    cfg = ctx.cfg
    if ctx.looped:
        out = _run_looped(ctx, arg_tree, wrapped, ctx.looped)
    else:
        out = _call_body(ctx, arg_tree, wrapped)
    given, out = out, _fit_out_tree(cfg.out_axes, out)
    out_matched, out_tree = _match(cfg.out_tree, cfg.out_leaves, out, "out_axes", cfg.out_axes, given=given)
    results = [_exit(ctx, v, leaf, _label(path, "output")) for leaf, path, v in out_matched]
    ctx.out_tree = out_tree
    return results


def _call_body(ctx: _Ctx, arg_tree, leaves: list[NamedArray]) -> Any:
    """The body's outputs for argument leaves that are NamedArrays (whole axes), as NamedArrays or arrays."""
    if ctx.positional:
        return _call_positional(ctx, arg_tree, leaves)
    return ctx.cfg.fun(*jax.tree.unflatten(arg_tree, leaves))


def _places(ctx: _Ctx, leaf: _Leaf, name: str) -> bool:
    """Whether an output with spec ``leaf`` keeps ``name`` (a name the body is mapped over)."""
    real = name[:-len(LOOP_CHUNK_SUFFIX)] if name.endswith(LOOP_CHUNK_SUFFIX) else name
    return real not in ctx.sizes or real in leaf.spec.names  # names of an enclosing map pass through


def _call_positional(ctx: _Ctx, arg_tree, leaves: list[NamedArray]) -> Any:
    """Call the body as xmap did: on per-element positional arrays, under one ``jax.vmap`` per name.

    Each name is the ``axis_name`` of its vmap, so ``jax.lax`` collectives, ``axis_index`` and autodiff
    rules (``custom_vjp`` ones included) inside the body see it, and the body may be anything that takes
    arrays (haiku, flax and equinox modules). An output keeps exactly the names it varies along: a name
    that its ``out_axes`` place is mapped to an axis (broadcast if the output does not vary along it); a
    name they leave out must be one the output does not vary along (reduced by a collective, or never
    depended on), which is JAX's ``out_axes=None``.
    """
    cfg = ctx.cfg
    sizes: dict[str, int] = {n: s for n, s in ctx.sizes.items() if n not in ctx.looped}
    for x in leaves:  # chunks of looped names, and names of an enclosing map, which pass through
        for n, d in zip(x.names, x.data.shape[x.data.ndim - len(x.names):]):
            sizes.setdefault(n, d)
    mapped = list(sizes)
    flat, in_axes = [], [[] for _ in mapped]
    for x in leaves:
        p = x.data.ndim - len(x.names)
        carried = [n for n in mapped if n in x.names]
        flat.append(transpose(x.data, tuple(p + x.names.index(n) for n in carried) + tuple(range(p))))
        for k, n in enumerate(mapped):
            in_axes[k].append(0 if n in x.names else None)
    out_box: list[Any] = []

    def body(*elems):
        out = cfg.raw(*jax.tree.unflatten(arg_tree, list(elems)))
        # the structure the body returned, for the tree-prefix message (before a list is read as a tuple)
        out_box.append(jax.tree.structure(out, is_leaf=is_named))
        return _fit_out_tree(cfg.out_axes, out)

    f = body
    for k in reversed(range(len(mapped))):
        n = mapped[k]
        out_axes = jax.tree.unflatten(cfg.out_tree, [0 if _places(ctx, leaf, n) else None
                                                     for _, leaf in cfg.out_leaves])
        real = n[:-len(LOOP_CHUNK_SUFFIX)] if n.endswith(LOOP_CHUNK_SUFFIX) else n
        spmd = ctx.mesh_axes(real) if ctx.cmesh is not None and real in ctx.sizes else ()
        f = jax.vmap(f, in_axes=tuple(in_axes[k]), out_axes=out_axes, axis_name=n, axis_size=sizes[n],
                     spmd_axis_name=tuple(spmd) or None)
    own = [n for n in ctx.sizes]
    with _env.bind_positional(sizes, own=own, resources=ctx.resources, mesh=ctx.cmesh, loops=ctx.looped,
                              where=_WHERE):
        try:
            out = f(*flat)
        except NameError as e:
            _loop_reference(e, ctx)
            raise
        except ValueError as e:
            _vmap_out_error(e, ctx, out_box)
            raise
    matched, out_tree = _match(cfg.out_tree, cfg.out_leaves, out, "out_axes", cfg.out_axes)
    results = []
    for leaf, path, v in matched:
        lead = tuple(n for n in mapped if _places(ctx, leaf, n))
        if type(v) is NamedArray:
            clash = sorted(set(lead) & set(v.names))
            if clash:
                raise PerElementAxisError(
                    f"{_WHERE}: {_label(path, 'output')} of {cfg.name} is a NamedArray carrying "
                    f"{fmt_names(clash)}, which the body is mapped over (inside a positional body values "
                    "are per element along the map's names); return its elements, or rename it")
            d, names = v.data, v.names + lead
        else:
            d, names = _as_array(v), lead
        k = len(lead)
        d = transpose(d, tuple(range(k, d.ndim)) + tuple(range(k)))
        results.append(from_storage(d, names, _WHERE) if names else d)
    return jax.tree.unflatten(out_tree, results)


def _loop_reference(e: NameError, ctx: _Ctx) -> None:
    """A ``jax.lax`` collective over a name computed by a serial loop: xmap's LoopAxisError."""
    m = re.search(r"unbound axis name: ([^\s.]+)", str(e))
    if m is not None and m.group(1) in ctx.looped:
        raise _contract(LoopAxisError(
            f"{_WHERE}: Named axes with loop resources assigned to them cannot be referenced inside the "
            f"xmapped computation (e.g. in collectives), but `{m.group(1)}` violates that rule: the body "
            f"sees one chunk of {m.group(1)!r} at a time, so reductions over it count too "
            f"({str(e).splitlines()[0]})")) from None


def _contract(e: NamedAxisError) -> NamedAxisError:
    """Mark an error of xmap's own contract on a positional call (the body itself was right to be called
    that way), for :func:`_run_body`."""
    e.xmap_contract = True  # type: ignore[attr-defined]
    return e


def _vmap_out_error(e: ValueError, ctx: _Ctx, out_box: list) -> None:
    """JAX's errors about ``out_axes`` of the vmaps, in xmap's terms."""
    text = str(e)
    m = re.search(r"vmap has mapped output \(axis_name=(.+?)\) but out_axes is None", text)
    cfg = ctx.cfg
    if m is not None:
        name = m.group(1)
        real = name[:-len(LOOP_CHUNK_SUFFIX)] if name.endswith(LOOP_CHUNK_SUFFIX) else name
        omit = sorted({leaf.text for _, leaf in cfg.out_leaves if real not in leaf.spec.names})
        raise _contract(UnplacedAxisError(
            f"{_WHERE}: One of xmap results has an out_axes specification of {' or '.join(omit)}, but is "
            f"actually mapped along more axes defined by this xmap call: {real}. An output of {cfg.name} "
            f"varies along {real!r} (size {ctx.sizes.get(real, '?')}). Give it a position in out_axes, or "
            f"reduce it in the function (jax.lax.psum(y, {real!r}) sums it, jax.lax.pmean averages "
            "it)")) from None
    if "out_axes specification must be a tree prefix" in text and out_box:
        raise _contract(AxisSpecError(
            f"{_WHERE}: xmap out_axes specification must be a tree prefix of the corresponding value, got "
            f"specification {cfg.out_axes!r} for value tree {out_box[-1]}.")) from None


def _as_array(v):
    return v if hasattr(v, "ndim") else jnp.asarray(v)


def _fit_out_tree(out_axes: Any, out: Any) -> Any:
    # A top-level list of specs for a tuple of results (or the reverse) means the same thing.
    if isinstance(out_axes, list) and not _is_leaf(out_axes) and type(out) is tuple:
        return list(out)
    if isinstance(out_axes, tuple) and not _is_leaf(out_axes) and type(out) is list:
        return tuple(out)
    return out


def _exit(ctx: _Ctx, value: Any, leaf: _Leaf, label: str):
    """Check one output and place its names: (array or NamedArray of pass-through names, storage spec)."""
    spec = leaf.spec
    x = value if type(value) is NamedArray else _make(_as_array(value), ())
    placed = spec.as_dict()
    placed_names = set(placed.values())
    extra = sorted(n for n in x.names if n in ctx.sizes and n not in placed_names)
    if extra:
        raise UnplacedAxisError(
            f"{_WHERE}: One of xmap results has an out_axes specification of {leaf.text}, but is actually "
            f"mapped along more axes defined by this xmap call: {', '.join(extra)}. It is {label} of "
            f"{ctx.cfg.name}. Give them positions in out_axes, "
            f"or remove them in the function: if the value is the same along {extra[0]!r} (for example "
            f"a jax.lax collective inside nx.nmap already reduced it), take one element, "
            f"y[{{{extra[0]!r}: 0}}]; "
            f"if it varies, reduce it with the collective you mean (nx.psum(y, {extra[0]!r}) adds the "
            "elements up, nx.pmean averages them)")
    p = x.ndim
    final_rank = p + len(placed)
    if spec.rank is not None and final_rank != spec.rank:
        raise RankError(
            f"{_WHERE}: xmap output has an out_axes specification of {leaf.text}, which asserts that it "
            f"should be of rank {spec.rank}, but the output has rank {final_rank} (and shape "
            f"{_final_shape(x.shape, placed, ctx.sizes)}). It is {label} of {ctx.cfg.name}.")
    need = spec.min_rank() - len(placed)
    if need > p:
        raise RankError(
            f"{_WHERE}: One of xmap outputs has an out_axes specification of {leaf.text}, which requires the "
            f"result of the xmapped function to have at least {need} positional dimensions, but it only has "
            f"{p}. It is {label} of {ctx.cfg.name}, of positional shape {x.shape}.")
    c = _res.conflict(x.names, ctx.resources)
    if c is not None:
        # a positional body's output carries every name its out_axes place (its vmaps put them there), so a
        # conflict a jax operation inside made shows here; a body on NamedArrays reports it where it is made
        raise ResourceConflictError(_res.conflict_message(
            *c, f"a value returned from an xmapped function {ctx.cfg.name} (xmap called at "
            f"{_res.user_location()}): {label} carries both"))
    missing = [placed[r] for r in sorted(placed) if placed[r] not in x.names]  # in output position order
    if missing:
        c = _res.conflict(tuple(x.names) + tuple(missing), ctx.resources)
        if c is not None:
            a, b, r = c
            bc, have = (b, a) if b in missing else (a, b)
            r = _res.loop_label(r)
            raise ResourceConflictError(
                f"{_WHERE}: One of xmapped function ({ctx.cfg.name}) outputs is broadcast along axis `{bc}` "
                f"which is assigned to resources `{r}`, but the output is already partitioned along `{r}`, "
                f"because its named shape contains `{have}`. It is {label}; a value cannot be split "
                f"twice over one resource (map {bc!r} and {have!r} to different resources, or reduce "
                f"{have!r} first)")
        full = dict(zip(x.names, x.data.shape[p:]))
        for n in missing:
            full[n] = ctx.sizes[n]
        names = x.names + tuple(missing)
        x = _make(align(x, names, full), names)
    names = x.names
    it = iter(range(p))
    perm = [p + names.index(placed[r]) if r in placed else next(it) for r in range(final_rank)]
    rest = [n for n in names if n not in placed_names]
    perm += [p + names.index(n) for n in rest]
    data = transpose(x.data, tuple(perm))
    # the result's dims in order: placed names and positional axes, then the names passing through
    dims = tuple(placed.get(r, _POSITIONAL) for r in range(final_rank)) + tuple(rest)
    pspec = placement.storage_spec(len(dims), dims, ctx.mesh_axes)
    if ctx.cmesh is not None:
        try:
            data = placement.constrain(data, pspec, ctx.cmesh)
        except ValueError as e:
            ctx.enclosing_conflict(e, names, lambda a, b: (
                f"a value returned from an xmapped function {ctx.cfg.name} (xmap called at "
                f"{_res.user_location()}): {label} varies along {b!r} of an enclosing nx.xmap, and its "
                f"out_axes place {a!r}"))
            raise
    return (_make(data, tuple(rest)) if rest else data), pspec


_POSITIONAL = ""  # a dim with no name (never an axis name): replicated


def _final_shape(shape, placed: Mapping[int, str], sizes: Mapping[str, int]) -> tuple[int, ...]:
    it = iter(shape)
    out = []
    for r in range(len(shape) + len(placed)):
        out.append(sizes.get(placed[r], -1) if r in placed else next(it))
    return tuple(out)


def _reshard_explicit(ctx: _Ctx, r, spec: PartitionSpec):
    explicit = set(ctx.plan.explicit)

    def keep(part):
        if part is None:
            return None
        axes = tuple(a for a in (part if isinstance(part, tuple) else (part,)) if a in explicit)
        return None if not axes else axes[0] if len(axes) == 1 else axes

    espec = PartitionSpec(*[keep(p) for p in spec])
    sharding = NamedSharding(ctx.plan.mesh, espec)
    if type(r) is NamedArray:
        return _make(jax.sharding.reshard(r.data, sharding), r.names)
    return jax.sharding.reshard(r, sharding)


# --------------------------------------------------------------------------------------------------------
# Serial loops: compute a named axis in chunks


LOOP_CHUNK_SUFFIX = "@loop-chunk"


def _hidden(name: str) -> str:
    # Inside the loop body the looped axis carries another name, so that any reference to the real name
    # (a reduction, a collective, axis_index) misses the value and asks the environment, which reports it.
    return name + LOOP_CHUNK_SUFFIX


def _run_looped(ctx: _Ctx, arg_tree, wrapped: list[NamedArray], looped: Mapping[str, int]):
    length = next(iter(looped.values()))
    msizes = _res.mesh_sizes(ctx.plan.mesh) if ctx.plan.mesh is not None else {}
    split = {n: math.prod(msizes[a] for a in ctx.mesh_axes(n)) for n in looped}
    stacked: list[NamedArray] = []
    where: list[int] = []
    for k, x in enumerate(wrapped):
        names = [n for n in x.names if n in looped]
        if names:  # at most one: names sharing the loop cannot co-occur (checked on entry)
            stacked.append(_chunk(x, names[0], split[names[0]], length))
            where.append(k)
    if not stacked:
        # No argument varies along the looped names: nothing to split; outputs get them by broadcasting.
        return _call_body(ctx, arg_tree, wrapped)
    out_tree_box: list[Any] = []

    def body(chunks):
        leaves = list(wrapped)
        for k, c in zip(where, chunks):
            leaves[k] = ctx.constrain(c)
        out = _call_body(ctx, arg_tree, leaves)
        out = _fit_out_tree(ctx.cfg.out_axes, out)
        flat, tree = jax.tree.flatten(out, is_leaf=is_named)
        out_tree_box.append(tree)
        return [o if type(o) is NamedArray else _make(_as_array(o), ()) for o in flat]

    outs = jax.lax.map(body, stacked)
    merged = []
    for o in outs:
        hidden = [n for n in looped if _hidden(n) in o.names]
        if hidden:
            merged.append(_unchunk(o, hidden[0], split[hidden[0]], length))
        else:
            # It carries no looped name, so it was computed from values that do not vary along it: every
            # iteration computed the same value.
            merged.append(_make(o.data[0], o.names))
    return jax.tree.unflatten(out_tree_box[-1], merged)


def _chunk(x: NamedArray, name: str, split: int, length: int) -> NamedArray:
    """Storage of ``x`` with axis ``name`` (size n) cut into ``length`` chunks stacked on a leading axis.

    The axis is first split over its mesh axes (major) and then over the loop (minor), so chunk ``c`` holds
    the ``c``-th piece of every device's block: each device works on its own data in every iteration.
    """
    d = x.data
    p = d.ndim - len(x.names)
    k = p + x.names.index(name)
    n = d.shape[k]
    m = n // (split * length)
    d = d.reshape(d.shape[:k] + (split, length, m) + d.shape[k + 1:])
    d = jnp.moveaxis(d, k + 1, 0)
    d = d.reshape((length,) + d.shape[1:k + 1] + (split * m,) + d.shape[k + 3:])
    names = tuple(_hidden(n_) if n_ == name else n_ for n_ in x.names)
    return from_storage(d, names, _WHERE)


def _unchunk(o: NamedArray, name: str, split: int, length: int) -> NamedArray:
    """The inverse of :func:`_chunk` on a stacked output (leading axis: the iteration)."""
    d = o.data
    h = _hidden(name)
    p = d.ndim - len(o.names)
    k = p + o.names.index(h)
    m = d.shape[k] // split
    d = d.reshape(d.shape[:k] + (split, m) + d.shape[k + 1:])
    d = jnp.moveaxis(d, 0, k)  # (..., split, length, m, ...)
    d = d.reshape(d.shape[:k - 1] + (split * length * m,) + d.shape[k + 2:])
    names = tuple(name if n_ == h else n_ for n_ in o.names)
    return from_storage(d, names, _WHERE)
