"""Timing and HLO helpers shared by the benchmark scripts.

Timings are medians of per-call wall times with synchronous CPU dispatch, taken in rotation (one call of
each case in turn) after warm-up, so that drift on a busy machine hits every case alike. Every row of the
results is a ratio of two cases measured side by side in one process.
"""

from __future__ import annotations

import collections
import re
import statistics
import time
from collections.abc import Callable

import jax

COLLECTIVES = re.compile(
    r"=\s*(?:\([^)]*\)|\S+)\s+(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
    r"collective-broadcast|"
    r"ragged-all-to-all)(-start)?\(")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*\S+\s+([a-z][\w\-]*)\(", re.M)
# Bookkeeping that is not work: parameters, tuples, constants and free layout views.
_NOT_WORK = {"parameter", "tuple", "get-tuple-element", "constant", "bitcast"}


def block(out):
    return jax.block_until_ready(out)


def compare(cases: dict[str, Callable[[], object]], *, reps: int = 500, warmup: int = 50) -> dict[str, float]:
    """Median microseconds per call of each case, measured in rotation."""
    for f in cases.values():
        for _ in range(warmup):
            block(f())
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, f in cases.items():
            t0 = time.perf_counter()
            block(f())
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def hlo_ops(compiled_text: str) -> collections.Counter:
    """Opcode counts of the work instructions in an optimised HLO module (fusions count once)."""
    counts: collections.Counter = collections.Counter()
    entry = _entry_and_fusion_free(compiled_text)
    for m in _INSTRUCTION.finditer(entry):
        op = m.group(1)
        if op not in _NOT_WORK:
            counts[op] += 1
    return counts


def _entry_and_fusion_free(text: str) -> str:
    """The instructions XLA schedules: the ENTRY computation and non-fused callees, not fusion bodies."""
    blocks = re.split(r"\n(?=\S)", text)
    keep = [b for b in blocks if not re.match(r"^%?fused_|^%?[\w.\-]*fused[\w.\-]*\s", b)
            and not b.startswith("HloModule")]
    return "\n".join(keep)


def hlo_ops_all(compiled_text: str) -> collections.Counter:
    """Opcode counts over every computation of an optimised HLO module, fusion bodies included.

    XLA's CPU backend keeps layout changes as ``transpose`` instructions inside fusions, so counting
    transposes needs the fusion bodies that ``hlo_ops`` leaves out.
    """
    return collections.Counter(m.group(1) for m in _INSTRUCTION.finditer(compiled_text))


def layout_counts(compiled_text: str) -> dict[str, int]:
    """The counts a layout comparison reports: work instructions (``hlo_ops``), transposes anywhere,
    fusions."""
    ops = hlo_ops(compiled_text)
    return {"work": sum(ops.values()), "transpose": hlo_ops_all(compiled_text)["transpose"],
            "fusion": ops.get("fusion", 0)}


def collectives(compiled_text: str) -> dict[str, int]:
    return dict(collections.Counter(m.group(1) for m in COLLECTIVES.finditer(compiled_text)))


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
