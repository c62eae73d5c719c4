"""Collectives over names: values, named-shape effects (xmap's table), gradients, jit, errors.

References are NumPy (or JAX's own collectives under ``jax.vmap(axis_name=...)``, which compute exactly the
global view a NamedArray holds) on positional arrays laid out the way ``nx.unwrap`` lays out the result.
"""

import contextlib

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import namedarray as nx
from namedarray import errors

R = np.random.default_rng(0)  # module constants; each test seeds its own generator
D = R.normal(size=(4, 4, 3)).astype(np.float32)  # named 'i' at 0, positional (4, 3)
D8 = R.normal(size=(4, 8, 3)).astype(np.float32)  # named 'i' at 0, positional (8, 3)


def _zero_fill_perm(d, pairs):
    out = jnp.zeros_like(d)
    for s, t in pairs:
        out = out.at[t].set(d[s])
    return out


# (id, data, in spec, nx function, positional reference, out spec, bound sizes)
CASES = [
    ("psum", D, {0: "i"}, lambda x: nx.psum(x, "i"), lambda d: d.sum(0), [...], {}),
    ("psum_mixed", D, {0: "i"}, lambda x: nx.psum(x, ("i", 0)), lambda d: d.sum((0, 1)), [...], {}),
    ("pmean", D, {0: "i"}, lambda x: nx.pmean(x, "i"), lambda d: d.mean(0), [...], {}),
    ("pmax", D, {0: "i"}, lambda x: nx.pmax(x, "i"), lambda d: d.max(0), [...], {}),
    ("pmin", D, {0: "i"}, lambda x: nx.pmin(x, "i"), lambda d: d.min(0), [...], {}),
    ("all_gather", D, {0: "i"}, lambda x: nx.all_gather(x, "i", axis=1), lambda d: jnp.moveaxis(d, 0, 1),
     [...], {}),
    ("all_gather_tiled", D, {0: "i"}, lambda x: nx.all_gather(x, "i", tiled=True), lambda d: d.reshape(16, 3),
     [...], {}),
    ("ppermute", D, {0: "i"}, lambda x: nx.ppermute(x, "i", [(0, 1), (1, 2), (3, 0)]),
     lambda d: _zero_fill_perm(d, [(0, 1), (1, 2), (3, 0)]), ["i", ...], {}),
    ("ppermute_shift", D, {0: "i"}, lambda x: nx.ppermute(x, "i", shift=1), lambda d: jnp.roll(d, 1, 0),
     ["i", ...], {}),
    ("pshuffle", D, {0: "i"}, lambda x: nx.pshuffle(x, "i", [2, 0, 3, 1]),
     lambda d: d[np.array([2, 0, 3, 1])], ["i", ...], {}),
    ("psum_scatter", D, {0: "i"}, lambda x: nx.psum_scatter(x, "i"), lambda d: d.sum(0), ["i", ...], {}),
    ("psum_scatter_dim1", D.transpose(0, 2, 1), {0: "i"},
     lambda x: nx.psum_scatter(x, "i", scatter_dimension=1), lambda d: d.sum(0).T, ["i", ...], {}),
    ("psum_scatter_tiled", D8, {0: "i"}, lambda x: nx.psum_scatter(x, "i", tiled=True),
     lambda d: d.sum(0).reshape(4, 2, 3), ["i", ...], {}),
    # y[k][a, j] = x[j][k, a]: the split axis becomes the name, the name becomes position 1
    ("all_to_all", D, {0: "i"}, lambda x: nx.all_to_all(x, "i", 0, 1), lambda d: jnp.transpose(d, (1, 2, 0)),
     ["i", ...], {}),
    # over a bound name the value lacks: it is constant along it (xmap's testCollectiveOverNoName)
    ("psum_bound", D, {0: "i"}, lambda x: nx.psum(x, "k"), lambda d: 5 * d, ["i", ...], {"k": 5}),
    ("pmean_bound", D, {0: "i"}, lambda x: nx.pmean(x, ("k", "i")), lambda d: d.mean(0), [...], {"k": 5}),
    ("pmax_bound", D, {0: "i"}, lambda x: nx.pmax(x, "k"), lambda d: d, ["i", ...], {"k": 5}),
    ("all_gather_bound", D, {0: "i"}, lambda x: nx.all_gather(x, "k"),
     lambda d: jnp.broadcast_to(d[:, None], (4, 5, 4, 3)), {0: "i"}, {"k": 5}),
    ("ppermute_bound", D, {0: "i"}, lambda x: nx.ppermute(x, "k", [(0, 1)]),
     lambda d: jnp.zeros((5,) + d.shape).at[1].set(d), ["k", "i", ...], {"k": 5}),
    ("psum_scatter_bound", D, {0: "i"}, lambda x: nx.psum_scatter(x, "k"), lambda d: 4 * d, ["i", "k", ...],
     {"k": 4}),
]
IDS = [c[0] for c in CASES]


def _run(case, d):
    _, _, spec, f, _, out_spec, _ = case
    out = f(nx.wrap(d, spec))
    return nx.unwrap(out, out_spec)


def _bound(case):
    return nx.env.bind(case[6]) if case[6] else contextlib.nullcontext()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_values_eager_and_jit(case):
    _, data, _, _, ref, _, _ = case
    with _bound(case):
        expected = np.asarray(ref(jnp.asarray(data)))
        np.testing.assert_allclose(_run(case, jnp.asarray(data)), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(jax.jit(lambda d: _run(case, d))(jnp.asarray(data)), expected,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradient_equals_positional_gradient(case):
    R = np.random.default_rng(101)
    _, data, _, _, ref, _, _ = case
    d = jnp.asarray(data)
    with _bound(case):
        w = jnp.asarray(R.normal(size=np.shape(ref(d))).astype(np.float32))
        g = jax.grad(lambda d: jnp.sum(w * _run(case, d)))(d)
        g_ref = jax.grad(lambda d: jnp.sum(w * ref(d)))(d)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [jnp.int8, jnp.uint16, jnp.bool_, jnp.bfloat16])
def test_psum_keeps_the_type_lax_psum_gives(dtype):
    # psum over int8 stays int8 (jnp.sum would promote it), a bool psum counts in int32: as lax.psum
    d = jnp.asarray(np.random.default_rng(104).integers(0, 2, size=(4, 8, 3))).astype(dtype)
    x = nx.wrap(d, ["i", ...])
    for axis_name in ("i", ("i", 0)):  # lax.psum reduces positional ints too
        ref = jax.vmap(lambda v, a=axis_name: jax.lax.psum(v, a), axis_name="i")(d)[0]
        out = nx.psum(x, axis_name)
        assert out.dtype == ref.dtype
        np.testing.assert_array_equal(np.asarray(out.data, np.float32), np.asarray(ref, np.float32))
    if dtype == jnp.bool_:
        return  # lax.psum_scatter rejects booleans
    scattered = jax.vmap(lambda v: jax.lax.psum_scatter(v, "i", tiled=True), axis_name="i")(d)
    out = nx.psum_scatter(x, "i", tiled=True)
    assert out.dtype == scattered.dtype
    np.testing.assert_array_equal(np.asarray(nx.unwrap(out, ["i", ...]), np.float32),
                                  np.asarray(scattered, np.float32))


def test_psum_transpose_is_broadcast():
    # d/dx sum_i x_i is 1 for every i: the cotangent of a psum over a carried name is broadcast back
    x = jnp.arange(4.0)
    g = jax.grad(lambda d: nx.psum(nx.wrap(d, ["i"]), "i").data)(x)
    np.testing.assert_array_equal(g, np.ones(4))
    with nx.env.bind({"i": 4}):  # over a bound name the scalar lacks, psum is multiplication by the size
        g = jax.grad(lambda s: nx.psum(nx.wrap(s), "i").data)(2.0)
    assert g == 4.0


# ---------------------------------------------------------------------------------------------------------
# Named-shape effects (xmap.md §2.6) and mixing with names the value carries but the op does not touch


def test_named_shape_effects():
    x = nx.wrap(jnp.ones((4, 2, 3, 5)), {0: "i", 1: "batch_dim"})  # positional (3, 5)
    assert nx.psum(x, "i").named_shape == {"batch_dim": 2}
    assert nx.pmean(x, ("i", "batch_dim", 1)).named_shape == {}
    assert nx.pmean(x, ("i", "batch_dim", 1)).shape == (3,)
    g = nx.all_gather(x, "i", axis=2)
    assert (g.shape, g.named_shape) == ((3, 5, 4), {"batch_dim": 2})
    assert nx.ppermute(x, "i", [(0, 1)]).named_shape == x.named_shape
    assert nx.pshuffle(x, "i", [1, 0, 3, 2]).named_shape == x.named_shape
    y = nx.psum_scatter(nx.wrap(jnp.ones((4, 2, 4, 5)), {0: "i", 1: "batch_dim"}), "i")
    assert (y.shape, y.named_shape) == ((5,), {"i": 4, "batch_dim": 2})  # keeps the name (unlike xmap)
    z = nx.all_to_all(nx.wrap(jnp.ones((4, 2, 4, 5)), {0: "i", 1: "batch_dim"}), "i", 0, 1)
    assert (z.shape, z.named_shape) == ((5, 4), {"i": 4, "batch_dim": 2})
    with nx.env.bind({"i": 4, "j": 3}):
        assert nx.axis_index("i").named_shape == {"i": 4}
        assert nx.axis_index(("j", "i")).named_shape == {"i": 4, "j": 3}


def test_other_names_are_batch_axes():
    R = np.random.default_rng(102)
    # a name the collective does not mention is untouched, whatever its storage position
    x = nx.wrap(R.normal(size=(3, 4, 8)).astype(np.float32), {0: "zz", 1: "a"})  # storage: (8, a, zz)
    y = nx.all_to_all(x, "a", 0, 0, tiled=True)
    ref = jax.vmap(jax.vmap(lambda v: jax.lax.all_to_all(v, "a", 0, 0, tiled=True), axis_name="a"))(
        jnp.asarray(nx.unwrap(x, ["zz", "a", ...])))
    np.testing.assert_allclose(nx.unwrap(y, ["zz", "a", ...]), ref)


@pytest.mark.parametrize("tiled", [False, True])
@pytest.mark.parametrize("pos_shape, split, concat", [
    ((4, 6), 0, 0), ((4, 6), 0, 1), ((6, 4), 1, 0), ((6, 4), 1, 1), ((4, 2, 6), 0, 2), ((2, 4, 6), 1, 0),
    ((2, 6, 4), -1, -2)])
def test_all_to_all_matches_jax(pos_shape, split, concat, tiled):
    R = np.random.default_rng(103)
    n = 4 if not tiled else 2
    d = jnp.asarray(R.normal(size=(n,) + pos_shape).astype(np.float32))
    # jax.lax.all_to_all does not normalise negative axes: hand it the positions
    s, c = split % len(pos_shape), concat % len(pos_shape)
    ref = jax.vmap(lambda v: jax.lax.all_to_all(v, "i", s, c, tiled=tiled), axis_name="i")(d)
    out = nx.all_to_all(nx.wrap(d, ["i", ...]), "i", split, concat, tiled=tiled)
    np.testing.assert_allclose(nx.unwrap(out, ["i", ...]), ref)


def test_all_to_all_over_two_names_matches_jax():
    R = np.random.default_rng(104)
    d = jnp.asarray(R.normal(size=(2, 3, 6, 2)).astype(np.float32))
    f = lambda v: jax.lax.all_to_all(v, ("ii", "jj"), 0, 1, tiled=True)
    ref = jax.vmap(jax.vmap(f, axis_name="jj"), axis_name="ii")(d)
    out = nx.all_to_all(nx.wrap(d, ["ii", "jj", ...]), ("ii", "jj"), 0, 1, tiled=True)
    np.testing.assert_allclose(nx.unwrap(out, ["ii", "jj", ...]), ref)


@pytest.mark.parametrize("axis, tiled", [(0, False), (1, False), (-1, False), (0, True), (1, True)])
def test_all_gather_matches_jax(axis, tiled):
    R = np.random.default_rng(105)
    d = jnp.asarray(R.normal(size=(3, 2, 5)).astype(np.float32))
    ref = jax.vmap(lambda v: jax.lax.all_gather(v, "i", axis=axis, tiled=tiled), axis_name="i")(d)
    out = nx.all_gather(nx.wrap(d, ["i", ...]), "i", axis=axis, tiled=tiled)
    assert out.named_shape == {}
    np.testing.assert_allclose(out.data, ref[0])


def test_all_gather_plus_axis_index():
    # xmap's testCollectiveAllGather: all_gather(x, 'i') + axis_index('i') -> x[None] + x[None].T
    x = jnp.arange(4, dtype=jnp.int32)
    with nx.env.bind({"i": 4}):
        out = nx.all_gather(nx.wrap(x, ["i"]), "i") + nx.axis_index("i")
        np.testing.assert_array_equal(nx.unwrap(out, ["i", ...]), x[None] + x[None].T)


def test_all_gather_over_two_names_is_row_major():
    d = np.arange(2 * 3 * 2).reshape(2, 3, 2)
    out = nx.all_gather(nx.wrap(d, ["a", "b", ...]), ("b", "a"))
    np.testing.assert_array_equal(out.data, d.transpose(1, 0, 2).reshape(6, 2))


def test_ppermute_zero_fills_and_shifts():
    x = nx.wrap(jnp.arange(1, 5), ["i"])
    assert nx.ppermute(x, "i", [(0, 2), (3, 1)]).unwrap(["i"]).tolist() == [0, 4, 1, 0]
    # xmap's testPPermute: a cyclic shift over 2 is a reversal
    y = nx.wrap(jnp.arange(2), ["i"])
    assert nx.ppermute(y, "i", [(0, 1), (1, 0)]).unwrap(["i"]).tolist() == [1, 0]
    assert nx.ppermute(x, "i", shift=-1).unwrap(["i"]).tolist() == [2, 3, 4, 1]


def test_ppermute_over_two_names_uses_linear_index():
    d = np.arange(6).reshape(2, 3)
    out = nx.ppermute(nx.wrap(d, ["a", "b"]), ("a", "b"), [(0, 5), (5, 0)])
    expected = np.zeros(6, int)
    expected[5], expected[0] = 0, 5
    np.testing.assert_array_equal(nx.unwrap(out, ["a", "b"]).reshape(6), expected)


def test_pshuffle():
    # xmap's testCollectivePermute1D and the tutorial's reversal
    x = nx.wrap(jnp.arange(4), ["i"])
    assert nx.pshuffle(x, "i", [3, 1, 2, 0]).unwrap(["i"]).tolist() == [3, 1, 2, 0]
    y = nx.wrap(jnp.arange(8), ["i"])
    assert nx.lax.pshuffle(y, "i", list(reversed(range(8)))).unwrap(["i"]).tolist() == list(range(8))[::-1]
    # xmap's testCollectivePermute2D: over ('i', 'j') the row-major linear index is permuted
    z = nx.wrap(jnp.arange(4).reshape(2, 2), ["i", "j"])
    out = nx.pshuffle(z, ("i", "j"), [3, 1, 2, 0])
    assert nx.unwrap(out, ["i", "j"]).reshape(4).tolist() == [3, 1, 2, 0]


def test_psum_scatter_over_bound_name():
    # xmap's testReduceScatter1d: psum_scatter(x, 'i', 0, tiled=True) on a value without names, i = 2
    x = jnp.arange(6.0).reshape(2, 3)
    with nx.env.bind({"i": 2}):
        out = nx.psum_scatter(nx.wrap(x), "i", scatter_dimension=0, tiled=True)
        assert (out.shape, out.named_shape) == ((1, 3), {"i": 2})
        np.testing.assert_array_equal(nx.unwrap(out, ["i", ...]), 2 * x.reshape(2, 1, 3))


def test_psum_scatter_matches_jax_untiled():
    R = np.random.default_rng(106)
    d = jnp.asarray(R.normal(size=(3, 2, 3)).astype(np.float32))
    ref = jax.vmap(lambda v: jax.lax.psum_scatter(v, "i", scatter_dimension=1), axis_name="i")(d)
    out = nx.psum_scatter(nx.wrap(d, ["i", ...]), "i", scatter_dimension=1)
    np.testing.assert_allclose(nx.unwrap(out, ["i", ...]), ref, rtol=1e-6, atol=1e-6)


def test_reduction_over_positional_int_and_pytrees():
    R = np.random.default_rng(107)
    d = R.normal(size=(2, 3, 4)).astype(np.float32)
    x = nx.wrap(d, {1: "long_name"})
    np.testing.assert_allclose(nx.psum(x, (0, "long_name")).data, d.sum((0, 1)), rtol=1e-5, atol=1e-6)
    tree = {"a": x, "b": [nx.wrap(d, ["long_name", ...])]}
    out = nx.psum(tree, "long_name")
    np.testing.assert_allclose(out["a"].data, d.sum(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["b"][0].data, d.sum(0), rtol=1e-5, atol=1e-6)


def test_psum_of_constants_is_the_axis_size():
    with nx.env.bind({"classes": 10, "j": 3}):
        n = nx.psum(1, "classes")
        assert n == 10 and type(n) is int and int(nx.psum(1, "classes")) == 10
        assert nx.psum(1, ("classes", "j")) == 30
        assert nx.pmean(2.5, "classes") == 2.5
        # xmap's testCollectiveOverNoName (psum(2 ** 2, 'i') with i = 4 is 16); positional stays positional
        assert int(nx.psum(jnp.array(2) ** 2, "j")) == 12
        assert not isinstance(nx.psum(jnp.ones(2), "j"), nx.NamedArray)
        assert nx.axis_size("classes") == 10 and nx.axis_size(("classes", "j")) == 30
        assert nx.lax.axis_size("j") == 3

        @jax.jit
        def f(x):
            return x / nx.psum(1, "classes")  # a Python int under tracing too

        np.testing.assert_allclose(f(jnp.ones(2)), 0.1)


def test_axis_index():
    with nx.env.bind({"i": 2, "j": 3}):
        a = nx.axis_index("j")
        assert a.dtype == jnp.int32 and a.unwrap(["j"]).tolist() == [0, 1, 2]
        # row-major linear index over a tuple of names, in the order given
        assert nx.axis_index(("i", "j")).unwrap(["i", "j"]).tolist() == [[0, 1, 2], [3, 4, 5]]
        assert nx.axis_index(("j", "i")).unwrap(["i", "j"]).tolist() == [[0, 2, 4], [1, 3, 5]]
        out = jax.jit(lambda: nx.unwrap(nx.axis_index("j") * 2, ["j"]))()
        assert out.tolist() == [0, 2, 4]


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_reductions_any_storage_order(data):
    R = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    # random names (multi-character too), random positions: psum/pmax over a random subset of axes
    k = data.draw(st.integers(1, 3))
    names = data.draw(st.lists(st.sampled_from(["a", "bb", "ccc", "z", "batch"]), min_size=k, max_size=k,
                               unique=True))
    p = data.draw(st.integers(0, 2))
    shape = tuple(data.draw(st.lists(st.integers(1, 3), min_size=k + p, max_size=k + p)))
    positions = data.draw(st.permutations(range(k + p)))[:k]
    d = np.asarray(R.normal(size=shape), np.float32)
    x = nx.wrap(d, dict(zip(positions, names)))
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=k, unique=True))
    kind = data.draw(st.sampled_from(["psum", "pmax", "pmean"]))
    out = getattr(nx, kind)(x, tuple(chosen))
    np_fn = {"psum": np.sum, "pmax": np.max, "pmean": np.mean}[kind]
    ref = np_fn(d, axis=tuple(positions[names.index(n)] for n in chosen))
    remaining = [n for n in names if n not in chosen]
    # where the remaining names land in `ref`: their original axes, in order, after removing reduced ones
    kept_axes = [i for i in range(len(shape)) if i not in {positions[names.index(n)] for n in chosen}]
    spec = {kept_axes.index(positions[names.index(n)]): n for n in remaining}
    assert out.named_shape == {n: shape[positions[names.index(n)]] for n in remaining}
    np.testing.assert_allclose(nx.unwrap(out, spec), ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# Errors


UNBOUND = [
    ("psum", lambda x: nx.psum(x, "missing_axis")),
    ("pmean", lambda x: nx.pmean(x, ("i", "missing_axis"))),
    ("psum_scalar", lambda x: nx.psum(1, "missing_axis")),
    ("all_gather", lambda x: nx.all_gather(x, "missing_axis")),
    ("ppermute", lambda x: nx.ppermute(x, "missing_axis", [(0, 1)])),
    ("pshuffle", lambda x: nx.pshuffle(x, "missing_axis", [0])),
    ("psum_scatter", lambda x: nx.psum_scatter(x, "missing_axis")),
    ("all_to_all", lambda x: nx.all_to_all(x, "missing_axis", 0, 0)),
    ("axis_index", lambda x: nx.axis_index("missing_axis")),
    ("axis_size", lambda x: nx.axis_size("missing_axis")),
]


@pytest.mark.parametrize("f", [f for _, f in UNBOUND], ids=[n for n, _ in UNBOUND])
def test_unbound_axis_errors(f):
    x = nx.wrap(jnp.ones((4, 4)), ["i", ...])
    with pytest.raises(errors.UnboundAxisError, match="missing_axis"):
        f(x)
    with nx.env.bind({"other": 2}), pytest.raises(errors.UnboundAxisError, match="missing_axis"):
        jax.jit(lambda d: f(nx.wrap(d, ["i", ...])))(jnp.ones((4, 4)))


def test_pshuffle_bad_perm():
    x = nx.wrap(jnp.arange(4), ["i"])
    with pytest.raises(errors.AxisSpecError,
                       match=r"`perm` does not represent a permutation: \[0, 0, 1, 2\]"):
        nx.pshuffle(x, "i", [0, 0, 1, 2])
    with pytest.raises(errors.AxisSpecError, match=r"does not represent a permutation.*size 4"):
        nx.pshuffle(x, "i", [1, 0])


def test_ppermute_bad_perm():
    x = nx.wrap(jnp.arange(4), ["i"])
    with pytest.raises(errors.AxisSpecError, match="sources and destinations must be unique"):
        nx.ppermute(x, "i", [(0, 1), (2, 1)])
    with pytest.raises(errors.AxisSpecError, match=r"\(0, 7\).*'i' of size 4"):
        nx.ppermute(x, "i", [(0, 7)])
    with pytest.raises(errors.AxisSpecError, match="exactly one of perm"):
        nx.ppermute(x, "i")
    # indices are ints: 1.5 is an error, not a shift by 1
    with pytest.raises(errors.AxisSpecError, match="shift must be an int, got 1.5"):
        nx.ppermute(x, "i", shift=1.5)
    with pytest.raises(errors.AxisSpecError, match=r"int pairs, got \[\(0.5, 1\)\]"):
        nx.ppermute(x, "i", [(0.5, 1)])
    with pytest.raises(errors.AxisSpecError, match="does not represent a permutation"):
        nx.pshuffle(x, "i", [1.0, 0.0, 2.0, 3.0])
    with pytest.raises(errors.AxisSpecError, match="source must be an int index along 'i', got 1.5"):
        nx.lax.pbroadcast(x, "i", 1.5)


def test_psum_scatter_size_errors():
    x = nx.wrap(jnp.ones((4, 8, 3)), ["i", ...])
    with pytest.raises(errors.AxisSizeError, match="scatter dimension size 8 must match shard count 4.*'i'"):
        nx.psum_scatter(x, "i")
    y = nx.wrap(jnp.ones((4, 6)), ["i", ...])
    with pytest.raises(errors.AxisSizeError,
                       match="scatter dimension size 6 must be divisible by shard_count 4"):
        nx.psum_scatter(y, "i", tiled=True)


def test_all_to_all_size_errors():
    x = nx.wrap(jnp.ones((4, 3, 5)), ["i", ...])
    with pytest.raises(errors.AxisSizeError,
                       match=r"mapped axis 'i' to equal x.shape\[split_axis\], but they are 4 and 3"):
        nx.all_to_all(x, "i", 0, 1)
    with pytest.raises(errors.AxisSizeError,
                       match=r"split_axis \(5\) has to be divisible by the size of the named axis 'i' \(4\)"):
        nx.all_to_all(x, "i", 1, 0, tiled=True)


def test_bad_axis_arguments():
    x = nx.wrap(jnp.ones((4, 3)), ["i", ...])
    with pytest.raises(errors.AxisSpecError, match="positional axes"):
        nx.all_gather(x, 0)
    with pytest.raises(errors.AxisSpecError, match="axis=2 is out of range"):
        nx.all_gather(x, "i", axis=2, tiled=True)
    with pytest.raises(errors.DuplicateAxisError, match="'i' appears twice"):
        nx.all_gather(x, ("i", "i"))
    with pytest.raises(errors.AxisSpecError, match="axis_name is required"):
        nx.psum(x, None)
    with pytest.raises(errors.AxisSpecError, match="out of range for a scalar"):
        nx.psum(1, 0)
    scalar = nx.wrap(jnp.ones(4), ["i"])  # no positional axis to scatter, split or concatenate
    with pytest.raises(errors.AxisSpecError, match=r"scatter_dimension=0 is out of range for a value with 0 "
                                                   r"positional axes \(shape \(\), named axes 'i'"):
        nx.psum_scatter(scalar, "i")
    with pytest.raises(errors.AxisSpecError, match="split_axis=0 is out of range"):
        nx.all_to_all(scalar, "i", 0, 0)
    with pytest.raises(errors.AxisSpecError, match="axis=0 is out of range"):
        nx.all_gather(scalar, "i", tiled=True)


# ---------------------------------------------------------------------------------------------------------
# The nx.lax namespace, and the collectives inside nx.xmap (xmap.md §3.2)


def test_lax_namespace():
    assert nx.lax.psum is nx.psum and nx.lax.all_to_all is nx.all_to_all and nx.lax.pdot is nx.pdot
    assert nx.lax.Precision is jax.lax.Precision
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["b", ...])
    # any other jax.lax function is lifted: integer axes stay positional, names are batch axes
    c = nx.lax.cumsum(x, axis=0)
    assert c.named_shape == {"b": 2}
    np.testing.assert_array_equal(c.unwrap(["b", ...]), np.cumsum(np.arange(6.0).reshape(2, 3), axis=1))
    # control flow sees NamedArrays (pytrees) with their names, so named ops work in branches and bodies
    out = nx.lax.cond(True, lambda v: nx.psum(v, "b"), lambda v: nx.pmax(v, "b"), x)
    np.testing.assert_array_equal(out.data, [3.0, 5.0, 7.0])
    total, _ = nx.lax.scan(lambda carry, v: (carry + nx.psum(v, "b"), None), nx.wrap(jnp.zeros(())),
                           nx.wrap(jnp.ones((4, 2)), [None, "b"]))
    assert float(total) == 8.0
    swapped = nx.lax.pswapaxes(nx.wrap(jnp.arange(4).reshape(2, 2), ["b", ...]), "b", 0)
    assert swapped.unwrap(["b", ...]).tolist() == [[0, 2], [1, 3]]
    with pytest.raises(AttributeError, match="no_such_function"):
        nx.lax.no_such_function  # noqa: B018


def test_inside_xmap():
    lax = nx.lax
    # testCollectiveReduce
    a = jnp.arange(6.0).reshape(2, 3)
    f = nx.xmap(lambda a, b: (lax.psum(a * 2, "a"), b * 4), in_axes=(["a", "b", ...], {0: "c"}),
                out_axes=(["b", ...], {0: "c"}))
    r1, r2 = f(a, jnp.arange(5.0))
    np.testing.assert_array_equal(r1, (a * 2).sum(0))
    np.testing.assert_array_equal(r2, jnp.arange(5.0) * 4)
    # testCollectiveOverNoName, under jit
    g = jax.jit(nx.xmap(lambda x: lax.psum(x ** 2, "i"), in_axes={}, out_axes={}, axis_sizes={"i": 4}))
    assert int(g(jnp.array(2))) == 16
    # testCollectiveAllGather
    x = jnp.arange(4, dtype=jnp.int32)
    h = nx.xmap(lambda x: lax.all_gather(x, "i") + lax.axis_index("i"), ["i", ...], ["i", ...])
    np.testing.assert_array_equal(h(x), x[None] + x[None].T)
    # the tutorial's pshuffle, and testControlFlow (a collective inside fori_loop)
    rev = nx.xmap(lambda x: lax.pshuffle(x, "i", list(reversed(range(8)))), ["i", ...], ["i", ...])
    np.testing.assert_array_equal(rev(jnp.arange(8)), np.arange(8)[::-1])
    body = lambda _, v: lax.pmean(v, "i") + v
    loop = nx.xmap(lambda x: lax.fori_loop(0, 3, body, x), ["i", ...], ["i", ...])
    ref = np.arange(5.0)
    for _ in range(3):
        ref = ref.mean() + ref
    np.testing.assert_allclose(loop(jnp.arange(5.0)), ref)
    # testReduceScatter1d
    y = jnp.arange(6.0).reshape(2, 3)
    rs = nx.xmap(lambda v: lax.psum_scatter(v, "i", scatter_dimension=0, tiled=True), in_axes=[None, None],
                 out_axes=["i", None, None], axis_sizes={"i": 2})
    np.testing.assert_array_equal(rs(y), 2 * y.reshape(2, 1, 3))


def test_pbroadcast_and_pcast():
    R = np.random.default_rng(108)
    d = R.normal(size=(3, 2, 4)).astype(np.float32)
    x = nx.wrap(d, ["a", "b", ...])
    out = nx.lax.pbroadcast(x, ("a", "b"), 3)  # linear index 3 = (a=1, b=1)
    assert out.named_shape == {} and out.shape == (4,)
    np.testing.assert_array_equal(out.data, d[1, 1])
    # JAX's definition: psum(where(axis_index == source, x, 0)); the gradient is the same too
    with nx.env.bind({"a": 3, "b": 2}):
        ref = nx.psum(nx.where(nx.axis_index(("a", "b")) == 3, x, 0.0), ("a", "b"))
        np.testing.assert_array_equal(out.data, ref.data)
        g = jax.grad(lambda d: jnp.sum(nx.lax.pbroadcast(nx.wrap(d, ["a", "b", ...]), ("a", "b"), 3).data))(d)
    expected = np.zeros_like(d)
    expected[1, 1] = 1
    np.testing.assert_array_equal(g, expected)
    assert nx.lax.pcast(x, "a", to="varying") is x
    with pytest.raises(errors.UnboundAxisError, match="'zz'"):
        nx.lax.pcast(x, "zz", to="varying")
    with pytest.raises(errors.AxisSpecError, match="source=6 is out of range"):
        nx.lax.pbroadcast(x, ("a", "b"), 6)
