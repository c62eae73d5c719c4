"""``nx.shard_map``: a function of NamedArrays run on per-device blocks, by name.

``nx.shard_map(f, resources={"x": "data"})`` splits every argument's named axis ``x`` over the mesh axes
it maps to (``resources``, or the rules of ``nx.axis_rules``) and runs ``f`` once per device on its block
(``jax.shard_map``): inside, NamedArrays are the local blocks, so ``named_shape`` gives local sizes, while
``nx.axis_size("x")`` gives the whole size and ``nx.axis_index("x")`` the index of each local element in the
whole axis. Names the mapping does not split stay whole in every block. Results are put back together by
their names.

The body reads as it would under ``nx.xmap`` and gives the same values: an operation over a split name
combines the blocks itself. ``nx.sum``/``nx.mean``/``nx.max``/``nx.min``/``nx.any``/``nx.all``/``nx.var``/
``nx.std`` and the collectives ``nx.psum``/``pmean``/``pmax``/``pmin`` over a split name reduce each block,
then combine the blocks with the mesh collective (``lax.psum`` over the name's mesh axes); so do
``nx.nn.softmax``, ``log_softmax``, ``logsumexp``, ``layer_norm``, ``rms_norm`` and ``standardize``;
contractions over it (``nx.dot``, ``nx.einsum``, ``nx.pdot``) add up each device's partial sum;
``nx.all_gather`` gathers the blocks; ``nx.nn.one_hot`` fills each device's block of classes. Where a block is
what the program is about, the collectives move blocks: ``nx.ppermute(x, "x", shift=1)`` sends each device's
block to the next device along the name's mesh axes (periodic; explicit ``(source, destination)`` pairs of
block indices zero-fill the blocks they do not reach, as JAX does) -- the halo exchange of a stencil; slicing
and concatenating along a split name act on each block. An operation that needs the whole of a split axis
otherwise (sorting, a cumulative sum or indexing one element along it) is a
:class:`~namedarray.errors.SplitAxisError` saying so. The body is traced twice (once to learn the names of
its results), so a ``print`` in it shows twice.

Only the mesh axes the split names use are manual; the others stay automatic (partial manual mode), so a
body may still lay its values out over them with ``.shard()``.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
>>> @nx.shard_map(resources={"batch": "data"}, mesh=mesh)
... def center(x):
...     return x - nx.mean(x, "batch")          # the blocks' means are combined
>>> center(nx.wrap(jnp.arange(1.0, 5.0), ["batch"])).unwrap(["batch"]).tolist()
[-1.5, -0.5, 0.5, 1.5]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
from jax.sharding import PartitionSpec
from jax.tree_util import keystr

from ..core import env as _env
from ..core import placement
from ..core.array import _make, canonical_storage, is_named
from ..core.layout import named_sizes
from ..core.orders import canonical
from ..errors import AxisSizeError, AxisSpecError, MissingResourceError, NamedAxisError
from .distribute import _NO_MESH, active_mapping, shard

__all__ = ["shard_map", "ShardMapped"]

_WHERE = "nx.shard_map"


def shard_map(f: Callable | None = None, *, resources: Mapping[str, Any] | None = None, mesh: Any = None,
              check_vma: bool = True) -> Any:
    """Run ``f`` on per-device blocks of its NamedArray arguments, split by name (see the module docstring).

    ``resources`` maps names to a mesh axis or a tuple of mesh axes (default: the rules of ``nx.axis_rules``);
    ``mesh`` defaults to the mesh in context; ``check_vma`` is ``jax.shard_map``'s check that results which
    lack a split name are the same on every device. Arguments and results are pytrees of NamedArrays (plain
    arrays are whole in every block). Also a decorator, with or without arguments.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> total = nx.shard_map(lambda v: nx.psum(v, "i"), resources={"i": "x"}, mesh=mesh)
    >>> total(nx.wrap(jnp.arange(4.0), ["i"])).tolist()
    6.0
    """
    if f is None:
        return functools.partial(shard_map, resources=resources, mesh=mesh, check_vma=check_vma)
    return ShardMapped(f, resources, mesh, check_vma)


class ShardMapped:
    """The callable :func:`shard_map` returns."""

    def __init__(self, f: Callable, resources: Mapping[str, Any] | None, mesh: Any, check_vma: bool):
        if not callable(f):
            raise TypeError(f"{_WHERE}: f must be callable, got {f!r}")
        self._f = f
        self._resources = None if resources is None else placement.normalize(resources, _WHERE)
        self._mesh = mesh
        self._check_vma = bool(check_vma)
        functools.update_wrapper(self, f, updated=())

    def __repr__(self) -> str:
        return f"nx.shard_map({getattr(self._f, '__name__', self._f)!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"{_WHERE}: the mapped function takes positional arguments only (as "
                            f"jax.shard_map), got keyword arguments {sorted(kwargs)}")
        if self._mesh is None and placement.current_mesh() is None:
            raise MissingResourceError(f"{_WHERE}: {_NO_MESH}")
        with _env.synced():
            return self._jitted(*args)

    @functools.cached_property
    def _jitted(self) -> Callable:
        # one compilation per argument signature, rules and mesh in context (all in jax.jit's cache key)
        return jax.jit(self._traced)

    def _traced(self, *args: Any) -> Any:
        mesh = self._mesh if self._mesh is not None else placement.current_mesh()
        mapping = active_mapping(self._resources, _WHERE)
        sizes, split, specs = _split_arguments(args, mapping, mesh)
        if not split:  # nothing is split: every device would run the whole of f
            with _env.bind_blocks(sizes, {}, mesh=mesh, where=_WHERE):
                return self._f(*args)
        manual = frozenset(a for axes in split.values() for a in axes)
        # arguments laid out as their blocks (on Explicit axes shard_map wants exactly that layout)
        args = shard(args, split, mesh=mesh)

        # names the resources map that no argument carries are not split (their mesh axes are not manual):
        # recorded with no mesh axes, so that a collective over one says so rather than act on whole values
        unsplit = {n: () for n in self._resources or {} if n not in split}

        def body(*blocks):
            with _env.bind_blocks(sizes, {**split, **unsplit}, mesh=_body_mesh(mesh), where=_WHERE):
                return _canonical(self._f(*blocks))

        # The results' layout follows their names, known once the body has run: trace it abstractly first
        # (results unchecked and unconcatenated), then run it with the specs of those names.
        probe = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(),
                              axis_names=manual, check_vma=False)
        out_specs = _result_specs(jax.eval_shape(probe, *args), split)
        run = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=out_specs, axis_names=manual,
                            check_vma=self._check_vma)
        try:
            return run(*args)
        except ValueError as e:
            if isinstance(e, NamedAxisError) or "out_specs" not in str(e):
                raise
            raise AxisSpecError(
                f"{_WHERE}: a result that lacks a split name must be the same on every device, and one of "
                f"{self._name} varies along {sorted(split)}: reduce it over them (nx.psum, nx.sum, ...) or "
                f"keep the name on it (jax says: {str(e).splitlines()[0]})") from None

    @property
    def _name(self) -> str:
        return f"{getattr(self._f, '__name__', 'f')}'s results"


def _split_arguments(args: tuple, mapping: Mapping[str, tuple[str, ...]], mesh: Any
                     ) -> tuple[dict[str, int], dict[str, tuple[str, ...]], Any]:
    """(the arguments' names -> whole size, split name -> mesh axes, the in_specs of ``args``): each name an
    argument carries and the mapping sends to mesh axes is split; its size must be divisible (checked per
    argument, naming it), and two arguments must agree on a name's size."""
    sizes: dict[str, int] = {}
    origin: dict[str, str] = {}
    split: dict[str, tuple[str, ...]] = {}

    def spec(path, v):
        if not is_named(v):
            return PartitionSpec()
        label = f"argument {keystr(path)}" if path else "the argument"
        where = f"{_WHERE} {label}"
        own = named_sizes(v)
        # strict even under ranked rules: a name's blocks are one size in every value of the body, so no
        # value can keep whole a name that another splits
        placement.check(own, mapping, mesh, where, strict=True,
                        hint="nx.shard_map splits a name alike in every value, so it cannot leave one of "
                             "them whole in this value as the rules in force would; map one of them "
                             "elsewhere or to None for this call (resources=)")
        for n, s in own.items():
            if sizes.setdefault(n, s) != s:
                raise AxisSizeError(f"{_WHERE}: axis {n!r} has size {sizes[n]} in {origin[n]} but size {s} "
                                    f"in {label}")
            origin.setdefault(n, label)
            if mapping.get(n):
                split[n] = mapping[n]
        # the spec of the leaf jax.shard_map sees: the storage with the names in canonical order
        return placement.storage_spec(v.data.ndim, canonical(v.names), mapping.get)

    specs = jax.tree_util.tree_map_with_path(spec, args, is_leaf=is_named)
    return sizes, split, specs


def _body_mesh(mesh: Any) -> Any:
    """The mesh as the body sees it (its manual axes marked so), for nx operations that ask for it."""
    inside = jax.sharding.get_abstract_mesh()
    return inside if not inside.empty else mesh


def _canonical(out: Any) -> Any:
    """Results with their names in canonical order, the order jax.shard_map sees their leaves in (so the
    specs computed from the probe's names describe exactly these leaves)."""
    def one(v):
        if not is_named(v):
            return v
        d, names = canonical_storage(v)
        return _make(d, names)

    return jax.tree.map(one, out, is_leaf=is_named)


def _result_specs(probe: Any, split: Mapping[str, tuple[str, ...]]) -> Any:
    """Each result leaf's spec: its split names over their mesh axes (blocks put back side by side)."""
    def spec(v):
        if not is_named(v):
            return PartitionSpec()
        return placement.storage_spec(v.data.ndim, v.names, split.get)

    return jax.tree.map(spec, probe, is_leaf=is_named)
