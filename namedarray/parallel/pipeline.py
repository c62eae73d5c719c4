"""``nx.pipeline``: stacked layers run as a pipeline over the devices a rule gives their name.

A deep model keeps its layers' parameters stacked along a name (``layer``) and folds one layer function
over them: ``nx.scan(lambda h, p: (layer_fn(p, h), None), x, params, axis="layer")``. ``nx.pipeline(
layer_fn, params, x, axis="layer", microbatches=M)`` computes the same fold. What changes is where it runs:
under rules that map ``layer`` to a mesh axis of size ``S`` (``{"layer": "stage"}``), each device of that
axis holds ``L/S`` consecutive layers (the parameters are split along ``layer`` and never gathered), and the
batch flows through the devices as a pipeline.

The schedule is GPipe's. The batch is cut along its name (``batch``, or ``microbatch_axis=``) into ``M``
microbatches. At step ``t`` of ``M + S - 1`` steps, stage ``s`` runs its ``L/S`` layers (one ``scan``) on
microbatch ``t - s``, then every stage hands its result to the next one with one collective permute
(``jax.lax.ppermute`` inside ``nx.shard_map`` over the stage axis). Stage 0 reads a new microbatch each step;
the last stage writes a finished one each step from step ``S - 1`` on. A stage is idle (computes a value that
is thrown away) in ``S - 1`` of the ``M + S - 1`` steps: the bubble, an idle fraction of
``(S - 1) / (M + S - 1)``, which more microbatches shrink (``nx.visualize_pipeline(S, M)`` draws it).
``jax.grad`` runs the same schedule backwards: the transpose of a permute to the next stage is a permute to
the previous one, and each stage's parameter gradients stay on it. ``remat=True`` recomputes a stage's step
in the backward pass instead of keeping its activations (``jax.checkpoint`` around it).

``repeats=R`` runs the circular (looped) schedule instead: the layers are cut into ``S R`` runs of ``L/(S R)``
and run ``j`` goes to stage ``j % S``, so layer ``l`` is on stage ``(l // (L/(S R))) % S`` and each stage
holds ``R`` runs that are not contiguous. A microbatch goes round the ring of stages ``R`` times, through run
``k S + s`` on its ``k``-th pass at stage ``s``: at step ``t`` of ``R M + S - 1`` stage ``s`` works on
microbatch ``(t - s) % M``, pass ``(t - s) // M``. What leaves the last stage comes round to stage 0, which
keeps it until its next pass is due (``M - S + 1`` steps later, so ``M >= S``). A step now runs ``L/(S R)``
layers, and a stage idles in ``S - 1`` of the ``R M + S - 1`` steps, an idle fraction of
``(S - 1) / (R M + S - 1)``: ``R`` times more steps of ``1/R`` the work, with the same ``S - 1`` idle ones.
The price is ``R`` times more permutes (each one microbatch of activations) and, since the rules split
``layer`` into contiguous blocks, moving each run to its stage once per call, and the gradients back:
collectives over the parameters (all-to-alls, and gathers among a few stages, as XLA compiles the
reordering) that ``R = 1`` does not need.

The names decide everything else, as everywhere in nx:

* other rules compose: under ``{"layer": "stage", "batch": "data"}`` every microbatch keeps its ``batch``
  split over ``data`` (only the stage axis is manual inside; ``.shard()`` in ``layer_fn`` lays values out
  over the others as it would outside);
* with no rule for ``axis`` (or no mesh, or a stage axis of size 1) it is the fold itself, ``nx.scan``, so
  the same code runs on one device;
* the values never depend on the rules: microbatches are cut so that each keeps the layout of the batch it
  came from (microbatch ``m`` holds rows ``m, m + M, m + 2M, ...``), and put back in place.

Microbatching assumes what pipelining always assumes: ``layer_fn`` treats the rows of the batch
independently (no statistics over ``batch``, such as a batch norm, inside a layer). The activations crossing
a stage boundary are ``x``'s shape with ``batch`` cut ``M`` ways; the last stage's results reach every
stage with one all-reduce at the end (the layout ``x`` had, replicated over the stage axis).

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> params = {"w": nx.wrap(jnp.full((4, 3, 3), 0.25), ["layer", "embed", "out"])}
>>> def layer_fn(p, h):
...     return h + nx.dot(h, p["w"], axis="embed").rename({"out": "embed"})
>>> x = nx.wrap(jnp.ones((8, 3)), ["batch", "embed"])
>>> nx.pipeline(layer_fn, params, x, axis="layer", microbatches=4).unwrap(["batch", "embed"])[0].tolist()
[9.37890625, 9.37890625, 9.37890625]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec
from jax.tree_util import keystr

from ..core import env as _env
from ..core import placement
from ..core.array import NamedArray, _make, is_named
from ..core.layout import align, named_sizes, pos_ndim
from ..core.orders import canonical
from ..core.shape import check_name
from ..errors import (
    AxisSizeError,
    AxisSpecError,
    CarryError,
    DivisibilityError,
    MissingResourceError,
    fmt_names,
    wrong_type,
)
from ..transforms.control import built_around
from ..transforms.scan import scan
from .distribute import active_mapping, shard
from .shard_map import _body_mesh

__all__ = ["pipeline", "visualize_pipeline", "bubble_fraction"]

_WHERE = "nx.pipeline"


def pipeline(layer_fn: Callable[[Any, NamedArray], NamedArray], params: Any, x: NamedArray,
             axis: str = "layer", *, microbatches: int, microbatch_axis: str = "batch",
             remat: bool | Callable = False, repeats: int = 1) -> NamedArray:
    """Fold ``layer_fn`` over the layers of ``params`` stacked along ``axis``, as a pipeline where a rule maps
    ``axis`` to mesh axes (see the module docstring).

    ``layer_fn(p, h) -> h`` applies one layer: ``p`` is ``params`` without ``axis``, ``h`` has ``x``'s named
    shape (with ``microbatch_axis`` cut ``microbatches`` ways when pipelined), and the result must have
    ``h``'s names, positional shape and dtype. ``params`` is a pytree whose NamedArrays carry ``axis`` (leaves
    without it reach every layer whole). ``remat=True`` (or a ``jax.checkpoint_policies`` policy) recomputes
    each step's activations in the backward pass. ``repeats=R`` runs the circular schedule: each stage holds
    ``R`` runs of ``L/(S*R)`` layers and the microbatches go round the stages ``R`` times (``L`` must divide
    by ``S*R`` and ``microbatches`` be at least ``S``). Returns the result of the last layer, laid out as
    ``x``.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> params = {"b": nx.wrap(jnp.arange(4.0), ["layer"])}
    >>> x = nx.wrap(jnp.zeros(6), ["batch"])
    >>> nx.pipeline(lambda p, h: h + p["b"], params, x, microbatches=3).unwrap(["batch"]).tolist()
    [6.0, 6.0, 6.0, 6.0, 6.0, 6.0]
    """
    if not callable(layer_fn):
        raise wrong_type(_WHERE, "layer_fn", layer_fn, "a function layer_fn(p, x) -> x")
    check_name(axis, _WHERE)
    check_name(microbatch_axis, _WHERE)
    if not (remat is None or isinstance(remat, bool) or callable(remat)):
        raise TypeError(f"{_WHERE}: remat must be True, False or a jax.checkpoint_policies policy, got "
                        f"{remat!r}")
    if type(x) is not NamedArray:
        raise wrong_type(_WHERE, "x", x, f"a NamedArray with a {microbatch_axis!r} axis")
    if (isinstance(microbatches, bool) or not isinstance(microbatches, numbers.Integral)
            or microbatches < 1):
        raise AxisSpecError(f"{_WHERE}: microbatches must be a positive int (how many pieces "
                            f"{microbatch_axis!r} is cut into), got {microbatches!r}")
    m = int(microbatches)
    if isinstance(repeats, bool) or not isinstance(repeats, numbers.Integral) or repeats < 1:
        raise AxisSpecError(f"{_WHERE}: repeats must be a positive int (how many times the microbatches go "
                            f"round the stages), got {repeats!r}")
    r = int(repeats)
    length = _layers(params, axis)
    sizes = named_sizes(x)
    if microbatch_axis not in sizes:
        raise AxisSpecError(
            f"{_WHERE}: x has no axis {microbatch_axis!r} to cut into {m} microbatches (it has "
            f"{fmt_names(sorted(x.names)) or 'no named axes'}); name the batch axis with microbatch_axis=")
    batch = sizes[microbatch_axis]
    if batch % m:
        raise DivisibilityError(
            f"{_WHERE}: axis {microbatch_axis!r} of x has size {batch}, which {m} microbatches do not divide "
            f"(each microbatch holds an equal share of it): pick microbatches among the divisors of {batch}")

    stage_axes, stages = _stage_axes(axis)
    if stages == 1:  # nothing to pipeline over: the fold itself
        def layer(h, p):
            return layer_fn(p, h), None
        return scan(layer, x, params, axis=axis, remat=remat)[0]

    if length % (stages * r):
        if r == 1:
            raise DivisibilityError(
                f"{_WHERE}: axis {axis!r} of params has size {length}, which the {stages} stages of mesh "
                f"axes {stage_axes} it maps to do not divide (each stage holds an equal run of layers): use "
                f"a layer count that is a multiple of {stages}, or map {axis!r} to fewer devices")
        raise DivisibilityError(
            f"{_WHERE}: axis {axis!r} of params has size {length}, which {stages} stages (mesh axes "
            f"{stage_axes}) times repeats={r} do not divide (each stage holds {r} equal runs of layers): use "
            f"a layer count that is a multiple of {stages * r}, or fewer repeats")
    if r > 1 and m < stages:
        # a microbatch leaving the last stage re-enters stage 0 M - S + 1 steps later: with fewer
        # microbatches than stages it would be needed there before it is done
        raise AxisSizeError(
            f"{_WHERE}: the circular schedule (repeats={r}) needs at least as many microbatches as stages, "
            f"so that a microbatch is back at stage 0 before its next pass is due; got microbatches={m} on "
            f"{stages} stages of mesh axes {stage_axes} (axis {microbatch_axis!r} of x has size {batch})")
    _check_microbatch_layout(x, microbatch_axis, batch // m, stage_axes)

    key = (axis, microbatch_axis, m, stages, stage_axes, r, remat if _hashable(remat) else None)
    run = built_around(layer_fn, key if _hashable(remat) else None,
                       lambda get: _pipelined(get, axis, microbatch_axis, m, stages, stage_axes, remat, r))
    return run(params, x)


# --------------------------------------------------------------------------------------------------------
# Checks


def _layers(params: Any, axis: str) -> int:
    """The number of layers: the size of ``axis`` in the leaves of ``params`` that carry it (one size)."""
    flat = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_named)[0]
    length, first = None, ""
    for path, v in flat:
        if type(v) is NamedArray and axis in v.names:
            size = named_sizes(v)[axis]
            if length is None:
                length, first = size, keystr(path)
            elif size != length:
                raise AxisSizeError(f"{_WHERE}: axis {axis!r} has size {length} in params{first} but size "
                                    f"{size} in params{keystr(path)}")
    if length is None:
        carried = "; ".join(f"params{keystr(p)} has {fmt_names(sorted(v.names)) or 'no names'}"
                            if type(v) is NamedArray else f"params{keystr(p)} is a {type(v).__name__}"
                            for p, v in flat[:6]) or "params has no leaves"
        raise AxisSpecError(f"{_WHERE}: no leaf of params carries axis {axis!r}, the axis the layers are "
                            f"stacked along; {carried}")
    return length


def _stage_axes(axis: str) -> tuple[tuple[str, ...], int]:
    """(the mesh axes the rules in force map ``axis`` to, how many devices they span): ``((), 1)`` when there
    is no such rule or no mesh."""
    axes = active_mapping(where=_WHERE).get(axis) or ()
    mesh = placement.current_mesh()
    if not axes or mesh is None:
        return (), 1
    msizes = placement.mesh_sizes(mesh)
    missing = [a for a in axes if a not in msizes]
    if missing:
        raise MissingResourceError(f"{_WHERE}: the rules map axis {axis!r} to mesh axes {axes}, but the mesh "
                                   f"in context has no axis {missing[0]!r} (it has {tuple(msizes)})")
    return tuple(axes), math.prod(msizes[a] for a in axes)


def _check_microbatch_layout(x: NamedArray, name: str, size: int, stage_axes: tuple[str, ...]) -> None:
    """A microbatch keeps the layout of the batch: its share of ``name`` must divide by the mesh axes the
    rules split ``name`` over (the stage axes aside, which hold layers, not rows)."""
    axes = tuple(a for a in active_mapping(where=_WHERE).get(name) or () if a not in stage_axes)
    if not axes:
        return
    msizes = placement.mesh_sizes(placement.current_mesh())
    blocks = math.prod(msizes.get(a, 1) for a in axes)
    if size % blocks:
        raise DivisibilityError(
            f"{_WHERE}: each microbatch holds {size} of axis {name!r}, which its {blocks} blocks over mesh "
            f"axes {axes} do not divide: use fewer microbatches, so that a microbatch still splits over "
            f"{axes}")


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


# --------------------------------------------------------------------------------------------------------
# The schedule


def _pipelined(get_fn: Callable[[], Callable], axis: str, name: str, m: int, stages: int,
               stage_axes: tuple[str, ...], remat: Any, repeats: int = 1) -> Callable:
    """The pipelined fold, for ``layer_fn = get_fn()``: a ``jax.shard_map`` manual over the stage mesh axes
    alone, so that the rules lay out every other name inside as outside (``nx.shard_map`` would lay its
    arguments out by the names it splits only, gathering ``x``'s other mesh axes on entry)."""

    def body(params, x):
        stage = jax.lax.axis_index(stage_axes)
        last = stage == stages - 1
        mbs = _microbatches(x, name, m)  # (m, the storage of one microbatch): the microbatch in front
        names = x.names

        def stage_fn(h, p):  # this stage's run of layers on one microbatch
            def layer(c, q):
                return _fit(get_fn()(q, c), c, "layer_fn"), None
            return scan(layer, h, p, axis=axis)[0]

        def run_of(t):  # the run of layers stage s uses at step t: its pass (t - s) // M over the ring
            if repeats == 1:
                return params
            k = jnp.clip((t - stage) // m, 0, repeats - 1)
            return jax.tree.map(lambda v: _chunk(v, axis, k, repeats), params, is_leaf=is_named)

        def step(carry, t):
            state, outs, back = carry
            if repeats == 1:
                # stage 0 takes microbatch t (the last one again once they are all in: its result is
                # dropped); the others take what the previous stage handed on
                fresh = jax.lax.dynamic_index_in_dim(mbs, jnp.minimum(t, m - 1), 0, keepdims=False)
            else:
                # what came round the ring is microbatch t - S after a pass: stage 0 keeps it until its
                # next pass is due, M - S + 1 steps after it left the last stage (the same step when M = S)
                came = t - stages
                slot = jnp.mod(jnp.maximum(came, 0), m)
                kept = jax.lax.dynamic_index_in_dim(back, slot, 0, keepdims=False)
                back = jax.lax.dynamic_update_index_in_dim(back, jnp.where(came >= 0, state, kept), slot, 0)
                # stage 0 takes microbatch t mod M: fresh in the first pass, from the ring after it
                mb = jnp.mod(t, m)
                fresh = jnp.where(t < m, jax.lax.dynamic_index_in_dim(mbs, mb, 0, keepdims=False),
                                  jax.lax.dynamic_index_in_dim(back, mb, 0, keepdims=False))
            h = _make(jnp.where(stage == 0, fresh, state), names).shard()
            out = align(stage_fn(h, run_of(t)), names)
            # the last stage finished microbatch t - (S - 1) - (R - 1) M of its last pass: keep it
            done = t - (stages - 1) - (repeats - 1) * m
            slot = jnp.clip(done, 0, m - 1)
            old = jax.lax.dynamic_index_in_dim(outs, slot, 0, keepdims=False)
            new = jnp.where(last & (done >= 0), out, old)
            outs = jax.lax.dynamic_update_index_in_dim(outs, new, slot, 0)
            # hand each result to the next stage (the last one's goes round to stage 0: its next pass, or
            # ignored in the last one)
            state = jax.lax.ppermute(out, stage_axes, [(s, (s + 1) % stages) for s in range(stages)])
            return (state, outs, back), None

        if remat is True:
            step = jax.checkpoint(step, prevent_cse=False)
        elif remat:
            step = jax.checkpoint(step, prevent_cse=False, policy=remat)
        # every stage starts from a real microbatch rather than zeros, so that a layer that is not finite
        # at zero (a norm without epsilon) puts no NaN into the gradient through the steps it idles
        # (the ring's store, `back`, starts as the microbatches themselves, for the same reason)
        back = mbs if repeats > 1 else jnp.zeros((), mbs.dtype)
        init = jax.lax.pcast((mbs[0], jnp.zeros_like(mbs), back), stage_axes, to="varying")
        (_, outs, _), _ = jax.lax.scan(step, init, jnp.arange(repeats * m + stages - 1))
        # only the last stage holds the results: one all-reduce gives them to every stage
        outs = jax.lax.psum(jnp.where(last, outs, jnp.zeros_like(outs)), stage_axes)
        return _make(_joined(outs, x, name), names)

    def traced(params, x):
        mesh = placement.current_mesh()
        # the parameters laid out by the rules (a no-op under nx.jit, which placed them so already):
        # shard_map wants exactly its in_specs on Explicit mesh axes
        params = shard(params)
        if repeats > 1:
            # the circular layout: layer l to stage (l // (L / (S R))) % S, so each stage holds R runs
            params = jax.tree.map(lambda v: _circular(v, axis, stages, repeats), params, is_leaf=is_named)
        split = {axis: stage_axes}
        sizes: dict[str, int] = {}
        for v in jax.tree.leaves((params, x), is_leaf=is_named):
            if type(v) is NamedArray:
                sizes.update(named_sizes(v))

        def spec(v):  # the spec of the leaf jax.shard_map sees: the storage in canonical order
            if type(v) is not NamedArray:
                return PartitionSpec()
            return placement.storage_spec(v.data.ndim, canonical(v.names), split.get)

        def inside(params, x):
            with _env.bind_blocks(sizes, split, mesh=_body_mesh(mesh), where=_WHERE):
                return body(params, x)

        run = jax.shard_map(inside, mesh=mesh, in_specs=(jax.tree.map(spec, params, is_leaf=is_named),
                                                         PartitionSpec()),
                            out_specs=PartitionSpec(), axis_names=frozenset(stage_axes), check_vma=True)
        return run(params, x)

    jitted = jax.jit(traced)  # one compilation per signature, rules and mesh (all in jax.jit's cache key)

    def call(params, x):
        with _env.synced():
            return jitted(params, x)

    return call


def _circular(v: Any, axis: str, stages: int, repeats: int) -> Any:
    """``v``'s layers reordered so that splitting ``axis`` into ``S`` equal blocks gives stage ``s`` the runs
    ``s, s + S, ..., s + (R - 1) S`` of ``L / (S R)`` layers, in that order: run ``j`` of ``S R`` moves from
    position ``j`` to ``(j % S) R + j // S``. (With the layers split into contiguous blocks by the rules, this
    moves each run to its stage once per call, and the transpose moves the gradients back.)"""
    if type(v) is not NamedArray or axis not in v.names:
        return v
    d = v.data
    k = pos_ndim(v) + v.names.index(axis)
    n = d.shape[k]
    d = d.reshape(d.shape[:k] + (repeats, stages, n // (stages * repeats)) + d.shape[k + 1:])
    d = jnp.swapaxes(d, k, k + 1).reshape(d.shape[:k] + (n,) + d.shape[k + 3:])
    return _make(d, v.names)


def _chunk(v: Any, axis: str, k: Any, repeats: int) -> Any:
    """Run ``k`` of the ``repeats`` runs of layers a stage holds along ``axis`` (a dynamic slice)."""
    if type(v) is not NamedArray or axis not in v.names:
        return v
    d = v.data
    i = pos_ndim(v) + v.names.index(axis)
    size = d.shape[i] // repeats
    return _make(jax.lax.dynamic_slice_in_dim(d, k * size, size, i), v.names)


def _fit(out: Any, like: NamedArray, what: str) -> NamedArray:
    """``out`` laid out as ``like``, or a :class:`CarryError` saying how it differs."""
    if type(out) is not NamedArray or set(out.names) != set(like.names) or out.shape != like.shape \
            or out.dtype != like.dtype:
        got = (f"names {fmt_names(out.names)}, positional shape {out.shape}, dtype {out.dtype}"
               if type(out) is NamedArray else f"a {type(out).__name__}")
        raise CarryError(
            f"{_WHERE}: {what} must return a value like the one it takes (names {fmt_names(like.names)}, "
            f"positional shape {like.shape}, dtype {like.dtype}), since one layer's output is the next one's "
            f"input; got {got}")
    return _make(align(out, like.names), like.names)


def _microbatches(x: NamedArray, name: str, m: int) -> Any:
    """``x``'s storage cut along ``name`` into ``m`` microbatches, stacked in front: microbatch ``j`` holds
    rows ``j, j + m, j + 2m, ...``, so a device holding a block of rows holds a block of every microbatch
    (cutting needs no communication)."""
    d = x.data
    k = pos_ndim(x) + x.names.index(name)
    size = d.shape[k]
    d = d.reshape(d.shape[:k] + (size // m, m) + d.shape[k + 1:])
    return jnp.moveaxis(d, k + 1, 0)


def _joined(outs: Any, x: NamedArray, name: str) -> Any:
    """The inverse of :func:`_microbatches`: the stacked microbatches put back in their rows."""
    k = pos_ndim(x) + x.names.index(name)
    d = jnp.moveaxis(outs, 0, k + 1)
    return d.reshape(d.shape[:k] + (d.shape[k] * d.shape[k + 1],) + d.shape[k + 2:])


# --------------------------------------------------------------------------------------------------------
# The picture


def bubble_fraction(stages: int, microbatches: int, repeats: int = 1) -> float:
    """The share of the schedule's steps a stage idles in: ``(S - 1) / (R M + S - 1)`` (GPipe's
    ``(S - 1) / (M + S - 1)`` when ``R = 1``).

    >>> bubble_fraction(4, 8), bubble_fraction(4, 8, repeats=2)
    (0.2727272727272727, 0.15789473684210525)
    """
    s, m = _positive(stages, "stages"), _positive(microbatches, "microbatches")
    r = _positive(repeats, "repeats")
    return (s - 1) / (r * m + s - 1)


def _positive(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise AxisSpecError(f"nx.visualize_pipeline: {what} must be a positive int, got {v!r}")
    return int(v)


class PipelinePicture:
    """What :func:`visualize_pipeline` returns: the table as text (``str``), and as HTML in notebooks."""

    def __init__(self, stages: int, microbatches: int, repeats: int = 1):
        self.stages, self.microbatches, self.repeats = stages, microbatches, repeats
        steps = repeats * microbatches + stages - 1
        # cell (stage, step): the microbatch the stage works on (with its pass round the ring, a letter, when
        # there are several), or None where it idles
        self.cells = [[self._label(t - s) if 0 <= t - s < repeats * microbatches else None
                       for t in range(steps)] for s in range(stages)]

    def _label(self, i: int) -> str:
        m = str(i % self.microbatches)
        return m if self.repeats == 1 else m + _pass_letter(i // self.microbatches)

    def __str__(self) -> str:
        s, m, r = self.stages, self.microbatches, self.repeats
        steps = r * m + s - 1
        width = max(max((len(c) for row in self.cells for c in row if c is not None), default=1),
                    len(str(steps - 1)), 1)
        label = max(len(f"stage {s - 1}"), len("step"))
        rows = ["step".ljust(label) + " | " + " ".join(str(t).rjust(width) for t in range(steps))]
        rows.append("-" * len(rows[0]))
        for i, row in enumerate(self.cells):
            rows.append(f"stage {i}".ljust(label) + " | "
                        + " ".join(("." if c is None else str(c)).rjust(width) for c in row))
        idle = bubble_fraction(s, m, r)
        passes = "" if r == 1 else (f", {r} passes round the ring "
                                    f"({', '.join(_pass_letter(k) for k in range(r))})")
        rows.append(f"{s} stages, {m} microbatches{passes}, {steps} steps: {s - 1} idle (.) per stage, "
                    f"{idle:.1%}")
        return "\n".join(rows)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        steps = self.repeats * self.microbatches + self.stages - 1
        head = "".join(f"<th>{t}</th>" for t in range(steps))
        body = "".join(
            f"<tr><th>stage {i}</th>" + "".join(
                "<td style='color:#999'>.</td>" if c is None else f"<td>{c}</td>" for c in row) + "</tr>"
            for i, row in enumerate(self.cells))
        idle = bubble_fraction(self.stages, self.microbatches, self.repeats)
        return (f"<table><tr><th>step</th>{head}</tr>{body}</table>"
                f"<p>idle fraction (S - 1) / (R M + S - 1) = {idle:.1%}</p>")


def _pass_letter(k: int) -> str:
    """The letter of pass ``k`` round the ring: a, b, ..., z, then a26, a27, ..."""
    return chr(ord("a") + k) if k < 26 else f"a{k}"


def visualize_pipeline(stages: int, microbatches: int, repeats: int = 1) -> PipelinePicture:
    """Which microbatch each stage works on at each step of ``nx.pipeline``'s schedule (GPipe; circular with
    ``repeats=R``, each cell's letter saying which pass round the ring), and the fraction of steps a stage
    idles in.

    >>> import namedarray as nx
    >>> print(nx.visualize_pipeline(3, 4))
    step    | 0 1 2 3 4 5
    ---------------------
    stage 0 | 0 1 2 3 . .
    stage 1 | . 0 1 2 3 .
    stage 2 | . . 0 1 2 3
    3 stages, 4 microbatches, 6 steps: 2 idle (.) per stage, 33.3%
    >>> print(nx.visualize_pipeline(2, 2, repeats=2))
    step    |  0  1  2  3  4
    ------------------------
    stage 0 | 0a 1a 0b 1b  .
    stage 1 |  . 0a 1a 0b 1b
    2 stages, 2 microbatches, 2 passes round the ring (a, b), 5 steps: 1 idle (.) per stage, 20.0%
    """
    return PipelinePicture(_positive(stages, "stages"), _positive(microbatches, "microbatches"),
                           _positive(repeats, "repeats"))
