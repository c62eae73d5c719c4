"""nx.dot, tensordot, pdot (by name) and matmul/vdot/inner/outer (positional, vectorised over names)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import namedarray as nx
from namedarray.errors import AxisSizeError, AxisSpecError, DuplicateAxisError, UnboundAxisError

NAMES = ["a", "batch", "k", "m2", "out"]


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


@st.composite
def named_operand_pair(draw, batch: bool):
    """Two named arrays with random storage orders, the names to contract, and their raw layouts."""
    pool = draw(st.permutations(NAMES))
    n_c = draw(st.integers(1, 2))
    contract, rest = list(pool[:n_c]), pool[n_c:]
    owner = {n: draw(st.sampled_from(["a", "b", "both"] if batch else ["a", "b"])) for n in rest}
    size = {n: draw(st.integers(1, 3)) for n in NAMES}
    a_names = contract + [n for n in rest if owner[n] in ("a", "both")]
    b_names = contract + [n for n in rest if owner[n] in ("b", "both")]
    a_order = draw(st.permutations(a_names))
    b_order = draw(st.permutations(b_names))
    return contract, size, list(a_order), list(b_order)


def _aligned(raw, raw_names, pos, names):
    """``raw`` (positional axes, then ``raw_names``) laid out as (positional, ``names``), 1 if missing."""
    perm = list(range(pos)) + [pos + raw_names.index(n) for n in names if n in raw_names]
    out = np.transpose(raw, perm)
    shape = list(out.shape[:pos])
    it = iter(out.shape[pos:])
    for n in names:
        shape.append(next(it) if n in raw_names else 1)
    return out.reshape(shape)


@settings(max_examples=20, deadline=None)
@given(case=named_operand_pair(batch=False), seed=st.integers(0, 2**16))
def test_named_dot_equals_tensordot(case, seed):
    contract, size, a_order, b_order = case
    rng = np.random.default_rng(seed)
    a_raw = _rand(rng, [size[n] for n in a_order])
    b_raw = _rand(rng, [size[n] for n in b_order])
    a = nx.wrap(a_raw, a_order)
    b = nx.wrap(b_raw, b_order)
    free_a = sorted(set(a_order) - set(contract))
    free_b = sorted(set(b_order) - set(contract))
    axis = contract[0] if len(contract) == 1 else tuple(contract)
    out = nx.dot(a, b, axis=axis)
    assert out.shape == () and out.named_shape == {n: size[n] for n in free_a + free_b}
    A = np.transpose(a_raw, [a_order.index(n) for n in free_a + contract]).astype(np.float64)
    B = np.transpose(b_raw, [b_order.index(n) for n in contract + free_b]).astype(np.float64)
    ref = np.tensordot(A, B, axes=len(contract))
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, free_a + free_b)), ref, rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(case=named_operand_pair(batch=True), seed=st.integers(0, 2**16),
       pos=st.lists(st.tuples(st.sampled_from([1, 2]), st.sampled_from([1, 2])), max_size=2),
       drop_a=st.integers(0, 2), drop_b=st.integers(0, 2))
def test_named_dot_broadcasts_other_names_and_positional_axes(case, seed, pos, drop_a, drop_b):
    # nx.dot(a, b, axis) == sum(a * b, axis): shared names are batch axes, positional axes broadcast
    contract, size, a_order, b_order = case
    rng = np.random.default_rng(seed)
    # right-aligned pairs of sizes in {1, 2} always broadcast, whatever leading axes each side drops
    pa = tuple(s for s, _ in pos)[drop_a:]
    pb = tuple(s for _, s in pos)[drop_b:]
    a_raw = _rand(rng, list(pa) + [size[n] for n in a_order])
    b_raw = _rand(rng, list(pb) + [size[n] for n in b_order])
    a = nx.wrap(a_raw, {len(pa) + i: n for i, n in enumerate(a_order)})
    b = nx.wrap(b_raw, {len(pb) + i: n for i, n in enumerate(b_order)})
    out = nx.dot(a, b, axis=tuple(contract))
    union = sorted(set(a_order) | set(b_order))
    kept = [n for n in union if n not in contract]
    p = max(len(pa), len(pb))
    A = _aligned(a_raw, a_order, len(pa), union).astype(np.float64)
    B = _aligned(b_raw, b_order, len(pb), union).astype(np.float64)
    ref = (A * B).sum(axis=tuple(p + union.index(n) for n in contract))
    assert out.shape == np.broadcast_shapes(pa, pb)
    assert out.named_shape == {n: size[n] for n in kept}
    got = nx.unwrap(out, {p + i: n for i, n in enumerate(kept)})
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-4)


def test_named_dot_examples(rng):
    x, w = _rand(rng, (32, 64)), _rand(rng, (64, 16))
    out = nx.dot(nx.wrap(x, ["b", "k"]), nx.wrap(w, ["k", "m"]), axis="k")
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["b", "m"])), x @ w, rtol=1e-5, atol=1e-4)
    # the same with the weight stored the other way round and passed first
    out = nx.dot(nx.wrap(w.T, ["m", "k"]), nx.wrap(x, ["b", "k"]), axis=("k",))
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["b", "m"])), x @ w, rtol=1e-5, atol=1e-4)
    # a positional axis broadcasting against a named contraction
    h = _rand(rng, (3, 64))
    out = nx.dot(nx.wrap(h, [None, "k"]), nx.wrap(w, ["k", "m"]), axis="k")
    assert out.shape == (3,) and out.named_shape == {"m": 16}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, [None, "m"])), h @ w, rtol=1e-5, atol=1e-4)


def test_dot_without_axis_is_jnp_dot_vectorised_over_names(rng):
    a, b = _rand(rng, (4, 2, 3)), _rand(rng, (4, 3, 5))
    x = nx.wrap(a, ["z", ...])
    out = nx.dot(x, b[0])  # plain positional operand: (2, 3) . (3, 5) for each z
    assert out.shape == (2, 5) and out.named_shape == {"z": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", ...])), a @ b[0], rtol=1e-5, atol=1e-5)
    out = nx.dot(x, nx.wrap(b, ["z", ...]))  # a name both carry is a batch axis
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", ...])), np.einsum("zij,zjk->zik", a, b),
                               rtol=1e-5, atol=1e-5)
    out = nx.dot(x, nx.wrap(b, ["y", ...]))  # different names: all pairs
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", "y", ...])), np.einsum("zij,yjk->zyik", a, b),
                               rtol=1e-5, atol=1e-5)
    assert isinstance(nx.dot(a[0], b[0]), jax.Array)  # plain in, plain out
    np.testing.assert_allclose(np.asarray(nx.dot(a[0], b[0])), a[0] @ b[0], rtol=1e-5)


# --------------------------------------------------------------------------------------------------------
# matmul (@), vdot, inner, outer: positional semantics, vectorised over names


def test_matmul_and_operator(rng):
    a, b = _rand(rng, (4, 3, 2, 3)), _rand(rng, (3, 5))
    x = nx.wrap(a, ["z", ...])  # positional (3, 2, 3)
    out = x @ b
    assert out.shape == (3, 2, 5) and out.named_shape == {"z": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", ...])), a @ b, rtol=1e-5, atol=1e-5)
    v = _rand(rng, (6, 3))
    out = x @ nx.wrap(v, ["y", ...])  # matrix @ vector, two names
    assert out.shape == (3, 2) and out.named_shape == {"y": 6, "z": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", "y", ...])),
                               np.einsum("zbij,yj->zybi", a, v), rtol=1e-5, atol=1e-5)
    out = b.T @ nx.wrap(v, ["y", ...])  # reflected operator: jax array @ NamedArray
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["y", ...])), v @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(nx.matmul(a[0], b)), a[0] @ b, rtol=1e-5)


def test_vdot_like_the_xmap_docstring():
    x = np.arange(10).reshape(2, 5)
    out = nx.vdot(nx.wrap(x, {0: "left"}), nx.wrap(x.T, {1: "right"}))
    assert out.shape == () and out.named_shape == {"left": 2, "right": 2}
    assert nx.unwrap(out, ["left", "right"]).tolist() == [[30, 80], [80, 255]]


def test_inner_and_outer(rng):
    a, b = _rand(rng, (4, 2, 3)), _rand(rng, (5, 3))
    out = nx.inner(nx.wrap(a, ["z", ...]), b)
    assert out.shape == (2, 5) and out.named_shape == {"z": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", ...])), np.einsum("zij,kj->zik", a, b),
                               rtol=1e-5, atol=1e-5)
    out = nx.outer(nx.wrap(a, ["z", ...]), b[0])
    assert out.shape == (6, 3) and out.named_shape == {"z": 4}
    ref = np.stack([np.outer(a[i], b[0]) for i in range(4)])
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", ...])), ref, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------------
# tensordot: numpy's axes, where an entry may be a name


def test_tensordot_integer_axes_lifted_over_names(rng):
    a, b = _rand(rng, (4, 2, 3, 5)), _rand(rng, (3, 5, 6))
    x = nx.wrap(a, ["z", ...])
    out = nx.tensordot(x, b, axes=2)
    assert out.shape == (2, 6) and out.named_shape == {"z": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", ...])),
                               np.einsum("zijk,jkl->zil", a, b), rtol=1e-5, atol=1e-5)
    out = nx.tensordot(x, b, axes=((1,), (0,)))
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["z", ...])),
                               np.einsum("zijk,jml->zikml", a, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(nx.tensordot(a[0], b, axes=([-2, -1], [0, 1]))),
                               np.tensordot(a[0], b, axes=2), rtol=1e-5, atol=1e-5)


def test_tensordot_axes_by_name(rng):
    a, b = _rand(rng, (3, 2, 4)), _rand(rng, (4, 3, 5))
    x = nx.wrap(a, ["k", None, "j"])  # positional (2,), named k, j
    # one name both carry
    y = nx.wrap(b, ["j", "k", None])
    out = nx.tensordot(x, y, axes="k")
    assert out.shape == (2, 5) and out.named_shape == {"j": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["j", ...])), np.einsum("kij,jkl->jil", a, b),
                               rtol=1e-5, atol=1e-5)
    # a name of x against a positional axis of a plain array
    out = nx.tensordot(x, b[0], axes=(("k",), (0,)))
    assert out.shape == (2, 5) and out.named_shape == {"j": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["j", ...])), np.einsum("kij,kl->jil", a, b[0]),
                               rtol=1e-5, atol=1e-5)
    # a pair of two names is (axis of a, axis of b), as in numpy: x.j with z.q, which have different names
    z = nx.wrap(b, ["q", ...])
    out = nx.tensordot(x, z, axes=("j", "q"))
    assert out.shape == (2, 3, 5) and out.named_shape == {"k": 3}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["k", ...])), np.einsum("kij,jml->kiml", a, b),
                               rtol=1e-5, atol=1e-5)
    # names and positions mixed in one contraction
    out = nx.tensordot(x, nx.wrap(b, [None, "k", None]), axes=(("j", "k"), (0, "k")))
    assert out.shape == (2, 5) and out.named_shape == {}
    np.testing.assert_allclose(np.asarray(out), np.einsum("kij,jkl->il", a, b), rtol=1e-5, atol=1e-5)


def test_tensordot_errors():
    x = nx.wrap(np.ones((3, 2)), ["k", None])
    with pytest.raises(AxisSpecError, match="argument 1 has no axis 'k'"):
        nx.tensordot(x, np.ones((3, 5)), axes="k")
    with pytest.raises(AxisSizeError, match=r"contracting axis 'k' of argument 0 \(size 3\) with axis 0 of "
                                            r"argument 1 \(size 4\)"):
        nx.tensordot(x, np.ones((4, 5)), axes=(("k",), (0,)))
    with pytest.raises(AxisSpecError, match="pairs 1 axes of argument 0 with 2"):
        nx.tensordot(x, np.ones((3, 5)), axes=(("k",), (0, 1)))
    with pytest.raises(AxisSpecError, match="an int, an axis name, or a pair"):
        nx.tensordot(x, np.ones((3, 5)), axes=("k", "j", "m"))
    with pytest.raises(AxisSpecError, match="needs that many positional axes"):
        nx.tensordot(x, np.ones((3, 5)), axes=2)
    with pytest.raises(DuplicateAxisError, match="lists an axis twice"):
        nx.tensordot(x, np.ones((3, 3)), axes=(("k", "k"), (0, 1)))
    # positions are ints: 0.5 is an error, not axis 0
    with pytest.raises(AxisSpecError, match=r"an axis is a position \(an int\) or a name, got \(0.5,\)"):
        nx.tensordot(x, np.ones((2, 5)), axes=((0.5,), (0,)))
    with pytest.raises(AxisSpecError, match="an int, an axis name, or a pair"):
        nx.tensordot(x, np.ones((2, 5)), axes=1.0)
    np.testing.assert_allclose(  # numpy integers and arrays of positions are positions
        np.asarray(nx.tensordot(nx.wrap(np.ones((3, 2)), ["k", None]), np.ones((2, 5)),
                                axes=(np.array([0]), [np.int64(0)])).unwrap(["k", ...])),
        np.full((3, 5), 2.0))


# --------------------------------------------------------------------------------------------------------
# pdot (xmap.md §3.12)


def test_pdot_basic(rng):
    x, y = _rand(rng, (3, 8)), _rand(rng, (8, 5))
    out = nx.pdot(nx.wrap(x, {1: "i"}), nx.wrap(y, {0: "i"}), "i")
    assert out.shape == (3, 5) and out.named_shape == {}
    np.testing.assert_allclose(np.asarray(out), x @ y, rtol=1e-5, atol=1e-5)
    assert nx.lax.pdot is nx.pdot


def test_pdot_batching(rng):
    x, y = _rand(rng, (2, 3, 8)), _rand(rng, (2, 8, 5))
    out = nx.pdot(nx.wrap(x, {0: "j", 2: "i"}), nx.wrap(y, {0: "j", 1: "i"}), "i")
    assert out.shape == (3, 5) and out.named_shape == {"j": 2}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["j", ...])), np.einsum("nij,njk->nik", x, y),
                               rtol=1e-5, atol=1e-5)


def _matchings(lhs, rhs):
    """Every set of (lhs dim, rhs dim) pairs of equal size, each dim used at most once (xmap's helper)."""

    def helper(start, used1, used2):
        yield ()
        for i in range(start, len(lhs)):
            for j, d in enumerate(rhs):
                if lhs[i] == d and j not in used2:
                    for rest in helper(i + 1, used1 | {i}, used2 | {j}):
                        yield ((i, j), *rest)

    return helper(0, frozenset(), frozenset())


def _pdot_specs():
    specs = []
    for lhs, rhs in [((2,), (2, 4, 2, 1)), ((3, 2, 2), (2, 3, 2))]:
        for matching in _matchings(lhs, rhs):
            for kinds in itertools.product(range(4), repeat=len(matching)):
                specs.append((lhs, rhs, tuple(zip(matching, kinds))))
    # every spec of the first pair, and a deterministic sample of the (many) others
    first = [s for s in specs if s[0] == (2,)]
    return first + [s for s in specs if s[0] != (2,)][::17]


def _run_pdot_spec(lhs, rhs, spec, x, y):
    """(nx function of raw x, y; positional reference) for one pdot spec (xmap's testPdotSystematic)."""
    # kinds: 0 mapped contract, 1 positional contract, 2 mapped batch, 3 positional batch
    x_map = {i: f"c{k}" if kind == 0 else f"b{k}" for k, ((i, _), kind) in enumerate(spec) if kind in (0, 2)}
    y_map = {j: f"c{k}" if kind == 0 else f"b{k}" for k, ((_, j), kind) in enumerate(spec) if kind in (0, 2)}
    x_pos = [i for i in range(len(lhs)) if i not in x_map]
    y_pos = [j for j in range(len(rhs)) if j not in y_map]
    pc = (tuple(x_pos.index(i) for (i, _), kind in spec if kind == 1),
          tuple(y_pos.index(j) for (_, j), kind in spec if kind == 1))
    pb = (tuple(x_pos.index(i) for (i, _), kind in spec if kind == 3),
          tuple(y_pos.index(j) for (_, j), kind in spec if kind == 3))
    contract_names = tuple(f"c{k}" for k, (_, kind) in enumerate(spec) if kind == 0)
    batch_names = [f"b{k}" for k, (_, kind) in enumerate(spec) if kind == 2]

    def named(x, y):
        out = nx.pdot(nx.wrap(x, x_map), nx.wrap(y, y_map), contract_names, pos_contract=pc, pos_batch=pb)
        return nx.unwrap(out, batch_names + [...])

    mb = [(i, j) for (i, j), kind in spec if kind == 2]
    pbp = [(i, j) for (i, j), kind in spec if kind == 3]
    con = [(i, j) for (i, j), kind in spec if kind in (0, 1)]
    dims = ((tuple(i for i, _ in con), tuple(j for _, j in con)),
            (tuple(i for i, _ in mb + pbp), tuple(j for _, j in mb + pbp)))

    def reference(x, y):
        return lax.dot_general(x, y, dims, precision=lax.Precision.HIGHEST)

    return named, reference


@pytest.mark.parametrize("lhs, rhs, spec", _pdot_specs())
def test_pdot_systematic(lhs, rhs, spec, rng):
    x, y = _rand(rng, lhs), _rand(rng, rhs)
    named, reference = _run_pdot_spec(lhs, rhs, spec, x, y)
    np.testing.assert_allclose(np.asarray(named(x, y)), np.asarray(reference(x, y)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lhs, rhs, spec", _pdot_specs()[::3])
def test_pdot_vjp_systematic(lhs, rhs, spec, rng):
    x, y = _rand(rng, lhs), _rand(rng, rhs)
    named, reference = _run_pdot_spec(lhs, rhs, spec, x, y)
    out, vjp = jax.vjp(named, x, y)
    ref_out, ref_vjp = jax.vjp(reference, x, y)
    ct = _rand(rng, ref_out.shape)
    for got, want in zip(vjp(jnp.asarray(ct)), ref_vjp(jnp.asarray(ct))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_pdot_names_carried_by_one_operand_or_bound_only(rng):
    x, y = _rand(rng, (3, 4)), _rand(rng, (5,))
    xi = nx.wrap(x, {1: "i"})
    # a name only x carries: psum over it sums x along it
    out = nx.pdot(xi, y, "i")
    np.testing.assert_allclose(np.asarray(out), np.outer(x.sum(1), y), rtol=1e-5, atol=1e-5)
    # a name neither carries: psum over a bound name multiplies by its size; unbound is an error
    with nx.env.bind({"r": 7}):
        out = nx.pdot(xi, y, ("i", "r"))
    np.testing.assert_allclose(np.asarray(out), 7 * np.outer(x.sum(1), y), rtol=1e-5, atol=1e-4)
    with pytest.raises(UnboundAxisError, match="unbound axis name 'r'"):
        nx.pdot(xi, y, ("i", "r"))
    with pytest.raises(DuplicateAxisError, match="'i' listed twice"):
        nx.pdot(xi, y, ("i", "i"))
    with pytest.raises(AxisSizeError, match=r"pos_contract pairs positional axis 0 of x \(size 3\) with "
                                            r"axis 0 of y \(size 5\)"):
        nx.pdot(xi, y, "i", pos_contract=((0,), (0,)))
    with pytest.raises(AxisSpecError, match=r"pos_contract is a pair of sequences .* got \(\(0.5,\), "):
        nx.pdot(xi, y, "i", pos_contract=((0.5,), (0,)))
    with pytest.raises(AxisSpecError, match=r"pos_batch is a pair of sequences .* got 3"):
        nx.pdot(xi, y, "i", pos_batch=3)


def test_pdot_keeps_small_integer_types(rng):
    # psum(dot_general(x, y)) over int8 stays int8, whether a name is contracted or summed in one operand
    x = rng.integers(-3, 3, size=(3, 4)).astype(np.int8)
    y = rng.integers(-3, 3, size=(4, 5)).astype(np.int8)
    dims = (((), ()), ((), ()))
    # (under vmap, every index of i holds the psum: take index 0)
    ref_one = jax.vmap(lambda a: lax.psum(lax.dot_general(a, y[0], dims), "i"), in_axes=1,
                       axis_name="i")(x)[0]
    out = nx.pdot(nx.wrap(x, {1: "i"}), y[0], "i")
    assert out.dtype == ref_one.dtype == jnp.int8
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref_one))
    ref_both = jax.vmap(lambda a, b: lax.psum(lax.dot_general(a, b, dims), "i"), in_axes=(1, 0),
                        axis_name="i")(x, y)[0]
    out = nx.pdot(nx.wrap(x, {1: "i"}), nx.wrap(y, {0: "i"}), "i")
    assert out.dtype == ref_both.dtype == jnp.int8
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref_both))


def test_pdot_inside_xmap(rng):
    x, y = _rand(rng, (2, 5, 3)), _rand(rng, (3, 4))
    # 'r' is bound by the xmap (axis_sizes) and carried by neither operand: psum multiplies by its size
    f = nx.xmap(lambda x, y: nx.pdot(x, y, ("k", "r")), in_axes=[{0: "b", 2: "k"}, ["k", "m", ...]],
                out_axes={0: "b", 2: "m"}, axis_sizes={"r": 3})
    np.testing.assert_allclose(np.asarray(f(x, y)), 3 * np.einsum("bnk,km->bnm", x, y), rtol=1e-5, atol=1e-5)


def test_pdot_precision_and_type(rng):
    x = nx.wrap(jnp.ones((3, 4), jnp.bfloat16), ["i", None])
    out = nx.pdot(x, x, "i", pos_contract=((0,), (0,)), preferred_element_type=jnp.float32)
    assert out.dtype == jnp.float32 and float(out) == 12.0
    out = nx.pdot(x, x, "i", precision=lax.Precision.HIGHEST)
    assert out.dtype == jnp.bfloat16 and out.shape == (4, 4)


def test_tutorial_mlp_with_pdot_matches_positional(rng):
    image, w1, w2 = _rand(rng, (8, 12)), _rand(rng, (12, 6)), _rand(rng, (6, 3))

    def named_predict(w1, w2, images):
        hidden = nx.maximum(nx.pdot(images, w1, "inputs"), 0)
        logits = nx.pdot(hidden, w2, "hidden")
        return logits - nx.max(logits, axis="classes")

    out = named_predict(nx.wrap(w1, ["inputs", "hidden"]), nx.wrap(w2, ["hidden", "classes"]),
                        nx.wrap(image, ["batch", "inputs"]))
    logits = np.maximum(image @ w1, 0) @ w2
    ref = logits - logits.max(1, keepdims=True)
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["batch", "classes"])), ref, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------------------
# Gradients, lowering and errors


def test_grad_through_named_dot_equals_positional_gradient(rng):
    x, w = _rand(rng, (4, 3)), _rand(rng, (3, 2))

    def named(x, w):
        return nx.sum(nx.tanh(nx.dot(x, w, axis="k")), axis=("b", "m")).data

    def positional(x, w):
        return jnp.sum(jnp.tanh(x @ w))

    gx, gw = jax.grad(named, argnums=(0, 1))(nx.wrap(x, ["b", "k"]), nx.wrap(w, ["k", "m"]))
    rx, rw = jax.grad(positional, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(nx.unwrap(gx, ["b", "k"])), rx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(nx.unwrap(gw, ["k", "m"])), rw, rtol=1e-5, atol=1e-6)


def _count_prims(jaxpr, counts):
    for eqn in jaxpr.eqns:
        counts[eqn.primitive.name] = counts.get(eqn.primitive.name, 0) + 1
        for sub in jax.core.subjaxprs(eqn.params) if hasattr(jax.core, "subjaxprs") else ():
            _count_prims(sub, counts)
        for v in eqn.params.values():
            if hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):
                _count_prims(v.jaxpr, counts)
    return counts


@pytest.mark.parametrize("f", [
    lambda a, b: nx.dot(a, b, axis="k"),
    lambda a, b: nx.dot(b, a, axis=("k",)),
    lambda a, b: nx.pdot(a, b, "k"),
    lambda a, b: nx.tensordot(a, b, axes="k"),
])
def test_named_contraction_lowers_to_one_dot_general(f):
    a = nx.wrap(jnp.ones((32, 64)), ["b", "k"])
    b = nx.wrap(jnp.ones((128, 64)), ["m", "k"])
    # the storage as the operation leaves it: dot_general's own order, no transpose of operands or result
    counts = _count_prims(jax.make_jaxpr(lambda a, b: f(a, b).data)(a, b).jaxpr, {})
    assert counts.get("dot_general") == 1
    assert counts.get("transpose", 0) == 0, counts
    assert set(counts) <= {"dot_general", "pjit", "jit"}, counts
    # leaving the trace, the result is flattened to canonical storage (sorted names): values by name agree
    out = jax.jit(f)(a, b)
    np.testing.assert_allclose(np.asarray(out.unwrap(["b", "m"])), np.full((32, 128), 64.0))


def test_dot_errors():
    x = nx.wrap(np.ones((3, 4)), ["i", "k"])
    with pytest.raises(AxisSpecError, match="contracting axis 'k', but argument 1 does not carry it"):
        nx.dot(x, nx.wrap(np.ones(4), ["j"]), axis="k")
    with pytest.raises(AxisSpecError, match="argument 1 does not carry it .*no named axes"):
        nx.dot(x, np.ones(4), axis="k")
    with pytest.raises(AxisSizeError, match="axis 'k' has size 4 in argument 0 but size 5 in argument 1"):
        nx.dot(x, nx.wrap(np.ones(5), ["k"]), axis="k")
    with pytest.raises(AxisSizeError, match=r"positional shapes \(2,\) and \(3,\) do not broadcast"):
        nx.dot(nx.wrap(np.ones((2, 4)), [None, "k"]), nx.wrap(np.ones((3, 4)), [None, "k"]), axis="k")
    with pytest.raises(AxisSpecError, match="axis must be a name or a tuple of names"):
        nx.dot(x, x, axis=0)
    with pytest.raises(DuplicateAxisError, match="listed twice"):
        nx.dot(x, x, axis=("k", "k"))




def test_eager_named_dot_is_one_cached_kernel(counts):
    a = nx.wrap(jnp.ones((32, 64)), ["b", "k"])
    b = nx.wrap(jnp.ones((64, 16)), ["k", "m"])
    counts.reset(fresh_kernels=True)
    nx.dot(a, b, axis="k").block_until_ready()
    assert counts.compiles == 1 and counts.kernels_built == 1
    for _ in range(5):
        nx.dot(a, b, axis="k").block_until_ready()
    assert counts.compiles == 1 and counts.kernels_built == 1 and counts.eager_calls == 6


def test_matmul_without_positional_axes_names_the_operand():
    x = nx.wrap(jnp.ones((3, 4)), ["a", "k"])
    with pytest.raises(nx.errors.AxisSpecError, match=r"argument 0 .*no positional axis.*'a', 'k'.*nx.dot"):
        x @ jnp.ones((4,))
    with pytest.raises(nx.errors.AxisSpecError, match="argument 1"):
        jnp.ones((4,)) @ x
    rows = nx.wrap(jnp.ones((2, 4)), ["a", ...])
    np.testing.assert_allclose((rows @ jnp.ones(4)).unwrap(["a"]), [4.0, 4.0])
