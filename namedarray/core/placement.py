"""Names to PartitionSpecs: the one place where a value's axis names become a layout over a device mesh.

A *mapping* (``nx.axis_rules``, ``x.shard(resources)``, ``nx.xmap``'s ``axis_resources``) sends axis names to
mesh axes: ``{"batch": "data", "embed": ("data", "model"), "vocab": None}``. A value is laid out by its
names alone: the storage dimension of a named axis is split over the mesh axes its name maps to (several
mesh axes: major to minor), and every other dimension, positional axes included, is replicated. So
``.shard()``, ``nx.sharding``, ``nx.jit``, ``nx.from_process_local`` and ``nx.xmap`` all build their
``PartitionSpec``\\ s with :func:`storage_spec`, and give the same spec for the same names and mapping.

*Rules* (``nx.axis_rules``, and what ``nx.jit(resources=)`` adds) are ranked by their order, the mapping's
insertion order (the order ``nx.axis_rules()`` lists them in): for each value, the names it carries take
their mesh axes rule by rule, and a rule whose mesh axes an earlier-ranked name of that value already took is
skipped, that name staying replicated (:func:`resolve`). So one mesh axis can serve several names that
rarely meet, fully sharded data parallelism by name: ``{"batch": "data", "embed": "data"}`` splits the
parameters' ``embed`` over ``data``, and an activation carrying both names is split by ``batch`` alone. The
rank depends on the program text only, never on the order a value stores its names in, so every process of
a job lays a value out alike. A mapping given to one call (``x.shard(resources)``), and ``nx.xmap``'s
``axis_resources``, say where each name goes: there two names of one value on one mesh axis are an error.

A layout is legal when (:func:`check`): every mesh axis it names is in the mesh, no mesh axis splits a
value twice, and each named size is divisible by the product of its mesh axes' sizes. Results never depend
on the layout.

>>> storage_spec(3, ("batch", "embed"), {"batch": ("data",), "embed": ("x", "y")}.get)
P(None, 'data', ('x', 'y'))
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jax
import numpy as np

# What current_mesh and mesh_token read on every nx.jit / nx.xmap call, bound once: jax's concrete mesh of
# jax.set_mesh, and its thread_resources, the legacy `with Mesh(...)` context that xmap-era code enters
from jax._src.mesh import get_concrete_mesh as _concrete_mesh
from jax._src.mesh import thread_resources as _legacy
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from ..errors import (
    AxisSpecError,
    DivisibilityError,
    MissingResourceError,
    ResourceConflictError,
    wrong_type,
)
from . import caches, context

_abstract_mesh = jax.sharding.get_abstract_mesh

__all__ = ["current_mesh", "mesh_token", "check_mesh", "LastCall", "mesh_sizes", "mesh_axes", "normalize",
           "entry", "storage_spec", "conflict", "resolve",
           "check", "constrain", "place", "is_placed", "contraction_sharding", "gather_sharding",
           "with_layout", "explicit_in_context", "align_explicit_layouts", "layouts_known", "known_layout",
           "note_layout", "layout_key", "conflict_error"]

_Tracer = jax.core.Tracer


def current_mesh() -> jax.sharding.Mesh | jax.sharding.AbstractMesh | None:
    """The mesh in context: ``jax.set_mesh``'s (concrete outside jit, abstract inside), else the legacy
    ``with Mesh(...)`` block's, else ``None``.

    >>> import jax
    >>> current_mesh() is None
    True
    >>> with jax.set_mesh(jax.make_mesh((1,), ("x",))):
    ...     current_mesh().axis_names
    ('x',)
    """
    am = jax.sharding.get_abstract_mesh()
    if not am.empty:
        try:
            m = jax.sharding.get_mesh()
        except ValueError:  # inside jit only the abstract mesh is known, which is all constraints need
            return am
        return am if m.empty else m
    pm = _legacy.env.physical_mesh  # the legacy `with Mesh(...)` context xmap code used
    return None if pm.empty else pm


def check_mesh(mesh: Any, where: str) -> Any:
    """``mesh`` itself if it is a mesh (``jax.sharding.Mesh`` or ``AbstractMesh``) or None, else a
    TypeError naming the argument.

    >>> check_mesh(None, "nx.shard") is None
    True
    """
    if mesh is None or isinstance(mesh, (jax.sharding.Mesh, jax.sharding.AbstractMesh)):
        return mesh
    raise wrong_type(where, "mesh", mesh, "a jax.sharding.Mesh (from jax.make_mesh) or None")


def mesh_token() -> tuple:
    """What :func:`current_mesh` reads, as objects to compare cheaply: equal tokens mean the same mesh in
    context (a memo of what depends on it stays valid). Cheaper than :func:`current_mesh`.

    >>> mesh_token() == mesh_token()
    True
    """
    # the concrete mesh too: two meshes over other devices have equal abstract meshes
    return (_abstract_mesh(), _concrete_mesh(), _legacy.env.physical_mesh)


_LAST_CALLS = caches.SlotFamily("last calls of nx.jit and nx.xmap")


class LastCall:
    """The compiled function that served an entry point's last call (``nx.jit``, ``nx.xmap``), with what
    chose it: the axis environment (the same object), the mesh context (:func:`mesh_token`) and the
    arguments' pytree structure. A call in the same context takes it directly, at the cost of ``jax.jit``'s
    own dispatch; jit still checks every leaf, so a leaf laid out otherwise raises and the caller takes its
    full path. One slot per entry point (:class:`~namedarray.core.caches.SlotFamily`): it never grows, and
    ``nx.clear_caches()`` empties it.

    >>> memo = LastCall()
    >>> memo.put("env", (1.0,), "compiled"); memo.get("env", (2.0,)), memo.get("other", (2.0,))
    ('compiled', None)
    """

    __slots__ = ("_slot",)

    def __init__(self) -> None:
        self._slot = _LAST_CALLS.new()

    def get(self, env: Any, args: tuple) -> Any:
        entry = self._slot.value
        if entry is None or entry[0] is not env:
            return None
        try:
            if entry[1] == mesh_token() and entry[2] == jax.tree.structure(args):
                return entry[3]
        except (TypeError, ValueError):  # arguments jax cannot flatten: the full path says why
            pass
        return None

    def put(self, env: Any, args: tuple, fn: Any) -> None:
        try:
            self._slot.value = (env, mesh_token(), jax.tree.structure(args), fn)
        except (TypeError, ValueError):
            self._slot.value = None

    def clear(self) -> None:
        self._slot.value = None


def mesh_sizes(mesh) -> dict[str, int]:
    """Mesh axis name -> size.

    >>> import jax
    >>> mesh_sizes(jax.make_mesh((1,), ("data",)))
    {'data': 1}
    """
    return dict(zip(mesh.axis_names, mesh.axis_sizes))


# --------------------------------------------------------------------------------------------------------
# Mappings


def mesh_axes(value: Any, name: str, where: str) -> tuple[str, ...]:
    """One mapping value as a tuple of mesh axes: ``None`` -> ``()``, ``"x"`` -> ``("x",)``, a tuple or list
    of mesh axis names as it is (major to minor); a mesh axis twice is a :class:`ResourceConflictError`.

    >>> mesh_axes(["data", "model"], "batch", "example")
    ('data', 'model')
    """
    if value is None:
        return ()
    axes = (value,) if isinstance(value, str) else value
    if not isinstance(axes, (tuple, list)) or not all(isinstance(a, str) and a for a in axes):
        raise AxisSpecError(
            f"{where}: axis {name!r} must map to a mesh axis name, a tuple of mesh axis names (major to "
            f"minor) or None, got {value!r}")
    axes = tuple(axes)
    if len(set(axes)) != len(axes):
        twice = sorted({a for a in axes if axes.count(a) > 1})
        raise ResourceConflictError(
            f"{where}: axis {name!r} maps to {value!r}, which names mesh axis {twice[0]!r} twice; a value "
            "can be split over a mesh axis only once")
    return axes


def normalize(mapping: Mapping[str, Any] | None, where: str) -> dict[str, tuple[str, ...]]:
    """A mapping with every value as a tuple of mesh axes (see :func:`mesh_axes`).

    >>> normalize({"batch": "data", "embed": None}, "example")
    {'batch': ('data',), 'embed': ()}
    """
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise AxisSpecError(f"{where}: resources must be a mapping from axis names to mesh axes, such as "
                            f"{{'batch': 'data'}}, got {mapping!r}")
    out = {}
    for name, value in mapping.items():
        if not isinstance(name, str) or not name:
            raise AxisSpecError(f"{where}: the keys of resources are axis names (non-empty strings), got "
                                f"{name!r}")
        out[name] = mesh_axes(value, name, where)
    return out


# --------------------------------------------------------------------------------------------------------
# Specs


def entry(axes: tuple[str, ...]) -> None | str | tuple[str, ...]:
    """The ``PartitionSpec`` entry of one dimension split over ``axes`` (none: replicated).

    >>> entry(()), entry(("x",)), entry(("x", "y"))
    (None, 'x', ('x', 'y'))
    """
    return None if not axes else axes[0] if len(axes) == 1 else axes


def storage_spec(ndim: int, names: tuple[str, ...],
                 axes_of: Callable[[str], tuple[str, ...] | None]) -> PartitionSpec:
    """The spec of a storage array of rank ``ndim`` whose last ``len(names)`` dimensions are ``names``, in
    that order: each name split over ``axes_of(name)``, every other dimension replicated. Trailing
    replicated entries are left out, as JAX prints specs.

    >>> storage_spec(2, ("a",), {"a": ("x",)}.get), storage_spec(2, ("a",), {}.get)
    (P(None, 'x'), P())
    """
    parts: list[Any] = [None] * (ndim - len(names))
    parts += [entry(axes_of(n) or ()) for n in names]
    while parts and parts[-1] is None:
        parts.pop()
    return PartitionSpec(*parts)


def conflict(names: Iterable[str], mapping: Mapping[str, Iterable[str]]) -> tuple[str, str, str] | None:
    """The first (name, name, mesh axis) such that both names map to that mesh axis, or ``None``.

    Names are taken in sorted order, so the message does not depend on the order a value stores them in.

    >>> conflict(["b", "a"], {"a": ("x",), "b": ("y", "x")})
    ('a', 'b', 'x')
    """
    owner: dict[str, str] = {}
    for n in sorted(names):
        for r in mapping.get(n, ()):
            if r in owner:
                return owner[r], n, r
            owner[r] = n
    return None


def resolve(names: Iterable[str], mapping: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The mesh axes each name of a value that carries ``names`` is split over, under rules ``mapping``
    ranked by their order: each rule, first to last, gives its name (if the value carries it) all of its
    mesh axes when none of them is taken yet by an earlier-ranked name of the value, and none otherwise (the
    name is then replicated, as a rule whose mesh axes are taken is skipped in Flax's and MaxText's logical
    rules). A rule of several mesh axes is taken whole or not at all: splitting over what is left of it
    would give the name a layout no rule states. Names left out of the result are replicated.

    The result depends on the set of ``names`` and the order of ``mapping`` only.

    >>> resolve(["embed", "batch"], {"batch": ("data",), "embed": ("data",)})
    {'batch': ('data',)}
    >>> resolve(["embed", "mlp"], {"batch": ("data",), "embed": ("data",), "mlp": ("model", "data")})
    {'embed': ('data',)}
    """
    carried = names if isinstance(names, (set, frozenset, Mapping)) else set(names)
    used: set[str] = set()
    out: dict[str, tuple[str, ...]] = {}
    for name, axes in mapping.items():
        if axes and name in carried and used.isdisjoint(axes):
            out[name] = axes
            used.update(axes)
    return out


def conflict_error(where: str, found: tuple[str, str, str], mapping: Mapping[str, tuple[str, ...]],
                   hint: str = "map one of them elsewhere, or to None") -> ResourceConflictError:
    """The error for two names of one value on one mesh axis (``found``: as :func:`conflict` returns it)."""
    a, b, r = found
    return ResourceConflictError(
        f"{where}: axes {a!r} and {b!r} both map to mesh axis {r!r} ({a!r} -> {mapping[a]}, {b!r} -> "
        f"{mapping[b]}), but one value carries both; a value cannot be split twice over one mesh axis "
        f"({hint})")


def check(sizes: Mapping[str, int], mapping: Mapping[str, tuple[str, ...]], mesh: Any, where: str, *,
          strict: bool = False, hint: str | None = None) -> dict[str, tuple[str, ...]]:
    """Raise unless a value of named shape ``sizes`` can be laid out by ``mapping`` on ``mesh``; return the
    mesh axes each of its names is split over.

    Mesh axes must exist (:class:`MissingResourceError`; a rule naming one the mesh lacks is a mistake even
    where a higher-ranked name would take its place), and each size must be divisible by its mesh axes'
    total size (:class:`DivisibilityError`). ``mapping`` is ranked rules (:func:`resolve`): a name whose mesh
    axes an earlier-ranked name of the value took is replicated. With ``strict`` it is the layout one call
    asks for, and two of the value's names sharing a mesh axis are a :class:`ResourceConflictError` (``hint``
    says what to do instead). Names ``mapping`` does not mention are replicated and need nothing.

    >>> import jax
    >>> mesh = jax.make_mesh((1,), ("data",))
    >>> check({"batch": 4, "embed": 2}, {"batch": ("data",), "embed": ("data",)}, mesh, "example")
    {'batch': ('data',)}
    """
    msizes = mesh_sizes(mesh)
    for name in sizes:
        for a in mapping.get(name, ()):
            if a not in msizes:
                raise MissingResourceError(
                    f"{where}: axis {name!r} maps to mesh axis {a!r}, but the mesh has axes "
                    f"{_fmt_mesh(msizes)}")
    if strict:
        c = conflict(sizes, mapping)
        if c is not None:
            raise conflict_error(where, c, mapping, *(() if hint is None else (hint,)))
    axes_of = resolve(sizes, mapping)
    for name, axes in axes_of.items():
        total = math.prod(msizes[a] for a in axes)
        if sizes[name] % total:
            raise DivisibilityError(
                f"{where}: axis {name!r} has size {sizes[name]}, which is not divisible by the {total} "
                f"devices of its mesh axes {axes} ({', '.join(f'{a}={msizes[a]}' for a in axes)})")
    return axes_of


def _fmt_mesh(msizes: Mapping[str, int]) -> str:
    return "{" + ", ".join(f"{a!r}: {s}" for a, s in msizes.items()) + "}" if msizes else "(none)"


# --------------------------------------------------------------------------------------------------------
# Applying a spec


def constrain(data: Any, spec: PartitionSpec, mesh: Any) -> Any:
    """``data`` laid out as ``spec`` on ``mesh``.

    Inside a trace: ``with_sharding_constraint`` on Auto mesh axes, ``jax.sharding.reshard`` on Explicit
    ones (where the layout is part of the type), both on a mesh that mixes them. Outside: placement
    (``device_put``), which a concrete mesh needs.
    """
    if not isinstance(data, _Tracer):
        target = NamedSharding(mesh, spec)
        # already there: nothing moves; otherwise placed, so that its .sharding is the NamedSharding asked
        placed = isinstance(getattr(data, "sharding", None), NamedSharding) and is_placed(data, target)
        return data if placed else jax.device_put(data, target)
    explicit = {a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit}
    if not explicit:
        return jax.lax.with_sharding_constraint(data, NamedSharding(mesh, spec))
    if jax.sharding.get_abstract_mesh().empty:
        # JAX places a jitted function's Explicit layouts on the mesh in context, and there is none
        raise MissingResourceError(
            f"laying a traced value out as {spec} on the Explicit mesh axes {sorted(explicit)} needs that "
            "mesh in context: call the jitted function inside `with jax.set_mesh(mesh):`")
    if len(explicit) == len(mesh.axis_names):
        return jax.sharding.reshard(data, NamedSharding(mesh, spec))

    def part(keep: Callable[[str], bool]) -> PartitionSpec:
        out = []
        for e in spec:
            axes = () if e is None else (e,) if isinstance(e, str) else tuple(e)
            kept = tuple(a for a in axes if keep(a))
            if kept and len(kept) != len(axes):
                raise AxisSpecError(
                    f"a dimension split over {axes} mixes Explicit and Auto mesh axes "
                    f"({[a for a in axes if a in explicit]} are Explicit); map each name to mesh axes of "
                    "one type")
            out.append(entry(kept))
        return PartitionSpec(*out)

    data = jax.sharding.reshard(data, NamedSharding(mesh, part(explicit.__contains__)))
    return jax.lax.with_sharding_constraint(data, NamedSharding(mesh, part(lambda a: a not in explicit)))


def is_placed(v: Any, sharding: NamedSharding) -> bool:
    """Whether the concrete array ``v`` is already laid out as ``sharding`` says.

    Equivalence, not equality: an array placed with ``P("x")`` is what ``P("x", None)`` asks for (and
    likewise another mesh object over the same devices, or a size-1 mesh axis), and moving it would make a
    donation donate a copy. On Explicit mesh axes the mesh's axis types must agree too, since there the
    layout is part of the array's type.
    """
    s = getattr(v, "sharding", None)
    if s is None:
        return False
    if s == sharding:
        return True
    explicit = any(t == AxisType.Explicit for t in sharding.mesh.axis_types)
    if explicit and not (isinstance(s, NamedSharding) and s.mesh.axis_types == sharding.mesh.axis_types):
        return False
    try:
        return s.is_equivalent_to(sharding, len(v.shape))
    except (ValueError, TypeError, AttributeError):
        return False


def is_process_local(v: Any) -> bool:
    """Whether ``v`` holds only this process's data in a multi-process run (a NumPy array, or a jax array
    on this process's devices), so that it is one block of a global array rather than the whole of it."""
    if jax.process_count() == 1:
        return False
    if isinstance(v, (np.ndarray, np.generic)):
        return True
    return isinstance(v, jax.Array) and not isinstance(v, _Tracer) and v.is_fully_addressable


def place(v: Any, sharding: NamedSharding, *, donate: bool = False, local_blocks: bool = False) -> Any:
    """The concrete array ``v`` laid out as ``sharding`` (``v`` itself when it already is).

    With ``local_blocks`` (``nx.xmap``'s contract), a process-local ``v`` in a multi-process run is this
    process's block of the global array (``jax.make_array_from_process_local_data``: sizes along the split
    dimensions are multiplied by the number of processes they span); otherwise it is the whole value, the
    same on every process, as ``jax.jit`` takes it. ``donate`` releases ``v``'s buffer when it has to be
    copied (best effort: backends that cannot donate in a transfer keep it).
    """
    if local_blocks and is_process_local(v):
        return jax.make_array_from_process_local_data(sharding, np.asarray(v))
    if is_placed(v, sharding):
        return v
    if donate and isinstance(v, jax.Array):
        return jax.device_put(v, sharding, donate=True)
    return jax.device_put(v, sharding)


# --------------------------------------------------------------------------------------------------------
# Explicit mesh axes: where the layout is part of each value's type, results get theirs by name


def _explicit_dims(x: Any) -> tuple[Any, tuple[tuple[str, ...], ...]] | None:
    """(mesh, the mesh axes of each dim) of a value whose type carries an Explicit sharding, else None."""
    try:
        s = jax.typeof(x).sharding
    except (TypeError, AttributeError):
        return None
    mesh = getattr(s, "mesh", None)
    if mesh is None or mesh.empty or AxisType.Explicit not in mesh.axis_types:
        return None
    spec = tuple(s.spec) + (None,) * (np.ndim(x) - len(s.spec))
    return mesh, tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in spec)


def _explicit_layout(operands: Any, labels: Any) -> tuple[Any, dict[Any, tuple[str, ...]], set]:
    """(mesh, label -> the mesh axes its dim is split over, the labels split in some operand) from the
    operands whose type carries an Explicit sharding; the mesh is None when no operand's does."""
    dims: dict[Any, tuple[str, ...]] = {}
    split: set = set()
    mesh = None
    for x, labs in zip(operands, labels):
        got = _explicit_dims(x)
        if got is None:
            continue
        mesh, axes = got
        for lab, a in zip(labs, axes):
            dims.setdefault(lab, a)
            if a:
                split.add(lab)
    return mesh, dims, split


def _by_name(mesh: Any, dims: Mapping[Any, tuple[str, ...]], out_labels: Any, out_names: Mapping[Any, str],
             mapping: Mapping[str, tuple[str, ...]]) -> NamedSharding:
    """Each output name laid out by ``mapping`` (ranked rules, :func:`resolve`), any other output dim as it
    is in the operand it comes from where its mesh axes are still free (Explicit mesh axes only, each used
    once)."""
    explicit = {a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit}
    named = [out_names[lab] for lab in out_labels if lab in out_names]
    ruled = resolve(named, mapping)
    used: set[str] = {a for axes in ruled.values() for a in axes}
    out = []
    for lab in out_labels:
        name = out_names.get(lab)
        if name is not None and name in mapping:
            axes = tuple(a for a in ruled.get(name, ()) if a in explicit)
        else:
            axes = tuple(a for a in dims.get(lab, ()) if a in explicit and a not in used)
            used.update(axes)
        out.append(entry(axes))
    return NamedSharding(mesh, PartitionSpec(*out))


def contraction_sharding(operands: Any, labels: Any, out_labels: Any, out_names: Mapping[Any, str],
                         mapping: Mapping[str, tuple[str, ...]]) -> NamedSharding | None:
    """The output sharding of a contraction on Explicit mesh axes, where JAX would find it ambiguous.

    On Explicit axes the sharding is part of each value's type, and a contraction over a split dimension
    needs its result's layout spelled out (JAX raises otherwise). By name it is known: each output name is
    laid out by ``mapping`` (the rules in force), and any other output dim keeps the layout it has in the
    operand it comes from; the contracted mesh axes are summed over (an all-reduce, or a reduce-scatter
    where the rules split an output name over them). ``labels`` label each operand's dims, ``out_labels``
    the output's, and ``out_names`` gives the axis name of the output labels that are named. None when no
    operand is on Explicit axes, or no contracted dim is split and the output dims keep their operands'
    layouts without splitting the result twice over one mesh axis: JAX's own inference is then unambiguous
    and legal. (Under fully sharded rules a parameter splits ``embed`` over the mesh axis an activation
    splits ``batch`` over; their product carries both, and the rules decide which keeps it.)
    """
    mesh, dims, split = _explicit_layout(operands, labels)
    if mesh is None:
        return None
    if not split - set(out_labels):
        taken = [a for lab in out_labels for a in dims.get(lab, ())]
        if len(taken) == len(set(taken)):
            return None
    return _by_name(mesh, dims, out_labels, out_names, mapping)


def gather_sharding(operands: Any, labels: Any, out_labels: Any, out_names: Mapping[Any, str],
                    mapping: Mapping[str, tuple[str, ...]]) -> NamedSharding | None:
    """The output sharding of a gather (a lookup by name) on Explicit mesh axes, where any split dim makes
    JAX ask for one: laid out by name as :func:`contraction_sharding` lays out a contraction. None when no
    operand is on Explicit axes or nothing is split."""
    mesh, dims, split = _explicit_layout(operands, labels)
    if mesh is None or not split:
        return None
    return _by_name(mesh, dims, out_labels, out_names, mapping)


def with_layout(f: Callable, sharding: NamedSharding | None) -> Callable:
    """``f`` computed with the Explicit mesh axes of ``sharding`` made automatic, its result laid out as
    ``sharding`` says (``jax.sharding.auto_axes``); ``f`` itself when ``sharding`` is None."""
    if sharding is None:
        return f
    mesh = sharding.mesh
    explicit = tuple(a for a, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit)
    return jax.sharding.auto_axes(f, out_sharding=sharding, axes=explicit)


def explicit_in_context() -> bool:
    """Whether the mesh in context has Explicit axes (where each value's layout is part of its type)."""
    m = _abstract_mesh()
    return not m.empty and AxisType.Explicit in m.axis_types


def align_explicit_layouts(datas: list, names: list,
                           mapping: Mapping[str, tuple[str, ...]] | None = None) -> list:
    """Storages (``datas``, whose trailing dims are ``names``; None for a plain operand) laid out so that
    each name is split alike in all of them, where they carry Explicit shardings in their types.

    A vectorised map over a name (``nx.nmap``, the joins built on it) needs every operand's dim of that name
    split the same way, and on Explicit axes the split is part of each operand's type: an operand made on
    the spot (``nx.zeros``) is whole where another is split. The first operand that splits a name gives its
    layout to the others. Where two names would so share a mesh axis (under fully sharded rules a parameter
    splits ``embed`` over the mesh axis an activation's ``batch`` is split over), the result, which carries
    both, cannot be split twice over it: the name that ranks first in ``mapping`` (the rules in force; names
    they do not map after them, by name) keeps it, and the other is gathered, as :func:`resolve` lays out a
    value carrying both.
    """
    found = [(_explicit_dims(d) if n is not None else None) for d, n in zip(datas, names)]
    if not any(found):
        return datas
    mesh = next(f for f in found if f)[0]
    chosen: dict[str, tuple[str, ...]] = {}
    for f, d, n in zip(found, datas, names):
        if f and n:
            p = d.ndim - len(n)
            for k, name in enumerate(n):
                if f[1][p + k]:
                    chosen.setdefault(name, f[1][p + k])
    if len({a for axes in chosen.values() for a in axes}) < sum(len(axes) for axes in chosen.values()):
        rank = {n: i for i, n in enumerate(mapping or ())}
        ranked = sorted(chosen, key=lambda n: (rank.get(n, len(rank)), n))  # unranked: by name, fixed
        kept = resolve(chosen, {n: chosen[n] for n in ranked})
        chosen = {n: kept.get(n, ()) for n in chosen}
    out = []
    for f, d, n in zip(found, datas, names):
        if n is not None and chosen:
            p = d.ndim - len(n)
            have = f[1] if f else ((),) * d.ndim
            # a dim of size 1 is one the operand lacks, broadcast: it stays whole
            want = have[:p] + tuple(have[p + k] if d.shape[p + k] == 1 else chosen.get(name, have[p + k])
                                    for k, name in enumerate(n))
            if want != have:
                d = jax.sharding.reshard(d, NamedSharding(mesh, PartitionSpec(*[entry(a) for a in want])))
        out.append(d)
    return out


# --------------------------------------------------------------------------------------------------------
# Layouts a trace already states
#
# A constraint costs nothing where the layout it asks for is the one the value has, except in one place that
# matters: a scan. A sharding constraint on a slice of the scanned parameters (``p["w"].shard()`` in the
# body of ``nx.scan(block, x, params, axis="layer")``, as model code writes it) is a new value computed from
# the slice, and differentiating the scan saves every step's copy of it for the backward pass: a second copy
# of each constrained parameter stack (measured: a Llama-style step's temp memory grew by the size of its
# stacked MLP weights). The slice itself is the scan's input, which the backward pass reads in place.
#
# So within :func:`layouts_known` (a trace that lays every argument out by its names on entry opens it), the
# trace remembers which tracers already have which layout: those a constraint produced, and the slices a
# scan takes of them along a name no mesh axis splits. ``.shard()`` of such a value with the same layout is
# the value itself. Tracers of ``jax.grad`` (their ``primal``) have their primal's layout. Per context
# (``context.known_layouts``), so traces in other threads keep apart; outside such a block every
# ``.shard()`` constrains.

@contextlib.contextmanager
def layouts_known() -> Iterator[None]:
    """Within: :func:`note_layout` records, and :func:`known_layout` answers (one trace's scope)."""
    token = context.known_layouts.set({})
    try:
        yield
    finally:
        context.known_layouts.reset(token)


def layout_key(mesh: Any, names: Iterable[str], axes_of: Callable[[str], tuple[str, ...] | None]) -> tuple:
    """What identifies the layout of a value with ``names`` under a mapping: the mesh and each name's mesh
    axes (names in sorted order: the storage order does not change which axes split which name)."""
    return mesh, tuple((n, tuple(axes_of(n) or ())) for n in sorted(names))


def note_layout(data: Any, key: tuple) -> None:
    """Record that the traced ``data`` is laid out as ``key`` (:func:`layout_key`) in this trace."""
    known = context.known_layouts.get()
    if known is not None and isinstance(data, _Tracer):
        known[id(data)] = (data, key)  # the tracer itself is kept, so its id cannot be reused meanwhile


def known_layout(data: Any) -> tuple | None:
    """The layout recorded for the traced ``data`` (or for the primal it differentiates), else None."""
    known = context.known_layouts.get()
    if not known:
        return None
    for _ in range(8):  # nested differentiation: a tracer whose primal is a tracer ...
        got = known.get(id(data))
        if got is not None and got[0] is data:
            return got[1]
        data = getattr(data, "primal", None)
        if not isinstance(data, _Tracer):
            return None
    return None
