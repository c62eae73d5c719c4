"""What users of the peer libraries expect of whole-value predicates, ``rearrange``'s sizes, ``unique``,
``tile`` and ``broadcast_to``, against NumPy.

References are NumPy on the positional data: values with names are laid out by name (positional axes
first, then the names in one fixed order, size 1 where a value lacks a name) before NumPy sees them. Inputs
come in random storage orders (where ``nx.wrap`` finds the named axes among the positional ones).
"""

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

POOL = ("a", "bb", "c1", "seq")


def _aligned(x: nx.NamedArray, rank: int, universe: list[str]) -> np.ndarray:
    """``x`` laid out for NumPy: positional axes left-padded to ``rank``, then ``universe`` (size 1 where
    ``x`` lacks a name)."""
    own = [n for n in universe if n in x.names]
    d = _logical(x, own)
    sizes = dict(x.named_shape)
    return d.reshape((1,) * (rank - len(x.shape)) + x.shape + tuple(sizes.get(n, 1) for n in universe))


def _truth(v) -> bool:
    """A 0-d predicate result: a NamedArray without names (``bool()`` takes it)."""
    assert isinstance(v, nx.NamedArray) and v.shape == () and not v.names, v
    assert v.dtype == np.bool_
    return bool(v)


# --------------------------------------------------------------------------------------------------------
# 1. Whole-value predicates


def test_the_reported_cases():
    x = nx.ones({"A": 2, "B": 3})
    assert _truth(nx.allclose(x, x)) is True
    assert _truth(nx.array_equal(x, nx.ones(()))) is False
    assert np.array_equal(np.ones((2, 3)), np.ones(())) is False  # as NumPy says
    assert _truth(nx.array_equiv(x, nx.ones({"C": 4}))) is False
    assert bool(np.array_equiv(np.ones((2, 3)), np.ones(4))) is False
    # the same values by name, stored in another order
    y = nx.wrap(jnp.ones((3, 2)), ["B", "A"])
    assert _truth(nx.array_equal(x, y)) and _truth(nx.array_equiv(x, y)) and _truth(nx.allclose(x, y))
    # numpy's functions reach them through __array_function__
    assert bool(np.allclose(x, y)) and bool(np.array_equal(x, y))
    assert not bool(np.array_equiv(x, nx.ones({"C": 4})))


def test_array_equal_compares_named_shapes_names_and_sizes():
    d = np.arange(6.0).reshape(2, 3)
    x = nx.wrap(d, ["a", "b"])
    assert _truth(nx.array_equal(x, nx.wrap(d.T, ["b", "a"])))
    assert not _truth(nx.array_equal(x, nx.wrap(d, ["a", "c"])))  # other names, same positional data
    assert not _truth(nx.array_equal(x, nx.wrap(d, ["a", ...])))  # 'b' positional in one of them
    assert not _truth(nx.array_equal(x, nx.wrap(d[:, :2], ["a", "b"])))  # another size
    assert not _truth(nx.array_equal(x, nx.wrap(d + (d == 5), ["a", "b"])))  # one element differs
    nan = nx.wrap(np.array([1.0, np.nan]), ["k"])
    assert not _truth(nx.array_equal(nan, nan)) and _truth(nx.array_equal(nan, nan, equal_nan=True))
    # a plain array is a value without names
    assert _truth(nx.array_equal(nx.wrap(d), d)) and not _truth(nx.array_equal(x, d))


def test_array_equiv_needs_one_named_shape_to_hold_the_other():
    x = nx.wrap(np.ones((2, 3)), ["a", "b"])
    assert _truth(nx.array_equiv(x, nx.ones({"b": 3})))  # broadcast along 'a'
    assert _truth(nx.array_equiv(nx.ones({"b": 3}), x))
    assert _truth(nx.array_equiv(x, 1.0)) and _truth(nx.array_equiv(x, nx.ones(())))
    assert not _truth(nx.array_equiv(x, nx.ones({"c": 4})))
    assert not _truth(nx.array_equiv(nx.ones({"a": 2}), nx.ones({"b": 3})))  # neither holds the other
    assert not _truth(nx.array_equiv(x, nx.ones({"b": 4})))  # a size conflict: False, as in NumPy
    assert not _truth(nx.array_equiv(x, nx.zeros({"b": 3})))
    # positional shapes by NumPy's rules, as np.array_equiv
    for s1, s2 in [((2, 1), (1, 3)), ((3,), (2, 3)), ((2,), (3,)), ((), (4,))]:
        got = _truth(nx.array_equiv(nx.wrap(np.ones(s1)), nx.wrap(np.ones(s2))))
        assert got == bool(np.array_equiv(np.ones(s1), np.ones(s2))), (s1, s2)


def test_allclose_broadcasts_by_name_and_raises_on_conflicts():
    d = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = nx.wrap(d, ["a", "b"])
    assert _truth(nx.allclose(x, nx.wrap(d.T + 1e-9, ["b", "a"])))
    assert not _truth(nx.allclose(x, nx.wrap(d, ["b", "a"])))  # the same positions, other names
    assert _truth(nx.allclose(nx.full({"a": 2, "b": 3}, 2.0), nx.full({"c": 4}, 2.0)))  # as np.allclose
    assert _truth(nx.allclose(x, x * 1.01, rtol=nx.wrap(np.array([0.02, 0.02]), ["a"])))
    assert not _truth(nx.allclose(x, x * 1.01, rtol=nx.wrap(np.array([0.02, 0.0]), ["b"])))
    with pytest.raises(errors.AxisSizeError, match=r"nx.allclose: axis 'a' has size 2 .* size 3"):
        nx.allclose(x, nx.ones({"a": 3}))
    with pytest.raises(errors.AxisSizeError, match=r"nx.allclose: the positional shapes do not broadcast"):
        nx.allclose(nx.wrap(np.ones((2, 3))), nx.wrap(np.ones(4)))
    nan = nx.wrap(np.array([np.nan]), ["k"])
    assert not _truth(nx.allclose(nan, nan)) and _truth(nx.allclose(nan, nan, equal_nan=True))


def test_isclose_stays_elementwise_and_plain_operands_keep_jax_results():
    x = nx.wrap(np.array([1.0, 2.0]), ["k"])
    assert nx.isclose(x, nx.wrap(np.array([1.0, 3.0]), ["k"])).unwrap(["k"]).tolist() == [True, False]
    for f in (nx.array_equal, nx.array_equiv, nx.allclose):
        out = f(jnp.ones(3), np.ones(3))
        assert isinstance(out, jax.Array) and bool(out)


def test_predicates_under_jit_and_per_element_of_xmap_names():
    x = nx.wrap(np.arange(6.0).reshape(2, 3), ["a", "b"])
    y = nx.wrap(np.arange(6.0).reshape(2, 3).T, ["b", "a"])
    for f in (nx.array_equal, nx.array_equiv, nx.allclose):
        assert _truth(jax.jit(f)(x, y)), f
        assert not _truth(jax.jit(f)(x, y + 1)), f
    # names bound by nx.xmap are per element there, as in xmap: one answer per row
    a = np.arange(12.0).reshape(4, 3)
    b = a.copy()
    b[1, 1] = 100.0
    for f in (jnp.allclose, jnp.array_equal, jnp.array_equiv):
        out = nx.xmap(f, in_axes=({0: "i"}, {0: "i"}), out_axes={0: "i"})(a, b)
        np.testing.assert_array_equal(out, [True, False, True, True])


@st.composite
def predicate_cases(draw):
    names = draw(st.lists(st.sampled_from(POOL), max_size=3, unique=True))
    sizes = {n: draw(st.integers(1, 3)) for n in names}
    pshape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = rng.integers(0, 3, pshape + tuple(sizes[n] for n in names)).astype(np.float32)
    x = _stored(draw, d, names)
    how = draw(st.sampled_from(["same", "perturbed", "fewer names", "other name", "other size",
                                "positional broadcast", "constant"]))
    y_names, y_sizes, y_pshape, e = list(names), dict(sizes), pshape, d
    if how == "perturbed" and d.size:
        e = d.copy()
        e.flat[draw(st.integers(0, d.size - 1))] += 1
    elif how == "fewer names" and names:
        drop = draw(st.sampled_from(names))
        e = np.take(d, 0, axis=len(pshape) + names.index(drop))
        y_names.remove(drop)
    elif how == "other name":
        new = draw(st.sampled_from([n for n in (*POOL, "zz") if n not in names]))
        y_sizes[new] = draw(st.integers(1, 3))
        y_names.append(new)
        e = np.broadcast_to(d[..., None], d.shape + (y_sizes[new],))
    elif how == "other size" and names:
        n = draw(st.sampled_from(names))
        y_sizes[n] = sizes[n] + 1
        e = np.concatenate([d, np.take(d, [0], axis=len(pshape) + names.index(n))], axis=len(pshape)
                           + names.index(n))
    elif how == "positional broadcast":
        y_pshape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        e = rng.integers(0, 2, y_pshape + tuple(sizes[n] for n in names)).astype(np.float32)
    elif how == "constant":
        y_names, y_pshape = [], ()
        e = np.asarray(draw(st.sampled_from([0.0, 1.0])), np.float32)
    y = _stored(draw, np.ascontiguousarray(e), [n for n in y_names])
    return x, y


@settings(max_examples=60, deadline=None)
@given(predicate_cases())
def test_predicates_match_numpy_aligned_by_name(case):
    x, y = case
    universe = sorted(set(x.names) | set(y.names))
    rank = max(len(x.shape), len(y.shape))
    ax, ay = _aligned(x, rank, universe), _aligned(y, rank, universe)
    sx, sy = dict(x.named_shape).items(), dict(y.named_shape).items()
    equal = dict(sx) == dict(sy) and x.shape == y.shape and np.array_equal(ax, ay)
    assert _truth(nx.array_equal(x, y)) == equal
    assert _truth(nx.array_equal(y, x)) == equal
    equiv = (sx <= sy or sy <= sx) and bool(np.array_equiv(ax, ay))
    assert _truth(nx.array_equiv(x, y)) == equiv
    assert _truth(nx.array_equiv(y, x)) == equiv
    conflict = any(dict(sx)[n] != dict(sy)[n] for n in set(x.names) & set(y.names))
    try:
        np.broadcast_shapes(x.shape, y.shape)
        positional_ok = True
    except ValueError:
        positional_ok = False
    if conflict or not positional_ok:
        with pytest.raises(errors.AxisSizeError, match="nx.allclose"):
            nx.allclose(x, y)
    else:
        assert _truth(nx.allclose(x, y)) == bool(np.allclose(ax, ay))


# --------------------------------------------------------------------------------------------------------
# 2. rearrange: sizes for any identifier


def test_rearrange_takes_sizes_named_like_its_parameters():
    x = nx.wrap(np.arange(6), ["H"])
    for key in ("x", "spec"):
        out = nx.rearrange(nx.ones({"H": 6}), f"{{H:({key} y)}} -> {{{key}, y}}", **{key: 2})
        assert out.named_shape == {key: 2, "y": 3}
    out = nx.rearrange(x, "{H:(x y)} -> x {y}", x=2)
    np.testing.assert_array_equal(_logical(out, ["y"]), np.arange(6).reshape(2, 3))
    jitted = jax.jit(lambda v: nx.rearrange(v, "{H:(x y)} -> {x, y}", x=3))(x)
    np.testing.assert_array_equal(_logical(jitted, ["x", "y"]), np.arange(6).reshape(3, 2))
    with pytest.raises(TypeError):
        nx.rearrange(x=x, spec="{H} -> H")  # the value and the spec are positional-only


# --------------------------------------------------------------------------------------------------------
# 3. unique & co., tile


def test_unique_returns_named_arrays_as_sort_does():
    v = nx.wrap(jnp.array([3, 1, 3]))
    out = nx.unique(v, size=2)
    assert isinstance(out, nx.NamedArray) and not out.names
    np.testing.assert_array_equal(np.asarray(out), np.unique([3, 1, 3]))
    assert isinstance(nx.sort(v), nx.NamedArray)  # the same kind of result
    d = np.array([[2, 0, 2], [5, 0, 1]])
    vals, idx, inv, counts = nx.unique(nx.wrap(d), return_index=True, return_inverse=True, return_counts=True)
    ref = np.unique(d, return_index=True, return_inverse=True, return_counts=True)
    for got, want in zip((vals, idx, inv, counts), ref):
        assert isinstance(got, nx.NamedArray) and not got.names
        np.testing.assert_array_equal(np.asarray(got).ravel(), np.asarray(want).ravel())
    rows = nx.unique(nx.wrap(np.array([[1, 2], [0, 1], [1, 2]])), axis=0)
    np.testing.assert_array_equal(np.asarray(rows), np.unique(np.array([[1, 2], [0, 1], [1, 2]]), axis=0))
    every = nx.unique_all(nx.wrap(d))
    assert type(every).__name__ == type(jnp.unique_all(d)).__name__  # the named tuple keeps its type
    ref_all = np.unique_all(d)
    for field in ("values", "indices", "inverse_indices", "counts"):
        got = getattr(every, field)
        assert isinstance(got, nx.NamedArray) and not got.names, field
        np.testing.assert_array_equal(np.asarray(got), getattr(ref_all, field), err_msg=field)
    np.testing.assert_array_equal(np.asarray(nx.unique_values(nx.wrap(d))), np.sort(np.unique_values(d)))
    counts = nx.unique_counts(nx.wrap(d))
    np.testing.assert_array_equal(np.asarray(counts.counts), np.unique_counts(d).counts)
    padded = nx.unique(nx.wrap(d), size=6, fill_value=-1)
    np.testing.assert_array_equal(np.asarray(padded), [0, 1, 2, 5, -1, -1])
    jitted = jax.jit(lambda a: nx.unique(a, size=4))(nx.wrap(d))
    assert isinstance(jitted, nx.NamedArray)
    np.testing.assert_array_equal(np.asarray(jitted), [0, 1, 2, 5])
    # plain inputs keep jax's plain results
    assert not isinstance(nx.unique(jnp.array([3, 1, 3])), nx.NamedArray)


def test_other_value_dependent_functions_return_named_arrays():
    a = np.array([0, 3, 0, 4])
    out = nx.nonzero(nx.wrap(a))
    assert isinstance(out, tuple) and all(isinstance(o, nx.NamedArray) for o in out)
    np.testing.assert_array_equal(np.asarray(out[0]), np.nonzero(a)[0])
    np.testing.assert_array_equal(np.asarray(nx.where(nx.wrap(a))[0]), np.nonzero(a)[0])
    np.testing.assert_array_equal(np.asarray(nx.flatnonzero(nx.wrap(a))), np.flatnonzero(a))
    np.testing.assert_array_equal(np.asarray(nx.setdiff1d(nx.wrap(a), nx.wrap(np.array([3])))),
                                  np.setdiff1d(a, [3]))
    np.testing.assert_array_equal(np.asarray(nx.setdiff1d(nx.wrap(a), np.array([3]))), np.setdiff1d(a, [3]))
    np.testing.assert_array_equal(np.asarray(nx.extract(nx.wrap(a > 0), nx.wrap(a))), np.extract(a > 0, a))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_unique_of_named_values_asks_for_an_order(data):
    names = data.draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=3, unique=True))
    sizes = [data.draw(st.integers(1, 3)) for _ in names]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    d = rng.integers(0, 4, sizes)
    x = _stored(data.draw, d, names)
    with pytest.raises(errors.PositionalMisuseError, match=r"nx.unique: argument 0 has named axes .*"
                                                           + ".*".join(repr(n) for n in x.names)) as caught:
        nx.unique(x)
    assert "x.untag(" in str(caught.value)
    order = data.draw(st.permutations(names))
    out = nx.unique(x.untag(*order))
    ref = np.unique(np.transpose(d, [names.index(n) for n in order]))
    np.testing.assert_array_equal(np.asarray(out), ref)
    inverse = nx.unique(x.untag(*order), return_inverse=True)[1]
    np.testing.assert_array_equal(np.asarray(inverse).ravel(),
                                  np.unique(np.transpose(d, [names.index(n) for n in order]),
                                            return_inverse=True)[1].ravel())


def test_value_dependent_errors_name_the_argument_and_axis():
    with pytest.raises(errors.PositionalMisuseError, match=r"nx.setdiff1d: argument 1 has named axes 'q'"):
        nx.setdiff1d(nx.wrap(np.arange(3)), nx.wrap(np.arange(2), ["q"]))
    with pytest.raises(errors.AxisSpecError, match=r"nx.unique: axis='q' is a name"):
        nx.unique(nx.wrap(np.arange(3)), axis="q")


@st.composite
def tile_cases(draw):
    names = draw(st.lists(st.sampled_from(POOL), max_size=3, unique=True))
    sizes = [draw(st.integers(1, 3)) for _ in names]
    pshape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = rng.integers(-9, 9, pshape + tuple(sizes)).astype(np.int32)
    x = _stored(draw, d, names)
    axes = names + list(range(len(pshape)))
    keys = draw(st.lists(st.sampled_from(axes), unique=True)) if axes else []
    reps = {k: draw(st.integers(0, 3)) for k in keys}
    if pshape and draw(st.booleans()):  # a position counted from the end
        k = draw(st.integers(1, len(pshape)))
        if len(pshape) - k not in reps:
            reps[-k] = draw(st.integers(0, 3))
    return d, x, names, reps


@settings(max_examples=40, deadline=None)
@given(tile_cases())
def test_tile_by_name_and_position_matches_numpy(case):
    d, x, names, reps = case
    p = d.ndim - len(names)
    np_reps = [1] * d.ndim
    for k, n in reps.items():
        np_reps[p + names.index(k) if isinstance(k, str) else k % p] = n
    ref = np.tile(d, np_reps)
    for out in (nx.tile(x, reps), jax.jit(lambda v: nx.tile(v, reps))(x)):
        assert out.shape == ref.shape[:p]
        assert out.named_shape == dict(zip(names, ref.shape[p:]))
        np.testing.assert_array_equal(_logical(out, names), ref)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_positional_reps_tile_positional_axes_per_named_element(data):
    names = data.draw(st.lists(st.sampled_from(POOL), max_size=2, unique=True))
    sizes = [data.draw(st.integers(1, 3)) for _ in names]
    pshape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    d = np.arange(int(np.prod(pshape + tuple(sizes)))).reshape(pshape + tuple(sizes))
    x = _stored(data.draw, d, names)
    reps = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=len(pshape) + 1)))
    out = nx.tile(x, reps)
    k = len(names)
    names_first = np.moveaxis(d, list(range(len(pshape), d.ndim)), list(range(k)))
    ref = np.stack([np.tile(e, reps) for e in names_first.reshape((-1,) + pshape)])
    ref = ref.reshape(tuple(sizes) + ref.shape[1:])
    got = np.asarray(nx.unwrap(out, {i: n for i, n in enumerate(names)}))  # names first
    np.testing.assert_array_equal(got, ref)
    if not names:
        np.testing.assert_array_equal(np.asarray(out), np.tile(d, reps))


def test_tile_errors_and_plain_arrays():
    x = nx.wrap(np.arange(6).reshape(2, 3), ["H", "W"])
    with pytest.raises(errors.AxisSpecError, match=r"nx.tile: reps names axis 'Z', which the value does not "
                                                   r"carry \(it has 'H', 'W'\)"):
        nx.tile(x, {"Z": 2})
    with pytest.raises(errors.AxisSpecError, match=r"nx.tile: the repetition count of axis 'H'"):
        nx.tile(x, {"H": -1})
    with pytest.raises(errors.AxisSpecError, match=r"nx.tile: reps key 3"):
        nx.tile(x, {3: 2})
    with pytest.raises(errors.PositionalAxisError, match=r"nx.tile: reps=2 counts positional axes.*'H', 'W'"):
        nx.tile(x, 2)
    with pytest.raises(errors.AxisSpecError, match=r"nx.tile: reps maps axes \['H'\], but the array has no"):
        nx.tile(np.arange(3), {"H": 2})
    np.testing.assert_array_equal(nx.tile(np.arange(3), (2, 2)), np.tile(np.arange(3), (2, 2)))
    # numpy's tile reaches it
    assert np.tile(x, {"H": 2}).named_shape == {"H": 4, "W": 3}
    # the user's case
    assert nx.tile(nx.ones({"H": 3}), {"H": 2}).named_shape == {"H": 6}


# --------------------------------------------------------------------------------------------------------
# 4. broadcast_to with names


@st.composite
def broadcast_cases(draw):
    names = draw(st.lists(st.sampled_from(POOL), max_size=3, unique=True))
    sizes = {n: draw(st.integers(1, 3)) for n in names}
    target = tuple(draw(st.lists(st.integers(1, 3), max_size=3)))
    xp = draw(st.integers(0, len(target)))
    xshape = tuple(s if draw(st.booleans()) else 1 for s in target[len(target) - xp:])
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = rng.integers(-9, 9, xshape + tuple(sizes[n] for n in names)).astype(np.int32)
    x = _stored(draw, d, names)
    shared = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    new = draw(st.lists(st.sampled_from([n for n in ("k", "m", "seq2") if n not in names]), unique=True))
    requested = {n: sizes[n] for n in shared} | {n: draw(st.integers(1, 3)) for n in new}
    order = draw(st.permutations(list(requested)))
    return d, x, names, target, {n: requested[n] for n in order}


@settings(max_examples=50, deadline=None)
@given(broadcast_cases())
def test_broadcast_to_matches_numpy(case):
    d, x, names, target, requested = case
    new = [n for n in requested if n not in names]
    universe = names + new
    xp = len(x.shape)
    ref = d.reshape((1,) * (len(target) - xp) + d.shape + (1,) * len(new))
    ref = np.broadcast_to(ref, target + d.shape[xp:] + tuple(requested[n] for n in new))
    calls = [lambda v: nx.broadcast_to(v, target, named_shape=requested)]
    if not target:
        calls.append(lambda v: nx.broadcast_to(v, requested))  # a mapping as shape: every axis named
    for call in calls:
        for out in (call(x), jax.jit(call)(x)):
            assert out.shape == target
            assert out.named_shape == {**dict(x.named_shape), **requested}
            np.testing.assert_array_equal(_logical(out, universe), ref)


def test_broadcast_to_spellings_and_plain_inputs():
    x = nx.wrap(np.arange(3.0), ["k"])
    y = nx.broadcast_to(x, {"a": 2, "b": 3})
    assert y.shape == () and y.named_shape == {"a": 2, "b": 3, "k": 3}
    np.testing.assert_array_equal(_logical(y, ["a", "b", "k"]), np.broadcast_to(np.arange(3.0), (2, 3, 3)))
    z = nx.broadcast_to(x, (), named_shape={"b": 4})
    assert z.named_shape == {"b": 4, "k": 3}
    # a plain array with names asked for becomes a NamedArray; without, it is jnp.broadcast_to
    p = nx.broadcast_to(np.arange(3), (2, 3), named_shape={"b": 2})
    assert isinstance(p, nx.NamedArray) and p.shape == (2, 3) and p.named_shape == {"b": 2}
    q = nx.broadcast_to(np.arange(3), (2, 3))
    assert isinstance(q, jax.Array)
    np.testing.assert_array_equal(q, np.broadcast_to(np.arange(3), (2, 3)))
    assert nx.broadcast_to(x, (4,)).shape == (4,) and nx.broadcast_to(x, 4).named_shape == {"k": 3}
    assert np.broadcast_to(x, (2,)).named_shape == {"k": 3}  # numpy's function reaches it


def test_broadcast_to_errors():
    x = nx.wrap(np.ones((3, 2)), [None, "a"])
    with pytest.raises(errors.AxisSizeError, match=r"nx.broadcast_to: axis 'a' has size 2 in the array but "
                                                   r"size 5 in the requested named shape"):
        nx.broadcast_to(x, (3,), named_shape={"a": 5})
    with pytest.raises(errors.AxisSizeError, match=r"nx.broadcast_to: the array's positional shape \(3,\) "
                                                   r"\(named axes 'a'\) does not broadcast to shape \(4,\)"):
        nx.broadcast_to(x, (4,))
    with pytest.raises(errors.AxisSizeError, match=r"a mapping as shape names every axis.*"
                                                   r"nx.broadcast_to\(x, \(3,\), named_shape="):
        nx.broadcast_to(x, {"c": 2})
    with pytest.raises(errors.AxisSpecError, match="give the named axes once"):
        nx.broadcast_to(x, {"c": 2}, named_shape={"d": 2})
    with pytest.raises(errors.AxisSpecError, match="the size of axis 'c' in named_shape"):
        nx.broadcast_to(x, (3,), named_shape={"c": -1})


def test_broadcast_to_inside_xmap_takes_bound_sizes():
    a = np.arange(12.0).reshape(4, 3)
    out = nx.xmap(lambda v, w: nx.broadcast_to(w, (), named_shape=["i"]) + v, in_axes=({0: "i"}, {}),
                  out_axes={0: "i"})(a, np.float32(1))
    np.testing.assert_array_equal(out, a + 1)


# --------------------------------------------------------------------------------------------------------
# isin: membership in the whole of test_elements


def test_isin_searches_the_whole_test_value():
    e = np.array([1, 2, 3, 7])
    t = np.array([[1, 5], [7, 3]])
    x = nx.wrap(e, ["k"])
    out = nx.isin(x, nx.wrap(t, ["r", "c"]))
    assert out.named_shape == {"k": 4}
    np.testing.assert_array_equal(out.unwrap(["k"]), np.isin(e, t))
    np.testing.assert_array_equal(nx.isin(x, nx.wrap(t, ["r", "c"]), invert=True).unwrap(["k"]),
                                  np.isin(e, t, invert=True))
    np.testing.assert_array_equal(nx.isin(x, t).unwrap(["k"]), np.isin(e, t))  # a plain set
    # a name both carry matches element to element: each row is searched in its own row of the table
    rows = np.array([[1, 2], [1, 2]])
    table = np.array([[1, 5], [2, 3]])
    got = nx.isin(nx.wrap(rows, ["b", "k"]), nx.wrap(table, ["b", "c"])).unwrap(["b", "k"])
    np.testing.assert_array_equal(got, [np.isin(rows[i], table[i]) for i in range(2)])
