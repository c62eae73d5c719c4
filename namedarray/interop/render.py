"""Text and HTML display of NamedArrays: dtype, positional shape, named shape, then the values.

Values are shown with the positional axes first and the named axes after them, in the storage order the
header's ``axes=[...]`` lists, so what is printed can be read without knowing the storage layout.

>>> import namedarray as nx, jax.numpy as jnp
>>> print(repr(nx.wrap(jnp.arange(3), ["b"])))
NamedArray(int32, shape=(), named_shape={'b': 3}, axes=[b])
[0 1 2]
"""

from __future__ import annotations

import html
from typing import Any

import jax
import numpy as np

__all__ = ["header", "text_repr", "html_repr"]


def header(x: Any) -> str:
    """The first line of a NamedArray's repr: dtype, positional shape, named shape, storage axes.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> header(nx.wrap(jnp.zeros((2, 3)), [None, "k"]))
    "NamedArray(float32, shape=(2,), named_shape={'k': 3}, axes=[#0, k])"
    """
    d = x.data
    dtype = getattr(d, "dtype", "?")
    try:
        shape, named = x.shape, x.named_shape
    except Exception:  # a transform may have left storage and names out of step
        return f"NamedArray({dtype}, data={type(d).__name__}, names={x.names})"
    axes = [f"#{i}" for i in range(len(shape))] + list(x.names)
    return f"NamedArray({dtype}, shape={shape}, named_shape={named!r}, axes=[{', '.join(axes)}])"


def _values(x):
    d = x.data
    # tracers, and ShapeDtypeStructs (jax.eval_shape), have a type but no values to show
    if isinstance(d, jax.core.Tracer) or not isinstance(d, (jax.Array, np.ndarray)):
        return None
    try:
        return np.asarray(d)
    except Exception:  # deleted buffers, non-addressable global arrays
        return None


def _multi_device(x) -> bool:
    d = x.data
    s = None if isinstance(d, jax.core.Tracer) else getattr(d, "sharding", None)
    try:
        return s is not None and len(s.device_set) > 1
    except Exception:  # a sharding without devices (abstract)
        return False


def _sharding_line(x) -> str:
    from ..parallel.visualize import axes_text, split_axes

    split = split_axes(x)
    mesh = getattr(x.data.sharding, "mesh", None)
    on = f" over mesh {dict(zip(mesh.axis_names, mesh.axis_sizes))}" if mesh is not None else ""
    what = ", ".join(f"{n} -> {axes_text(a)}" for n, a in split.items()) if split else "replicated"
    return f"sharding: {what} on {len(x.data.sharding.device_set)} devices{on}"


def text_repr(x: Any) -> str:
    """``repr(x)``: the header, the sharding when on several devices, then the values (positional axes
    first), unless ``x`` is abstract."""
    head = header(x)
    if _multi_device(x):
        head += "\n" + _sharding_line(x)
    values = _values(x)
    if values is None:
        return head
    return head + "\n" + np.array2string(values, threshold=200, edgeitems=3)


def _printed_as(i: int, rank: int) -> str:
    """Where storage axis ``i`` of ``rank`` shows in the printed values: NumPy prints the last axis along a
    row (its columns), the one before down the rows, and each earlier axis as blocks of those."""
    if i == rank - 1:
        return "columns"
    if i == rank - 2:
        return "rows"
    return "blocks" if i == rank - 3 else f"blocks (level {rank - 3 - i})"


def html_repr(x: Any) -> str:
    """``x._repr_html_()``: a table of the axes (positional, then named, in the order the values below are
    printed in) and the values, for notebooks.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> "<b>k</b></td><td>3</td><td>named" in html_repr(nx.wrap(jnp.zeros(3), ["k"]))
    True
    >>> page = html_repr(nx.wrap(jnp.zeros((2, 3)), ["r", "c"]))
    >>> "<b>r</b></td><td>2</td><td>named</td><td>rows" in page
    True
    >>> "<b>c</b></td><td>3</td><td>named</td><td>columns" in page
    True
    """
    sizes = x.named_shape
    axes = [(f"#{i}", s, "positional") for i, s in enumerate(x.shape)]
    axes += [(f"<b>{html.escape(str(n))}</b>", sizes[n], "named") for n in getattr(x, "names", sizes)]
    rank = len(axes)
    rows = "".join(f"<tr><td>{a}</td><td>{s}</td><td>{kind}</td><td>{_printed_as(i, rank)}</td></tr>"
                   for i, (a, s, kind) in enumerate(axes))
    values = _values(x)
    body = "" if values is None else (
        "<pre style='margin:4px 0'>" + html.escape(np.array2string(values, threshold=200, edgeitems=3))
        + "</pre>")
    layout = ""
    if _multi_device(x):
        from ..parallel.visualize import visualize_sharding

        layout = visualize_sharding(x)._repr_html_()
    return (f"<div class='nx-namedarray'><b>NamedArray</b> <code>{html.escape(str(x.dtype))}</code>"
            "<table style='border-collapse:collapse'><tr><th>axis</th><th>size</th><th>kind</th>"
            "<th>in the values</th></tr>"
            f"{rows}</table>{layout}{body}</div>")
