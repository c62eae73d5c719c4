"""Resources for ``nx.xmap``: mapping axis names to mesh axes and serial loops.

``axis_resources={"batch": "x", "hidden": ("y", "z"), "i": nx.SerialLoop(4)}`` assigns each named axis
a tuple of resources, major to minor: mesh axes of the mesh in context, then at most one serial loop.
Resources never change results; they decide where and when the work runs:

* a name mapped to mesh axes splits every value that carries it over those axes (xmap's partitioning rule:
  a value is partitioned over a mesh axis iff its named shape has a name mapped to it, replicated otherwise);
* a name mapped to a loop is computed in chunks, one after the other, to bound memory.

The mesh comes from ``jax.set_mesh(mesh)`` or from the legacy ``with Mesh(devices, names):`` block, and is
looked up at call time (as xmap did), so one ``nx.xmap`` can run under different meshes.

>>> import namedarray as nx
>>> nx.SerialLoop(4) == nx.SerialLoop(4)
True
>>> with nx.serial_loop("l", 4):
...     in_scope_loops()
{'l': 4}
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jax.sharding import AxisType

from ..core import env as _env
from ..core.array import NamedArray, _make
from ..core.placement import conflict, constrain, current_mesh, mesh_sizes, storage_spec
from ..engine import dispatch as engine
from ..errors import (
    DivisibilityError,
    MeshChangeError,
    MissingResourceError,
    ResourceConflictError,
    ResourceError,
    fmt_names,
    wrong_type,
)

# The user-facing part; the rest of the module serves nx.xmap (and the engine's check_created hook).
__all__ = ["SerialLoop", "serial_loop", "in_scope_loops", "current_mesh"]


class SerialLoop:
    """An anonymous loop resource: the named axis mapped to it is computed in ``length`` chunks.

    Equal (and hashing equal) to every other ``SerialLoop`` of the same length, as in xmap; each use in an
    ``axis_resources`` mapping is still a loop of its own.

    >>> SerialLoop(20)
    SerialLoop(20)
    """

    __slots__ = ("length",)

    def __init__(self, length: int):
        self.length = _loop_length(length, "nx.SerialLoop")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SerialLoop) and other.length == self.length

    def __hash__(self) -> int:
        return hash(("SerialLoop", self.length))

    def __repr__(self) -> str:
        return f"SerialLoop({self.length})"


def _loop_length(length: Any, where: str) -> int:
    if not isinstance(length, int) or isinstance(length, bool):
        raise wrong_type(where, "length", length, "a positive int")
    if length < 1:
        raise ResourceError(f"{where}: the length must be a positive int, got {length!r}")
    return length


@contextlib.contextmanager
def serial_loop(name: str, length: int) -> Iterator[None]:
    """Bring a named loop resource into scope (a context manager, also usable as a decorator).

    Inside, ``axis_resources={"i": name}`` computes axis ``i`` in ``length`` chunks. Several axes may share
    one loop as long as no value carries two of them.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> with nx.serial_loop("l", 2):
    ...     nx.xmap(lambda x: x + 1, ["i"], ["i"], axis_resources={"i": "l"})(jnp.arange(4)).tolist()
    [1, 2, 3, 4]
    """
    if not isinstance(name, str):
        raise wrong_type("nx.serial_loop", "name", name, "a non-empty string (the loop's name)")
    if not name:
        raise ResourceError("nx.serial_loop: the loop name must be a non-empty string, got ''")
    _loop_length(length, "nx.serial_loop")
    with _env.loop_scope(name, length):  # the loops in scope are part of the one axis environment
        yield


def in_scope_loops() -> dict[str, int]:
    """The loops that ``with nx.serial_loop(...)`` blocks have brought into scope: name -> length.

    >>> import namedarray as nx
    >>> with nx.serial_loop("outer", 2), nx.serial_loop("inner", 4):
    ...     in_scope_loops()
    {'outer': 2, 'inner': 4}
    """
    return dict(_env.current().loop_resources)


# --------------------------------------------------------------------------------------------------------
# Parsing (at construction) and resolving (at call time)


def parse_resources(axis_resources: Mapping[str, Any] | None, where: str) -> dict[str, tuple]:
    """Normalise ``axis_resources`` to name -> tuple of entries (mesh-axis/loop names or SerialLoops).

    Checks what does not depend on the scope: entry types, distinct entries per axis, anonymous loops
    after every named resource, one anonymous loop at most.
    """
    out: dict[str, tuple] = {}
    anon = 0
    for name, res in (axis_resources or {}).items():
        entries = tuple(res) if isinstance(res, (tuple, list)) else (res,)
        for r in entries:
            if not (isinstance(r, SerialLoop) or (isinstance(r, str) and r)):
                raise MissingResourceError(
                    f"{where}: the resources of axis {name!r} must be mesh axis names, loop names or "
                    f"nx.SerialLoop(n), got {res!r}")
        named = [r for r in entries if isinstance(r, str)]
        if len(set(named)) != len(named):
            twice = sorted({r for r in named if named.count(r) > 1})
            raise ResourceConflictError(
                f"{where}: Resource assignment of a single axis must be a tuple of distinct resources, but "
                f"specified {res!r} for axis {name}. Axis {name!r} lists {fmt_names(twice)} more than once.")
        loops = [i for i, r in enumerate(entries) if isinstance(r, SerialLoop)]
        if loops and loops[0] != len(entries) - 1:
            raise MissingResourceError(
                f"{where}: loop resources cannot appear before mesh axes; axis {name!r} has {res!r} (put "
                "the SerialLoop last)")
        anon += len(loops)
        out[name] = entries
    if anon > 1:
        raise MissingResourceError(f"{where}: only one loop per nx.xmap is supported, but axis_resources "
                                   f"uses {anon} anonymous SerialLoops")
    return out


@dataclass(frozen=True)
class Plan:
    """Resources resolved in the calling context.

    ``mesh``: the mesh used for constraints (``None`` when no name of this call maps to a mesh axis and no
    enclosing call had a mesh); ``explicit``: its Explicit axes; ``axes``: name -> resource names (mesh axes
    major to minor, then the loop's name); ``loop``: (loop resource name, length) or ``None``;
    ``looped``: the names computed in chunks.
    """

    mesh: Any
    explicit: tuple[str, ...]
    axes: Mapping[str, tuple[str, ...]]
    loop: tuple[str, int] | None
    looped: tuple[str, ...]

    def mesh_axes(self, name: str, resources: Mapping[str, tuple] | None = None) -> tuple[str, ...]:
        res = (resources if resources is not None else self.axes).get(name, ())
        return tuple(r for r in res if self.mesh is not None and r in self.mesh.axis_names)


def resolve(parsed: Mapping[str, tuple], where: str) -> tuple[Plan, tuple]:
    """Resolve parsed resources against the mesh and loops in scope. Returns (plan, hashable cache key)."""
    outer = _env.current()
    mesh = current_mesh()
    if outer.mesh is not None:
        check_same_mesh(outer.mesh, mesh, where)
        mesh = outer.mesh
    loops_in_scope = in_scope_loops()
    mesh_names = tuple(mesh.axis_names) if mesh is not None else ()
    axes: dict[str, tuple[str, ...]] = {}
    missing: dict[str, list[str]] = {}  # missing resource -> the names assigned to it
    loop: tuple[str, int] | None = None
    looped: list[str] = []
    for name, entries in parsed.items():
        res = []
        seen_loop = False
        for r in entries:
            if isinstance(r, SerialLoop):
                rname, length = f"SerialLoop({r.length})#{id(entries)}", r.length
            elif r in mesh_names:
                if seen_loop:
                    raise MissingResourceError(
                        f"{where}: loop resources cannot appear before mesh axes; axis {name!r} has "
                        f"{entries!r} (put the loop last)")
                res.append(r)
                continue
            elif r in loops_in_scope:
                rname, length = r, loops_in_scope[r]
            else:
                missing.setdefault(r, []).append(name)
                continue
            if loop is not None and loop[0] != rname:
                raise MissingResourceError(
                    f"{where}: only one loop per nx.xmap is supported, but axis_resources uses loops "
                    f"{loop_label(loop[0])!r} and {loop_label(rname)!r}")
            loop = (rname, length)
            seen_loop = True
            looped.append(name)
            res.append(rname)
        axes[name] = tuple(res)
    if missing:
        scope = (f"mesh axes {list(mesh_names)}" if mesh_names else "no mesh (use jax.set_mesh(mesh) or "
                 "`with Mesh(devices, names):`)")
        if loops_in_scope:
            scope += f" and loops {sorted(loops_in_scope)}"
        listed = "{" + ", ".join(repr(r) for r in sorted(missing)) + "}"  # xmap's set, in one order
        users = "; ".join(f"{r!r} by {'axis' if len(missing[r]) == 1 else 'axes'} {fmt_names(missing[r])}"
                          for r in sorted(missing))
        raise MissingResourceError(
            f"{where}: In-scope resources are insufficient to execute the xmapped function. The missing "
            f"resources are: {listed} (asked for {users}; in scope: {scope})")
    uses_mesh = any(r in mesh_names for res in axes.values() for r in res) or outer.mesh is not None
    if not uses_mesh:
        mesh = None
    explicit: tuple[str, ...] = ()
    if mesh is not None:
        explicit = tuple(n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit)
    plan = Plan(mesh, explicit, axes, loop, tuple(looped))
    # anonymous loops get a fresh resource name per xmap (so nested ones never look alike); the cache key
    # only needs to know there is one, so equal constructions still share a compilation
    stable = tuple(sorted((n, tuple(loop_label(r) for r in res)) for n, res in axes.items()))
    key = (mesh, explicit, stable, None if loop is None else (loop_label(loop[0]), loop[1]), plan.looped)
    return plan, key


def loop_label(rname: str) -> str:
    """A loop resource's name as the user wrote it (anonymous loops carry a ``#id`` suffix inside)."""
    return rname.split("#")[0]


def check_divisible(plan: Plan, sizes: Mapping[str, int], where: str, origin: Mapping[str, str]) -> None:
    """Each size must be divisible by the product of its resources (mesh axes and loop length)."""
    msizes = mesh_sizes(plan.mesh) if plan.mesh is not None else {}
    for name, res in plan.axes.items():
        if name not in sizes:
            continue
        factors = [(r, msizes[r]) if r in msizes else (loop_label(r), plan.loop[1]) for r in res]
        total = math.prod(f for _, f in factors)
        if total and sizes[name] % total:
            names = tuple(r for r, _ in factors)
            raise DivisibilityError(
                f"{where}: Size of axis {name} ({sizes[name]}) is not divisible by the total number of "
                f"resources assigned to this axis ({names!r}, {total} in total). Axis {name!r} has size "
                f"{sizes[name]} ({origin.get(name, 'inferred')}), split over "
                f"{', '.join(f'{r}={f}' for r, f in factors)}.")


# --------------------------------------------------------------------------------------------------------
# Conflicts: two names sharing a resource may not co-occur in one value


def conflict_message(a: str, b: str, r: str, what: str) -> str:
    """xmap's sentence (its tests quote it; names in backquotes as it wrote them), then what to do."""
    return (f"nx.xmap: Axes `{a}` and `{b}` are both mapped to the resource `{loop_label(r)}`, but they "
            f"coincide in the named_shape of {what}. A value cannot be split twice over one resource: map "
            f"{a!r} and {b!r} to different resources, or reduce one of them first")


_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the package, every layer


def user_location() -> str:
    """``file:line (function)`` of the innermost caller outside namedarray and jax."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(_PKG_DIR) or f"{os.sep}jax{os.sep}" in fn or f"{os.sep}jaxlib" in fn
                or fn.startswith("<frozen") or f"{os.sep}contextlib.py" in fn):
            return f"{fn}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return "an unknown location"


def check_same_mesh(expected: Any, found: Any, where: str) -> None:
    """Inside an ``nx.xmap`` with mesh resources the mesh in context must stay the one it runs on, as in xmap:
    another mesh (or none) entered in the body is a :class:`MeshChangeError`."""
    if found is not None and (tuple(found.axis_names), tuple(found.axis_sizes)) == (
            tuple(expected.axis_names), tuple(expected.axis_sizes)):
        return
    now = mesh_sizes(found) if found is not None else "no mesh"
    raise MeshChangeError(f"{where}: Changing the physical mesh is not allowed inside nx.xmap (the enclosing "
                          f"call runs on {mesh_sizes(expected)}, but {now} is in context here)")


def check_created(out: Any, static: Any = None) -> None:
    """Engine hook: a traced operation inside ``nx.xmap`` with resources must run on the mesh the call runs
    on, and must not create a value that carries two names sharing a resource. ``static`` is the operation's
    configuration (for its name)."""
    env = _env.current()
    if env.mesh is not None:
        check_same_mesh(env.mesh, current_mesh(), f"{_op_name(static)} at {user_location()}")
    resources = env.resources
    for v in out if isinstance(out, (tuple, list)) else (out,):
        if type(v) is NamedArray and len(v.names) > 1:
            c = conflict(v.names, resources)
            if c is not None:
                op = _op_name(static)
                # xmap named the primitive ("a primitive add"); nx's operation nx.add is that primitive
                prim = f"a primitive {op[3:]}" if op.startswith("nx.") else op
                raise ResourceConflictError(conflict_message(
                    *c, f"a value returned from {prim} created at {user_location()}"))


engine.install_created_check(check_created)


def _op_name(static: Any) -> str:
    for s in static if isinstance(static, tuple) else (static,):
        if isinstance(s, str) and s.startswith("nx."):
            return s
    return "an nx operation"


# --------------------------------------------------------------------------------------------------------
# Constraints


def constrain_named(x: NamedArray, plan: Plan, mesh, resources: Mapping[str, tuple]) -> NamedArray:
    """``x`` with its storage constrained by xmap's rule: split resourced names' dims, replicate the rest."""
    spec = storage_spec(x.data.ndim, x.names, lambda n: plan.mesh_axes(n, resources))
    return _make(constrain(x.data, spec, mesh), x.names)
