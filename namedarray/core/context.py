"""The context of a call: every context variable of the library, in one module.

Some state belongs to the call in progress rather than to the process: it must be per thread and per asyncio
task, and nest by replacement. It is held in context variables, and all of them are here, so that one file
answers "what can change how this call behaves":

* :data:`axis_env`: the axis environment, the immutable ``AxisEnv`` of :mod:`namedarray.core.env` (sizes
  bound by enclosing maps, serial loops, resources, the rules of ``nx.axis_rules``). Read and written only by
  that module, which gives it its meaning.
* :func:`recording` / :func:`record`: what a trace in progress records about its values, by kind:

  - ``"known layouts"``: while ``nx.jit`` traces, which tracers already have which layout (so that a
    ``.shard()`` asking for that layout adds nothing; :mod:`namedarray.core.placement`);
  - ``"stated layouts"``: while ``nx.jit`` traces, the values a ``.shard()`` of the body laid out, so that
    an output keeps the layout the body stated (:mod:`namedarray.parallel.distribute`);
  - ``"output layouts"``: while ``Jitted.eval_shape`` traces, the layout of each output, by key path;
  - ``"laid out values"``: while ``nx.plan_sharding`` traces a step, every value laid out by name (a list),
    from which it learns which names occur together;
  - ``"made names"``: while ``nx.plan_sharding`` traces a step on a mesh with Explicit axes, the names of
    every NamedArray made (a list), intermediates included: on such axes two names of one value cannot
    share a mesh axis.

  A record lives as long as its ``with recording(...)`` block; outside one, :func:`record` is None.

Nothing here is a cache: ``nx.clear_caches()`` has nothing to clear in it.

>>> with recording("doc") as table:
...     record("doc") is table
True
>>> record("doc") is None
True
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["axis_env", "recording", "record"]

# The axis environment (namedarray.core.env.AxisEnv). No default here: env.current() supplies its EMPTY.
axis_env: contextvars.ContextVar[Any] = contextvars.ContextVar("namedarray_axis_env")

_NONE: Mapping[str, Any] = types.MappingProxyType({})
_RECORDS: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("namedarray_trace_records",
                                                                              default=_NONE)


@contextlib.contextmanager
def recording(kind: str, table: Any = None) -> Iterator[Any]:
    """Within the block, :func:`record` of ``kind`` is ``table`` (a new dict by default), which it yields."""
    table = {} if table is None else table
    token = _RECORDS.set({**_RECORDS.get(), kind: table})
    try:
        yield table
    finally:
        _RECORDS.reset(token)


def record(kind: str) -> Any:
    """The table of the innermost ``recording(kind)`` block in force, else None."""
    return _RECORDS.get().get(kind)
