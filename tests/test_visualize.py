"""nx.visualize_sharding and the sharding in a NamedArray's repr: which device holds which block, by name.

Every picture is checked against the array's own shards (jax's `addressable_shards`): each block label
names the axis and the index range a device really holds.
"""

from html.parser import HTMLParser

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from meshes import auto_mesh

import namedarray as nx
from namedarray import errors


def value(names=("batch", "embed", "head"), sizes=(8, 4, 2)):
    return nx.wrap(jnp.arange(int(np.prod(sizes)), dtype=jnp.float32).reshape(sizes), list(names))


def holdings(x):
    """device id -> {name: (start, stop)} from the array's own shards."""
    p = x.ndim
    out = {}
    for s in x.data.addressable_shards:
        out[s.device.id] = {n: s.index[p + k].indices(x.data.shape[p + k])[:2] for k, n in enumerate(x.names)}
    return out


class _Cells(HTMLParser):
    """The text of every table cell (markup inside a cell included) and all the text."""

    def __init__(self):
        super().__init__()
        self.cells, self.text, self._depth = [], [], 0

    def handle_starttag(self, tag, attrs):
        self._depth += tag in ("td", "th")

    def handle_endtag(self, tag):
        self._depth -= tag in ("td", "th")

    def handle_data(self, data):
        self.text.append(data)
        if self._depth:
            self.cells.append(data)


def parse_html(markup):
    p = _Cells()
    p.feed(markup)
    return p


def test_single_device_value_is_whole_on_device_0():
    pic = nx.visualize_sharding(value())
    text = str(pic)
    assert "on 1 device: whole (not split)" in text
    assert "batch[0:8] embed[0:4] head[0:2]" in text


@pytest.mark.parametrize("rules,mesh_shape,axes", [
    ({"batch": "x"}, (8,), ("x",)),                               # one split name: a row
    ({"batch": "x", "embed": "y"}, (4, 2), ("x", "y")),            # two: a grid
    ({"batch": "x", "embed": "y", "head": "z"}, (2, 2, 2), ("x", "y", "z")),  # three: a table
    ({"embed": "y"}, (4, 2), ("x", "y")),                          # replicas over x
    ({"batch": ("x", "y")}, (4, 2), ("x", "y")),                   # one name over two mesh axes
])
def test_every_block_is_labelled_with_the_range_its_devices_hold(rules, mesh_shape, axes):
    x = value().shard(rules, mesh=auto_mesh(mesh_shape, axes))
    pic = nx.visualize_sharding(x)
    held = holdings(x)
    split = [n for n in x.names if len({h[n] for h in held.values()}) > 1]
    # every device appears in the block whose ranges it holds
    for key, devices in pic.holders.items():
        for d in devices:
            ranges = {pic.axes[dim]: pic.ranges[j][key[j]] for j, dim in enumerate(pic.split)}
            assert ranges == {n: held[int(d)][n] for n in split}
    assert sorted(int(d) for ds in pic.holders.values() for d in ds) == sorted(held)
    text = str(pic)
    for n in split:  # every split name appears with each of its ranges
        for start, stop in sorted({h[n] for h in held.values()}):
            assert f"[{start}:{stop}]" in text and n in text
    for n, axes_ in rules.items():
        assert n in text and all(a in text for a in (axes_ if isinstance(axes_, tuple) else (axes_,)))
    whole = [n for n in x.names if n not in split]
    if whole:
        assert "whole in every block: " + ", ".join(f"{n} ({x.named_shape[n]})" for n in whole) in text


def test_two_split_names_draw_a_grid():
    x = value().shard({"batch": "x", "embed": "y"}, mesh=auto_mesh((4, 2), ("x", "y")))
    lines = str(nx.visualize_sharding(x)).splitlines()
    assert lines[1].split() == ["embed[0:2]", "embed[2:4]"]
    assert [ln.split() for ln in lines[2:6]] == [["batch[0:2]", "0", "1"], ["batch[2:4]", "2", "3"],
                                                ["batch[4:6]", "4", "5"], ["batch[6:8]", "6", "7"]]


def test_html_picture_holds_every_name_and_range():
    x = value().shard({"batch": "x", "embed": "y"}, mesh=auto_mesh((4, 2), ("x", "y")))
    parsed = parse_html(nx.visualize_sharding(x)._repr_html_())
    joined = " ".join(parsed.text)
    for label in ("batch[0:2]", "batch[6:8]", "embed[0:2]", "embed[2:4]", "head (2)"):
        assert label in joined
    assert {c for c in parsed.cells if c.isdigit()} == {str(i) for i in range(8)}


def test_namedarray_repr_shows_the_sharding_when_on_several_devices():
    single = value()
    assert "sharding" not in repr(single) and "nx-sharding" not in single._repr_html_()
    x = single.shard({"batch": "x"}, mesh=auto_mesh((8,), ("x",)))
    assert "sharding: batch -> x on 8 devices over mesh {'x': 8}" in repr(x)
    parsed = parse_html(x._repr_html_())
    joined = " ".join(parsed.text)
    for n, size in x.named_shape.items():
        assert n in parsed.cells and str(size) in parsed.cells
    assert "batch[0:1]" in joined and "batch[7:8]" in joined
    replicated = single.shard({}, mesh=auto_mesh((8,), ("x",)))
    assert "sharding: replicated on 8 devices" in repr(replicated)


def test_a_split_positional_axis_is_labelled_by_position():
    mesh = auto_mesh((8,), ("x",))
    x = nx.wrap(jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("x"))), [None, "embed"])
    text = str(nx.visualize_sharding(x))
    assert "#0[0:1]" in text and "#0[7:8]" in text and "whole in every block: embed (4)" in text


def test_inside_jit_the_picture_is_printed_when_compiled(capsys):
    mesh = auto_mesh((4, 2), ("x", "y"))

    @jax.jit
    def f(v):
        v = v.shard({"batch": "x", "embed": "y"}, mesh=mesh)
        assert nx.visualize_sharding(v) is None
        return v * 2

    f(value())
    out = capsys.readouterr().out
    assert "batch[0:2]" in out and "embed[2:4]" in out


def test_visualize_needs_a_named_array():
    with pytest.raises(errors.PositionalMisuseError, match="expected a NamedArray"):
        nx.visualize_sharding(jnp.zeros(3))
