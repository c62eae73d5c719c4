"""``x.at[index]`` against NumPy on the positional data.

Each example draws a value with positional and named axes in a random storage order, an index over random
positional axes and random names (ints, slices with any step, index arrays, new axes), and update values
carrying a random subset of the region's names in their own storage order. The reference indexes the
logical NumPy array (positional axes, then the names in a fixed order): the positional part by NumPy's
rules, each name on its own axis (outer indexing), and updates the selected positions.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import storage_order
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors

NAMES = ("b", "seq", "k2")


def _wrap_any_order(draw, logical, p, names):
    """``logical`` (p positional axes, then ``names``) as a NamedArray stored in a random order."""
    perm, named_at = storage_order(draw, p, names)
    return nx.wrap(np.transpose(logical, perm), named_at)


def _entry(draw, size, n=None):
    kind = draw(st.sampled_from(["int", "slice", "array"]))
    if kind == "int":
        return draw(st.integers(-size, size - 1))
    if kind == "slice":
        start = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
        stop = draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
        step = draw(st.sampled_from([None, 1, 2, -1, -2]))
        return slice(start, stop, step)
    n = draw(st.integers(1, min(3, size))) if n is None else n
    positions = draw(st.lists(st.integers(0, size - 1), min_size=n, max_size=n, unique=True))
    return np.asarray([i - size if draw(st.booleans()) else i for i in positions])  # no position twice


@st.composite
def cases(draw):
    p = draw(st.integers(0, 3))
    pshape = tuple(draw(st.integers(1, 4)) for _ in range(p))
    names = draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
    sizes = {n: draw(st.integers(1, 4)) for n in names}
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logical = rng.integers(-9, 10, pshape + tuple(sizes[n] for n in names)).astype(np.float32)
    x = _wrap_any_order(draw, logical, p, names)
    # the positional part: entries for some leading and some trailing axes with an ellipsis between them,
    # and new axes (None) anywhere
    lead = draw(st.integers(0, p))
    trail = draw(st.integers(0, p - lead))
    n = draw(st.integers(1, min((3,) + pshape)))  # index arrays over positions broadcast together
    pos_index = [_entry(draw, pshape[a], n) for a in range(lead)]
    if trail or draw(st.booleans()):
        pos_index.append(Ellipsis)
    pos_index += [_entry(draw, pshape[a], n) for a in range(p - trail, p)]
    for _ in range(draw(st.integers(0, 1))):
        pos_index.insert(draw(st.integers(0, len(pos_index))), None)
    named_index = {n: _entry(draw, sizes[n]) for n in names if draw(st.booleans())}
    return x, logical, p, names, sizes, pos_index, named_index, rng


def _numpy_index(pos_index, p):
    """The positional index over exactly p axes (an ellipsis expanded, the rest filled with ':')."""
    used = sum(1 for i in pos_index if i is not None and i is not Ellipsis)
    fill = [slice(None)] * (p - used)
    if any(i is Ellipsis for i in pos_index):
        k = next(k for k, i in enumerate(pos_index) if i is Ellipsis)
        return pos_index[:k] + fill + pos_index[k + 1:]
    return pos_index + fill


def _region_ids(logical, p, names, pos_index, named_index):
    """Flat positions of the region (its positional axes, then the names it keeps in ``names`` order)."""
    ids = np.arange(logical.size).reshape(logical.shape)
    r = ids[tuple(_numpy_index(list(pos_index), p)) + (slice(None),) * len(names)]
    kept = list(names)
    for n in names:
        if n not in named_index:
            continue
        j = r.ndim - len(kept) + kept.index(n)
        i = named_index[n]
        if isinstance(i, slice):
            r = r[(slice(None),) * j + (i,)]
        else:
            r = np.take(r, i, axis=j)
            if np.ndim(i) == 0:
                kept.remove(n)
    return r, kept


def _index(pos_index, named_index):
    return (named_index, *pos_index) if named_index else tuple(pos_index)


@settings(max_examples=60, deadline=None)
@given(cases(), st.sampled_from(["get", "set", "add", "multiply", "max"]), st.data())
def test_at_matches_numpy(case, method, data):
    x, logical, p, names, sizes, pos_index, named_index, rng = case
    region, kept = _region_ids(logical, p, names, pos_index, named_index)
    rp = region.ndim - len(kept)
    index = _index(pos_index, named_index)
    with jax.numpy_rank_promotion("raise"):
        if method == "get":
            got = x.at[index].get()
            assert got.shape == region.shape[:rp]
            assert got.named_shape == dict(zip(kept, region.shape[rp:]))
            np.testing.assert_array_equal(nx.unwrap(got, {rp + i: n for i, n in enumerate(kept)}),
                                          logical.reshape(-1)[region])
            return
        # values: a suffix of the region's positional shape (some axes 1), a subset of its names
        vp = data.draw(st.integers(0, rp))
        vshape = tuple(s if data.draw(st.booleans()) else 1 for s in region.shape[rp - vp:rp])
        vnames = data.draw(st.lists(st.sampled_from(kept), unique=True)) if kept else []
        vsizes = {n: region.shape[rp + kept.index(n)] for n in vnames}
        vlogical = rng.integers(1, 4, vshape + tuple(vsizes[n] for n in vnames)).astype(np.float32)
        values = _wrap_any_order(data.draw, vlogical, vp, vnames) if vnames or data.draw(st.booleans()) \
            else vlogical
        got = getattr(x.at[index], method)(values)
        ref_values = np.transpose(vlogical, list(range(vp)) + [vp + vnames.index(n) for n in kept
                                                              if n in vnames])
        ref_values = ref_values.reshape((1,) * (rp - vp) + vshape + tuple(
            region.shape[rp + i] if n in vnames else 1 for i, n in enumerate(kept)))
        ref_values = np.broadcast_to(ref_values, region.shape)
        ref = logical.reshape(-1).copy()
        ufunc = {"set": None, "add": np.add, "multiply": np.multiply, "max": np.maximum}[method]
        if ufunc is None:
            ref[region] = ref_values  # positions are unique: the indices were drawn without repeats
        else:
            ufunc.at(ref, region, ref_values)
    assert got.shape == x.shape and got.named_shape == x.named_shape
    np.testing.assert_array_equal(nx.unwrap(got, {p + i: n for i, n in enumerate(names)}),
                                  ref.reshape(logical.shape))


def test_at_under_jit_and_with_a_traced_position():
    cache = nx.zeros({"batch": 2, "seq": 5, "d": 3})
    step = nx.wrap(jnp.arange(6.0).reshape(3, 2), ["d", "batch"])

    @jax.jit
    def write(c, v, t):
        return c.at[{"seq": t}].set(v)

    out = write(cache, step, 3)
    ref = np.zeros((2, 5, 3), np.float32)
    ref[:, 3, :] = np.arange(6.0).reshape(3, 2).T
    np.testing.assert_array_equal(out.unwrap(["batch", "seq", "d"]), ref)


def test_a_named_index_pairs_up_with_the_axis_it_carries():
    x = nx.wrap(np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3), ["b", "seq", "d"])
    lengths = nx.wrap(jnp.array([1, 3]), ["b"])  # one position per batch element
    got = x.at[{"seq": lengths}].get()
    assert got.named_shape == {"b": 2, "d": 3}
    d = np.asarray(x.unwrap(["b", "seq", "d"]))
    np.testing.assert_array_equal(got.unwrap(["b", "d"]), d[[0, 1], [1, 3]])
    np.testing.assert_array_equal(got.unwrap(["b", "d"]), x[{"seq": lengths}].unwrap(["b", "d"]))
    out = x.at[{"seq": lengths}].set(nx.wrap(jnp.array([-1.0, -2.0]), ["b"]))
    ref = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    ref[0, 1], ref[1, 3] = -1, -2
    np.testing.assert_array_equal(out.unwrap(["b", "seq", "d"]), ref)
    # an index with a name of its own adds that axis
    idx = nx.wrap(jnp.array([0, 2, 2]), ["q"])
    got = x.at[{"seq": idx}].get()
    assert got.named_shape == {"b": 2, "q": 3, "d": 3}
    np.testing.assert_array_equal(got.unwrap(["b", "q", "d"]), d[:, [0, 2, 2]])
    # an update through it keeps that name too: one updated copy of x per q (the union of names, as .get)
    out = x.at[{"seq": idx}].add(1.0)
    assert out.named_shape == {"q": 3, "b": 2, "seq": 4, "d": 3}
    for k, pos in enumerate([0, 2, 2]):
        ref = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
        ref[:, pos] += 1.0
        np.testing.assert_array_equal(out.unwrap(["q", "b", "seq", "d"])[k], ref)
    out = x.at[{"seq": jnp.array([0, 2, 2])}].add(1.0)  # a plain index array: repeated positions add up
    ref = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    np.add.at(ref, (slice(None), [0, 2, 2]), 1.0)
    np.testing.assert_array_equal(out.unwrap(["b", "seq", "d"]), ref)


def test_mode_and_options_pass_through():
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
    got = x.at[{"b": jnp.array([0, 7])}].get(mode="fill", fill_value=-1.0)
    np.testing.assert_array_equal(got.unwrap(["a", "b"]), [[0.0, -1.0], [3.0, -1.0]])
    dropped = x.at[{"b": jnp.array([1, 9])}].set(0.0, mode="drop", unique_indices=True)
    np.testing.assert_array_equal(dropped.unwrap(["a", "b"]), [[0.0, 0.0, 2.0], [3.0, 0.0, 5.0]])
    clipped = x.at[{"b": 9}].set(-5.0, mode="clip")
    np.testing.assert_array_equal(clipped.unwrap(["a", "b"]), [[0.0, 1.0, -5.0], [3.0, 4.0, -5.0]])
    sorted_ = x.at[{"a": jnp.array([0, 1])}].add(1.0, indices_are_sorted=True)
    np.testing.assert_array_equal(sorted_.unwrap(["a", "b"]), np.arange(6.0).reshape(2, 3) + 1)
    applied = x.at[{"a": 1}, ].apply(jnp.negative)
    np.testing.assert_array_equal(applied.unwrap(["a", "b"]), [[0.0, 1.0, 2.0], [-3.0, -4.0, -5.0]])
    np.testing.assert_array_equal(x.at[{"a": 0}].divide(2.0).unwrap(["a", "b"]), [[0, 0.5, 1], [3, 4, 5]])
    np.testing.assert_array_equal(x.at[{"a": 0}].power(2).unwrap(["a", "b"]), [[0, 1, 4], [3, 4, 5]])
    np.testing.assert_array_equal(x.at[{"a": 0}].min(1.0).unwrap(["a", "b"]), [[0, 1, 1], [3, 4, 5]])
    np.testing.assert_array_equal(x.at[{"a": 0}].subtract(1.0).unwrap(["a", "b"]), [[-1, 0, 1], [3, 4, 5]])


def test_mixed_index_in_plain_indexing():
    d = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    x = nx.wrap(d, {0: "b"})  # positional (3, 4)
    np.testing.assert_array_equal(x[{"b": slice(0, 1)}, 1].unwrap(["b", ...]), d[0:1, 1])
    np.testing.assert_array_equal(x[..., {"b": 1}, 2].unwrap(), d[1, :, 2])


def test_update_errors_name_the_axis():
    x = nx.zeros({"b": 2, "seq": 4})
    # values with a name x lacks give one updated copy of x per entry along it (the union of names)
    assert x.at[{"seq": 0}].set(nx.zeros({"z": 2})).named_shape == {"b": 2, "seq": 4, "z": 2}
    with pytest.raises(errors.AxisSpecError, match="values have axes 'seq'"):
        x.at[{"seq": 0}].set(nx.zeros({"seq": 4}))  # seq was selected away
    with pytest.raises(errors.AxisSizeError, match="axis 'seq' has size 3 in the values but size 2 in the"):
        x.at[{"seq": slice(0, 2)}].set(nx.zeros({"seq": 3}))
    with pytest.raises(errors.AxisSizeError,
                       match=r"positional shape \(3,\) does not broadcast to the selected region's"):
        x.at[{"seq": 0}].set(jnp.zeros(3))
    with pytest.raises(errors.AxisSpecError, match="x.at\\[...\\].set: the array has no axis 'q'"):
        x.at[{"q": 0}].set(1.0)
    with pytest.raises(IndexError, match="too many indices for the positional axes: 1 indices for 0"):
        x.at[0].set(1.0)
    with pytest.raises(errors.AxisSpecError, match="carries axis 'b', which the index also selects"):
        x.at[{"seq": nx.wrap(jnp.array([0, 1]), ["b"]), "b": 0}].set(1.0)
    with pytest.raises(errors.AxisSizeError, match="axis 'b' has size 3 in the index for axis 'seq'"):
        x.at[{"seq": nx.wrap(jnp.array([0, 1, 2]), ["b"])}].get()


@pytest.mark.parametrize("method", ["set", "add", "max"])
def test_scatter_names_write_several_positions_into_one_array(method):
    # Haliax's cache write: two new tokens per batch element at positions lengths, lengths + 1
    rng = np.random.default_rng(0)
    base = rng.normal(size=(3, 8, 5)).astype(np.float32)
    lengths = np.array([0, 3, 6])
    kv = rng.normal(size=(3, 2, 5)).astype(np.float32)
    cache = nx.wrap(base, ["batch", "seq", None])
    index = nx.wrap(jnp.asarray(lengths), ["batch"]) + nx.arange(2, name="new")
    values = nx.wrap(kv, ["batch", "new", None])
    got = getattr(cache.at[{"seq": index}], method)(values, scatter="new")
    assert got.named_shape == {"batch": 3, "seq": 8}
    want = base.copy()
    for b in range(3):
        for j in range(2):
            s = lengths[b] + j
            want[b, s] = {"set": kv[b, j], "add": want[b, s] + kv[b, j],
                          "max": np.maximum(want[b, s], kv[b, j])}[method]
    np.testing.assert_allclose(got.unwrap(["batch", "seq", ...]), want, rtol=1e-6)
    # without scatter= the index's name is mapped over: one updated copy per new position
    mapped = cache.at[{"seq": index}].set(values)
    assert mapped.named_shape == {"batch": 3, "seq": 8, "new": 2}


def test_scatter_names_must_belong_to_the_index():
    cache = nx.zeros({"batch": 2, "seq": 4})
    index = nx.arange(2, name="new")
    with pytest.raises(errors.AxisSpecError, match="no index array carries 'other'"):
        cache.at[{"seq": index}].set(1.0, scatter="other")
    with pytest.raises(errors.AxisSpecError, match="which the array itself carries"):
        cache.at[{"seq": index}].set(1.0, scatter="batch")
