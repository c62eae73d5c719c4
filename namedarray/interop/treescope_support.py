"""Rich display in treescope (the ``[notebook]`` extra): NamedArrays with their axis names.

When treescope renders a NamedArray (``treescope.show(x)``, ``treescope.render_to_html(x)``, or every
notebook output after ``treescope.basic_interactive_setup()``), the array view labels each named axis by
its name and each positional axis by its position, the one-line summary reads ``NamedArray float32
(3,) {batch: 4, embed: 8}``, and a sharded value shows which device holds which block. Registration is
automatic: the first NamedArray treescope meets registers the adapter (or call :func:`set_up_treescope`).
Without treescope installed nothing here is imported.

>>> import namedarray as nx, jax.numpy as jnp
>>> import treescope
>>> "batch" in treescope.render_to_text(nx.wrap(jnp.zeros((2, 3)), ["batch", "embed"]))
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.array import NamedArray

__all__ = ["set_up_treescope", "NamedArrayAdapter"]

_REGISTERED = False


def set_up_treescope() -> None:
    """Register the NamedArray adapter with treescope (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from treescope import type_registries

    type_registries.NDARRAY_ADAPTER_REGISTRY[NamedArray] = _adapter_class()()
    _REGISTERED = True


def treescope_repr(x: NamedArray, path: Any, subtree_renderer: Any) -> Any:
    """``NamedArray.__treescope_repr__``: the one-line summary with the names (``NamedArray float32 (3,)
    {batch: 4}`` and statistics of the values), unfolding to the values as ``repr`` prints them. The first
    call also registers the adapter, so that treescope's array views know NamedArrays too."""
    set_up_treescope()
    from treescope import lowering, rendering_parts

    from .render import text_repr

    adapter = NamedArrayAdapter()
    d = x.data
    # a tracer has is_deleted too, and calling it under jit/vmap/grad is a concretization error
    concrete = not _is_tracer(d) and hasattr(d, "is_deleted") and not d.is_deleted()

    def line(fast: bool) -> Any:
        return rendering_parts.siblings(rendering_parts.text("<"), adapter.get_array_summary(x, fast=fast),
                                        rendering_parts.text(">"))

    if not concrete:
        return rendering_parts.abbreviation_color(line(fast=True))

    def thunk(expand_state: Any) -> Any:
        values = text_repr(x).split("\n", 1)[-1]  # the values, positional axes first, as repr prints them
        state = expand_state or (rendering_parts.ExpandState.WEAKLY_EXPANDED if values.count("\n") <= 15
                                 else rendering_parts.ExpandState.COLLAPSED)
        return rendering_parts.build_custom_foldable_tree_node(
            label=rendering_parts.abbreviation_color(rendering_parts.comment_color_when_expanded(
                rendering_parts.siblings(
                    rendering_parts.fold_condition(expanded=rendering_parts.text("# "),
                                                   collapsed=rendering_parts.text("<")),
                    adapter.get_array_summary(x, fast=False),
                    rendering_parts.fold_condition(collapsed=rendering_parts.text(">"))))),
            contents=rendering_parts.fold_condition(
                expanded=rendering_parts.indented_children([rendering_parts.text(values)])),
            path=path, expand_state=state).renderable

    return rendering_parts.RenderableAndLineAnnotations(
        renderable=lowering.maybe_defer_rendering(main_thunk=thunk,
                                                  placeholder_thunk=lambda: rendering_parts.
                                                  deferred_placeholder_style(line(fast=True))),
        annotations=rendering_parts.build_copy_button(path))


def _is_tracer(d: Any) -> bool:
    import jax

    return isinstance(d, jax.core.Tracer)


def _adapter_class() -> type:
    from treescope import ndarray_adapters, rendering_parts
    from treescope.external.jax_support import JAXArrayAdapter, summarize_array_data

    storage = JAXArrayAdapter()

    class NamedArrayAdapter(ndarray_adapters.NDArrayAdapter):
        """Axis info by name for treescope's array view; the storage's data, dtype and sharding as jax's."""

        def get_axis_info_for_array_data(self, array: NamedArray) -> tuple:
            d = array.data
            p = d.ndim - len(array.names)
            positional = tuple(ndarray_adapters.PositionalAxisInfo(i, d.shape[i]) for i in range(p))
            return positional + tuple(ndarray_adapters.NamedPositionlessAxisInfo(n, d.shape[p + k])
                                      for k, n in enumerate(array.names))

        def get_array_data_with_truncation(self, array: NamedArray, mask: Any,
                                           edge_items_per_axis: tuple) -> tuple[np.ndarray, np.ndarray]:
            if isinstance(mask, NamedArray):  # a mask by name: aligned to the storage order
                mask = mask.unwrap({k: n for k, n in enumerate(array.names, start=array.ndim)})
            return storage.get_array_data_with_truncation(array.data, mask, edge_items_per_axis)

        def get_array_summary(self, array: NamedArray, fast: bool) -> Any:
            named = ", ".join(f"{n}: {s}" for n, s in array.named_shape.items())
            head = f"NamedArray {array.dtype} {tuple(array.shape)} {{{named}}}"
            if fast or not storage.should_autovisualize(array.data):
                return rendering_parts.text(head)
            return rendering_parts.text(f"{head} {summarize_array_data(array.data).strip()}")

        def get_numpy_dtype(self, array: NamedArray) -> np.dtype | None:
            return storage.get_numpy_dtype(array.data)

        def get_sharding_info_for_array_data(self, array: NamedArray) -> Any:
            return storage.get_sharding_info_for_array_data(array.data)

        def should_autovisualize(self, array: NamedArray) -> bool:
            return storage.should_autovisualize(array.data)

    globals()["NamedArrayAdapter"] = NamedArrayAdapter
    return NamedArrayAdapter


NamedArrayAdapter: Any = None  # the adapter class, built (with treescope imported) by set_up_treescope
