"""The axis environment: what enclosing ``nx.xmap`` calls (and rule contexts) have bound.

This is the one place that knows axis sizes bound from outside a value (``nx.xmap``'s ``in_axes`` and
``axis_sizes``), which of those names the innermost ``nx.xmap`` defined (for its output checks and for
shadowing), the resources (mesh axes, loops) names map to, and the logical-name rules of ``nx.axis_rules``.
Operations ask it; nothing else keeps such state.

The environment is an immutable :class:`AxisEnv` held in a JAX *user context*
(:func:`jax.make_user_context`): JAX includes its value in every trace and compile cache key (``jax.jit``,
``lax.scan``/``cond`` bodies, ``jax.checkpoint``), so a function traced under one environment is never
reused under another: a jitted function that reads the size of a bound name retraces when that size
changes. The value is per thread (it follows tracing, which runs in the caller's thread) and nests by simple
replacement.

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax

from .errors import AxisNameShadowingError, LoopAxisError, UnboundAxisError, fmt_names

__all__ = ["AxisEnv", "current", "bind", "axis_rules", "EMPTY"]


def _frozen(d: Mapping | None) -> tuple:
    return tuple(sorted((d or {}).items()))


def _rule(value: Any) -> Any:
    """A rule's mesh axes in a hashable form: a list or tuple of mesh axes becomes a tuple."""
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return value


@dataclass(frozen=True)
class AxisEnv:
    """An immutable snapshot of the axis environment.

    ``sizes``: every axis name bound by an enclosing ``nx.xmap`` (outer ones included) -> size.
    ``local``: the names the innermost ``nx.xmap`` defined.
    ``resources``: axis name -> tuple of resource names (mesh axes, then at most one loop).
    ``mesh``: the mesh those resources refer to, if any.
    ``loops``: axis name -> chunk count, for names computed by a serial loop (the body sees one chunk).
    ``rules``: logical axis name -> mesh axes, from ``nx.axis_rules``.
    """

    sizes: Mapping[str, int] = field(default_factory=dict)
    local: frozenset = frozenset()
    resources: Mapping[str, tuple] = field(default_factory=dict)
    mesh: Any = None
    loops: Mapping[str, int] = field(default_factory=dict)
    rules: Mapping[str, Any] | None = None

    def __post_init__(self):
        # JAX hashes the environment on every jitted call made inside it (it is part of the cache key)
        object.__setattr__(self, "_hash", hash((
            _frozen(self.sizes), self.local, _frozen(self.resources), id(self.mesh), _frozen(self.loops),
            _frozen(self.rules))))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, AxisEnv) and hash(self) == hash(other)
            and dict(self.sizes) == dict(other.sizes) and self.local == other.local
            and dict(self.resources) == dict(other.resources) and self.mesh is other.mesh
            and dict(self.loops) == dict(other.loops) and self.rules == other.rules)

    def is_bound(self, name: str) -> bool:
        return name in self.sizes

    def size(self, name: str, where: str = "") -> int:
        """The bound size of ``name``, or :class:`UnboundAxisError`."""
        if name in self.loops:  # computed in chunks by a serial loop: the body only sees one chunk
            prefix = f"{where}: " if where else ""
            raise LoopAxisError(
                f"{prefix}named axes with loop resources assigned to them cannot be referenced inside the "
                f"xmapped computation (e.g. in collectives or reductions), but {name!r} violates that rule")
        try:
            return self.sizes[name]
        except KeyError:
            prefix = f"{where}: " if where else ""
            bound = sorted(self.sizes)
            hint = (f"; bound axis names here: {fmt_names(bound)}" if bound
                    else "; no nx.xmap binds any axis here")
            raise UnboundAxisError(f"{prefix}unbound axis name {name!r}: the value does not carry it"
                                   f"{hint}") from None


EMPTY = AxisEnv()
# None stands for EMPTY, so that code outside any nx context adds nothing to JAX's cache keys.
_ENV = jax.make_user_context(None)


def current() -> AxisEnv:
    """The environment in force."""
    env = _ENV.value
    return EMPTY if env is None else env


@contextlib.contextmanager
def _install(env: AxisEnv) -> Iterator[AxisEnv]:
    with _ENV(None if env == EMPTY else env):
        yield env


def bind(sizes: Mapping[str, int], *, resources: Mapping[str, tuple] | None = None, mesh: Any = None,
         loops: Mapping[str, int] | None = None,
         where: str = "nx.xmap") -> contextlib.AbstractContextManager[AxisEnv]:
    """Bind ``sizes`` for a nested region (what ``nx.xmap`` does around its body).

    Re-binding a name an enclosing region binds is an :class:`AxisNameShadowingError`, as in xmap.
    ``resources``, ``mesh`` and ``loops`` extend the enclosing ones; ``local`` becomes ``sizes``' names.
    """
    env = current()
    shadowed = sorted(set(sizes) & set(env.sizes))
    if shadowed:
        raise AxisNameShadowingError(
            f"{where}: axis names {fmt_names(shadowed)} are already bound by an enclosing nx.xmap "
            "(disallowed axis name shadowing); rename the inner axes")
    new = AxisEnv(
        sizes={**env.sizes, **sizes},
        local=frozenset(sizes),
        resources={**env.resources, **(resources or {})},
        mesh=mesh if mesh is not None else env.mesh,
        loops={**env.loops, **(loops or {})},
        rules=env.rules,
    )
    return _install(new)


def axis_rules(rules: Mapping[str, Any]) -> contextlib.AbstractContextManager[AxisEnv]:
    """Map logical axis names to mesh axes inside the ``with`` block (the rules sharding by name reads).

    >>> import namedarray as nx
    >>> with nx.env.axis_rules({"batch": "data", "embed": None}):
    ...     nx.env.current().rules["batch"]
    'data'
    """
    env = current()
    rules = {name: _rule(axes) for name, axes in dict(rules).items()}
    return _install(dataclasses.replace(env, rules={**(env.rules or {}), **rules}))
