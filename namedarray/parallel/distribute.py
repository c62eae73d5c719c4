"""Sharding by name: ``x.shard()``, ``nx.shard``, ``nx.sharding``, ``nx.jit`` and ``nx.from_process_local``.

Model code names its axes with *logical* names (``batch``, ``embed``, ``heads``) and calls ``.shard()`` where
a layout matters; the user picks the parallel strategy with one mapping from those names to mesh axes,
``with nx.axis_rules({"batch": "data", "heads": "model"}):``, and a mesh (``jax.set_mesh(mesh)``, the legacy
``with Mesh(...)``, or ``mesh=``). The model never mentions hardware, and results never depend on the
mapping. A value is laid out by its names alone (:mod:`namedarray.core.placement`): each named axis is split
over the mesh axes its name maps to, and everything else is replicated. The rules are ranked by their order:
where two names of one value map to one mesh axis, the first keeps it and the other is replicated in that
value, so ``{"batch": "data", "embed": "data"}`` is fully sharded data parallelism.

* Inside ``jit``, ``.shard()`` is a sharding constraint (``with_sharding_constraint`` on Auto mesh axes,
  ``jax.sharding.reshard`` on Explicit ones); outside, it places the data (``device_put``).
* ``nx.sharding(tree)`` gives the ``NamedSharding`` of every NamedArray in a pytree (abstract ones from
  ``jax.eval_shape`` included), for ``jax.jit``'s ``in_shardings``/``out_shardings``, ``jax.device_put``
  and checkpoint restores.
* ``nx.jit(f)`` is ``jax.jit`` with its NamedArray inputs and outputs laid out by name, so
  ``params = nx.jit(init)(key)`` creates parameters already split across devices.
* ``nx.from_process_local(x, ...)`` builds a global NamedArray from each process's block
  (``jax.distributed``).

Without a mesh and without rules, ``.shard()`` is a no-op, so the same model code runs on one device.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
>>> x = nx.wrap(jnp.ones((4, 3)), ["batch", "embed"])
>>> with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
...     x.shard().sharding.spec
P('data',)
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from jax.tree_util import keystr

from ..core import caches, placement
from ..core import env as _env
from ..core.array import NamedArray, _make, canonical_storage, is_named
from ..core.layout import named_sizes
from ..core.orders import canonical, sync_with_job
from ..errors import DivisibilityError, MissingResourceError, NamedAxisError
from . import context

__all__ = ["shard", "sharding", "jit", "Jitted", "from_process_local", "active_mapping", "recording_layouts"]

T = TypeVar("T")
_Tracer = jax.core.Tracer


# --------------------------------------------------------------------------------------------------------
# The mapping and the mesh in force


def active_mapping(resources: Mapping[str, Any] | None = None,
                   where: str = "nx.shard") -> dict[str, tuple[str, ...]]:
    """Axis name -> mesh axes: ``resources`` when given, else the rules of ``nx.axis_rules`` in force.

    >>> import namedarray as nx
    >>> with nx.axis_rules({"batch": "data"}):
    ...     active_mapping()
    {'batch': ('data',)}
    """
    env = _env.current()
    return env.mapping() if resources is None else env.mapping(placement.normalize(resources, where))


def _mesh(mesh: Any, where: str = "nx.shard") -> Any:
    if placement.check_mesh(mesh, where) is not None:
        return mesh
    env = _env.current()
    return env.mesh if env.mesh is not None else placement.current_mesh()


_NO_MESH = ("no mesh is in context: enter one with `with jax.set_mesh(mesh):` (or the legacy `with "
            "Mesh(devices, names):`), or pass mesh=")


def _no_mesh(where: str, names: Sequence[str], mapping: Mapping[str, tuple[str, ...]]) -> Exception:
    mapped = ", ".join(f"{n!r} -> {mapping[n]}" for n in names if mapping.get(n))
    return MissingResourceError(f"{where}: the rules map {mapped}, but {_NO_MESH}")


# A mapping given to the call itself (x.shard(resources), nx.shard, nx.sharding, nx.from_process_local) says
# where each name of the values it lays out goes, as a PartitionSpec would: two names of one value on one mesh
# axis are asked for at once, which is an error, as jax's P("data", "data") is. The rules in force are ranked
# instead (placement.resolve): the first of the two in rule order keeps the mesh axis.
_STRICT_HINT = ("map one of them elsewhere or to None; under nx.axis_rules instead, the first of the two in "
                "rule order would be split over it and the other replicated")


def _axes(x: NamedArray, mapping, mesh, where: str, strict: bool) -> dict[str, tuple[str, ...]]:
    """The mesh axes each name of ``x`` is split over (checked: mesh axes, divisibility, and with ``strict``
    no two names on one mesh axis)."""
    return placement.check(named_sizes(x), mapping, mesh, where, strict=strict,
                           hint=_STRICT_HINT if strict else None)


def _spec(x: NamedArray, names: tuple[str, ...], ndim: int, mapping, mesh, where: str,
          strict: bool = False) -> PartitionSpec:
    return placement.storage_spec(ndim, names, _axes(x, mapping, mesh, where, strict).get)


# --------------------------------------------------------------------------------------------------------
# shard


def _shard_one(x: NamedArray, mapping: Mapping[str, tuple[str, ...]], mesh: Any, where: str,
               strict: bool = False) -> NamedArray:
    seen = context.laid_out_values.get()
    if seen is not None:
        seen.append(x)
    if mesh is None:
        if any(mapping.get(n) for n in x.names):
            raise _no_mesh(where, x.names, mapping)
        return x
    d = x.data
    axes_of = _axes(x, mapping, mesh, where, strict)
    spec = placement.storage_spec(d.ndim, x.names, axes_of.get)
    if isinstance(d, jax.ShapeDtypeStruct):
        return _make(jax.ShapeDtypeStruct(d.shape, d.dtype, sharding=NamedSharding(mesh, spec),
                                          weak_type=d.weak_type), x.names)
    if not isinstance(d, _Tracer):
        if isinstance(mesh, jax.sharding.AbstractMesh):
            raise MissingResourceError(f"{where}: only an abstract mesh is in context (jax.sharding."
                                       "use_abstract_mesh), which cannot place data; use jax.set_mesh(mesh)")
        return _make(placement.constrain(d, spec, mesh), x.names)
    # a value this trace already laid out so stays as it is: no constraint (see placement.layouts_known)
    key = placement.layout_key(mesh, x.names, axes_of.get)
    if placement.known_layout(d) == key:
        out = d
    else:
        out = placement.constrain(d, spec, mesh)
        placement.note_layout(out, key)
    stated = context.stated_layouts.get()
    if stated is not None:
        stated[id(out)] = (out, mapping)  # the tracer itself is kept, so its id cannot be reused
    return _make(out, x.names)


# While nx.jit traces its function, context.stated_layouts holds each value a constraint in the body
# produced (id -> (tracer, the mapping it was laid out by)), so that the output keeps the layout the body
# stated (see Jitted._traced); while Jitted.eval_shape traces, context.output_layouts holds the
# PartitionSpec of each output NamedArray, by key path. Per context (namedarray.parallel.context), so threads
# tracing at once keep apart.
# While nx.plan_sharding traces a step to learn which names occur together, context.laid_out_values is a
# list of every value laid out by name.


def recording_layouts() -> contextlib.AbstractContextManager[list]:
    """Within the block, a list that collects every NamedArray laid out by name (``.shard()``, ``nx.shard``,
    ``nx.jit``'s arguments and results): what :func:`namedarray.plan_sharding` reads of a step's values.

    >>> import jax.numpy as jnp, namedarray as nx
    >>> with recording_layouts() as seen:
    ...     _ = nx.wrap(jnp.ones((2, 3)), ["a", "b"]).shard()
    >>> [dict(v.named_shape) for v in seen]
    [{'a': 2, 'b': 3}]
    """
    return context.holding(context.laid_out_values, [])


def shard(tree: T, resources: Mapping[str, Any] | None = None, *, mesh: Any = None) -> T:
    """Lay every NamedArray of ``tree`` out by its names; other leaves pass through unchanged.

    ``resources`` maps axis names to a mesh axis, a tuple of mesh axes (major to minor) or ``None``; it
    defaults to the rules of the innermost ``with nx.axis_rules(...)``. Each named axis is split over its
    mesh axes; names the mapping does not mention, and positional axes, are replicated. Inside ``jit`` this
    is a sharding constraint, outside it places the data; values never change. The mesh is ``mesh=``, else
    ``jax.set_mesh``'s, else the legacy ``with Mesh(...)``'s. With no mesh, a value none of whose names is
    mapped is returned as it is (so model code runs unchanged on one device); a mapped one is an error.

    Two names of one value mapped to one mesh axis: under the rules in force the first of them in rule
    order is split over it and the other replicated (see ``nx.axis_rules``: fully sharded data parallelism
    by name); in a ``resources`` given here, which says where each name goes, it is an error.

    Errors (raised before any data moves): a mesh axis the mesh lacks, two names of one value on one mesh
    axis in ``resources``, a size its mesh axes do not divide, a mesh axis twice in one name's tuple, rules
    with no mesh.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> params = {"w": nx.wrap(jnp.ones((3, 4)), ["embed", "mlp"]), "step": 0}
    >>> nx.shard(params, {"mlp": "data"}, mesh=mesh)["w"].sharding.spec
    P(None, 'data')
    """
    sync_with_job()
    mapping = active_mapping(resources, "nx.shard")
    m = _mesh(mesh)
    strict = resources is not None
    if is_named(tree):
        return _shard_one(tree, mapping, m, "nx.shard", strict)

    def one(path, v):
        if not is_named(v):
            return v
        return _shard_one(v, mapping, m, f"nx.shard at {keystr(path)}" if path else "nx.shard", strict)

    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=is_named)


def shard_method(self: NamedArray, resources: Mapping[str, Any] | None = None, *,
                 mesh: Any = None) -> NamedArray:
    """Lay this array out by its names (see :func:`namedarray.shard`); values never change.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> x = nx.wrap(jnp.ones((4, 3)), ["batch", "embed"])
    >>> x.shard() is x   # no mesh and no rules: nothing to do
    True
    """
    return _shard_one(self, active_mapping(resources, "x.shard()"), _mesh(mesh, "x.shard()"), "x.shard()",
                      strict=resources is not None)


# --------------------------------------------------------------------------------------------------------
# sharding: the NamedShardings of a pytree


def sharding(tree: Any, resources: Mapping[str, Any] | None = None, *, mesh: Any = None) -> Any:
    """The ``NamedSharding`` each NamedArray of ``tree`` gets by its names (other leaves: replicated).

    The result has ``tree``'s structure with every NamedArray replaced by one sharding (a NamedArray is one
    leaf), so it is a tree prefix of ``tree``: pass it as ``jax.jit``'s ``in_shardings``/``out_shardings``,
    to ``jax.device_put``, or to a checkpoint restore. Abstract trees work (``jax.eval_shape``'s NamedArrays
    over ``ShapeDtypeStruct``). The spec is that of the flattened leaf (names in canonical order), which is
    what those functions see.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> abstract = jax.eval_shape(lambda: {"w": nx.wrap(jnp.zeros((4, 3)), ["batch", "embed"])})
    >>> nx.sharding(abstract, {"batch": "data"}, mesh=mesh)["w"].spec
    P('data',)
    """
    mapping = active_mapping(resources, "nx.sharding")
    m = _mesh(mesh, "nx.sharding")
    if m is None:
        raise MissingResourceError(f"nx.sharding: {_NO_MESH}")
    replicated = NamedSharding(m, PartitionSpec())

    def one(path, v):
        if not is_named(v):
            return replicated
        where = f"nx.sharding at {keystr(path)}" if path else "nx.sharding"
        return NamedSharding(m, _spec(v, canonical(v.names), v.data.ndim, mapping, m, where,
                                      strict=resources is not None))

    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=is_named)


# --------------------------------------------------------------------------------------------------------
# jit


P = ParamSpec("P")
R = TypeVar("R", covariant=True)


class JitFunction(Protocol, Generic[P, R]):
    """What ``nx.jit(f)`` is to a type checker: ``f``'s signature, and jax's ahead-of-time methods."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
    def trace(self, *args: Any, **kwargs: Any) -> jax.stages.Traced: ...
    def lower(self, *args: Any, **kwargs: Any) -> jax.stages.Lowered: ...
    def eval_shape(self, *args: Any, **kwargs: Any) -> Any: ...


# nx.jit(f) keeps f's signature; nx.jit(resources=...) is a decorator that does
@overload
def jit(fun: Callable[P, R], *, resources: Mapping[str, Any] | None = None,
        **jit_kwargs: Any) -> JitFunction[P, R]: ...
@overload
def jit(*, resources: Mapping[str, Any] | None = None,
        **jit_kwargs: Any) -> Callable[[Callable[P, R]], JitFunction[P, R]]: ...


def jit(fun: Callable | None = None, *, resources: Mapping[str, Any] | None = None,
        **jit_kwargs: Any) -> Any:
    """``jax.jit`` whose NamedArray inputs and outputs are laid out by name.

    Each call places the NamedArrays among its (non-static) arguments by the rules in force (``resources``
    adds rules for this function, as ``with nx.axis_rules(resources)`` around each call would), and the
    compiled function lays its NamedArray results out the same way; plain array leaves are left to
    ``jax.jit``. So ``params = nx.jit(init)(key)`` creates parameters already split across devices, never
    whole on one, and a training step receives and returns them split. ``static_argnums``,
    ``donate_argnums`` and every other ``jax.jit`` option pass through. Also a decorator, with or without
    arguments. With no mesh in context it is ``jax.jit``.

    An output's layout is decided by, in this order:

    1. an explicit argument: ``out_shardings=`` (passed to ``jax.jit``; nx.jit then constrains no output,
       and with ``in_shardings=`` it places no argument);
    2. the function body: an output that is the result of a ``.shard()`` / ``nx.shard`` in the body keeps
       the layout that call stated (its ``resources``, or the rules in force there), as ``jax.jit`` keeps a
       ``with_sharding_constraint``;
    3. the rules: each named axis split over the mesh axes its name maps to (ranked by rule order where
       two names of one value map to one mesh axis: see ``nx.axis_rules``);
    4. replicated: names no rule maps.

    Arguments are placed by the rules (3, 4) unless ``in_shardings=`` says otherwise: a body that states
    another layout for a value it returns and receives back (a training state) moves it on every call, so
    say such layouts in the rules.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> init = nx.jit(lambda key: nx.random.normal(key, named_shape={"batch": 4, "embed": 2}))
    >>> with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
    ...     init(jax.random.key(0)).named_shape
    {'batch': 4, 'embed': 2}
    """
    if fun is None:
        return functools.partial(jit, resources=resources, **jit_kwargs)
    return Jitted(fun, resources, jit_kwargs)


_current_env = _env.current  # read on every call of nx.jit and nx.xmap

# each nx.jit's compilations with its arguments' layouts as in_shardings, one small LRU per nx.jit object
_FAST = caches.LRUFamily("nx.jit compilations with argument layouts", 16)


# --------------------------------------------------------------------------------------------------------
# The per-call fast path of nx.jit and nx.xmap
#
# A training loop calls one step with arguments of one structure, laid out as their names ask, in one
# context, thousands of times. What depends only on the structure, the shardings, the mesh, the rules and
# the axis environment (the layout each leaf needs, the compiled function) is decided once per such key;
# every later call flattens its arguments once and hands the leaves to jax.jit's own dispatch, whose C++
# path then checks each leaf's sharding against the in_shardings (an argument laid out otherwise raises
# there, and the entry point takes its full path, which places it). Without this, jit flattens the tree a
# second time (one Python call per NamedArray) to learn a structure the entry point just learned.

# jax.jit arguments that a jit over leaves decides itself (the rest pass through)
_FLAT_OWN = frozenset({"in_shardings", "static_argnums", "static_argnames", "donate_argnums",
                       "donate_argnames"})


def flat_jit(fun: Callable[[Any], Any], tree: Any, shardings: Sequence[Any], donated: Sequence[int],
             jit_kwargs: Mapping[str, Any], name: str = "flat") -> Callable:
    """``jax.jit`` of ``fun`` over the leaves of a value of structure ``tree``: the compiled function takes
    the leaves (``shardings[i]`` for leaf ``i``, ``None`` to leave it to jit; the leaves ``donated`` are
    donated) and calls ``fun`` with the value rebuilt from them. The compiled module is named ``name``.

    >>> import jax, jax.numpy as jnp
    >>> tree = jax.tree.structure(({"a": 0, "b": 0},))
    >>> f = flat_jit(lambda args: args[0]["a"] + args[0]["b"], tree, [None, None], (), {})
    >>> f(jnp.ones(2), jnp.ones(2))
    Array([2., 2.], dtype=float32)
    """
    def flat(*leaves):
        return fun(tree.unflatten(leaves))

    flat.__name__ = flat.__qualname__ = name
    return jax.jit(flat, in_shardings=tuple(shardings), donate_argnums=tuple(donated), **jit_kwargs)


def remember(last: placement.LastCall, outer: _env.AxisEnv, tree: Any, fn: Callable,
             flat: bool = True) -> tuple:
    """The memo of a call that ``fn`` served, for :func:`recall`: the environment (the same object), the
    mesh context (:func:`~namedarray.core.placement.mesh_token`), the arguments' treedef, ``fn`` (held
    weakly: ``last``, which ``nx.clear_caches()`` empties, and the cache that built it hold it) and whether
    it takes the leaves (``flat``) or the arguments."""
    last.put(outer, (), fn)
    return outer, placement.mesh_token(), tree, weakref.ref(fn), flat


def recall(memo: tuple | None, args: Any) -> tuple[Callable, list, bool] | None:
    """(the function that served the last call, these arguments' leaves, whether it takes the leaves) where
    the memo holds for this call: same environment, same mesh context, same treedef (names included), and
    the caches still hold the function; else None.

    >>> recall(None, (1, 2)) is None
    True
    """
    if memo is None or memo[0] is not _current_env() or memo[1] != placement.mesh_token():
        return None
    fn = memo[3]()
    if fn is None:
        return None
    leaves, tree = tree_of(args)
    return (fn, leaves, memo[4]) if tree == memo[2] else None


def tree_of(value: Any) -> tuple[list, Any]:
    """``jax.tree.flatten(value)``, or ``([], None)`` where jax cannot flatten it (the full path says why).

    >>> tree_of({"a": 1, 2: "b"})
    ([], None)
    """
    try:
        return jax.tree.flatten(value)
    except (TypeError, ValueError):
        return [], None


def leaf_spans(tree: Any, offset: int = 0) -> list[range]:
    """The leaf indices of each child of ``tree`` (a tuple's items, a dict's values in key order).

    >>> leaf_spans(jax.tree.structure((1, {"a": 2, "b": 3}, None)))
    [range(0, 1), range(1, 3), range(3, 3)]
    """
    out = []
    for child in tree.children():
        out.append(range(offset, offset + child.num_leaves))
        offset += child.num_leaves
    return out


def _layouts(leaves: Sequence[Any], mesh: Any) -> list:
    """The layout each leaf's names ask for under the rules in force (NamedArrays; None for other leaves;
    False where the rules give no layout of this mesh, which the placing path reports, naming the axes)."""
    mapping = active_mapping()
    out: list = []
    for v in leaves:
        if not is_named(v):
            out.append(None)
            continue
        spec = placement.storage_spec(v.data.ndim, canonical(v.names),
                                      placement.resolve(v.names, mapping).get)
        try:
            out.append(NamedSharding(mesh, spec))
        # a mesh axis the mesh lacks, or a jax error of its own (DuplicateSpecError is no ValueError)
        except Exception:  # noqa: BLE001
            out.append(False)
    return out


class Jitted:
    """The callable :func:`jit` returns: call it, or ``.lower(*args)`` for the compiled program."""

    def __init__(self, fun: Callable, resources: Mapping[str, Any] | None, jit_kwargs: dict[str, Any]):
        if not callable(fun):
            raise TypeError(f"nx.jit: fun must be callable, got {fun!r}")
        self._fun = fun
        self._rules = None if resources is None else _env.axis_rules(resources)
        static = jit_kwargs.get("static_argnums", ())
        self._static = {static} if isinstance(static, int) else set(static or ())
        names = jit_kwargs.get("static_argnames", ())
        self._static_names = {names} if isinstance(names, str) else set(names or ())
        donate = jit_kwargs.get("donate_argnums", ())
        self._donate = {donate} if isinstance(donate, int) else set(donate or ())
        names = jit_kwargs.get("donate_argnames", ())
        self._donate_names = {names} if isinstance(names, str) else set(names or ())
        # an explicit in_shardings / out_shardings outranks the rules (see jit's docstring)
        self._place_args = "in_shardings" not in jit_kwargs
        self._lay_out_results = "out_shardings" not in jit_kwargs
        self._jitted = jax.jit(self._traced, **jit_kwargs)
        self._jit_kwargs = jit_kwargs
        # (arguments' treedef, mesh, environment, leaf ranks) -> each leaf's layout (None: not a NamedArray)
        self._targets: dict[tuple, list] = {}
        # (treedef of (args, kwargs), mesh, environment) -> jit over their leaves, their layouts as
        # in_shardings (flat_jit); the one that served the last call, and its context (remember, recall)
        self._fast = _FAST.new()
        self._last = placement.LastCall()
        self._memo: tuple | None = None
        functools.update_wrapper(self, fun, updated=())

    def __repr__(self) -> str:
        return f"nx.jit({getattr(self._fun, '__name__', self._fun)!r})"

    def _traced(self, *args, **kwargs):
        mapping, mesh = active_mapping(), _mesh(None)
        with placement.layouts_known():
            if self._place_args:
                args = tuple(a if i in self._static else _lay_out(a, mapping, mesh, f"argument {i}")
                             for i, a in enumerate(args))
                kwargs = {k: v if k in self._static_names else _lay_out(v, mapping, mesh, f"argument {k!r}")
                          for k, v in kwargs.items()}
            with context.holding(context.stated_layouts, {}) as stated:
                out = self._fun(*args, **kwargs)
            if not self._lay_out_results:
                return out
            return _lay_out(out, mapping, mesh, "output", canonical_order=True, stated=stated)

    def _placed(self, args: tuple, kwargs: dict, abstract: bool) -> tuple[tuple, dict]:
        sync_with_job()  # global arrays are built here: the job's processes must lay names out alike
        mesh = _mesh(None)
        if mesh is None or isinstance(mesh, jax.sharding.AbstractMesh):
            return args, kwargs
        mapping = active_mapping()
        args = tuple(a if i in self._static else
                     _place_tree(a, mapping, mesh, f"argument {i}", i in self._donate, abstract)
                     for i, a in enumerate(args))
        kwargs = {k: v if k in self._static_names else
                  _place_tree(v, mapping, mesh, f"argument {k!r}", k in self._donate_names, abstract)
                  for k, v in kwargs.items()}
        return args, kwargs

    def _dynamic(self, args: tuple, kwargs: dict) -> tuple:
        if not (self._static or self._static_names):
            return args, kwargs
        return (tuple(a for i, a in enumerate(args) if i not in self._static),
                {k: v for k, v in kwargs.items() if k not in self._static_names})

    def _laid_out(self, args: tuple, kwargs: dict, mesh: Any) -> bool:
        """Whether every NamedArray argument already has the layout its names ask for (a training loop
        passes back what the previous step returned, so this is the usual case, and costs one flatten)."""
        dyn = self._dynamic(args, kwargs)
        leaves, treedef = jax.tree.flatten(dyn)
        key = (treedef, mesh, _env.current(), tuple(getattr(v, "ndim", -1) for v in leaves))
        targets = self._targets.get(key)
        if targets is None:
            # a NamedArray is one leaf, so the leaves of the two flattenings line up
            targets = _layouts(jax.tree.leaves(dyn, is_leaf=is_named), mesh)
            if len(self._targets) > 64:
                self._targets.clear()
            self._targets[key] = targets
        for v, t in zip(leaves, targets):
            if t is None or isinstance(v, _Tracer):
                continue
            if t is False:
                return False
            s = getattr(v, "sharding", None)
            if s is None or not (s == t or placement.is_placed(v, t)):
                return False
        return True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # what served the last call, in this same context: one flatten and jit's own dispatch
        last = recall(self._memo, (args, kwargs))
        if last is not None:
            try:
                if self._rules is None:
                    if _env.in_sync():  # the usual case: no block to enter
                        return last[0](*last[1])
                    with _env.synced():
                        return last[0](*last[1])
                with self._rules, _env.synced():
                    return last[0](*last[1])
            except ValueError as e:
                if isinstance(e, NamedAxisError):
                    raise
                self._memo = None  # laid out otherwise this time: the full path below
        outer = _env.current()
        with self._rules or _NULL, _env.synced():
            mesh = _mesh(None)
            if mesh is None or isinstance(mesh, jax.sharding.AbstractMesh):
                return self._jitted(*args, **kwargs)
            if self._place_args and not self._laid_out(args, kwargs, mesh):
                args, kwargs = self._placed(args, kwargs, abstract=False)
            flat = self._flat(outer, args, kwargs, mesh)
            if flat is not None:
                try:
                    out = flat[1](*flat[2])
                except ValueError as e:
                    if isinstance(e, NamedAxisError):
                        raise
                    # jit compares shardings where nx.jit asks for placement: an argument laid out as its
                    # names ask, by a sharding jit does not take for the same, goes to jit as it is
                else:
                    self._memo = remember(self._last, outer, flat[0], flat[1])
                    return out
            return self._jitted(*args, **kwargs)

    def _flat(self, outer: _env.AxisEnv, args: tuple, kwargs: dict, mesh: Any) -> tuple | None:
        """(the arguments' treedef, ``jax.jit`` over their leaves with the layouts their names ask for as
        in_shardings, the leaves): what serves every later call of this structure in this context (same
        environment, same mesh), at the cost of one flatten and jit's own dispatch. None where nx.jit does
        not place the arguments (the caller's in_shardings, static arguments) or the rules give no layout
        of this mesh (the placing path reported that already, naming the axes)."""
        if not self._place_args or self._static or self._static_names & kwargs.keys():
            return None
        try:
            leaves, tree = jax.tree.flatten((args, kwargs))
        except (TypeError, ValueError):  # what jax cannot flatten: jit says why
            return None
        key = (tree, mesh, outer)
        fn = self._fast.get(key)
        if fn is None:
            # a NamedArray is one leaf, so the leaves of the two flattenings line up
            shardings = _layouts(jax.tree.leaves((args, kwargs), is_leaf=is_named), mesh)
            if len(shardings) != len(leaves) or any(t is False for t in shardings):
                return None
            arg_tree, kwarg_tree = tree.children()
            spans = leaf_spans(arg_tree) + leaf_spans(kwarg_tree, offset=arg_tree.num_leaves)
            donated = [j for i, k in enumerate([*range(len(args)), *sorted(kwargs)])
                       if k in (self._donate if isinstance(k, int) else self._donate_names)
                       for j in spans[i]]
            fn = self._fast.setdefault(key, flat_jit(
                lambda a: self._traced(*a[0], **a[1]), tree, shardings, donated,
                {k: v for k, v in self._jit_kwargs.items() if k not in _FLAT_OWN},
                "".join(c if c.isalnum() else "_" for c in getattr(self._fun, "__name__", "fun"))))
        return tree, fn, leaves

    def eval_shape(self, *args: Any, **kwargs: Any) -> Any:
        """The abstract result, each NamedArray over a ``jax.ShapeDtypeStruct`` that carries the layout a call
        gives it: the target to restore a checkpoint of what this function makes into, under the rules and
        mesh in force.

        >>> import jax, jax.numpy as jnp, namedarray as nx
        >>> init = nx.jit(lambda key: nx.random.normal(key, named_shape={"embed": 4}))
        >>> init.eval_shape(jax.random.key(0)).named_shape
        {'embed': 4}
        """
        with self._rules or _NULL, _env.synced():
            mesh = _mesh(None)
            if mesh is None or not self._lay_out_results:
                return jax.eval_shape(self._jitted, *args, **kwargs)
            # Trace afresh (a new function each time, never a cached trace) to learn the layout each output
            # gets, body-stated ones included, which the abstract values jax returns do not carry.
            with context.holding(context.output_layouts, {}) as layouts:
                out = jax.eval_shape(lambda *a, **k: self._traced(*a, **k), *args, **kwargs)

            def one(path, v):
                spec = layouts.get(keystr(path))
                if not is_named(v) or spec is None:
                    return v
                d = v.data
                return _make(jax.ShapeDtypeStruct(d.shape, d.dtype, sharding=NamedSharding(mesh, spec),
                                                  weak_type=d.weak_type), v.names)

            return jax.tree_util.tree_map_with_path(one, out, is_leaf=is_named)

    def trace(self, *args: Any, **kwargs: Any) -> jax.stages.Traced:
        """Trace for these arguments (arrays, NamedArrays, or their ``jax.ShapeDtypeStruct`` versions), laid
        out by name, as ``jax.jit(f).trace`` does: what ``jax.export.export(nx.jit(f))`` calls.

        >>> import jax, jax.numpy as jnp, namedarray as nx
        >>> f = nx.jit(lambda x: x.sum("batch"))
        >>> f.trace(nx.wrap(jnp.ones(4), ["batch"])).out_info.shape
        ()
        """
        with self._rules or _NULL, _env.synced():
            args, kwargs = self._placed(args, kwargs, abstract=True)
            return self._jitted.trace(*args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> jax.stages.Lowered:
        """Lower for these arguments (arrays, NamedArrays, or their ``jax.ShapeDtypeStruct`` versions), laid
        out by name: ``.compile().memory_analysis()`` gives per-device sizes.

        >>> import jax, jax.numpy as jnp, namedarray as nx
        >>> f = nx.jit(lambda x: x * 2)
        >>> f.lower(nx.wrap(jnp.ones(4), ["batch"])).compile()(nx.wrap(jnp.ones(4), ["batch"])).named_shape
        {'batch': 4}
        """
        with self._rules or _NULL, _env.synced():
            args, kwargs = self._placed(args, kwargs, abstract=True)
            return self._jitted.lower(*args, **kwargs)


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NULL = _Null()


def _lay_out(tree: Any, mapping, mesh, what: str, canonical_order: bool = False,
             stated: dict | None = None) -> Any:
    """Inside the trace: constrain each NamedArray of ``tree`` by its names (results: in canonical order,
    the order they leave the function in, so the constraint is exactly the output's layout). A result the
    body constrained itself (in ``stated``) keeps the mapping the body gave it instead of ``mapping``."""
    layouts = context.output_layouts.get() if canonical_order else None

    def one(path, v):
        if not is_named(v):
            return v
        where = f"nx.jit {what}" + (f" at {keystr(path)}" if path else "")
        m = mapping
        if canonical_order and isinstance(v.data, _Tracer):
            said = stated.get(id(v.data)) if stated else None
            if said is not None and said[0] is v.data:
                m = said[1]
            d, names = canonical_storage(v)
            v = _make(d, names)
        out = _shard_one(v, m, mesh, where)
        if layouts is not None and mesh is not None:
            layouts[keystr(path)] = placement.storage_spec(v.data.ndim, v.names,
                                                           placement.resolve(v.names, m).get)
        return out

    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=is_named)


def _place_tree(tree: Any, mapping, mesh, what: str, donate: bool, abstract: bool) -> Any:
    """Before the call: each concrete NamedArray of ``tree`` placed by its names, in the canonical order it
    is flattened in (so that jit receives exactly the layout it compiles for)."""
    def one(path, v):
        if not is_named(v) or isinstance(v.data, _Tracer):
            return v
        d, names = canonical_storage(v)
        where = f"nx.jit {what}" + (f" at {keystr(path)}" if path else "")
        target = _target(names, tuple(d.shape), d.ndim, mapping, mesh, where, v)
        if abstract:
            return _make(jax.ShapeDtypeStruct(d.shape, d.dtype, sharding=target,
                                              weak_type=bool(getattr(d, "weak_type", False))), names)
        if isinstance(d, jax.ShapeDtypeStruct):
            return v
        return _make(placement.place(d, target, donate=donate), names)

    return jax.tree_util.tree_map_with_path(one, tree, is_leaf=is_named)


def _target(names, shape, ndim, mapping, mesh, where, v) -> NamedSharding:
    # the rules of these names in rank order: their order decides which keeps a mesh axis two of them share
    key = (names, shape, mesh, tuple((n, a) for n, a in mapping.items() if n in names))
    got = _TARGETS.get(key)
    if got is None:
        got = NamedSharding(mesh, _spec(v, names, ndim, mapping, mesh, where))
        _TARGETS.put(key, got)
    return got


# (names, shape, mesh, the ranked rules of those names) -> the checked NamedSharding: what a training loop
# asks for on every step, built once
_TARGETS: caches.LRU[tuple, NamedSharding] = caches.LRU("sharding targets", 4096)


# --------------------------------------------------------------------------------------------------------
# Multi-process


def from_process_local(x_local: NamedArray, resources: Mapping[str, Any] | None = None, *,
                       mesh: Any = None) -> NamedArray:
    """A global NamedArray from each process's block of it (``jax.distributed``).

    Every process passes its own block, ``x_local``, with the same names; each named axis is split over its
    mesh axes (``resources``, default the rules in force), and along an axis split over devices of several
    processes the blocks are put side by side in process order, so the global size is the local size times
    the number of processes it spans (``jax.make_array_from_process_local_data``). Names that are not split
    across processes must hold the same data on every process. In one process this is placement.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> x = nx.from_process_local(nx.wrap(jnp.ones((4, 3)), ["batch", ...]), {"batch": "data"}, mesh=mesh)
    >>> x.named_shape, x.sharding.spec
    ({'batch': 4}, P(None, 'data'))
    """
    where = "nx.from_process_local"
    sync_with_job()
    if not is_named(x_local):
        raise TypeError(f"{where}: x_local must be a NamedArray (this process's block, with its axis names), "
                        f"got {type(x_local).__name__}")
    mapping = active_mapping(resources, where)
    m = _mesh(mesh, where)
    if m is None or isinstance(m, jax.sharding.AbstractMesh):
        raise MissingResourceError(f"{where}: {_NO_MESH}")
    if isinstance(x_local.data, _Tracer):
        raise TypeError(f"{where}: x_local must hold concrete data (it builds a global array from it), not a "
                        "traced value; call it outside jit")
    # Every process lays its block out in the boundary order of the names, which the processes of a job
    # agree on: blocks built in different orders on different processes still meet axis by axis.
    d, names = canonical_storage(x_local)
    msizes = placement.mesh_sizes(m)
    strict = resources is not None
    # mesh axes and conflicts (sizes below, once the global ones are known)
    axes_of = placement.check({n: 0 for n in names}, mapping, m, where, strict=strict,
                              hint=_STRICT_HINT if strict else None)
    spec = placement.storage_spec(d.ndim, names, axes_of.get)
    target = NamedSharding(m, spec)
    local = np.asarray(d)
    try:
        out = jax.make_array_from_process_local_data(target, local)
    except ValueError as e:
        sizes = dict(zip(names, local.shape[local.ndim - len(names):]))
        detail = "; ".join(f"{n!r}: local size {sizes[n]} over {axes_of[n]} "
                           f"({'x'.join(str(msizes[a]) for a in axes_of[n])} devices)"
                           for n in names if axes_of.get(n))
        raise DivisibilityError(f"{where}: this process's block cannot be laid out by its names ({detail}): "
                                f"{e}") from None
    result = _make(out, names)
    placement.check(named_sizes(result), axes_of, m, where)
    return result
