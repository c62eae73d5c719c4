"""wrap/unwrap with every xmap axis-map form, rename, astype, and indexing by position and by name."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray.errors import AxisSpecError, DuplicateAxisError

D = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)


# --------------------------------------------------------------------------------------------------------
# wrap


@pytest.mark.parametrize("spec, shape, named, perm", [
    # spec, positional shape, named shape, D's axes in (positional..., names sorted) order
    ({0: "a"}, (3, 4), {"a": 2}, (1, 2, 0)),
    ({0: "a", 2: "b"}, (3,), {"a": 2, "b": 4}, (1, 0, 2)),
    ({2: "a", 0: "b"}, (3,), {"a": 4, "b": 2}, (1, 2, 0)),
    (["a", "b", ...], (4,), {"a": 2, "b": 3}, (2, 0, 1)),
    ([None, "k", ...], (2, 4), {"k": 3}, (0, 2, 1)),
    (["a", None, "b"], (3,), {"a": 2, "b": 4}, (1, 0, 2)),
    (("a", "b", None), (4,), {"a": 2, "b": 3}, (2, 0, 1)),
    (("batch", "b", "ab"), (), {"batch": 2, "b": 3, "ab": 4}, (2, 1, 0)),
    ([...], (2, 3, 4), {}, (0, 1, 2)),
    ({}, (2, 3, 4), {}, (0, 1, 2)),
    (None, (2, 3, 4), {}, (0, 1, 2)),
])
@pytest.mark.parametrize("kind", [np.asarray, jnp.asarray])
def test_wrap_forms(spec, shape, named, perm, kind):
    x = nx.wrap(kind(D), spec)
    assert x.shape == shape and x.named_shape == named
    names = sorted(named)
    got = nx.unwrap(x, {len(shape) + i: n for i, n in enumerate(names)})
    np.testing.assert_array_equal(got, D.transpose(perm))


@pytest.mark.parametrize("spec", [{0: "a", 2: "b"}, ["a", "b", ...], ["a", None, "b"], ("a", "b", None),
                                  {1: "b"}, [None, None, "c"], [...]])
def test_unwrap_with_the_same_spec_is_the_inverse_of_wrap(spec):
    x = nx.wrap(D, spec)
    out = nx.unwrap(x, spec)
    assert isinstance(out, jax.Array)
    np.testing.assert_array_equal(out, D)
    np.testing.assert_array_equal(x.unwrap(spec), D)


def test_unwrap_positions_are_positions_in_the_result():
    x = nx.wrap(D, {0: "a", 2: "b"})
    assert nx.unwrap(x, {2: "a", 0: "b"}).shape == (4, 3, 2)
    np.testing.assert_array_equal(nx.unwrap(x, {2: "a", 0: "b"}), D.transpose(2, 1, 0))
    np.testing.assert_array_equal(nx.unwrap(x, ["b", "a", ...]), D.transpose(2, 0, 1))
    np.testing.assert_array_equal(nx.unwrap(x, [None, "b", "a"]), D.transpose(1, 2, 0))
    np.testing.assert_array_equal(nx.unwrap(x, ("a", None, "b")), D)


def test_numpy_integers_as_positions_in_an_axis_map():
    x = nx.wrap(D, {np.int64(2): "b", np.int32(0): "a"})
    assert x.shape == (3,) and x.named_shape == {"a": 2, "b": 4}
    np.testing.assert_array_equal(nx.unwrap(x, {np.int64(0): "a", 2: "b"}), D)


def test_wrap_a_python_list_and_a_named_array():
    x = nx.wrap([[1, 2, 3], [4, 5, 6]], ["a", ...])
    assert x.shape == (3,) and x.named_shape == {"a": 2} and x.dtype == jnp.int32
    # on a NamedArray, positions are positions among its positional axes
    y = nx.wrap(nx.wrap(D, {1: "b"}), {1: "c"})
    assert y.shape == (2,) and y.named_shape == {"b": 3, "c": 4}
    np.testing.assert_array_equal(y.unwrap(["b", None, "c"]), D.transpose(1, 0, 2))


def test_unwrap_of_a_plain_array_and_of_a_nameless_named_array():
    np.testing.assert_array_equal(nx.unwrap(jnp.asarray(D)), D)
    np.testing.assert_array_equal(nx.unwrap(nx.wrap(D)), D)
    np.testing.assert_array_equal(nx.wrap(D).unwrap([...]), D)


@settings(max_examples=30)
@given(st.data())
def test_wrap_then_unwrap_round_trips_for_random_specs(data):
    rank = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    arr = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    positions = data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank)) if rank else []
    names = data.draw(st.lists(st.sampled_from(["a", "bb", "ccc", "time", "x"]), unique=True,
                               min_size=len(positions), max_size=len(positions)))
    slots = dict(zip(positions, names))
    form = data.draw(st.sampled_from(["dict", "list", "tuple"]))
    spec = slots if form == "dict" else [slots.get(i) for i in range(rank)]
    spec = tuple(spec) if form == "tuple" else spec
    x = nx.wrap(arr, spec)
    assert x.ndim == rank - len(slots) and x.named_shape == {n: shape[p] for p, n in slots.items()}
    np.testing.assert_array_equal(nx.unwrap(x, spec), arr)


# --------------------------------------------------------------------------------------------------------
# rename, astype


def test_rename_keeps_values_and_sizes():
    x = nx.wrap(D, {0: "a", 2: "b"})
    y = x.rename({"a": "zz"})
    assert y.named_shape == {"zz": 2, "b": 4}
    np.testing.assert_array_equal(y.unwrap({0: "zz", 2: "b"}), D)
    swapped = nx.rename(x, {"a": "b", "b": "a"})
    assert swapped.named_shape == {"a": 4, "b": 2}
    np.testing.assert_array_equal(swapped.unwrap({0: "b", 2: "a"}), D)
    np.testing.assert_array_equal(x.rename(b="k").unwrap({0: "a", 2: "k"}), D)


def test_rename_errors():
    x = nx.wrap(D, {0: "a", 2: "b"})
    with pytest.raises(AxisSpecError, match="no axis 'c'.*'a', 'b'"):
        x.rename({"c": "d"})
    with pytest.raises(DuplicateAxisError, match="'b' twice"):
        x.rename({"a": "b"})


def test_astype_preserves_names():
    x = nx.wrap(D, {0: "a", 2: "b"})
    y = x.astype(jnp.int8)
    assert y.dtype == jnp.int8 and y.named_shape == x.named_shape
    np.testing.assert_array_equal(y.unwrap({0: "a", 2: "b"}), D.astype(np.int8))


# --------------------------------------------------------------------------------------------------------
# Positional indexing: NumPy's semantics on the positional axes


E = np.arange(5 * 2 * 3 * 4, dtype=np.float32).reshape(5, 2, 3, 4)


@pytest.fixture
def xe():
    # positional (5, 3); names a=2, k=4
    return nx.wrap(E, {1: "a", 3: "k"})


def _names_first(v):
    return np.asarray(nx.unwrap(v, sorted(v.named_shape) + [...]))


REF_E = E.transpose(1, 3, 0, 2)  # names first (a, k), then positional (5, 3)

POSITIONAL_INDICES = [
    0, -1, np.int64(2), slice(1, 4), slice(None, None, -2), (Ellipsis, 1), (Ellipsis, slice(1, 3)),
    (None,), (slice(None), None), (Ellipsis, None), (1, 2), (-1, Ellipsis), (np.array([0, 3, 3]),),
    (jnp.array([4, 0]), slice(0, 2)), ([1, 2],), (np.array([[0, 1], [2, 3]]),),
    (np.array([True, False, True, False, True]),), (slice(None), np.array([2, 0])), (jnp.int32(3),),
    # a boolean scalar consumes no axis: it adds one of size 1 (or 0) where it stands
    (Ellipsis, True), (True,), (np.bool_(False),), (Ellipsis, np.array(True)), (0, True, Ellipsis),
]


@pytest.mark.parametrize("index", POSITIONAL_INDICES, ids=[repr(i)[:30] for i in POSITIONAL_INDICES])
def test_positional_indexing_matches_numpy(xe, index):
    out = xe[index]
    assert out.named_shape == {"a": 2, "k": 4}
    key = index if isinstance(index, tuple) else (index,)
    np_key = tuple(np.asarray(i) if isinstance(i, jax.Array) else i for i in key)
    want = REF_E[(slice(None), slice(None)) + np_key]
    assert out.shape == want.shape[2:]
    np.testing.assert_array_equal(_names_first(out), want)


def test_positional_indexing_under_jit_with_traced_indices(xe):
    f = jax.jit(lambda v, i, j: v[i, j])
    np.testing.assert_array_equal(_names_first(f(xe, 3, 1)), REF_E[:, :, 3, 1])
    g = jax.jit(lambda v, idx: v[idx])
    np.testing.assert_array_equal(_names_first(g(xe, jnp.array([4, 1]))), REF_E[:, :, [4, 1]])


def test_too_many_positional_indices(xe):
    with pytest.raises(IndexError, match="too many indices.*by name"):
        xe[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        xe[..., 0, ...]


def test_boolean_scalar_index_of_a_value_with_no_positional_axes():
    y = nx.wrap(np.arange(3.0), ["k"])
    assert y[True].shape == (1,) and y[True].named_shape == {"k": 3}
    np.testing.assert_array_equal(y[True].unwrap([None, "k"]), np.arange(3.0)[None])
    assert y[False].shape == (0,)


def test_eager_positional_indexing_compiles_nothing_per_index_value(xe, counts):
    for form in (lambda i: xe[i], lambda i: xe[i:i + 1], lambda i: xe[i, 2], lambda i: xe[..., i % 3]):
        form(0)
        counts.reset()
        outs = [form(i) for i in range(1, 5)]
        assert counts.compiles == 0
    np.testing.assert_array_equal(_names_first(outs[-1]), REF_E[..., 4 % 3])


def test_a_named_array_as_a_positional_index_vectorises_over_its_names(xe):
    idx = nx.wrap(np.array([4, 0, 2]), ["j"])
    out = xe[idx]
    assert out.shape == (3,) and out.named_shape == {"a": 2, "k": 4, "j": 3}
    got = np.asarray(nx.unwrap(out, ["j", "a", "k", ...]))
    np.testing.assert_array_equal(got, np.stack([REF_E[:, :, i] for i in (4, 0, 2)]))


# --------------------------------------------------------------------------------------------------------
# Indexing by name


BY_NAME = [
    ({"k": 0}, lambda r: r[:, 0]),
    ({"k": -1}, lambda r: r[:, -1]),
    ({"k": np.int32(2)}, lambda r: r[:, 2]),
    ({"k": slice(1, 3)}, lambda r: r[:, 1:3]),
    ({"k": slice(None, None, -1)}, lambda r: r[:, ::-1]),
    ({"k": [0, 2]}, lambda r: r[:, [0, 2]]),
    ({"k": np.array([3, 3, 1])}, lambda r: r[:, [3, 3, 1]]),
    ({"k": jnp.array(1)}, lambda r: r[:, 1]),
    ({"k": np.array([True, False, True, True])}, lambda r: r[:, [0, 2, 3]]),
    ({"a": 1, "k": slice(0, 2)}, lambda r: r[1, 0:2]),
]


@pytest.mark.parametrize("index, ref", BY_NAME, ids=[repr(i)[:30] for i, _ in BY_NAME])
def test_indexing_by_name(xe, index, ref):
    out = xe[index]
    assert out.shape == (5, 3)
    want = ref(REF_E)  # names first: (a, k, 5, 3) indexed on the leading named axes
    dropped = {n for n, i in index.items() if np.ndim(i) == 0 and not isinstance(i, slice)}
    assert set(out.named_shape) == {"a", "k"} - dropped
    np.testing.assert_array_equal(_names_first(out), want)


def test_index_by_name_under_jit_and_in_a_loop(xe):
    f = jax.jit(lambda v, i: v[{"k": i}])
    np.testing.assert_array_equal(_names_first(f(xe, 2)), REF_E[:, 2])
    init = nx.wrap(jnp.zeros((2, 5, 3)), ["a", ...])
    total = jax.lax.fori_loop(0, 4, lambda i, s: s + xe[{"k": i}], init)
    np.testing.assert_allclose(_names_first(total), REF_E.sum(1))


def test_gather_by_name_with_a_named_index(xe):
    # a NamedArray index replaces the indexed name with the index's names
    idx = nx.wrap(np.array([3, 0]), ["j"])
    out = xe[{"k": idx}]
    assert out.named_shape == {"a": 2, "j": 2} and out.shape == (5, 3)
    np.testing.assert_array_equal(np.asarray(nx.unwrap(out, ["a", "j", ...])), REF_E[:, [3, 0]])
    # an index that varies along another name of x is a per-element (vectorised) gather
    per_a = nx.wrap(np.array([1, 3]), ["a"])
    out = xe[{"k": per_a}]
    assert out.named_shape == {"a": 2}
    np.testing.assert_array_equal(_names_first(out), np.stack([REF_E[0, 1], REF_E[1, 3]]))
    # an index carrying the indexed name itself permutes along it
    rev = nx.wrap(np.array([3, 2, 1, 0]), ["k"])
    np.testing.assert_array_equal(_names_first(xe[{"k": rev}]), REF_E[:, ::-1])


def test_indexing_by_name_errors(xe):
    with pytest.raises(AxisSpecError, match="no axis 'zz'.*'a', 'k'"):
        xe[{"zz": 0}]
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 'k' with size 4"):
        xe[{"k": 4}]
    with pytest.raises(AxisSpecError, match="'k'.*shape \\(2, 2\\)"):
        xe[{"k": np.zeros((2, 2), int)}]
    # a NamedArray index with positional axes of its own: they index as NumPy's advanced index axes do
    got = xe[{"k": nx.wrap(np.zeros((2, 2), int), ["j", ...])}]
    assert got.shape[-1:] == (2,) and "j" in got.names


@pytest.mark.parametrize("bad", [True, np.bool_(False), jnp.array(True), None, Ellipsis, 1.0, "x",
                                 np.array([0.5])], ids=repr)
def test_indexing_by_name_with_an_index_that_is_no_index(xe, bad):
    # a boolean scalar would add an axis that has no name; the others are not indices at all
    with pytest.raises(AxisSpecError, match="indexing axis 'k' by name takes an int, a slice"):
        xe[{"k": bad}]


def test_boolean_mask_by_name_must_cover_the_axis(xe):
    with pytest.raises(IndexError, match="boolean index of shape \\(3,\\) for axis 'k' with size 4"):
        xe[{"k": np.array([True, False, True])}]


def test_boolean_named_array_as_index(xe):
    mask = nx.wrap(np.array([True, False, True, True, False]))  # no names: a positional mask
    np.testing.assert_array_equal(_names_first(xe[mask]), REF_E[:, :, [0, 2, 3]])
    with pytest.raises(nx.errors.PositionalMisuseError, match="boolean NamedArray index.*'a'.*nx.where"):
        xe[xe > 3]


@settings(max_examples=30)
@given(st.data())
def test_unwrap_places_names_at_result_positions(data):
    p = data.draw(st.integers(0, 2))
    names = data.draw(st.lists(st.sampled_from(["a", "bb", "time", "x"]), unique=True, min_size=1,
                               max_size=3))
    shape = tuple(data.draw(st.integers(1, 3)) for _ in range(p + len(names)))
    ref = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)  # positional axes, then `names`
    x = nx.wrap(ref, {p + i: n for i, n in enumerate(names)})
    rank = p + len(names)
    slots = data.draw(st.lists(st.integers(0, rank - 1), unique=True, min_size=len(names),
                               max_size=len(names)))
    out_spec = dict(zip(slots, data.draw(st.permutations(names))))
    positional = iter(range(p))
    perm = [p + names.index(out_spec[r]) if r in out_spec else next(positional) for r in range(rank)]
    form = data.draw(st.sampled_from(["dict", "list"]))
    spec = out_spec if form == "dict" else [out_spec.get(r) for r in range(rank)]
    np.testing.assert_array_equal(nx.unwrap(x, spec), ref.transpose(perm))


@st.composite
def indices_for(draw, shape):
    """A NumPy index for ``shape``: ints, slices, None, boolean scalars, integer arrays, one ellipsis."""
    items, axis, ellipsis = [], 0, False
    for _ in range(draw(st.integers(0, len(shape) + 2))):
        kinds = ["none", "bool"] + (["int", "slice", "array"] if axis < len(shape) else []) + (
            [] if ellipsis else ["..."])
        kind = draw(st.sampled_from(kinds))
        if kind == "int":
            items.append(draw(st.integers(-shape[axis], shape[axis] - 1)))
        elif kind == "array":  # all of one length, so that several broadcast together
            items.append(np.array([draw(st.integers(-shape[axis], shape[axis] - 1)) for _ in range(2)]))
        elif kind == "slice":
            bound = st.none() | st.integers(-4, 4)
            items.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, -1]))))
        elif kind == "none":
            items.append(None)
        elif kind == "bool":
            items.append(draw(st.booleans()))
        else:
            ellipsis = True
            items.append(Ellipsis)
            axis = len(shape) - sum(1 for i in items if isinstance(i, (int, slice, np.ndarray))
                                    and not isinstance(i, bool))
        axis += kind in ("int", "slice", "array")
    return tuple(items)


@settings(max_examples=50)
@given(st.data())
def test_positional_indices_match_numpy_slice_by_slice(data):
    pos = tuple(data.draw(st.lists(st.integers(1, 3), max_size=3)))
    names = data.draw(st.lists(st.sampled_from(["a", "bb", "k"]), unique=True, max_size=2))
    sizes = {n: i + 2 for i, n in enumerate(names)}
    ref = np.arange(int(np.prod([sizes[n] for n in names] + list(pos))), dtype=np.int32).reshape(
        tuple(sizes[n] for n in names) + pos)  # names first (in `names` order), then positional
    x = nx.wrap(ref, names + [...])
    index = data.draw(indices_for(pos))
    # the definition: NumPy's indexing of each positional slice (one per element of the named axes)
    slices = ref.reshape((-1,) + pos)
    try:
        want = np.stack([s[index] for s in slices]).reshape(ref.shape[:len(names)] + slices[0][index].shape)
    except IndexError:  # e.g. False (no element) next to an array of two: they do not broadcast
        with pytest.raises((IndexError, ValueError)):
            x[index]
        return
    out = x[index]
    assert out.named_shape == sizes and out.shape == want.shape[len(names):]
    np.testing.assert_array_equal(nx.unwrap(out, names + [...]), want)
