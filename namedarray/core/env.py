"""The axis environment: what enclosing ``nx.xmap`` calls (and rule contexts) have bound.

This is the one place that knows axis sizes bound from outside a value (``nx.xmap``'s ``in_axes`` and
``axis_sizes``), which of those names the innermost ``nx.xmap`` defined (for its output checks and for
shadowing), the resources (mesh axes, loops) names map to, and the logical-name rules of ``nx.axis_rules``.
Operations ask it; nothing else keeps such state.

The environment is an immutable :class:`AxisEnv`, held in a context variable (so it is per thread and per
asyncio task, and nests by simple replacement; the variable is declared, with every other context variable
of the library, in :mod:`namedarray.core.context`) and mirrored into a JAX *user context*
(:func:`jax.make_user_context`): JAX includes that value in every trace and compile cache key (``jax.jit``,
``lax.scan``/``cond`` bodies, ``jax.checkpoint``), so a function traced under one environment is never
reused under another: a jitted function that reads the size of a bound name, or lays values out by the
rules of ``nx.axis_rules``, retraces when they change.

>>> import namedarray as nx
>>> nx.env.current().sizes
{}
>>> with nx.env.bind({"batch": 4}):
...     nx.env.current().size("batch")
4
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax

from ..errors import (
    AxisNameShadowingError,
    LoopAxisError,
    PerElementAxisError,
    SplitAxisError,
    UnboundAxisError,
    did_you_mean,
    fmt_names,
)
from . import context, placement

__all__ = ["AxisEnv", "current", "bind", "bind_positional", "bind_blocks", "loop_scope", "axis_rules",
           "exact_rules", "synced", "EMPTY"]


def _frozen(d: Mapping | None) -> tuple:
    return tuple(sorted((d or {}).items()))


def _ranked(rules: Mapping | None) -> tuple | None:
    """The rules as an ordered tuple: their order ranks them (placement.resolve), so two environments whose
    rules differ only in order lay values out differently and must not share a trace."""
    return None if rules is None else tuple(rules.items())


@dataclass(frozen=True)
class AxisEnv:
    """An immutable snapshot of the axis environment.

    ``sizes``: every axis name bound by an enclosing ``nx.xmap`` (outer ones included) -> size.
    ``local``: the names the innermost ``nx.xmap`` defined.
    ``resources``: axis name -> tuple of resource names (mesh axes, then at most one loop).
    ``mesh``: the mesh those resources refer to, if any.
    ``loops``: axis name -> chunk count, for names computed by a serial loop (the body sees one chunk).
    ``rules``: logical axis name -> mesh axes, from ``nx.axis_rules``, in rank order (first wins a mesh axis
    two names of one value map to: :func:`namedarray.core.placement.resolve`).
    ``split``: inside ``nx.shard_map``, each name its values hold a block of -> the (manual) mesh axes the
    blocks are spread over; ``sizes`` holds the whole size.
    ``loop_resources``: the serial loops ``with nx.serial_loop(name, length):`` brought into scope, name ->
    length, for ``axis_resources`` to refer to.
    ``jax_names``: inside a positional ``nx.xmap`` body (one that receives per-element arrays, as xmap's
    did), its names -> sizes. They are JAX axis names there (``jax.vmap``'s ``axis_name``): values are per
    element along them, ``jax.lax`` collectives take them and nx's collectives hand them to ``jax.lax``.
    They are not in ``sizes``: nx never reads a plain value as constant along one of them.
    """

    sizes: Mapping[str, int] = field(default_factory=dict)
    local: frozenset = frozenset()
    resources: Mapping[str, tuple] = field(default_factory=dict)
    mesh: Any = None
    loops: Mapping[str, int] = field(default_factory=dict)
    rules: Mapping[str, Any] | None = None
    split: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    loop_resources: Mapping[str, int] = field(default_factory=dict)
    jax_names: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self):
        # JAX hashes the environment on every jitted call made inside it (it is part of the cache key)
        object.__setattr__(self, "_hash", hash((
            _frozen(self.sizes), self.local, _frozen(self.resources), id(self.mesh), _frozen(self.loops),
            _ranked(self.rules), _frozen(self.split), _frozen(self.loop_resources), _frozen(self.jax_names))))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, AxisEnv) and hash(self) == hash(other)
            and dict(self.sizes) == dict(other.sizes) and self.local == other.local
            and dict(self.resources) == dict(other.resources) and self.mesh is other.mesh
            and dict(self.loops) == dict(other.loops) and _ranked(self.rules) == _ranked(other.rules)
            and dict(self.split) == dict(other.split)
            and dict(self.loop_resources) == dict(other.loop_resources)
            and dict(self.jax_names) == dict(other.jax_names))

    def mapping(self, resources: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, tuple[str, ...]]:
        """Axis name -> the mesh axes values carrying it are laid out over: ``resources`` (normalized) if
        given, else the rules of ``nx.axis_rules``, in their rank order; inside ``nx.xmap``, the mesh axes
        of its resources win for the names it binds, and rank first (xmap lays every value out by them)."""
        if resources is None:
            got = self.__dict__.get("_mapping")
            if got is None:
                got = self.mapping(placement.normalize(self.rules, "nx.axis_rules"))
                object.__setattr__(self, "_mapping", got)
            return got
        if self.split:  # inside nx.shard_map its mesh axes hold blocks: nothing is laid out over them
            manual = {a for axes in self.split.values() for a in axes}
            resources = {n: tuple(a for a in axes if a not in manual) for n, axes in resources.items()}
        if not (self.resources and self.mesh is not None):
            return dict(resources)
        axes = set(self.mesh.axis_names)
        bound = {n: tuple(r for r in res if r in axes) for n, res in self.resources.items()}
        return {**bound, **{n: a for n, a in resources.items() if n not in bound}}

    def require_whole(self, names: Iterable[str], where: str) -> None:
        """Raise :class:`SplitAxisError` for a name of ``names`` that ``nx.shard_map`` splits into blocks
        here: ``where`` (an operation) needs all of the axis, and each device holds one block of it."""
        if not self.split:
            return
        for name in names:
            axes = self.split.get(name)
            if axes:
                raise SplitAxisError(
                    f"{where}: axis {name!r} is split across devices by nx.shard_map (each holds "
                    f"{self.local_size(name)} of its {self.sizes[name]} elements, over mesh axes {axes}), "
                    f"and this operation needs all of it. Gather it into a positional axis first "
                    f"(nx.all_gather(x, {name!r})), reduce over it (nx.sum, nx.max, nx.psum, ... combine "
                    "the blocks), or run it outside the nx.shard_map")

    def blocks(self, name: str) -> int:
        """How many blocks a split name is cut into inside ``nx.shard_map`` (1 for any other name)."""
        axes = self.split.get(name)
        if not axes:
            return 1
        sizes = dict(zip(self.mesh.axis_names, self.mesh.axis_sizes))
        return math.prod(sizes[a] for a in axes)

    def local_size(self, name: str, where: str = "") -> int:
        """The size of ``name`` in one value here: the bound size, or one block of it in ``nx.shard_map``."""
        return self.size(name, where) // self.blocks(name)

    def per_element(self, axis: Any) -> tuple[tuple, tuple[str, ...]]:
        """``axis`` (a name, an int, or a tuple of them) split into (the rest, the names of an enclosing
        positional ``nx.xmap`` body): over the latter, values here are per element, and a reduction or
        collective is JAX's own over them. The second part is empty outside such a body.

        >>> AxisEnv(jax_names={"i": 3}).per_element(("i", 0, "k"))
        ((0, 'k'), ('i',))
        """
        items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        if not self.jax_names:
            return items, ()
        theirs = tuple(a for a in items if isinstance(a, str) and a in self.jax_names)
        return tuple(a for a in items if a not in theirs), theirs

    def is_bound(self, name: str) -> bool:
        """Whether something around binds ``name``: then :meth:`size` gives its size, or says why a value
        here cannot have it as an axis (a serial loop's name, a positional ``nx.xmap`` body's name)."""
        return name in self.sizes or name in self.jax_names or name in self.loops

    def size(self, name: str, where: str = "") -> int:
        """The bound size of ``name``, or :class:`UnboundAxisError`."""
        if name in self.loops:  # computed in chunks by a serial loop: the body only sees one chunk
            prefix = f"{where}: " if where else ""
            raise LoopAxisError(
                f"{prefix}Named axes with loop resources assigned to them cannot be referenced inside the "
                f"xmapped computation (e.g. in collectives), but `{name}` violates that rule: the body sees "
                f"one chunk of {name!r} at a time, so reductions over it count too")
        try:
            return self.sizes[name]
        except KeyError:
            prefix = f"{where}: " if where else ""
            if name in self.jax_names:
                raise PerElementAxisError(
                    f"{prefix}axis {name!r} is a name of the positional nx.xmap body around this, where "
                    "values are per element along it (as in xmap): reduce over it with a collective, "
                    f"jax.lax.psum(x, {name!r}) or nx.psum(x, {name!r}) (pmean, pmax, all_gather, ...), "
                    f"and read its index with jax.lax.axis_index({name!r})") from None
            bound = sorted(self.sizes)
            hint = (f"axis names bound here: {fmt_names(bound)}" if bound
                    else "no nx.xmap or nx.shard_map binds any axis here")
            raise UnboundAxisError(f"{prefix}unbound axis name {name!r}: no value here carries it, and {hint}"
                                   f"{did_you_mean(name, bound)}") from None


EMPTY = AxisEnv()
_VAR = context.axis_env
# The mirror JAX keys its caches on. None stands for EMPTY, so that code outside any nx context adds nothing
# to JAX's cache keys.
_ENV = jax.make_user_context(None)
# what JAX's copy is read from: its state object where this jax has one (a read skips a Python property,
# on every nx.jit and nx.xmap call), else the context itself (both have .value)
_ENV_STATE = getattr(_ENV, "_obj", _ENV)


def current() -> AxisEnv:
    """The environment in force."""
    return _VAR.get(EMPTY)


def _mirror(env: AxisEnv) -> None:
    """Set JAX's copy (per thread) to ``env``, for the jitted calls that follow in this thread."""
    _ENV(None if env is EMPTY else env).__enter__()  # a swap of the thread's value; nothing to undo later


@contextlib.contextmanager
def _install(env: AxisEnv) -> Iterator[AxisEnv]:
    if env is not EMPTY and env == EMPTY:
        # one object for "no context" (an empty nx.axis_rules block, say), so that every reader tells it by
        # identity, and JAX's copy holds None for it: code in such a block shares JAX's caches with code
        # outside every block, as its results do
        env = EMPTY
    token = _VAR.set(env)
    _mirror(env)
    try:
        yield env
    finally:
        _VAR.reset(token)
        # JAX's copy becomes the environment in force now, not the value it had when this block was entered:
        # where asyncio tasks of one thread interleave their blocks, that value is another task's, and
        # restoring it would leave the thread keyed on an environment nobody is in (a later plain jax.jit
        # call outside every block would then file its trace, made without rules, under those rules)
        _mirror(_VAR.get(EMPTY))


def synced() -> contextlib.AbstractContextManager:
    """Make JAX's copy of the environment the current one before a jitted call.

    The two differ only where asyncio tasks of one thread interleave their ``with`` blocks (JAX's copy is
    per thread, the environment per task); entry points that call ``jax.jit`` themselves (``nx.jit``,
    ``nx.xmap``) enter this so that the call is keyed on the caller's own environment.
    """
    if in_sync():
        return _NOTHING
    env = _VAR.get(EMPTY)
    return _ENV(None if env is EMPTY else env)


_NOTHING = contextlib.nullcontext()  # reusable: entering it does nothing (the usual case, on every call)


def in_sync() -> bool:
    """Whether JAX's copy of the environment is the one in force, so that a jitted call needs no
    :func:`synced` block: always, except where asyncio tasks of one thread interleave their blocks. What
    the per-call paths of ``nx.jit`` and ``nx.xmap`` ask first, a block costing more than the check.

    >>> in_sync()
    True
    """
    env = _VAR.get(EMPTY)
    return _ENV_STATE.value is (None if env is EMPTY else env)


def bind(sizes: Mapping[str, int], *, resources: Mapping[str, tuple] | None = None, mesh: Any = None,
         loops: Mapping[str, int] | None = None,
         where: str = "nx.env.bind") -> contextlib.AbstractContextManager[AxisEnv]:
    """Bind ``sizes`` for a nested region (what ``nx.xmap`` does around its body).

    Re-binding a name an enclosing region binds is an :class:`AxisNameShadowingError`, as in xmap.
    ``resources``, ``mesh`` and ``loops`` extend the enclosing ones; ``local`` becomes ``sizes``' names.
    """
    if not isinstance(sizes, Mapping):
        raise TypeError(f"{where}: sizes must be a mapping from axis names to sizes, such as {{'batch': 4}}, "
                        f"got {sizes!r}")
    env = _unshadowed(sizes, where)
    return _install(dataclasses.replace(
        env, sizes={**env.sizes, **sizes}, local=frozenset(sizes), mesh=env.mesh if mesh is None else mesh,
        resources={**env.resources, **(resources or {})}, loops={**env.loops, **(loops or {})}))


def bind_positional(names: Mapping[str, int], *, own: Iterable[str],
                    resources: Mapping[str, tuple] | None = None, mesh: Any = None,
                    loops: Mapping[str, int] | None = None,
                    where: str = "nx.env.bind_positional") -> contextlib.AbstractContextManager[AxisEnv]:
    """The region of a positional ``nx.xmap`` body: ``names`` are JAX axis names there (see
    :attr:`AxisEnv.jax_names`). A name of ``names`` that an enclosing region bound by size (it is passed
    through, and the body is mapped over it too) moves from ``sizes`` to ``jax_names``: values are per
    element along it now. A name of ``own`` (the ones this ``nx.xmap`` defines) bound outside is an
    :class:`AxisNameShadowingError`, as in xmap."""
    env = _unshadowed(own, where)
    sizes = {n: s for n, s in env.sizes.items() if n not in names}
    return _install(dataclasses.replace(
        env, sizes=sizes, local=frozenset(), mesh=env.mesh if mesh is None else mesh,
        resources={**env.resources, **(resources or {})}, loops={**env.loops, **(loops or {})},
        jax_names={**env.jax_names, **names}))


def loop_scope(name: str, length: int) -> contextlib.AbstractContextManager[AxisEnv]:
    """Bring serial loop ``name`` of ``length`` chunks into scope (``with nx.serial_loop(name, length):``).

    >>> with loop_scope("outer_doc", 2), loop_scope("inner_doc", 4):
    ...     dict(current().loop_resources)
    {'outer_doc': 2, 'inner_doc': 4}
    """
    env = _VAR.get(EMPTY)
    return _install(dataclasses.replace(env, loop_resources={**env.loop_resources, name: length}))


def bind_blocks(sizes: Mapping[str, int], split: Mapping[str, tuple[str, ...]], mesh: Any,
                where: str = "nx.env.bind_blocks") -> contextlib.AbstractContextManager[AxisEnv]:
    """The region of an ``nx.shard_map`` body: the names of its arguments are bound with their whole
    ``sizes`` (as ``nx.xmap`` binds its axes), and values hold one block of each name of ``split``, spread
    over its (manual) mesh axes."""
    env = _unshadowed(sizes, where)
    return _install(dataclasses.replace(env, sizes={**env.sizes, **sizes}, local=frozenset(sizes), mesh=mesh,
                                        split={**env.split, **split}))


def _unshadowed(names: Iterable[str], where: str) -> AxisEnv:
    """The environment in force, after checking that none of ``names`` is bound already (xmap's rule)."""
    env = current()
    shadowed = sorted(set(names) & (set(env.sizes) | set(env.jax_names)))
    if shadowed:
        raise AxisNameShadowingError(
            f"{where}: axis names {fmt_names(shadowed)} are already bound by an enclosing nx.xmap or "
            "nx.shard_map (disallowed axis name shadowing); rename the inner axes")
    return env


class _Rules(contextlib.ContextDecorator):
    """The context manager (and decorator) :func:`axis_rules` returns."""

    def __init__(self, rules: dict[str, Any]):
        self._rules = rules
        self._active: list[contextlib.AbstractContextManager] = []

    def _recreate_cm(self) -> _Rules:
        return _Rules(self._rules)  # a decorated function may run in several threads at once

    def __enter__(self) -> dict[str, Any]:
        env = current()
        cm = _install(dataclasses.replace(env, rules={**(env.rules or {}), **self._rules}))
        env = cm.__enter__()
        self._active.append(cm)
        return dict(env.rules)

    def __exit__(self, *exc) -> bool:
        return bool(self._active.pop().__exit__(*exc))

    def __repr__(self) -> str:
        return f"nx.axis_rules({self._rules!r})"


def exact_rules(rules: Mapping[str, Any]) -> contextlib.AbstractContextManager[AxisEnv]:
    """Within the block, exactly ``rules`` are in force: unlike :func:`axis_rules`, the rules of enclosing
    blocks are not kept (what ``nx.plan_sharding`` compiles each candidate under).

    >>> import namedarray as nx
    >>> with nx.axis_rules({"batch": "data"}), exact_rules({"embed": "model"}):
    ...     nx.axis_rules()
    {'embed': 'model'}
    """
    placement.normalize(rules, "nx.axis_rules")
    frozen = {n: tuple(v) if isinstance(v, list) else v for n, v in rules.items()}
    return _install(dataclasses.replace(current(), rules=frozen))


def axis_rules(rules: Mapping[str, Any] | None = None) -> Any:
    """Map logical axis names to mesh axes: the rules ``x.shard()`` (and ``nx.sharding``, ``nx.jit``) lay
    values out by when given no ``resources``.

    ``with nx.axis_rules({"batch": "data", "embed": ("data", "model"), "vocab": None}):`` maps each name to
    a mesh axis, a tuple of mesh axes (major to minor) or ``None`` (replicated). Blocks nest, the inner
    rule winning per name, and hold per thread and per asyncio task; the same object decorates a function
    (``@nx.axis_rules({...})``). Model code then calls ``.shard()`` with no hardware names, and the user
    picks the parallel strategy with one mapping. ``nx.axis_rules()`` with no argument returns the rules in
    force, in rank order.

    The rules are ranked by their order (the mapping's insertion order): for a value that carries several
    names mapped to one mesh axis, the first of them in rank order is split over it, and a rule whose mesh
    axes (all of them, for a tuple) an earlier-ranked name of the value took is skipped, leaving that name
    replicated in that value. This is fully sharded data parallelism by name: under ``{"batch": "data",
    "embed": "data"}`` parameters split ``embed`` over ``data``, and activations carrying ``batch`` and
    ``embed`` are split by ``batch`` alone. In a nested block a name mapped again keeps its rank, and new
    names rank after the enclosing block's. The rank depends on the program text only (not on the order a
    value stores its names in), so every process of a job lays every value out alike.

    >>> import namedarray as nx
    >>> with nx.axis_rules({"batch": "data"}), nx.axis_rules({"embed": ["model"]}):
    ...     nx.axis_rules()
    {'batch': 'data', 'embed': ('model',)}
    >>> nx.axis_rules()
    {}
    """
    if rules is None:
        return dict(current().rules or {})
    if not isinstance(rules, Mapping):
        raise TypeError(f"nx.axis_rules: rules must be a mapping from axis names to mesh axes, such as "
                        f"{{'batch': 'data'}}, got {rules!r}")
    placement.normalize(rules, "nx.axis_rules")  # checks names, types and repeated mesh axes now
    # stored as written, lists as tuples (hashable: the rules are part of JAX's cache keys)
    return _Rules({n: tuple(v) if isinstance(v, list) else v for n, v in rules.items()})
