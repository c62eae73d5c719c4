"""The context of a call, as the parallel layer means it: what a trace of ``nx.jit`` or ``nx.plan_sharding``
in progress notes about its values.

Like core's (:mod:`namedarray.core.context`), this state belongs to the call in progress: it is held in
context variables, so traces in other threads or asyncio tasks keep apart, and a nested block replaces the
enclosing one's table for its duration. Each variable is None outside its block.

* :data:`stated_layouts`: while ``nx.jit`` traces its function, each value a constraint in the body produced
  (``id(tracer) -> (tracer, the mapping it was laid out by)``), so that an output keeps the layout the body
  stated;
* :data:`output_layouts`: while ``Jitted.eval_shape`` traces, the ``PartitionSpec`` of each output
  NamedArray, by key path;
* :data:`laid_out_values`: while ``nx.plan_sharding`` traces a step, every NamedArray laid out by name (a
  list), from which it learns which names occur together.

What ``nx.plan_sharding`` learns of every value made (intermediates included) it hears through core's hook
(:func:`namedarray.core.context.hearing_made`): core makes the values, and knows nothing of who listens.

Nothing here is a cache: ``nx.clear_caches()`` has nothing to clear in it.

>>> with holding(laid_out_values, []) as seen:
...     laid_out_values.get() is seen
True
>>> laid_out_values.get() is None
True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["stated_layouts", "output_layouts", "laid_out_values", "holding"]

T = TypeVar("T")

stated_layouts: contextvars.ContextVar[dict[int, tuple[Any, Mapping[str, Any]]] | None] = (
    contextvars.ContextVar("namedarray_stated_layouts", default=None))
output_layouts: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "namedarray_output_layouts", default=None)
laid_out_values: contextvars.ContextVar[list | None] = contextvars.ContextVar("namedarray_laid_out_values",
                                                                              default=None)


@contextlib.contextmanager
def holding(var: contextvars.ContextVar[T | None], table: T) -> Iterator[T]:
    """Within the block, ``var`` holds ``table``, which it yields."""
    token = var.set(table)
    try:
        yield table
    finally:
        var.reset(token)
