"""Sharding pictures: which device holds which block of a NamedArray, labelled by axis names.

``nx.visualize_sharding(x)`` returns a :class:`ShardingPicture`: ``print`` it in a terminal, or let a notebook
display it (``_repr_html_``). Blocks are labelled by the names of the axes they split and the index ranges
they hold (``batch[0:32]``); a value split along two names is a grid, along one a column, along more a
table with a row per block. Names that are not split are whole in every block.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> print(nx.visualize_sharding(nx.wrap(jnp.zeros((4, 3)), ["batch", "embed"])))
NamedArray float32 {'batch': 4, 'embed': 3} on 1 device: whole (not split)
  device 0: batch[0:4] embed[0:3]
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax

from ..core.array import NamedArray, is_named
from ..errors import PositionalMisuseError

__all__ = ["visualize_sharding", "ShardingPicture", "split_axes", "axes_text"]


@dataclass(frozen=True)
class ShardingPicture:
    """Who holds what of one array: ``axes`` (labels of the storage dims), ``sizes``, the dims that are
    split with their ranges (``blocks``), and for each block the devices that hold it (replicas)."""

    title: str
    axes: tuple[str, ...]
    sizes: tuple[int, ...]
    split: tuple[int, ...]  # storage dims split into more than one block
    ranges: tuple[tuple[tuple[int, int], ...], ...]  # per split dim: its (start, stop) blocks in order
    holders: dict  # tuple of block indices (one per split dim) -> device labels
    whole: tuple[int, ...]  # dims every block holds whole
    n_devices: int

    # ---- text ----------------------------------------------------------------------------------------

    def _label(self, dim: int, block: int) -> str:
        start, stop = self.ranges[self.split.index(dim)][block]
        return f"{self.axes[dim]}[{start}:{stop}]"

    def _cell(self, key: tuple[int, ...]) -> str:
        return ",".join(_runs(self.holders.get(key, ["-"])))

    def _whole_text(self) -> str:
        if not self.whole or not self.split:
            return ""
        return "whole in every block: " + ", ".join(f"{self.axes[d]} ({self.sizes[d]})" for d in self.whole)

    def rows(self) -> tuple[list[str], list[list[str]]]:
        """(header, rows) of the picture as a table of strings (what the text and HTML forms draw)."""
        if not self.split:
            devices = ",".join(_runs(self.holders.get((), [])))
            return ["devices"] + [self.axes[d] for d in self.whole], [
                [devices] + [f"[0:{self.sizes[d]}]" for d in self.whole]]
        if len(self.split) == 2:
            a, b = self.split
            header = [""] + [self._label(b, j) for j in range(len(self.ranges[1]))]
            body = [[self._label(a, i)] + [self._cell((i, j)) for j in range(len(self.ranges[1]))]
                    for i in range(len(self.ranges[0]))]
            return header, body
        if len(self.split) == 1:  # a column: one row per block
            (a,) = self.split
            return ["block", "devices"], [[self._label(a, i), self._cell((i,))]
                                                for i in range(len(self.ranges[0]))]
        header = [self.axes[d] for d in self.split] + ["devices"]
        body = []
        for key in itertools.product(*(range(len(r)) for r in self.ranges)):
            body.append([f"[{self.ranges[k][i][0]}:{self.ranges[k][i][1]}]" for k, i in enumerate(key)]
                        + [self._cell(key)])
        return header, body

    def __str__(self) -> str:
        lines = [self.title]
        if not self.split:
            devices = ",".join(_runs(self.holders.get((), [])))
            dims = " ".join(f"{self.axes[d]}[0:{self.sizes[d]}]" for d in self.whole)
            lines.append(f"  device{'s' if self.n_devices > 1 else ''} {devices}: {dims}".rstrip())
            return "\n".join(lines)
        header, body = self.rows()
        table = [header] + body
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        for r in table:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if self._whole_text():
            lines.append("  " + self._whole_text())
        return "\n".join(lines)

    __repr__ = __str__

    # ---- HTML ----------------------------------------------------------------------------------------

    def _repr_html_(self) -> str:
        header, body = self.rows()
        cell = "border:1px solid #999;padding:2px 8px;text-align:center"
        head = "".join(f"<th style='{cell}'>{html.escape(h)}</th>" for h in header)
        rows = "".join("<tr>" + "".join(f"<td style='{cell}'>{html.escape(c)}</td>" for c in r) + "</tr>"
                       for r in body)
        foot = f"<div>{html.escape(self._whole_text())}</div>" if self._whole_text() else ""
        return (f"<div class='nx-sharding'><div><b>{html.escape(self.title)}</b></div>"
                f"<table style='border-collapse:collapse'><tr>{head}</tr>{rows}</table>{foot}</div>")


def _device_label(d: Any) -> str:
    if jax.process_count() > 1:
        return f"p{d.process_index}:{d.id}"
    return str(d.id)


def _runs(labels: list[str]) -> list[str]:
    """Consecutive device ids as ranges: ``['0', '1', '2', '5']`` -> ``['0-2', '5']``."""
    if not all(s.isdigit() for s in labels):
        return labels
    ids = sorted(int(s) for s in labels)
    out: list[str] = []
    start = prev = ids[0]
    for i in ids[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return out


def picture(sharding: Any, shape: Sequence[int], names: Sequence[str], dtype: Any = None) -> ShardingPicture:
    """The picture of a storage array of ``shape`` whose last dims are ``names``, laid out as ``sharding``."""
    shape = tuple(shape)
    p = len(shape) - len(names)
    axes = tuple(f"#{i}" for i in range(p)) + tuple(names)
    index = sharding.devices_indices_map(shape)
    per_dim: list[set] = [set() for _ in shape]
    for idx in index.values():
        for k, s in enumerate(idx):
            per_dim[k].add(s.indices(shape[k])[:2])
    split = tuple(k for k, r in enumerate(per_dim) if len(r) > 1)
    ranges = tuple(tuple(sorted(per_dim[k])) for k in split)
    holders: dict = {}
    for device, idx in sorted(index.items(), key=lambda kv: kv[0].id):
        key = tuple(ranges[j].index(idx[k].indices(shape[k])[:2]) for j, k in enumerate(split))
        holders.setdefault(key, []).append(_device_label(device))
    whole = tuple(k for k in range(len(shape)) if k not in split)
    n = len(index)
    named = "{" + ", ".join(f"{n_!r}: {shape[p + i]}" for i, n_ in enumerate(names)) + "}"
    pos = f" shape={shape[:p]}" if p else ""
    mesh = getattr(sharding, "mesh", None)
    over = _spec_axes(getattr(sharding, "spec", None), len(shape))
    how = ("whole (not split)" if not split else "split " + ", ".join(
        f"{axes[k]} over {axes_text(over[k])}" if over.get(k) else axes[k] for k in split))
    on = f"mesh {dict(zip(mesh.axis_names, mesh.axis_sizes))}" if mesh is not None and n > 1 else ""
    title = (f"NamedArray {dtype if dtype is not None else ''}{pos} {named} on {n} device"
             f"{'s' if n > 1 else ''}{' of ' + on if on else ''}: {how}").replace("  ", " ")
    return ShardingPicture(title, axes, shape, split, ranges, holders, whole, n)


def visualize_sharding(x: NamedArray) -> ShardingPicture | None:
    """Which device holds which block of ``x``, labelled by axis names and index ranges.

    Returns a :class:`ShardingPicture` (``print`` it; notebooks display it as a table). Inside ``jit`` the
    layout is only known once compiled: there it prints the picture when the function is compiled
    (``jax.debug.inspect_array_sharding``) and returns None.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> x = nx.wrap(jnp.zeros((4, 3)), ["batch", "embed"]).shard({"batch": "data"}, mesh=mesh)
    >>> nx.visualize_sharding(x).holders
    {(): ['0']}
    """
    if not is_named(x):
        raise PositionalMisuseError(f"nx.visualize_sharding: expected a NamedArray, got {type(x).__name__} "
                                    "(use jax.debug.visualize_array_sharding for positional arrays)")
    d = x.data
    names = x.names
    if isinstance(d, jax.core.Tracer):
        shape, dtype = tuple(d.shape), d.dtype
        jax.debug.inspect_array_sharding(d, callback=lambda s: print(picture(s, shape, names, dtype)))
        return None
    s = getattr(d, "sharding", None)
    if s is None:
        raise PositionalMisuseError("nx.visualize_sharding: this NamedArray holds no placed data "
                                    f"({type(d).__name__}); place it first (x.shard(), jax.device_put)")
    return picture(s, d.shape, names, d.dtype)


def axes_text(axes: tuple[str, ...]) -> str:
    """``data``, or ``(data, model)`` for a dim split over several mesh axes (major to minor)."""
    return axes[0] if len(axes) == 1 else "(" + ", ".join(axes) + ")"


def _spec_axes(spec: Any, ndim: int) -> dict[int, tuple[str, ...]]:
    """Storage dim -> the mesh axes a PartitionSpec splits it over (dims it replicates left out)."""
    out = {}
    for k, e in enumerate(spec or ()):
        if k < ndim and e is not None and e is not jax.sharding.PartitionSpec.UNCONSTRAINED:
            out[k] = (e,) if isinstance(e, str) else tuple(e)
    return out


def split_axes(x: NamedArray) -> dict[str, tuple[str, ...]]:
    """Each named axis of ``x`` that its sharding splits -> the mesh axes it is split over.

    >>> import jax, jax.numpy as jnp, namedarray as nx
    >>> mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    >>> split_axes(nx.wrap(jnp.zeros((4, 3)), ["batch", "embed"]).shard({"batch": "data"}, mesh=mesh))
    {'batch': ('data',)}
    """
    spec = getattr(getattr(x.data, "sharding", None), "spec", None)
    p = x.data.ndim - len(x.names)
    return {x.names[k - p]: axes for k, axes in _spec_axes(spec, x.data.ndim).items() if k >= p}
