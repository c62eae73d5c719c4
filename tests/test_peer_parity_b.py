"""What users of the peer libraries expect of indexing by name, against NumPy and positional jax.

* updates through an index that carries names the target lacks: the union rule (each slice along such a
  name is its own updated copy of the target), against a NumPy loop over those slices, and the documented
  peer result ``{qux, foo, bar}``;
* ``{"new": None}`` adds a size-1 named axis; NamedArray indices with positional axes (NumPy's advanced
  indexing on the positional axes, broadcast by name on the names);
* ``nonzero``, one-argument ``where`` and ``argwhere`` along a new named axis, with ``size=``/``fill_value=``
  under ``jit``;
* dynamic slices by name with a traced start (``ds``, ``dynamic_slice``, ``dynamic_update_slice``) against
  ``jax.lax.dynamic_slice``/``dynamic_update_slice`` on the positional layout (clamped starts included).

Values come in random storage orders and with random axis names; references see the logical layout
(positional axes first, then the names in a fixed order).
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import logical_order as _logical
from conftest import stored_randomly as _stored
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors
from namedarray.ops.indexing import argwhere, ds, dynamic_slice, dynamic_update_slice, nonzero, where

NAME = st.text("abcxyz_", min_size=1, max_size=4)


# --------------------------------------------------------------------------------------------------------
# 1. The union rule for updates through an index that carries names the target lacks


def test_update_through_an_index_with_a_new_name_keeps_it():
    foo, bar = 3, 4
    d = np.arange(foo * bar, dtype=np.float32).reshape(foo, bar)
    a = nx.wrap(d, ["foo", "bar"])
    idx = nx.arange(2, name="qux") + 1
    vals = 100 + 100 * nx.arange(2, name="qux")
    out = a.at[{"bar": idx}].add(vals)
    assert out.named_shape == {"qux": 2, "foo": foo, "bar": bar}  # the peer library's documented result
    got = _logical(out, ["qux", "foo", "bar"])
    for q in range(2):  # each qux slice is its own updated copy
        ref = d.copy()
        ref[:, q + 1] += 100 + 100 * q
        np.testing.assert_array_equal(got[q], ref)
    # .get() with the same index keeps qux as well, and reads back what the update wrote
    region = out.at[{"bar": idx}].get()
    assert region.named_shape == {"qux": 2, "foo": foo}
    np.testing.assert_array_equal(_logical(region, ["qux", "foo"]),
                                  _logical(a.at[{"bar": idx}].get(), ["qux", "foo"])
                                  + (100 + 100 * np.arange(2))[:, None])
    np.testing.assert_array_equal(_logical(a[{"bar": idx}], ["qux", "foo"]),
                                  _logical(a.at[{"bar": idx}].get(), ["qux", "foo"]))


def test_values_with_a_name_the_target_lacks_broadcast_the_target():
    x = nx.zeros({"b": 2, "seq": 4})
    v = nx.wrap(np.array([1.0, 2.0, 3.0], np.float32), ["z"])
    out = x.at[{"seq": 0}].set(v)
    assert out.named_shape == {"b": 2, "seq": 4, "z": 3}
    ref = np.zeros((3, 2, 4), np.float32)
    ref[:, :, 0] = np.array([1.0, 2.0, 3.0])[:, None]
    np.testing.assert_array_equal(_logical(out, ["z", "b", "seq"]), ref)
    # apply with an index name the target lacks
    out = nx.ones({"k": 3}).at[{"k": nx.arange(2, name="q")}].apply(jnp.negative)
    np.testing.assert_array_equal(_logical(out, ["q", "k"]), [[-1, 1, 1], [1, -1, 1]])
    # a name the integer index selects away still cannot appear in the values
    with pytest.raises(errors.AxisSpecError, match="values have axes 'seq'.*selects one element"):
        x.at[{"seq": 0}].set(nx.zeros({"seq": 4}))


@st.composite
def union_cases(draw):
    pool = draw(st.lists(NAME, min_size=6, max_size=6, unique=True))
    n_x = draw(st.integers(1, 3))
    xnames, rest = pool[:n_x], pool[n_x:]
    extra = rest[:draw(st.integers(1, 2))]  # names only the index carries
    vonly = rest[2:2 + draw(st.integers(0, 1))]  # a name only the values carry
    sizes = {n: draw(st.integers(1, 3)) for n in pool}
    p = draw(st.integers(0, 1))
    pshape = tuple(draw(st.integers(1, 3)) for _ in range(p))
    target = draw(st.sampled_from(xnames))
    shared = [n for n in xnames if n != target and draw(st.booleans())]  # names the index pairs up
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xlog = rng.integers(-5, 6, pshape + tuple(sizes[n] for n in xnames)).astype(np.float32)
    inames = draw(st.permutations(extra + shared))
    ilog = rng.integers(-sizes[target], sizes[target], tuple(sizes[n] for n in inames))
    region = [n for n in xnames if n != target] + [n for n in extra]
    vnames = draw(st.lists(st.sampled_from(region), unique=True)) + list(vonly)
    vpos = pshape[len(pshape) - draw(st.integers(0, p)):]
    vlog = rng.integers(1, 4, vpos + tuple(sizes[n] for n in vnames)).astype(np.float32)
    x = _stored(draw, xlog, xnames)
    idx = _stored(draw, ilog, inames)
    values = _stored(draw, vlog, vnames)
    return x, xlog, xnames, target, idx, ilog, inames, values, vlog, vnames, vpos, sizes, extra, vonly


@settings(max_examples=40, deadline=None)
@given(union_cases(), st.sampled_from(["set", "add", "max", "multiply"]))
def test_union_rule_matches_a_numpy_loop_over_the_new_names(case, method):
    x, xlog, xnames, target, idx, ilog, inames, values, vlog, vnames, vpos, sizes, extra, vonly = case
    with jax.numpy_rank_promotion("raise"):
        out = getattr(x.at[{target: idx}], method)(values)
        got_region = x.at[{target: idx}].get()
    new = list(extra) + list(vonly)
    assert out.named_shape == {**{n: sizes[n] for n in xnames + new}}
    got = _logical(out, xnames + new)
    p = xlog.ndim - len(xnames)
    ref = np.broadcast_to(xlog.reshape(xlog.shape + (1,) * len(new)),
                          xlog.shape + tuple(sizes[n] for n in new)).copy()
    ufunc = {"set": None, "add": np.add, "max": np.maximum, "multiply": np.multiply}[method]
    others = [n for n in xnames if n != target]
    for coords in itertools.product(*[range(sizes[n]) for n in others + new]):
        c = dict(zip(others + new, coords))
        c[target] = ilog[tuple(c[n] for n in inames)]
        where_ = (Ellipsis,) + tuple(c[n] for n in xnames + new)
        v = vlog[(Ellipsis,) + tuple(c[n] for n in vnames)]
        ref[where_] = v if ufunc is None else ufunc(ref[where_], v)
    np.testing.assert_array_equal(got, ref)
    # .get() with the same index: the names of x but the target, and the index's
    region_names = others + list(extra)
    assert got_region.named_shape == {n: sizes[n] for n in region_names}
    greg = _logical(got_region, region_names)
    for coords in itertools.product(*[range(sizes[n]) for n in region_names]):
        c = dict(zip(region_names, coords))
        c[target] = ilog[tuple(c[n] for n in inames)]
        np.testing.assert_array_equal(greg[(Ellipsis,) + coords], xlog[(slice(None),) * p
                                                                      + tuple(c[n] for n in xnames)])


# --------------------------------------------------------------------------------------------------------
# 2. New axes by name, and NamedArray indices with positional axes


def test_none_by_name_adds_a_size_one_axis():
    d = np.arange(24).reshape(2, 3, 4)
    x = nx.wrap(d, {0: "b"})  # positional (3, 4)
    y = x[{"new": None}]
    assert y.shape == (3, 4) and y.named_shape == {"b": 2, "new": 1}
    np.testing.assert_array_equal(_logical(y, ["b", "new"]), d.transpose(1, 2, 0)[..., None])
    z = x[{"new": None, "b": 1}, 0]
    assert z.shape == (4,) and z.named_shape == {"new": 1}
    np.testing.assert_array_equal(_logical(z, ["new"]), d[1, 0][:, None])
    g = x.at[{"new": None}].get()
    assert g.named_shape == {"b": 2, "new": 1}
    # an update through a new axis: values may carry it (size 1); the result has x's names, as x.at[None]
    out = x.at[{"new": None, "b": 0}].set(nx.wrap(np.full((1,), -1), ["new"]))
    assert out.named_shape == {"b": 2}
    ref = d.copy()
    ref[0] = -1
    np.testing.assert_array_equal(_logical(out, ["b"]), ref.transpose(1, 2, 0))
    with pytest.raises(errors.DuplicateAxisError, match="None.*adds a new axis 'b'"):
        x[{"b": None}]
    with pytest.raises(errors.DuplicateAxisError, match=r"x.at\[...\].get: \{'b': None\} adds an axis 'b'"):
        x.at[{"b": None}].get()
    with pytest.raises(errors.AxisSpecError, match="axis names must be non-empty strings"):
        x[{"": None}]


def _pos_entry(draw, size, bshape):
    kind = draw(st.sampled_from(["slice", "slice", "array", "int"]))
    if kind == "slice":
        return slice(draw(st.sampled_from([None, 0, 1])), None, draw(st.sampled_from([None, 1, -1])))
    if kind == "int":
        return draw(st.integers(-size, size - 1))
    return None  # an index array, filled in by the caller


@st.composite
def advanced_cases(draw):
    pool = draw(st.lists(NAME, min_size=4, max_size=4, unique=True))
    xnames, q = pool[:draw(st.integers(1, 3))], pool[3]
    sizes = {n: draw(st.integers(1, 4)) for n in pool}
    p = draw(st.integers(0, 2))
    pshape = tuple(draw(st.integers(1, 4)) for _ in range(p))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xlog = rng.integers(-9, 10, pshape + tuple(sizes[n] for n in xnames)).astype(np.float32)
    k = draw(st.integers(1, min(2, len(xnames))))
    indexed = list(draw(st.permutations(xnames)))[:k]
    others = [n for n in xnames if n not in indexed]
    bshape = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 2))))
    with_q = draw(st.booleans())

    def suffix():  # a shape that broadcasts to bshape
        s = bshape[len(bshape) - draw(st.integers(0, len(bshape))):]
        return tuple(1 if draw(st.booleans()) else n for n in s)

    ilogs, idx = [], {}
    for n in indexed:
        qs = (sizes[q],) if with_q and draw(st.booleans()) else ()
        log = rng.integers(-sizes[n], sizes[n], suffix() + qs)
        idx[n] = _stored(draw, log, [q] if qs else [])
        ilogs.append(log if qs else log[..., None])  # (positional..., q or 1)
    pos = [_pos_entry(draw, s, bshape) for s in pshape]
    pos = [rng.integers(-s, s, suffix()) if e is None else e for e, s in zip(pos, pshape)]
    qn = sizes[q] if any(idx[n].names for n in indexed) else 0
    x = _stored(draw, xlog, xnames)
    return x, xlog, xnames, indexed, others, idx, ilogs, pos, q, qn, sizes


@settings(max_examples=35, deadline=None)
@given(advanced_cases(), st.data())
def test_named_array_indices_with_positional_axes_match_numpy(case, data):
    x, xlog, xnames, indexed, others, idx, ilogs, pos, q, qn, sizes = case
    p = len(pos)
    # NumPy on the logical layout with the indexed names right after the positional axes
    re = xlog.transpose(list(range(p)) + [p + xnames.index(n) for n in indexed + others])
    index = ({**idx}, *pos) if pos else {**idx}
    with jax.numpy_rank_promotion("raise"):
        got = x[index]
        got_at = x.at[index].get()
        if not pos:
            assert got.named_shape == got_at.named_shape
    out_names = others + ([q] if qn else [])
    slices = range(qn) if qn else [0]
    refs = [re[tuple(pos) + tuple(i[..., min(j, i.shape[-1] - 1)] for i in ilogs)] for j in slices]
    assert got.named_shape == {n: sizes[n] for n in out_names}
    for g in (got, got_at):
        assert g.shape == refs[0].shape[:refs[0].ndim - len(others)]
        lg = _logical(g, out_names)
        for j, r in zip(slices, refs):
            np.testing.assert_array_equal(lg[..., j] if qn else lg, r)
    # an update through the same index: each q slice its own copy, repeated positions add up
    vlog = np.asarray(data.draw(st.integers(1, 3)), np.float32) * np.ones(
        refs[0].shape + ((qn,) if qn else ()), np.float32)
    values = nx.wrap(vlog, {vlog.ndim - 1 - i: n for i, n in enumerate(reversed(out_names))})
    with jax.numpy_rank_promotion("raise"):
        out = x.at[index].add(values)
    assert out.named_shape == {**{n: sizes[n] for n in xnames}, **({q: qn} if qn else {})}
    lo = _logical(out, indexed + others + ([q] if qn else []))
    for j in slices:
        ref = re.copy()
        np.add.at(ref, tuple(pos) + tuple(i[..., min(j, i.shape[-1] - 1)] for i in ilogs),
                  vlog[..., j] if qn else vlog)
        np.testing.assert_array_equal(lo[..., j] if qn else lo, ref)


def test_named_array_index_with_positional_axes_examples():
    d = np.arange(2 * 5 * 6).reshape(2, 5, 6)
    x = nx.wrap(d, {1: "seq", 2: "k"})  # positional (2,)
    i = nx.wrap(np.array([[0, 4], [1, 1], [3, 2]]), [None, None])  # positional (3, 2), no names
    np.testing.assert_array_equal(_logical(x[{"seq": i}], ["k"]), d[:, [[0, 4], [1, 1], [3, 2]], :])
    # with a positional index array too: separated by the positional slice, the index axes go first
    j = np.array([1, 0])
    got = x[{"seq": i}, j]
    assert got.shape == (3, 2) and got.named_shape == {"k": 6}
    np.testing.assert_array_equal(_logical(got, ["k"]), d[j, [[0, 4], [1, 1], [3, 2]], :])
    # a plain 1-d array still indexes by name and keeps the name
    assert x[{"seq": np.array([0, 2])}].named_shape == {"seq": 2, "k": 6}
    with pytest.raises(errors.AxisSpecError, match="carries axis 'k', which the index also selects"):
        x[{"seq": nx.wrap(np.array([0, 1]), ["k"]), "k": 0}]
    with pytest.raises(errors.AxisSizeError, match=r"positional shapes \(3,\), \(3, 2\) do not broadcast"):
        x.at[{"seq": i}, np.array([0, 1, 0])].get()


# --------------------------------------------------------------------------------------------------------
# 3. nonzero, where(condition), argwhere along a new named axis


@st.composite
def nonzero_cases(draw):
    pool = draw(st.lists(NAME, min_size=5, max_size=5, unique=True))
    names, axis_name, coord_name = pool[:draw(st.integers(1, 3))], pool[3], pool[4]
    p = draw(st.integers(0, 1))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(p + len(names)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logical = (rng.random(shape) < draw(st.sampled_from([0.0, 0.3, 0.7]))).astype(np.int32)
    order = draw(st.one_of(st.none(), st.permutations(names)))
    return _stored(draw, logical, names), logical, names, p, axis_name, coord_name, order


@settings(max_examples=25, deadline=None)
@given(nonzero_cases(), st.integers(0, 6), st.integers(-3, 3), st.booleans())
def test_nonzero_where_argwhere_by_name_match_numpy(case, size, fill, fill_by_axis):
    x, logical, names, p, axis_name, coord_name, order = case
    enum = list(order) if order is not None else sorted(names)
    keys = list(range(p)) + enum
    ref = np.nonzero(logical.transpose(list(range(p)) + [p + names.index(n) for n in enum]))
    if p:  # hits are keyed by name: positional axes besides the names must be named first
        with pytest.raises(errors.PositionalMisuseError, match="positional axes.*x.tag"):
            nonzero(x, axis_name=axis_name, order=order)
    else:
        hits = nonzero(x, axis_name=axis_name, order=order)
        assert list(hits) == keys
        for k, r in zip(keys, ref):
            assert hits[k].shape == () and hits[k].named_shape == {axis_name: len(r)}
            np.testing.assert_array_equal(_logical(hits[k], [axis_name]), r)
        if len(ref[0]):  # gathering by name reads the non-zero values back
            np.testing.assert_array_equal(_logical(x[hits], [axis_name]), np.ones(len(ref[0])))
    # under jit: size= and fill_value= (a scalar, or by axis)
    fills = {k: fill + i for i, k in enumerate(keys)} if fill_by_axis else fill
    f = jax.jit(lambda x: nonzero(x, size=size, fill_value=fills, axis_name=axis_name, order=order))
    w = jax.jit(lambda x: where(x, size=size, fill_value=fills, axis_name=axis_name, order=order))
    a = jax.jit(lambda x: argwhere(x, size=size, fill_value=fills, axis_name=axis_name,
                                   coord_name=coord_name, order=order))
    got_a = a(x)
    got, got_w = (f(x), w(x)) if not p else (None, None)
    for i, (k, r) in enumerate(zip(keys, ref)):
        fk = fills[k] if fill_by_axis else fill
        padded = np.concatenate([r[:size], np.full(max(0, size - len(r)), fk)])
        if not p:
            np.testing.assert_array_equal(_logical(got[k], [axis_name]), padded)
            np.testing.assert_array_equal(_logical(got_w[k], [axis_name]), padded)
        np.testing.assert_array_equal(_logical(got_a, [coord_name, axis_name])[i], padded)
    assert got_a.named_shape == {coord_name: len(keys), axis_name: size}
    positional = argwhere(x, axis_name=axis_name, order=order)
    assert positional.shape == (len(keys),)
    np.testing.assert_array_equal(_logical(positional, [axis_name]).T,
                                  np.argwhere(logical.transpose(list(range(p)) + [p + names.index(n)
                                                                                  for n in enum])))


def test_nonzero_by_name_dispatch_and_errors():
    x = nx.wrap(np.array([[0, 3], [4, 0]]), ["r", "c"])
    # enumerated with the names sorted (c before r), whatever the storage order
    assert {k: _logical(v, ["nz"]).tolist() for k, v in x.nonzero(axis_name="nz").items()} == \
        {"c": [0, 1], "r": [1, 0]}
    assert {k: _logical(v, ["nz"]).tolist() for k, v in x.nonzero(axis_name="nz", order=["r", "c"]).items()} \
        == {"r": [0, 1], "c": [1, 0]}
    by_position = nonzero(nx.wrap(np.array([[0, 1], [1, 0]])), axis_name="nz")
    assert {k: _logical(v, ["nz"]).tolist() for k, v in by_position.items()} == {0: [0, 1], 1: [1, 0]}
    # without names: jax's positional results (NamedArrays without names for a NamedArray)
    (only,) = nonzero(nx.wrap(np.array([0, 2, 3])))
    assert only.named_shape == {} and only.tolist() == [1, 2]
    assert [r.tolist() for r in nonzero(np.array([[1, 0], [0, 1]]))] == [[0, 1], [0, 1]]
    assert argwhere(nx.wrap(np.array([0, 2, 3]))).tolist() == [[1], [2]]
    with pytest.raises(errors.PositionalMisuseError, match="nx.nonzero.*'r', 'c'.*axis_name="):
        nonzero(x)
    with pytest.raises(errors.PositionalMisuseError, match="nx.where.*'r', 'c'.*axis_name="):
        where(x)
    with pytest.raises(errors.PositionalMisuseError, match="nx.argwhere.*axis_name="):
        argwhere(x)
    with pytest.raises(errors.DuplicateAxisError, match="axis_name 'r' is already an axis"):
        nonzero(x, axis_name="r")
    with pytest.raises(errors.DuplicateAxisError, match="coord_name 'nz' must differ"):
        argwhere(x, axis_name="nz", coord_name="nz")
    with pytest.raises(errors.AxisSpecError, match="order must list each named axis.*'r'"):
        nonzero(x, axis_name="nz", order=["r"])
    with pytest.raises(errors.AxisSpecError, match="fill_value gives axes 'q'"):
        nonzero(x, axis_name="nz", size=3, fill_value={"q": 1})
    with pytest.raises(TypeError, match="nx.nonzero: under jit the number of hits must be static: pass "
                                        "size="):
        jax.jit(lambda x: nonzero(x, axis_name="nz"))(x)
    with pytest.raises(TypeError, match="nx.where: give both x and y, or neither"):
        where(x > 0, 1.0)
    np.testing.assert_array_equal(_logical(where(x > 0, x, -1), ["r", "c"]), [[-1, 3], [4, -1]])


# --------------------------------------------------------------------------------------------------------
# 4. Dynamic slices by name with a traced start


@st.composite
def slice_cases(draw):
    pool = draw(st.lists(NAME, min_size=3, max_size=3, unique=True))
    names = pool[:draw(st.integers(1, 3))]
    p = draw(st.integers(0, 2))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(p + len(names)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logical = rng.integers(-9, 10, shape).astype(np.float32)
    j = draw(st.integers(0, len(shape) - 1))  # the logical axis sliced: positional (j < p) or a name
    axis = j if j < p else names[j - p]
    n = shape[j]
    size = draw(st.integers(0, n))
    start = draw(st.integers(-n - 3, n + 3))
    return _stored(draw, logical, names), logical, names, p, j, axis, size, start, rng


def _window(logical, j, start, size):
    starts = [0] * logical.ndim
    starts[j] = start
    sizes = list(logical.shape)
    sizes[j] = size
    return np.asarray(jax.lax.dynamic_slice(jnp.asarray(logical), starts, sizes))


@settings(max_examples=35, deadline=None)
@given(slice_cases(), st.sampled_from(["set", "add"]))
def test_dynamic_slices_match_lax_on_the_positional_layout(case, method):
    x, logical, names, p, j, axis, size, start, rng = case
    ref = _window(logical, j, start, size)
    if isinstance(axis, str):
        def index(i):
            return {axis: ds(i, size)}
    else:
        def index(i):
            return (slice(None),) * axis + (ds(i, size),)
    with jax.numpy_rank_promotion("raise"):
        got = jax.jit(lambda x, i: x[index(i)])(x, start)
        got_fn = jax.jit(lambda x, i: dynamic_slice(x, {axis: i}, {axis: size}))(x, start)
        got_at = jax.jit(lambda x, i: x.at[index(i)].get())(x, start)
        got_eager = x[index(start)]
    for g in (got, got_fn, got_at, got_eager):
        assert g.named_shape == {n: ref.shape[p + k] for k, n in enumerate(names)}
        np.testing.assert_array_equal(_logical(g, names), ref)
    # writing a window back: .at[...] and dynamic_update_slice against lax.dynamic_update_slice
    upd = rng.integers(1, 4, ref.shape).astype(np.float32)
    u = nx.wrap(upd, {p + k: n for k, n in enumerate(names)})
    starts = [0] * logical.ndim
    starts[j] = start
    new = upd if method == "set" else ref + upd
    expect = np.asarray(jax.lax.dynamic_update_slice(jnp.asarray(logical), jnp.asarray(new), starts))
    with jax.numpy_rank_promotion("raise"):
        out = jax.jit(lambda x, u, i: getattr(x.at[index(i)], method)(u))(x, u, start)
        np.testing.assert_array_equal(_logical(out, names), expect)
        if method == "set":
            out = jax.jit(lambda x, u, i: dynamic_update_slice(x, u, {axis: i}))(x, u, start)
            np.testing.assert_array_equal(_logical(out, names), expect)


def test_dynamic_slice_clamps_as_lax_and_loops_reuse_one_kernel(counts):
    x = nx.wrap(np.arange(2 * 10, dtype=np.float32).reshape(2, 10), ["b", "seq"])
    d = np.arange(20, dtype=np.float32).reshape(2, 10)
    for i, first in [(-3, 6), (-12, 0), (8, 6), (20, 6), (3, 3)]:  # negative: from the end once; clamped
        np.testing.assert_array_equal(_logical(x[{"seq": ds(i, 4)}], ["b", "seq"]), d[:, first:first + 4])
    assert _logical(x[{"seq": ds(3)}], ["b", "seq"]).shape == (2, 3)  # ds(n) is ds(0, n)
    # a KV-cache style loop under jit: a traced position, one compiled step
    cache = nx.zeros({"b": 2, "seq": 6, "d": 3})

    @jax.jit
    def write(c, t, v):
        return c.at[{"seq": ds(t, 2)}].set(v)

    steps = [nx.wrap(np.full((2, 2, 3), t + 1, np.float32), ["b", "seq", "d"]) for t in range(3)]
    counts.reset()
    for t in range(3):
        cache = write(cache, t * 2, steps[t])
    assert counts.compiles == 1
    np.testing.assert_array_equal(_logical(cache, ["b", "seq", "d"])[0, :, 0], [1, 1, 2, 2, 3, 3])


def test_dynamic_slice_with_a_named_start_slices_each_element_at_its_own_start():
    d = np.arange(3 * 8, dtype=np.float32).reshape(3, 8)
    x = nx.wrap(d, ["b", "seq"])
    starts = nx.wrap(np.array([0, 5, -2]), ["b"])  # pairs up with x's b
    got = x[{"seq": ds(starts, 3)}]
    assert got.named_shape == {"b": 3, "seq": 3}
    np.testing.assert_array_equal(_logical(got, ["b", "seq"]), [d[0, 0:3], d[1, 5:8], d[2, 5:8]])
    np.testing.assert_array_equal(_logical(dynamic_slice(x, {"seq": starts}, {"seq": 3}), ["b", "seq"]),
                                  _logical(got, ["b", "seq"]))
    out = x.at[{"seq": ds(starts, 3)}].set(-1.0)
    ref = d.copy()
    ref[0, 0:3] = ref[1, 5:8] = ref[2, 5:8] = -1
    np.testing.assert_array_equal(_logical(out, ["b", "seq"]), ref)
    # a start with a name x lacks: the union rule, one slice per start
    t = nx.wrap(np.array([1, 6]), ["t"])
    got = x[{"seq": ds(t, 2)}]
    assert got.named_shape == {"b": 3, "seq": 2, "t": 2}
    np.testing.assert_array_equal(_logical(got, ["t", "b", "seq"]), [d[:, 1:3], d[:, 6:8]])
    out = x.at[{"seq": ds(t, 2)}].add(100.0)
    assert out.named_shape == {"b": 3, "seq": 8, "t": 2}
    for k, s in enumerate([1, 6]):
        ref = d.copy()
        ref[:, s:s + 2] += 100
        np.testing.assert_array_equal(_logical(out, ["t", "b", "seq"])[k], ref)


def test_dynamic_slice_errors_name_the_axis_and_sizes():
    x = nx.zeros({"b": 2, "seq": 4})
    with pytest.raises(errors.AxisSizeError, match="nx.dynamic_slice: a dynamic slice of size 5 along axis "
                                                   "'seq', which has size 4"):
        dynamic_slice(x, {"seq": 0}, {"seq": 5})
    with pytest.raises(errors.AxisSizeError, match="size 5 along axis 'seq', which has size 4"):
        x[{"seq": ds(0, 5)}]
    with pytest.raises(errors.AxisSpecError, match="only one of them gives 'b'"):
        dynamic_slice(x, {"seq": 0, "b": 0}, {"seq": 2})
    with pytest.raises(errors.AxisSpecError, match="nx.dynamic_slice: the array has no axis 'q'"):
        dynamic_slice(x, {"q": 0}, {"q": 1})
    with pytest.raises(TypeError, match="the start for axis 'seq' must be an integer scalar"):
        x[{"seq": ds(1.5, 2)}]
    with pytest.raises(TypeError, match="nx.ds: size must be a static int"):
        ds(0, 2.5)
    with pytest.raises(errors.AxisSpecError, match="the update has no axis 'seq'"):
        dynamic_update_slice(x, nx.zeros({"b": 2}), {"seq": 1})
    with pytest.raises(errors.AxisSizeError, match="axis 'b' has size 3 in the update but size 2"):
        dynamic_update_slice(x, nx.zeros({"b": 3, "seq": 1}), {"seq": 1})
    with pytest.raises(errors.RankError, match="start_indices has 1 entries for 0 positional axes"):
        dynamic_slice(x, [0], [1])
    # positional sequences keep jax.lax's meaning
    y = nx.wrap(np.arange(12.0).reshape(3, 4), [None, "k"])
    np.testing.assert_array_equal(_logical(dynamic_slice(y, [1], [2]), ["k"]),
                                  np.arange(12.0).reshape(3, 4)[1:3])
