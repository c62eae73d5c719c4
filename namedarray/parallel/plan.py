"""``nx.plan_sharding``: compile a step under each parallel strategy and say which fits.

With named axes a parallel strategy is one small mapping, ``{"batch": "data", "heads": "model"}``, so the
strategies can be listed, compiled and compared for the user. :func:`plan_sharding` takes a step (a
function of NamedArray pytrees: a training step, a forward pass), its arguments (concrete, or abstract from
``jax.eval_shape``), and a mesh; for each candidate mapping it compiles the step ahead of time exactly as
``nx.jit(step)`` under ``nx.axis_rules(candidate)`` would (arguments laid out by their names on entry,
results by the rules), reads what XLA reports, and returns a :class:`Plan`: one :class:`PlanRow` per
candidate, best first. Nothing runs unless ``measure=True``.

What a row records, per device:

* ``argument_bytes``, ``output_bytes``, ``temp_bytes``: ``compiled.memory_analysis()``; the row's
  ``memory_bytes`` is their sum less the bytes outputs share with donated arguments (``alias``), the
  figure ``memory_limit`` is compared with;
* ``collective_bytes``: kind -> bytes, read from the optimised HLO (``compiled.as_text()``) by
  :func:`hlo_collectives`. The size counted is the collective's *result* shape (all of its buffers for a
  tuple-shaped one), once per execution: an asynchronous pair (``all-gather-start`` / ``-done``) counts once,
  at its ``-done``, and a collective inside a loop body counts once per iteration where XLA knows the trip
  count (``known_trip_count``, which ``scan`` and ``fori_loop`` give), else once;
* ``flops``: ``compiled.cost_analysis()["flops"]`` where the backend gives it (None otherwise);
* ``compile_s``: the seconds lowering and compiling took; ``time_s``: with ``measure=True``, the median
  of a few calls after one warm-up call, in rounds that call every candidate once.

**Enumeration** (``candidates=None``). The names are those of the arguments' NamedArrays; the mesh axis
groups are every non-empty set of mesh axes of size above 1, written in the mesh's order (major to minor; a
permuted tuple splits a value into the same blocks, only on other devices). A candidate maps each name to
nothing or to one group such that sizes are divisible (each name's size by its group's device count). Rules
are *ranked* (``nx.axis_rules``' rank rule): a value carrying two names of one mesh axis splits by the first,
the other staying whole, so the order of names that share a mesh axis is part of a strategy
(``{"batch": "data", "embed": "data"}`` is FSDP: activations split by batch, parameters by embed; the reverse
is another strategy). On an Auto mesh axis names that occur together may share it; on an Explicit one they
may not (there every value's layout is part of its type, and jax rejects an operation whose result would
split two of its axes over one mesh axis), where names occur together when one value of one abstract trace
of the step carries both (an argument, a value it lays out, an intermediate). Two mappings that lay out every
value of that trace alike (the same mesh axes for each name of each value) are one strategy, listed once.
The names are ranked by how batch-like they are: carried by many of the values the step makes and by little
of its arguments (the parameters and optimizer state).

**Pruning bound**: at most ``max_candidates`` (default :data:`MAX_CANDIDATES`, 50) candidates are
compiled, in this order: the replicated mapping ``{}`` (the baseline every strategy is measured against);
the strategies users write first, interleaved so that a small bound keeps some of each (``_templates``: data
parallel over the whole mesh and each mesh axis, data x tensor parallel, FSDP, FSDP x tensor parallel,
sequence splits, built from which names share values, how many bytes each name is in and how batch-like it
is, never from what names are called); each name alone over the whole mesh; then the other mappings holding
the fewest bytes per device by a static estimate (the arguments and every laid-out value of the trace, each
divided by the device count its ranked names split it over), each in rank order and, where names share a
mesh axis, reversed. What is dropped: mappings past the bound, orders of three or more names sharing a mesh
axis other than those two, and anything past :data:`MAX_VISITED` legal mappings. The estimate only
chooses what is compiled; the ranking below uses what XLA reports.

**Compiling** costs most of a plan. Each candidate is traced and lowered on the calling thread (the rules
are per thread), and compiled in threads, one per core (at least two); candidates that lower to the same
program compile once. On the CPU backend a candidate is compiled *for reading* (``_FAST_OPTIONS``: machine
code generated at ``-O0`` without LLVM's expensive passes, about half of a full compile): what a row reads
is fixed before code generation, and is the full compile's to the byte (tested). What runs (``measure=True``,
:meth:`Plan.verify`) is compiled again in full. Nothing is shared between candidates' compiles beyond that:
the SPMD partitioner's output, a scanned body's included, depends on the rules. A candidate of a 4-layer
scanned Llama's adam step costs about 0.4 CPU seconds to lower and 2.2 to compile so, against 3.7 to 4.2 for
the full compile (benchmarks/plan.py): the default bound, about 130 CPU seconds, a minute or so on two idle
cores.

**Ranking**: a row is rejected (``ok=False``, ``reason`` says why, starting with one of ``indivisible``,
``conflicting``, ``failed to compile``, ``over memory_limit``) when its layout is illegal for the
arguments, when tracing or compiling fails, or when ``memory_bytes`` exceeds ``memory_limit``. The
accepted rows are ordered by measured ``time_s`` when ``measure=True``, else by ``cost`` from the
:class:`CostModel`: ``flops / flops_per_s + bytes_accessed / memory_bytes_per_s + sum(weight[kind] *
bytes[kind]) / bytes_per_s``, per device, with weight 2 for an all-reduce (a ring all-reduce moves its
buffer twice: a reduce-scatter and an all-gather), 1 for the other kinds. Given no model, the three rates
are measured on the mesh's devices, all busy at once (:meth:`CostModel.calibrated`, about a second, once
per device set; a collective inside a step is charged a quarter of what a one-collective program takes,
a fitted figure, ``_LATENCY_IN_STEP``): that is what makes a replicated step, where every device does all
the work, cost what it costs on the machine at hand. Where the model cannot be trusted: it adds compute,
memory traffic and collectives as if none overlapped, counts a collective in a loop once per iteration
only where XLA knows the trip count, and knows nothing of fusion quality or of a scheduler's idle time;
rows within 1.5x of the best cost are marked ``verify`` in the table, and :meth:`Plan.verify` measures the
top rows. Pass ``cost_model=CostModel(...)`` to set the rates. Ties go to fewer
bytes per device, then fewer mapped names, then the sorted text of the rules; rejected rows follow in the
order they were given. The order is a function of the candidates and what XLA reports, so every process
of a multi-process job computes the same plan without asking the others. Measuring is a job-wide call
(``parallel/agree.py``): the processes meet by a fingerprint of what they plan, never by how many plans
each made, so a process planning another step is an error on both at once, not a wait or another step's
ranking; the candidates are then timed in interleaved rounds, and the first process's order is the job's
(measured times differ between processes). :meth:`Plan.rerank` ranks the same rows again under another
memory limit or cost model without compiling anything.

Each candidate is compiled under exactly its rules (``nx.axis_rules`` blocks around the call do not add
to them), so a row's ``rules`` are all a user passes to ``nx.axis_rules`` to get its numbers. The step's
arguments are its dynamic ones: close over static values (a config) with ``functools.partial``.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
>>> x = nx.wrap(jnp.ones((8, 4)), ["batch", "embed"])
>>> plan = nx.plan_sharding(lambda x: (x * 2).sum("embed"), x, mesh=mesh, candidates=[{}, {"batch": "data"}])
>>> [row.ok for row in plan.rows], plan.best
([True, True], {})
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import heapq
import html
import itertools
import json
import math
import os
import re
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import keystr

from ..core import caches, context, placement
from ..core import env as _env
from ..core.array import is_named
from ..core.layout import named_sizes
from ..core.orders import job_client
from ..errors import (
    AxisSpecError,
    DivisibilityError,
    MissingResourceError,
    NamedAxisError,
    ResourceConflictError,
    wrong_type,
)
from . import agree, distribute

__all__ = ["plan_sharding", "Plan", "PlanRow", "CostModel", "candidate_rules", "hlo_collectives",
           "KINDS", "MAX_CANDIDATES", "MAX_VISITED"]

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
MAX_CANDIDATES = 50
MAX_VISITED = 100_000
_WHERE = "nx.plan_sharding"


# --------------------------------------------------------------------------------------------------------
# Reading collectives from the optimised HLO

_DTYPE_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2,
                "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8,
                "c64": 8, "c128": 16}
_SHAPE = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]m[0-9][a-z]*)?)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_OP = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+(" + "|".join(map(re.escape, KINDS))
                 + r")(-start|-done)?\(")
_CALLS = re.compile(r"\b(?:body|condition|to_apply|calls|branch_computations|true_computation|"
                    r"false_computation)=\{?(%[\w.\-]+(?:,\s*%[\w.\-]+)*)\}?")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _shape_bytes(text: str) -> int:
    """Bytes of an HLO shape (a tuple's elements summed); layouts (``{1,0}``) are ignored."""
    total = 0
    for dtype, dims in _SHAPE.findall(text):
        if dtype not in _DTYPE_BYTES:
            continue
        total += _DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return total


def _groups(line: str) -> list[list[int]] | None:
    """The device groups of a collective (partition ids), from any of XLA's replica group spellings, or
    None when the line has none this reader understands."""
    m = re.search(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", line)
    if m:
        return [[int(a), int(b)] for a, b in re.findall(r"\{(\d+),(\d+)\}", m.group(1))]
    m = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}", line)
    if m:
        return [[int(v) for v in g.split(",") if v] for g in re.findall(r"\{([\d,]*)\}", m.group(1))]
    m = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
    if m:
        shape = [int(v) for v in m.group(1).split(",")]
        dims = [int(v) for v in m.group(2).split(",")]
        ids = np.arange(math.prod(dims)).reshape(dims)
        if m.group(3):
            ids = ids.transpose([int(v) for v in m.group(3).split(",")])
        return ids.reshape(shape).tolist()
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if m:
        axes = re.findall(r"'([^']+)'=(\d+)", m.group(1))
        over = re.findall(r"'([^']+)'", m.group(2))
        if not axes or any(":" in o or o not in dict(axes) for o in over) or "(" in m.group(2):
            return None
        names, dims = [a for a, _ in axes], [int(s) for _, s in axes]
        ids = np.arange(math.prod(dims)).reshape(dims)
        inner = [names.index(o) for o in over]
        outer = [i for i in range(len(names)) if i not in inner]
        ids = ids.transpose(outer + inner)
        return ids.reshape(-1, math.prod(dims[i] for i in inner)).tolist()
    return None


def hlo_collectives(text: str) -> list[tuple[str, int, list[list[int]] | None]]:
    """Every collective one execution of an optimised HLO module runs: ``(kind, result bytes, device groups)``.

    ``kind`` is one of :data:`KINDS`; an asynchronous pair counts once, at its ``-done`` (whose shape is the
    result); a collective in a ``while`` body counts ``known_trip_count`` times (once where XLA does not
    know the count); the groups are partition ids (None where the line does not say them in a known form).

    >>> hlo = '''
    ... %body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
    ...   %ar = f32[8]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1},{2,3}}, to_apply=%add
    ... }
    ... ENTRY %main (a: f32[4,8]) -> f32[16,8] {
    ...   %ags = (f32[4,8]{1,0}, f32[16,8]{1,0}) all-gather-start(%a), replica_groups=[1,4]<=[4], dimensions={0}
    ...   %agd = f32[16,8]{1,0} all-gather-done(%ags)
    ...   %w = (s32[], f32[8]) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
    ... }
    ... '''
    >>> [(kind, size, groups) for kind, size, groups in hlo_collectives(hlo)]
    [('all-gather', 512, [[0, 1, 2, 3]]), ('all-reduce', 32, [[0, 1], [2, 3]]), ('all-reduce', 32, [[0, 1], [2, 3]]), ('all-reduce', 32, [[0, 1], [2, 3]])]
    """  # noqa: E501
    own: dict[str, list] = {}
    calls: dict[str, list[tuple[str, int]]] = {}
    starts: dict[str, list[list[int]] | None] = {}
    entry, current = None, None
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head:
            current = head.group(1)
            own.setdefault(current, [])
            calls.setdefault(current, [])
            if line.startswith("ENTRY"):
                entry = current
            continue
        if current is None:
            continue
        op = _OP.match(line)
        if op:
            shape, kind, phase = op.groups()
            if phase == "-start":
                name = line.split("=", 1)[0].strip().removeprefix("ROOT").strip().lstrip("%")
                starts[name] = _groups(line)
            elif phase == "-done":
                operand = re.search(r"-done\(\s*%?([\w.\-]+)", line)
                groups = starts.get(operand.group(1)) if operand else None
                own[current].append((kind, _shape_bytes(shape), groups))
            else:
                own[current].append((kind, _shape_bytes(shape), _groups(line)))
        if re.search(r"\basync-(?:done|update)\(", line):
            continue  # the wrapped computation runs once, and its async-start names it already
        trips = _TRIPS.search(line)
        for m in _CALLS.finditer(line):
            times = int(trips.group(1)) if trips and m.group(0).startswith("body") else 1
            for callee in m.group(1).split(","):
                calls[current].append((callee.strip().lstrip("%"), times))
    if entry is None:  # a fragment: every computation once
        return [c for name in own for c in own[name]]
    out: list = []

    def walk(name: str, times: int, depth: int) -> None:
        if depth > 64:
            return
        out.extend(c for c in own.get(name, ()) for _ in range(times))
        for callee, n in calls.get(name, ()):
            walk(callee, times * n, depth + 1)

    walk(entry, 1, 0)
    return out


def _crossed(groups: list[list[int]] | None, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]
             ) -> tuple[str, ...] | None:
    """The mesh axes along which the devices of one group differ (None: groups unknown)."""
    if groups is None:
        return None
    n = math.prod(mesh_shape)
    crossed = set()
    for g in groups:
        if any(d >= n for d in g):
            return None
        coords = [np.unravel_index(d, mesh_shape) for d in g]
        for i, a in enumerate(axis_names):
            if len({c[i] for c in coords}) > 1:
                crossed.add(a)
    return tuple(a for a in axis_names if a in crossed)


# --------------------------------------------------------------------------------------------------------
# Rows, the cost model, the plan


@dataclasses.dataclass(frozen=True)
class CostModel:
    """The cost of an accepted row, in model seconds (lower is better): per-device compute, memory traffic
    and collective traffic, ``flops / flops_per_s + bytes_accessed / memory_bytes_per_s +
    sum(weights[kind] * collective_bytes[kind]) / bytes_per_s``. A row without FLOPs (or bytes accessed)
    counts none of it.

    The defaults are an accelerator's round figures. :meth:`calibrated` measures the rates (and the time of
    one small collective, ``latency_s``, added per collective operation) on the
    devices of a mesh, all of them busy at once, which is what ``nx.plan_sharding`` uses when given no
    model: on simulated CPU devices that share a few cores, compute costs thousands of times what the
    round figures say, and a model that ignores it ranks a replicated step (every device does all the
    work) first.

    >>> CostModel()(flops=1e14, collective_bytes={"all-reduce": 10**11, "all-gather": 10**11})
    4.0
    """

    flops_per_s: float = 1e14
    bytes_per_s: float = 1e11
    weights: Mapping[str, float] = dataclasses.field(default_factory=lambda: {
        "all-reduce": 2.0, "all-gather": 1.0, "reduce-scatter": 1.0, "all-to-all": 1.0,
        "collective-permute": 1.0})
    memory_bytes_per_s: float = 2e12
    latency_s: float = 0.0  # per collective operation, whatever its size

    def __call__(self, *, flops: float | None, collective_bytes: Mapping[str, int],
                 bytes_accessed: float | None = None, collective_count: int = 0) -> float:
        moved = sum(self.weights.get(k, 1.0) * b for k, b in collective_bytes.items())
        return ((flops or 0.0) / self.flops_per_s + (bytes_accessed or 0.0) / self.memory_bytes_per_s
                + moved / self.bytes_per_s + collective_count * self.latency_s)

    @classmethod
    def calibrated(cls, mesh: Any) -> CostModel:
        """The rates measured on ``mesh``'s devices of this process, every device busy at once (a batched
        matmul, an elementwise pass over 4 MiB per device, an all-reduce of 1 MiB): medians of a few calls,
        about a second the first time, then kept per platform, device kind and device count. In a job of
        several processes the first process's figures are the job's, so every process ranks alike.

        >>> import jax
        >>> model = CostModel.calibrated(jax.make_mesh((1,), ("data",)))
        >>> model.flops_per_s > 0 and model.bytes_per_s > 0 and model.memory_bytes_per_s > 0
        True
        """
        # this process's devices of the mesh only: the figures are per device, and a measurement that
        # spanned processes would be a collective program every process must run at once
        here = jax.process_index()
        local = [d for d in np.asarray(mesh.devices).flat if d.process_index == here]
        if not local:
            return cls()
        key = (local[0].platform, local[0].device_kind, len(local))
        got = _CALIBRATED.get(key)
        if got is None:
            got = _job_calibration(key, lambda: _calibrate(np.array(local, dtype=object)))
            _CALIBRATED.put(key, got)
        return cls(flops_per_s=got[0], memory_bytes_per_s=got[1], bytes_per_s=got[2],
                   latency_s=got[3] * _LATENCY_IN_STEP)


# What one collective costs inside a step, as a fraction of a one-collective program's time less an empty
# one's (what calibration measures: it includes bringing every device's thread to the meeting, which a
# step running already pays far less often). Fitted, not derived: on 7 measured plans of the GPT and the
# Llama on (8,) and (4, 2) (benchmarks/plan.py), the whole time ranked FSDP's rows (40 to 50 collectives)
# last though they ran as fast as data parallelism (Kendall tau 0.05 on the Llama); a quarter gave tau
# 0.53 to 0.80 and the same choices.
_LATENCY_IN_STEP = 0.25


_CALIBRATED: caches.LRU[tuple, tuple[float, ...]] = caches.LRU("plan cost calibrations", 16)


def _timed_together(cases: Mapping[str, tuple[Callable, Any]], rounds: int = 15) -> dict[str, float]:
    """Median seconds of each ``f(arg)``, in rounds that call every case once. A ranking depends on the
    rates' ratios only: timed one after the other, a machine whose load changed in between gave the plan
    a memory rate 6x off its compute rate from one plan to the next (simulated devices on a shared host);
    interleaved, a change weighs on every rate alike."""
    for f, arg in cases.values():
        jax.block_until_ready(f(arg))
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for k, (f, arg) in cases.items():
            t = time.perf_counter()
            jax.block_until_ready(f(arg))
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def _calibrate(devices: np.ndarray) -> tuple[float, ...]:
    """(flops/s, memory bytes/s, collective bytes/s, seconds per collective) per device, measured with
    every device of ``devices`` busy; the time of an empty call of the same kind is taken off each."""
    mesh = jax.sharding.Mesh(devices, ("all",), axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.set_mesh(mesh):  # whatever mesh the caller is in: these programs run on this one
        return _calibrate_on(mesh, len(devices))


def _calibrate_on(mesh: Any, n: int) -> tuple[float, ...]:
    split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("all"))
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    tiny = jax.device_put(np.zeros((n, 8), np.float32), split)
    k = 256
    cases = {
        "empty": (jax.jit(lambda a: a + 1, out_shardings=split), tiny),
        "matmul": (jax.jit(lambda a: jnp.einsum("bij,bjk->bik", a, a), out_shardings=split),
                   jax.device_put(np.ones((n, k, k), np.float32), split)),
        "stream": (jax.jit(lambda a: a * 2 + 1, out_shardings=split),
                   jax.device_put(np.ones((n, 1 << 20), np.float32), split)),
    }
    if n > 1:
        total = jax.jit(lambda a: a.sum(0), out_shardings=whole)
        cases["tiny all-reduce"] = (total, tiny)
        cases["all-reduce"] = (total, jax.device_put(np.ones((n, 1 << 18), np.float32), split))
    t = _timed_together(cases)
    flops = 2 * k ** 3 / max(t["matmul"] - t["empty"], 1e-6)
    memory = 2 * 4 * (1 << 20) / max(t["stream"] - t["empty"], 1e-6)
    if n > 1:
        latency = max(t["tiny all-reduce"] - t["empty"], 0.0)
        collective = 4 * (1 << 18) / max(t["all-reduce"] - t["empty"] - latency, 1e-6)
    else:
        collective, latency = memory, 0.0
    return float(flops), float(memory), float(collective), float(latency)


def _job_calibration(key: tuple, measure: Callable[[], tuple[float, ...]]) -> tuple[float, ...]:
    """The figures the first process of a job measured for ``key`` (this process's own outside a job)."""
    client = job_client()
    if client is None:
        return measure()
    name = "namedarray/calibration/" + hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    try:
        return tuple(json.loads(client.key_value_try_get(name)))
    except Exception:  # noqa: BLE001 - none yet (the runtime's not-found error)
        pass
    got = measure()
    try:
        client.key_value_set(name, json.dumps(got))
        return got
    except Exception:  # noqa: BLE001 - another process was first: its figures are the job's
        return tuple(json.loads(client.blocking_key_value_get(name, 30_000)))


@dataclasses.dataclass(frozen=True)
class PlanRow:
    """One candidate of a :class:`Plan`: its rules and what compiling the step under them gave.

    Bytes are per device; ``collective_bytes`` maps each kind of :data:`KINDS` to the bytes of its
    results per execution of the step; ``cost`` is the :class:`CostModel`'s (``inf`` for a step that did
    not compile); ``time_s`` is the measured median, None unless ``measure=True``.

    >>> row = PlanRow(rules={}, ok=True, reason=None, argument_bytes=64, output_bytes=32, temp_bytes=0,
    ...               collective_bytes={}, flops=16.0, cost=1.6e-13, compile_s=0.1, time_s=None)
    >>> row.memory_bytes
    96
    """

    rules: dict[str, Any]
    ok: bool
    reason: str | None
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    collective_bytes: dict[str, int]
    flops: float | None
    cost: float
    compile_s: float
    time_s: float | None
    alias_bytes: int = 0
    bytes_accessed: float | None = None  # XLA's memory traffic per device, where the backend reports it
    # (kind, the mesh axes its device groups cross (None: unknown), bytes): what explain() reports
    collectives: tuple[tuple[str, tuple[str, ...] | None, int], ...] = dataclasses.field(default=(),
                                                                                           repr=False)

    @property
    def memory_bytes(self) -> int:
        """Arguments, outputs and temporaries per device, less what outputs share with donated arguments."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes


def _fmt_rules(rules: Mapping[str, Any]) -> str:
    if not rules:
        return "{} (replicated)"
    return ", ".join(f"{n}->{'x'.join(v) if isinstance(v, tuple) else v}" for n, v in rules.items())


def _mib(n: int) -> str:
    return f"{n / 2**20:.3f}"


def _fmt_coll(c: Mapping[str, int]) -> str:
    short = {"all-reduce": "AR", "all-gather": "AG", "reduce-scatter": "RS", "all-to-all": "A2A",
             "collective-permute": "CP"}
    parts = [f"{short[k]} {_human(v)}" for k, v in c.items() if v]
    return ", ".join(parts) or "none"


def _human(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


class Plan:
    """What :func:`plan_sharding` found: ``rows`` best first, ``best`` the rules to use.

    ``plan.rows`` are :class:`PlanRow`\\ s; ``plan.best`` is the rules of the first accepted row (None when
    every candidate was rejected), ready for ``nx.axis_rules``; ``plan.row(rules)`` finds a row;
    ``plan.explain(rules)`` names the collectives a strategy adds and the names that cause them. The text
    repr is a table, and notebooks show an HTML table.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> plan = nx.plan_sharding(lambda x: x + 1, nx.wrap(jnp.ones(4), ["batch"]), mesh=mesh,
    ...                         candidates=[{"batch": "data"}])
    >>> len(plan), plan.rows[0].collective_bytes["all-reduce"]
    (1, 0)
    """

    def __init__(self, rows: Sequence[PlanRow], mesh: Any, cost_model: CostModel, measured: bool,
                 memory_limit: int | None, source: Any = None):
        self.rows: tuple[PlanRow, ...] = tuple(rows)
        self.mesh = mesh
        self.cost_model = cost_model
        self.measured = measured
        self.memory_limit = memory_limit
        # (arguments, keyword arguments, {rules key: (jitted step, compiled program)}): what verify() runs
        self._source = source

    def verify(self, k: int = 3) -> Plan:
        """The plan with its ``k`` best accepted rows measured and ranked by time: each row's compiled
        program called on the plan's arguments (abstract ones filled with zeros) in interleaved rounds, one
        call of every row per round, the median of each. ``best`` is then the fastest of those ``k``; the
        other rows follow in the model's order, unmeasured. In a job every process must call it alike (the
        processes meet, as a measured plan does).

        >>> import jax, jax.numpy as jnp, namedarray as nx
        >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
        >>> plan = nx.plan_sharding(lambda x: x * 2, nx.wrap(jnp.ones(4), ["batch"]), mesh=mesh,
        ...                         candidates=[{}, {"batch": "data"}])
        >>> checked = plan.verify(1)
        >>> checked.rows[0].time_s is not None, checked.rows[1].time_s is None
        (True, True)
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise wrong_type("Plan.verify", "k", k, "a positive int: how many of the best rows to measure")
        if self._source is None:
            raise AxisSpecError("Plan.verify: this plan holds no compiled programs (a plan from rerank of a "
                                "plan without them); plan again with nx.plan_sharding")
        args, kwargs, programs = self._source
        accepted = [r for r in self.rows if r.ok and _key(r.rules) in programs]
        top = accepted[:k]
        what = f"Plan.verify of the {len(top)} best of {len(self.rows)} candidates"
        with agree.Call("Plan.verify") as call:
            call.meet(_fingerprint(list(self.rows), True, self.memory_limit, self.cost_model) + f"/verify{k}",
                      what)
            timed = _measured(top, {i: programs[_key(r.rules)] for i, r in enumerate(top)}, args, kwargs,
                              self.mesh)
            timed = sorted(timed, key=lambda r: (r.time_s, r.cost))
            timed = _agree_on_times(call, timed, what)
        chosen = {json.dumps(_key(r.rules)) for r in timed}
        rest = [r for r in self.rows if json.dumps(_key(r.rules)) not in chosen]
        return Plan(timed + rest, self.mesh, self.cost_model, True, self.memory_limit, self._source)

    @property
    def best(self) -> dict[str, Any] | None:
        """The rules of the first accepted row (None when every candidate was rejected)."""
        for row in self.rows:
            if row.ok:
                return dict(row.rules)
        return None

    def rerank(self, *, memory_limit: int | None = None, cost_model: CostModel | None = None) -> Plan:
        """The same rows ranked again under another ``memory_limit`` and/or ``cost_model``, without
        compiling anything: rows rejected for memory before are reconsidered, the others keep their reason.

        >>> import jax, jax.numpy as jnp, namedarray as nx
        >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
        >>> plan = nx.plan_sharding(lambda x: x * 2, nx.wrap(jnp.ones(4), ["batch"]), mesh=mesh,
        ...                         candidates=[{}])
        >>> plan.rerank(memory_limit=1).rows[0].reason.split(":")[0]
        'over memory_limit'
        """
        cost_model = self.cost_model if cost_model is None else cost_model
        rows = []
        for r in self.rows:
            if r.reason is not None and not r.reason.startswith("over memory_limit"):
                rows.append(r)
                continue
            r = dataclasses.replace(r, ok=True, reason=None,
                                    cost=_cost(cost_model, r.flops, r.collective_bytes, r.bytes_accessed,
                                               len(r.collectives)))
            rows.append(_limited(r, memory_limit))
        return Plan(_order(rows, self.measured), self.mesh, cost_model, self.measured, memory_limit,
                    self._source)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[PlanRow]:
        return iter(self.rows)

    def row(self, rules: Mapping[str, Any]) -> PlanRow:
        """The row of ``rules`` (compared as mappings to mesh axes: ``"x"`` equals ``("x",)``, ``None``
        equals leaving the name out)."""
        key = _key(rules)
        for row in self.rows:
            if _key(row.rules) == key:
                return row
        raise AxisSpecError(f"Plan.row: no candidate has the rules {dict(rules)!r}; the candidates are "
                            + "; ".join(repr(r.rules) for r in self.rows))

    def explain(self, rules: Mapping[str, Any] | None = None) -> str:
        """The collectives a strategy adds, by kind, with their bytes, the mesh axes their device groups
        cross and the names the rules put on those mesh axes (default: the best rules).

        A collective crossing a mesh axis is there because some value is split over it: the names listed
        are the ones these rules map to that mesh axis.
        """
        if rules is None:
            rules = self.best if self.best is not None else {}
        row = self.row(rules)
        mapping = placement.normalize(row.rules, "Plan.explain")
        lines = [f"rules {_fmt_rules(row.rules)}: "
                 + ("accepted" if row.ok else f"rejected ({row.reason})")]
        if not row.collectives:
            if row.reason and row.reason.startswith(("failed", "indivisible", "conflicting")):
                return lines[0]
            lines.append("  no collectives: every device computes its part without communicating")
            return "\n".join(lines)
        merged: dict[tuple[str, tuple[str, ...] | None], list[int]] = {}
        for kind, axes, nbytes in row.collectives:
            m = merged.setdefault((kind, axes), [0, 0])
            m[0] += nbytes
            m[1] += 1
        for (kind, axes), (nbytes, count) in sorted(merged.items(), key=lambda kv: (KINDS.index(kv[0][0]),
                                                                                     -kv[1][0])):
            if axes is None:
                where = "over device groups this reader could not map to mesh axes"
            elif not axes:
                where = "within single devices"
            else:
                names = sorted(n for n, m in mapping.items() if set(m) & set(axes))
                caused = f"names on them: {', '.join(names)}" if names else "no name of the rules maps there"
                where = f"across mesh axes {', '.join(axes)} ({caused})"
            lines.append(f"  {kind}: {_human(nbytes)} in {count} op{'s' if count > 1 else ''}, {where}")
        return "\n".join(lines)

    def _table(self) -> tuple[list[str], list[list[str]]]:
        head = ["rules", "ok", "arg MiB", "out MiB", "temp MiB", "collectives", "GFLOP", "cost",
                "compile s"] + (["time ms"] if self.measured else [])
        body = []
        costs = [r.cost for r in self.rows if r.ok and r.time_s is None]
        close = 1.5 * min(costs) if costs else -1.0  # within the model's error of the best: measure them

        def status(r: PlanRow) -> str:
            if not r.ok:
                return (r.reason or "").split(":")[0]
            return "ok (verify)" if r.time_s is None and r.cost <= close and len(costs) > 1 else "ok"

        for r in self.rows:
            body.append([_fmt_rules(r.rules), status(r),
                         _mib(r.argument_bytes), _mib(r.output_bytes), _mib(r.temp_bytes),
                         _fmt_coll(r.collective_bytes), "-" if r.flops is None else f"{r.flops / 1e9:.4f}",
                         f"{r.cost:.3g}", f"{r.compile_s:.2f}"]
                        + ([("-" if r.time_s is None else f"{r.time_s * 1e3:.3f}")] if self.measured else []))
        return head, body

    def __repr__(self) -> str:
        head, body = self._table()
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
        fmt = "  ".join(f"{{:<{w}}}" if i < 2 or i == 5 else f"{{:>{w}}}" for i, w in enumerate(widths))
        shape = ", ".join(f"{a}={s}" for a, s in placement.mesh_sizes(self.mesh).items())
        lines = [f"Plan: {len(self.rows)} candidates on mesh ({shape}); best {self.best}",
                 fmt.format(*head)] + [fmt.format(*b) for b in body]
        if any(b[1] == "ok (verify)" for b in body):
            lines.append("  verify: within 1.5x of the best cost, where the model cannot order rows (it adds "
                         "compute, memory traffic and collectives as if none overlapped, and prices every "
                         "collective alike); plan.verify(k) times the k best")
        rejected = [r for r in self.rows if not r.ok]
        lines += [f"  rejected {_fmt_rules(r.rules)}: {r.reason}" for r in rejected]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head, body = self._table()
        shape = ", ".join(f"{a}={s}" for a, s in placement.mesh_sizes(self.mesh).items())
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        rows = []
        for r, b in zip(self.rows, body):
            title = f' title="{html.escape(r.reason)}"' if r.reason else ""
            style = "" if r.ok else ' style="opacity:0.6"'
            rows.append(f"<tr{style}{title}>" + "".join(f"<td>{html.escape(c)}</td>" for c in b) + "</tr>")
        return (f'<div class="nx-plan"><p>Plan: {len(self.rows)} candidates on mesh ({html.escape(shape)}); '
                f"best <code>{html.escape(repr(self.best))}</code></p><table><thead><tr>{cells}</tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table></div>")


def _key(rules: Mapping[str, Any]) -> tuple:
    """Rules compared as strategies: the mesh axes of each name (``"x"`` equals ``("x",)``, ``None`` equals
    leaving the name out) and, for every two names whose mesh axes overlap, which is ranked first (under the
    rank rule of ``nx.axis_rules`` a value carrying both splits by the first): ``{"batch": "data", "embed":
    "data"}`` and ``{"embed": "data", "batch": "data"}`` are two strategies, while the order of names on
    disjoint mesh axes changes nothing."""
    mapping = {n: v for n, v in placement.normalize(rules, "Plan").items() if v}
    order = list(mapping)
    before = sorted((a, b) for i, a in enumerate(order) for b in order[i + 1:]
                    if set(mapping[a]) & set(mapping[b]))
    return tuple(sorted(mapping.items())), tuple(before)


# --------------------------------------------------------------------------------------------------------
# Enumeration


def _named_leaves(tree: Any) -> list[tuple[str, Any]]:
    out = []
    for path, v in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_named)[0]:
        if is_named(v):
            out.append((keystr(path), v))
    return out


def candidate_rules(step: Callable, *args: Any, mesh: Any = None, max_candidates: int = MAX_CANDIDATES,
                    **kwargs: Any) -> list[dict[str, Any]]:
    """The candidates :func:`plan_sharding` compiles when given none (see the module's enumeration rule and
    pruning bound): the replicated mapping first, then the strategies users write first, each name alone
    over the whole mesh, and the mappings with the fewest estimated bytes per device.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",))   # a mesh axis of size 1 splits nothing
    >>> candidate_rules(lambda x: x * 2, nx.wrap(jnp.ones((4, 3)), ["batch", "embed"]), mesh=mesh)
    [{}]
    """
    m = _resolve_mesh(mesh)
    msizes = placement.mesh_sizes(m)
    axes = [a for a in m.axis_names if msizes[a] > 1]
    leaves = _named_leaves((args, kwargs))
    names = sorted({n for _, v in leaves for n in v.names})
    # A rule no value uses makes the environment, which JAX's trace caches are keyed on, new: bodies that
    # JAX traced before (a scan's, a grad's) are traced again, so their layouts are seen.
    marker = {f"nx.plan_sharding trace {next(_TRACES)}": None}
    explicit = {a for a, t in zip(m.axis_names, m.axis_types) if t == jax.sharding.AxisType.Explicit}
    made: list[tuple[str, ...]] = []  # the names of every value the step makes, intermediates included
    with (jax.set_mesh(m), _env.exact_rules(marker), distribute.recording_layouts() as seen,
          context.hearing_made(lambda v: made.append(v.names))):
        try:
            jax.eval_shape(distribute.jit(step), *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the candidates are still those of the arguments
            if isinstance(e, NamedAxisError):
                raise
    values = [(frozenset(named_sizes(v)), v.nbytes) for _, v in leaves]
    values += [(frozenset(named_sizes(v)), v.nbytes) for v in seen]
    sizes: dict[str, set[int]] = {}
    for v in [v for _, v in leaves] + seen:
        for n, size in named_sizes(v).items():
            sizes.setdefault(n, set()).add(size)
    together: set[frozenset] = set()
    for carried, _ in values:
        together.update(frozenset(p) for p in itertools.combinations(sorted(carried), 2))
    # On an Explicit mesh axis every value's layout is its type: two names of any value of the step, an
    # intermediate too, cannot share the axis (jax rejects the operation that makes it)
    within: set[frozenset] = set(together)
    if explicit:
        for carried in set(made):
            within.update(frozenset(p) for p in itertools.combinations(sorted(carried), 2))
    groups = [g for k in range(1, len(axes) + 1) for g in itertools.combinations(axes, k)]
    options = {n: [g for g in groups if all(s % math.prod(msizes[a] for a in g) == 0 for s in sizes[n])]
               for n in names}
    # merge values by name set: the estimate is a sum over distinct name sets
    weight: dict[frozenset, int] = {}
    for s, b in values:
        weight[s] = weight.get(s, 0) + b
    # A batch is a name many values the step makes carry and little of its arguments (the parameters and
    # optimizer state) do: ranked first where names share a mesh axis, and split first by the templates.
    args_total = sum(v.nbytes for _, v in leaves) or 1
    in_args = {n: sum(v.nbytes for _, v in leaves if n in v.names) for n in names}
    frequency = {n: sum(n in c for c in made) for n in names}
    datalike = {n: frequency[n] * (1 - in_args[n] / args_total) for n in names}
    ranked = sorted(names, key=lambda n: (-datalike[n], n))
    # the name sets whose layouts a strategy decides: two mappings that lay out every one alike are one
    # strategy (a name no value carries with a higher-ranked one changes nothing), compiled once
    kinds = sorted(set(weight) | {frozenset(c) for c in made}, key=sorted)

    def effect(assign: dict[str, tuple[str, ...]]) -> tuple:
        return tuple(tuple(sorted(placement.resolve(s, assign).items())) for s in kinds)

    def estimate(assign: dict[str, tuple[str, ...]]) -> float:
        # each value splits by its names in the rules' order, a name whose mesh axes an earlier name of
        # the value took staying whole (the rank rule of nx.axis_rules)
        total = 0.0
        for s, b in weight.items():
            split, taken = 1, set()
            for n, g in assign.items():
                if n in s and g and not taken.intersection(g):
                    taken.update(g)
                    split *= math.prod(msizes[a] for a in g)
            total += b / split
        return total

    def legal() -> Iterator[dict[str, tuple[str, ...]]]:
        # names in rank order: where two share an Auto mesh axis, the batch-like one ranks first
        visited = 0
        on_axis: dict[str, list[str]] = {a: [] for a in axes}
        assign: dict[str, tuple[str, ...]] = {}

        def go(i: int) -> Iterator[dict[str, tuple[str, ...]]]:
            nonlocal visited
            if visited >= MAX_VISITED:
                return
            if i == len(ranked):
                visited += 1
                yield dict(assign)
                return
            n = ranked[i]
            yield from go(i + 1)
            for g in options[n]:
                if any(frozenset((n, o)) in within for a in g if a in explicit for o in on_axis[a]):
                    continue
                assign[n] = g
                for a in g:
                    on_axis[a].append(n)
                yield from go(i + 1)
                for a in g:
                    on_axis[a].pop()
                del assign[n]

        yield from go(0)

    def shares(a: dict[str, tuple[str, ...]]) -> bool:
        items = list(a.items())
        return any(frozenset((n, o)) in together and set(g) & set(h)
                   for i, (n, g) in enumerate(items) for o, h in items[i + 1:])

    def text(assign) -> str:
        return json.dumps(list(assign.items()))

    def score(a):
        return estimate(a), len(a), text(a)

    def apart_on_explicit(a: dict[str, tuple[str, ...]]) -> bool:
        items = list(a.items())
        return not any(frozenset((n, o)) in within and set(g) & set(h) & explicit
                       for i, (n, g) in enumerate(items) for o, h in items[i + 1:])

    whole = tuple(axes)
    singles = sorted(({n: whole} for n in names if whole and whole in options[n]), key=score)
    templates = [a for a in _templates(ranked, axes, options, together, weight, datalike)
                 if apart_on_explicit(a)]
    room = max(0, max_candidates - 1)
    chosen: list[dict[str, tuple[str, ...]]] = []
    effects = {effect({})}

    def take(pool: Iterator[dict[str, tuple[str, ...]]]) -> None:
        for a in pool:
            if len(chosen) >= room:
                return
            e = effect(a)
            if e not in effects:
                effects.add(e)
                chosen.append(a)

    # the first hand-picked strategies (data parallel, then the templates' kinds interleaved), each name
    # alone over the whole mesh, then the rest by the estimate: each legal mapping in rank order and,
    # where names share a mesh axis, in the reverse order too (the weights' names ranked first)
    take(iter(templates[:1] + singles[:1]))
    take(iter(templates[1:]))
    take(iter(singles))
    if len(chosen) < room:
        def both(a):
            yield a
            if shares(a):
                yield dict(reversed(list(a.items())))
        rest = ((*score(b), b) for a in legal() if a for b in both(a))
        take(b for *_, b in heapq.nsmallest(4 * (room - len(chosen)) + 16, rest, key=lambda t: t[:3]))
    return [{}] + [{n: (g[0] if len(g) == 1 else g) for n, g in a.items()} for a in chosen]


def _templates(ranked: list[str], axes: list[str], options: dict[str, list[tuple[str, ...]]],
               together: set[frozenset], weight: dict[frozenset, int], datalike: dict[str, float]
               ) -> list[dict[str, tuple[str, ...]]]:
    """The strategies users write first, built from the co-occurrence of names (which names share a value),
    the bytes of the values each name is in and how batch-like each is (``datalike``: carried by many of
    the values the step makes, little of its arguments), never from what the names are called.

    The name split first (the *batch*) is each name in turn, the most batch-like first; its *partner* is
    the heaviest name it shares values with (the parameters' embed), its *sequence* the most batch-like
    name it shares values with.

    * *data parallel*: the batch over the whole mesh, and over each mesh axis;
    * *data x tensor parallel*, on two mesh axes A and B: the batch on A, and on B a greedy set of names no
      two of which share a value (the heads, mlp and vocab of a transformer: each splits its own
      weights), seeded by each name in turn;
    * *FSDP*, on the whole mesh or one mesh axis: the batch, then its partner, ranked after it so that a
      value carrying both splits by the batch (the rank rule of ``nx.axis_rules``);
    * *FSDP x tensor parallel*: FSDP on A and a tensor-parallel set on B;
    * *sequence splits*: the batch on A and its sequence on B, and the sequence with the batch on one axis.

    Kinds interleaved, so that a small bound keeps some of each."""
    heavy: dict[str, int] = {n: sum(b for s, b in weight.items() if n in s) for n in ranked}

    def fits(n: str, g: tuple[str, ...]) -> bool:
        return g in options.get(n, [])

    def independent(seed: str, g: tuple[str, ...], exclude: set[str]) -> dict[str, tuple[str, ...]]:
        chosen: list[str] = []
        for n in [seed] + sorted(ranked, key=lambda n: (-heavy[n], n)):
            if n in exclude or n in chosen or not fits(n, g):
                continue
            if any(frozenset((n, c)) in together for c in chosen):
                continue
            chosen.append(n)
        return {n: g for n in chosen}

    dp, dp_tp, fsdp, fsdp_tp, seq = [], [], [], [], []
    pairs = [((a,), (b,)) for a in axes for b in axes if a != b]
    whole = tuple(axes)
    for first in ranked:
        partners = sorted((n for n in ranked if n != first and frozenset((first, n)) in together),
                          key=lambda n: (-heavy[n], n))
        sequences = [n for n in ranked if n != first and frozenset((first, n)) in together]
        for g in [whole] + ([(a,) for a in axes] if len(axes) > 1 else []):
            if fits(first, g):
                dp.append({first: g})
            if fits(first, g) and partners and fits(partners[0], g):
                fsdp.append({first: g, partners[0]: g})
        for ga, gb in pairs:
            if not fits(first, ga):
                continue
            for s in [s for s in sequences if fits(s, gb)][:1]:
                seq.append({first: ga, s: gb})
            for seed in sorted(ranked, key=lambda n: (-heavy[n], n)):
                if seed == first or not fits(seed, gb):
                    continue
                tp = independent(seed, gb, {first})
                dp_tp.append({first: ga, **tp})
                if partners and fits(partners[0], ga) and partners[0] not in tp:
                    fsdp_tp.append({first: ga, partners[0]: ga, **tp})
    out: list[dict[str, tuple[str, ...]]] = []
    seen: set[str] = set()
    for group in itertools.zip_longest(dp, dp_tp, fsdp, fsdp_tp, seq):
        for a in group:
            if a is None:
                continue
            key = json.dumps(list(a.items()))
            if key not in seen:
                seen.add(key)
                out.append(a)
    return out


# --------------------------------------------------------------------------------------------------------
# Planning


def _resolve_mesh(mesh: Any) -> Any:
    m = placement.check_mesh(mesh, _WHERE)
    m = m if m is not None else placement.current_mesh()
    if m is None or m.empty:
        raise MissingResourceError(
            f"{_WHERE}: no mesh: pass mesh=, or enter one with `with jax.set_mesh(mesh):` (the candidates "
            "are compiled on it)")
    if isinstance(m, jax.sharding.AbstractMesh):
        raise MissingResourceError(f"{_WHERE}: only an abstract mesh is in context (inside jit, or "
                                   "jax.sharding.use_abstract_mesh); plan outside jit with a concrete mesh")
    return m


def _check_options(candidates: Any, memory_limit: Any, measure: Any, cost_model: Any,
                   max_candidates: Any) -> None:
    """Every option of :func:`plan_sharding` checked before anything is traced or compiled."""
    if candidates is not None and isinstance(candidates, Sequence) and not isinstance(candidates, str):
        for i, c in enumerate(candidates):
            if not isinstance(c, Mapping):
                raise wrong_type(_WHERE, f"candidates[{i}]", c,
                                 "a rule mapping such as {} (replicated) or {'batch': 'data'}")
    if memory_limit is not None:
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, np.integer)):
            raise wrong_type(_WHERE, "memory_limit", memory_limit, "a number of bytes per device (an int)")
        if memory_limit < 0:
            raise ValueError(f"{_WHERE}: memory_limit is bytes per device and cannot be negative, got "
                             f"{memory_limit}")
    if not isinstance(measure, (bool, np.bool_)):
        raise wrong_type(_WHERE, "measure", measure, "True or False")
    if cost_model is not None and not callable(cost_model):
        raise wrong_type(_WHERE, "cost_model", cost_model,
                         "a CostModel, or a callable of flops= and collective_bytes=")
    if isinstance(max_candidates, bool) or not isinstance(max_candidates, (int, np.integer)):
        raise wrong_type(_WHERE, "max_candidates", max_candidates, "an int, at least 1")
    if max_candidates < 1:
        raise ValueError(f"{_WHERE}: max_candidates must be at least 1 (the replicated candidate), got "
                         f"{max_candidates}")


def _check_rules(i: int, rules: Any, m: Any) -> dict[str, tuple[str, ...]]:
    where = f"{_WHERE}: candidate {i} {rules!r}"
    mapping = placement.normalize(rules, where)
    msizes = placement.mesh_sizes(m)
    for name, axes in mapping.items():
        for a in axes:
            if a not in msizes:
                raise MissingResourceError(
                    f"{where} maps axis {name!r} to mesh axis {a!r}, but the mesh has axes "
                    + "{" + ", ".join(f"{k!r}: {s}" for k, s in msizes.items()) + "}")
    return mapping


def _reject_reason(e: BaseException) -> str:
    if isinstance(e, DivisibilityError):
        kind = "indivisible"
    elif isinstance(e, ResourceConflictError):
        kind = "conflicting"
    else:
        kind = "failed to compile"
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"{kind}: {type(e).__name__}: {text[:400]}"


def _arguments_reason(leaves: list[tuple[str, Any]], mapping, m) -> str | None:
    for path, v in leaves:
        try:
            placement.check(named_sizes(v), mapping, m, f"{_WHERE}: argument {path}")
        except (DivisibilityError, ResourceConflictError) as e:
            return _reject_reason(e)
    return None


def _abstract(tree: Any) -> Any:
    def one(x):
        if isinstance(x, jax.Array | np.ndarray | np.generic):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype)
        return x
    return jax.tree.map(one, tree)


def _concrete(tree: Any) -> Any:
    """Abstract arguments filled with zeros, for measure=True; a PRNG key type gets keys of seed 0 (NumPy
    has no such dtype)."""
    def one(x):
        if not isinstance(x, jax.ShapeDtypeStruct):
            return x
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            key = jax.random.key(0)
            return key if x.shape == () else jax.random.split(key, math.prod(x.shape)).reshape(x.shape)
        return np.zeros(x.shape, x.dtype)
    return jax.tree.map(one, tree)


_CALLS_TIMED = 5  # measure=True: the median of this many calls, after one warm-up call
# candidates compile in threads, one per core (XLA releases the GIL while it compiles), at least two
_COMPILE_THREADS = max(2, min(8, os.cpu_count() or 2))
# What a row reads (the SPMD partitioner's collectives, buffer assignment's bytes, the HLO cost analysis)
# is fixed before the CPU backend generates machine code; these options make that code generation cheap
# (LLVM at -O0 without its expensive passes), about half of a candidate's compile time, and leave every
# figure of the row as the full compile gives it (tests/test_plan.py compares them). A program compiled so
# runs slower, so what is timed (measure=True, Plan.verify) is compiled again in full.
_FAST_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


class _Program:
    """A candidate's jitted step and lowered program, compiled for reading and, once it must run, in full."""

    def __init__(self, jitted: Any, lowered: Any, compiled: Any, full: bool):
        self.jitted, self.lowered, self.compiled, self.full = jitted, lowered, compiled, full
        self._lock = threading.Lock()  # candidates that lowered alike share a program: compile it once

    def runnable(self) -> tuple[Any, Any]:
        with self._lock:
            if not self.full:
                self.compiled, self.full = self.lowered.compile(), True
        return self.jitted, self.compiled


def _failed(rules: Mapping[str, Any], reason: str, compile_s: float = 0.0) -> PlanRow:
    return PlanRow(rules=dict(rules), ok=False, reason=reason, argument_bytes=0, output_bytes=0, temp_bytes=0,
                   collective_bytes={k: 0 for k in KINDS}, flops=None, cost=math.inf, compile_s=compile_s,
                   time_s=None)


def _lower(step: Callable, args: tuple, kwargs: dict, rules: dict[str, Any], m: Any, leaves
           ) -> tuple[Any, Any, float] | PlanRow:
    """Trace and lower ``nx.jit(step)`` under exactly ``rules``: (the jitted step, the lowered program, the
    seconds it took), or the rejected row."""
    reason = _arguments_reason(leaves, placement.normalize(rules, _WHERE), m)
    if reason is not None:
        return _failed(rules, reason)
    jitted = distribute.jit(step)
    t0 = time.perf_counter()
    try:
        with jax.set_mesh(m), _env.exact_rules(rules):
            lowered = jitted.lower(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the row says why; the plan goes on
        return _failed(rules, _reject_reason(e), time.perf_counter() - t0)
    return jitted, lowered, time.perf_counter() - t0


def _compile(lowered: Any, fast: bool) -> tuple[Any, float]:
    t0 = time.perf_counter()
    try:
        return (lowered.compile(compiler_options=_FAST_OPTIONS) if fast else lowered.compile(),
                time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - the row says why; the plan goes on
        return e, time.perf_counter() - t0


def _read(rules: dict[str, Any], compiled: Any, compile_s: float, m: Any, cost_model: CostModel) -> PlanRow:
    """The row of a compiled candidate: XLA's memory and cost analyses and the collectives of its HLO."""
    if isinstance(compiled, BaseException):
        return _failed(rules, _reject_reason(compiled), compile_s)
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    flops = accessed = None
    if isinstance(cost, Mapping) and cost.get("flops") is not None and cost["flops"] >= 0:
        flops = float(cost["flops"])
    if isinstance(cost, Mapping) and cost.get("bytes accessed") is not None and cost["bytes accessed"] >= 0:
        accessed = float(cost["bytes accessed"])
    shape, names = tuple(m.devices.shape), tuple(m.axis_names)
    found = [(kind, _crossed(groups, shape, names), nbytes) for kind, nbytes, groups in
             hlo_collectives(compiled.as_text())]
    coll = {k: 0 for k in KINDS}
    for kind, _, nbytes in found:
        coll[kind] += nbytes
    return PlanRow(rules=dict(rules), ok=True, reason=None,
                   argument_bytes=int(getattr(mem, "argument_size_in_bytes", 0)),
                   output_bytes=int(getattr(mem, "output_size_in_bytes", 0)),
                   temp_bytes=int(getattr(mem, "temp_size_in_bytes", 0)),
                   alias_bytes=int(getattr(mem, "alias_size_in_bytes", 0)),
                   collective_bytes=coll, flops=flops,
                   cost=_cost(cost_model, flops, coll, accessed, len(found)), compile_s=compile_s,
                   time_s=None, collectives=tuple(found), bytes_accessed=accessed)


def _cost(model: Any, flops: float | None, coll: Mapping[str, int], accessed: float | None,
          count: int) -> float:
    if isinstance(model, CostModel):
        return model(flops=flops, collective_bytes=coll, bytes_accessed=accessed, collective_count=count)
    return model(flops=flops, collective_bytes=coll)  # a user's model of the documented two arguments


def _limited(row: PlanRow, memory_limit: int | None) -> PlanRow:
    if not row.ok or memory_limit is None or row.memory_bytes <= memory_limit:
        return row
    return dataclasses.replace(row, ok=False, reason=(
        f"over memory_limit: {row.memory_bytes} bytes per device (arguments {row.argument_bytes}, "
        f"outputs {row.output_bytes}, temporaries {row.temp_bytes}) > {memory_limit}"))


def _order(rows: list[PlanRow], measured: bool) -> list[PlanRow]:
    def key(ir):
        i, r = ir
        if not r.ok:
            return (1, i)
        primary = r.time_s if measured and r.time_s is not None else r.cost
        return (0, primary, r.memory_bytes, len(_key(r.rules)[0]), json.dumps(_key(r.rules)), i)
    return [r for _, r in sorted(enumerate(rows), key=key)]


_TRACES = itertools.count()


def _measured(rows: list[PlanRow], programs: dict[int, _Program], args: tuple, kwargs: dict,
              m: Any) -> list[PlanRow]:
    """``rows`` with ``time_s``: the median of :data:`_CALLS_TIMED` calls of each accepted row's compiled
    program, after one warm-up call each, in interleaved rounds (one call of every candidate per round), so
    a machine that slows down or speeds up during the plan weighs on every candidate alike."""
    placed = {}
    todo = [i for i, row in enumerate(rows) if row.ok and i in programs]
    with concurrent.futures.ThreadPoolExecutor(_COMPILE_THREADS) as pool:  # the full compiles, in threads
        ready = dict(zip(todo, pool.map(lambda i: programs[i].runnable(), todo)))
    for i in todo:
        row = rows[i]
        jitted, compiled = ready[i]
        with jax.set_mesh(m), _env.exact_rules(row.rules):
            run_args, run_kwargs = jitted._placed(_concrete(args), _concrete(kwargs), abstract=False)
            jax.block_until_ready(compiled(*run_args, **run_kwargs))
        placed[i] = (compiled, run_args, run_kwargs)
    times: dict[int, list[float]] = {i: [] for i in placed}
    with jax.set_mesh(m):
        for _ in range(_CALLS_TIMED):
            for i, (compiled, run_args, run_kwargs) in placed.items():
                t = time.perf_counter()
                jax.block_until_ready(compiled(*run_args, **run_kwargs))
                times[i].append(time.perf_counter() - t)
    return [dataclasses.replace(row, time_s=statistics.median(times[i])) if i in times else row
            for i, row in enumerate(rows)]


def _fingerprint(rows: list[PlanRow], measure: bool, memory_limit: int | None, cost_model: CostModel) -> str:
    """What a plan computes, the same on every process that plans the same step on the same arguments: its
    candidates and what XLA reported for each (a plan is paired with the other processes' by this, never by
    how many plans each process made)."""
    text = json.dumps([measure, memory_limit, repr(cost_model)] + [
        [json.dumps(_key(r.rules)), r.ok, r.flops, sorted(r.collective_bytes.items()), r.argument_bytes,
         r.output_bytes, r.temp_bytes] for r in rows], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _agree_on_times(call: agree.Call, rows: list[PlanRow], what: str) -> list[PlanRow]:
    """In a job: the first process's measured order is the job's (times differ between processes)."""
    if call.client is None:
        return rows
    order = json.dumps([json.dumps(_key(r.rules)) for r in rows])
    if jax.process_index() == 0:
        call.publish("order", order)
        return rows
    agreed = json.loads(call.receive("order", 0, what))
    by_key = {json.dumps(_key(r.rules)): r for r in rows}
    return [by_key[k] for k in agreed]


def plan_sharding(step: Callable, *args: Any, mesh: Any = None,
                  candidates: Sequence[Mapping[str, Any]] | None = None, memory_limit: int | None = None,
                  measure: bool = False, cost_model: CostModel | None = None,
                  max_candidates: int = MAX_CANDIDATES, **kwargs: Any) -> Plan:
    """Compile ``step(*args, **kwargs)`` under each candidate ``nx.axis_rules`` mapping and rank them.

    ``args``/``kwargs`` may be concrete or abstract (``jax.eval_shape`` / ``jax.ShapeDtypeStruct`` trees);
    nothing runs unless ``measure=True`` (abstract arguments are then filled with zeros). ``mesh`` defaults
    to the mesh in context. ``candidates`` is a list of rule mappings; None enumerates them from the
    arguments' names and the mesh (at most ``max_candidates``; see the module's essay). Each is compiled
    as ``nx.jit(step)`` under exactly those rules (rules in force outside are not added). A candidate
    rejected for memory (``memory_limit``: bytes per device), divisibility, a conflict or a failed compile
    stays in the plan with its reason; the others are ranked by measured time or by ``cost_model``
    (default :class:`CostModel`).

    Errors: no mesh, and a candidate naming a mesh axis the mesh lacks (a
    :class:`~namedarray.errors.MissingResourceError` naming the candidate, the axis and the mesh's axes);
    a malformed candidate (:class:`~namedarray.errors.AxisSpecError`).

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> x = jax.eval_shape(lambda: nx.wrap(jnp.ones((8, 4)), ["batch", "embed"]))
    >>> plan = nx.plan_sharding(lambda x: x.sum("embed"), x, mesh=mesh, candidates=[{}], memory_limit=8)
    >>> plan.rows[0].ok, plan.rows[0].reason.split(":")[0], plan.best is None
    (False, 'over memory_limit', True)
    """
    # measuring runs programs that span the job, so a measured plan meets the other processes (agree.py);
    # a ranking by the cost model is a function of the compiled programs and needs no meeting
    with agree.Call(_WHERE) if measure is True else contextlib.nullcontext() as call:
        return _plan(call, step, args, kwargs, mesh, candidates, memory_limit, measure, cost_model,
                     max_candidates)


def _plan(call: Any, step: Callable, args: tuple, kwargs: dict, mesh: Any, candidates: Any,
          memory_limit: int | None, measure: bool, cost_model: CostModel | None, max_candidates: int) -> Plan:
    if not callable(step):
        raise TypeError(f"{_WHERE}: step must be callable, got {step!r}")
    _check_options(candidates, memory_limit, measure, cost_model, max_candidates)
    m = _resolve_mesh(mesh)
    cost_model = CostModel.calibrated(m) if cost_model is None else cost_model
    if candidates is None:
        candidates = candidate_rules(step, *args, mesh=m, max_candidates=max_candidates, **kwargs)
    elif isinstance(candidates, Mapping) or not isinstance(candidates, Sequence):
        raise AxisSpecError(f"{_WHERE}: candidates must be a list of rule mappings such as "
                            f"[{{}}, {{'batch': 'data'}}], got {candidates!r}")
    candidates = [dict(c) if isinstance(c, Mapping) else c for c in candidates]
    if not candidates:
        raise AxisSpecError(f"{_WHERE}: candidates is empty; pass None to enumerate them")
    for i, c in enumerate(candidates):
        _check_rules(i, c, m)  # every candidate checked before anything compiles
    seen: set = set()  # a candidate given twice (as "x" and ("x",), say) is compiled once
    candidates = [c for c in candidates if not (_key(c) in seen or seen.add(_key(c)))]
    leaves = _named_leaves((args, kwargs))
    a_args, a_kwargs = _abstract(args), _abstract(kwargs)
    rows: list[PlanRow | None] = [None] * len(candidates)
    programs: dict[int, _Program] = {}
    # the fast compile where the figures are known to be the full compile's (the CPU backend); a measured
    # plan runs what it compiles, so it compiles in full
    fast = not measure and m.devices.flat[0].platform == "cpu"
    with concurrent.futures.ThreadPoolExecutor(_COMPILE_THREADS) as pool:
        pending = []
        futures: dict[str, concurrent.futures.Future] = {}
        for i, rules in enumerate(candidates):  # tracing stays on this thread: the rules are per thread
            got = _lower(step, a_args, a_kwargs, rules, m, leaves)
            if isinstance(got, PlanRow):
                rows[i] = got
                continue
            jitted, lowered, lower_s = got
            # candidates that lower to the same program (rules that change no layout of this step) share
            # one compile
            text = hashlib.sha256(lowered.as_text().encode()).hexdigest()
            if text not in futures:
                futures[text] = pool.submit(_compile, lowered, fast)
            pending.append((i, rules, jitted, lowered, lower_s, futures[text]))
        shared: dict[int, _Program] = {}
        for i, rules, jitted, lowered, lower_s, future in pending:
            compiled, compile_s = future.result()
            rows[i] = _read(rules, compiled, lower_s + compile_s, m, cost_model)
            if not isinstance(compiled, BaseException):
                programs[i] = shared.setdefault(id(future), _Program(jitted, lowered, compiled, not fast))
    rows = [_limited(row, memory_limit) for row in rows]
    if measure:
        what = f"nx.plan_sharding of {getattr(step, '__qualname__', step)!s} over {len(rows)} candidates"
        if call is not None:
            call.meet(_fingerprint(rows, measure, memory_limit, cost_model), what)
        rows = _order(_measured(rows, programs, args, kwargs, m), measure)
        if call is not None:
            rows = _agree_on_times(call, rows, what)
    else:
        rows = _order(rows, measure)
    kept = {_key(candidates[i]): p for i, p in programs.items()}
    return Plan(rows, m, cost_model, measure, memory_limit, (args, kwargs, kept))
