"""The context of a call, as core means it: core's context variables, and the hooks by which core tells
whoever listens what happens while a block runs.

Some state belongs to the call in progress rather than to the process: it must be per thread and per asyncio
task, and nest by replacement. It is held in context variables. Each layer keeps those it gives a meaning
to in its own ``context`` module, so that core knows nothing of the layers above it and one file per layer
answers "what can change how this call behaves". Core's are here:

* :data:`axis_env`: the axis environment, the immutable ``AxisEnv`` of :mod:`namedarray.core.env` (sizes
  bound by enclosing maps, serial loops, resources, the rules of ``nx.axis_rules``). Read and written only by
  that module, which gives it its meaning.
* :data:`known_layouts`: while a trace lays its values out by name, which tracers already have which layout
  (so that a constraint asking for that layout adds nothing). Read and written only by
  :mod:`namedarray.core.placement` (``layouts_known``, ``note_layout``, ``known_layout``), which gives it
  its meaning; None outside such a trace.

A hook is how core calls out without knowing who listens: a layer above that needs to learn something core
does during a block (a trace it runs, say) installs a typed callable for that block. There is one:

* :func:`hearing_made` / :func:`made_hook`: every NamedArray made (by core's one constructor, so every
  result of every operation, intermediates included) is passed to the hooks installed. Nested blocks chain:
  the innermost hook hears a value first, then each enclosing one, so listeners need not know of each other.
  With none installed, the cost on the hot path is one context variable read.

Nothing here is a cache: ``nx.clear_caches()`` has nothing to clear in it.

>>> import jax.numpy as jnp
>>> from namedarray.core.array import _make
>>> heard = []
>>> with hearing_made(lambda v: heard.append(v.names)):
...     _ = _make(jnp.ones((2, 3)), ("a", "b"))
>>> heard
[('a', 'b')]
>>> made_hook() is None
True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .array import NamedArray

__all__ = ["axis_env", "known_layouts", "MadeHook", "hearing_made", "made_hook"]

# The axis environment (namedarray.core.env.AxisEnv). No default here: env.current() supplies its EMPTY.
axis_env: contextvars.ContextVar[Any] = contextvars.ContextVar("namedarray_axis_env")

# id(tracer) -> (tracer, layout key): see namedarray.core.placement's "Layouts a trace already states"
known_layouts: contextvars.ContextVar[dict[int, tuple[Any, tuple]] | None] = contextvars.ContextVar(
    "namedarray_known_layouts", default=None)


class MadeHook(Protocol):
    """What :func:`hearing_made` installs: called with each NamedArray made, once it is complete."""

    def __call__(self, value: NamedArray, /) -> None: ...


_made_hook: contextvars.ContextVar[MadeHook | None] = contextvars.ContextVar("namedarray_made_hook",
                                                                             default=None)

#: The hook in force (the innermost block's, chained to the enclosing ones), else None: what
#: ``namedarray.core.array._make`` reads on every value it makes. A bound method, so that reading it is one
#: C call and no Python frame.
made_hook = _made_hook.get


@contextlib.contextmanager
def hearing_made(hook: MadeHook) -> Iterator[None]:
    """Within the block, ``hook`` is called with every NamedArray made, before the hooks of enclosing blocks.

    A hook runs on the hot path of every operation while it is installed: it should only note what it needs.
    An exception it raises propagates from the operation that made the value.
    """
    outer = _made_hook.get()
    if outer is None:
        chained = hook
    else:
        def chained(value: NamedArray, /) -> None:
            hook(value)
            outer(value)
    token = _made_hook.set(chained)
    try:
        yield
    finally:
        _made_hook.reset(token)
