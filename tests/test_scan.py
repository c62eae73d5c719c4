"""``nx.scan`` and ``nx.map``: loops over a named axis equal a Python loop over its slices, their gradients
equal the positional ``jax.lax.scan``'s, remat lowers memory, and bad input is an ``nx.errors`` error."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import fresh_canonical_orders
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors

NAMES = ("a", "bb", "k", "feat")


def _named(rng, pos: tuple[int, ...], sizes: dict[str, int], perm) -> nx.NamedArray:
    """Random values with positional axes ``pos`` and named axes ``sizes``, stored in the order ``perm``
    (a permutation of all the axes, positional ones included)."""
    names = list(sizes)
    canon = np.asarray(rng.normal(size=pos + tuple(sizes.values())), np.float32)
    data = canon.transpose(perm)
    labels = [None] * len(pos) + names
    spec = {i: labels[a] for i, a in enumerate(perm) if labels[a] is not None}
    x = nx.wrap(data, spec)
    assert x.shape == pos
    return x


def _dense(x, order):
    """``x`` unwrapped with its names in ``order`` (the names it carries, in that order), as NumPy."""
    return np.asarray(x.unwrap([n for n in order if n in x.named_shape] + [...]))


@st.composite
def scan_cases(draw):
    axis = draw(st.sampled_from(NAMES))
    others = [n for n in NAMES if n != axis]
    sizes = {n: draw(st.integers(1, 3)) for n in draw(st.lists(st.sampled_from(others), max_size=3,
                                                                  unique=True))}
    length = draw(st.integers(1, 4))
    pos = draw(st.sampled_from([(), (2,)]))

    def operand(with_axis):
        chosen = {n: s for n, s in sizes.items() if draw(st.booleans())}
        if with_axis:
            chosen = {axis: length, **chosen}
        p = pos if draw(st.booleans()) else ()
        perm = draw(st.permutations(range(len(p) + len(chosen))))
        return p, chosen, tuple(perm)

    xs = [operand(True), operand(draw(st.booleans())), operand(True)]
    carry = {n: s for n, s in sizes.items() if draw(st.booleans())}
    carry_pos = max(p for p, _, _ in xs)  # the body broadcasts positional axes too: the carry has them
    carry_perm = tuple(draw(st.permutations(range(len(carry_pos) + len(carry)))))
    return dict(axis=axis, xs=xs, carry=(carry_pos, carry, carry_perm), reverse=draw(st.booleans()),
                unroll=draw(st.sampled_from([1, 2])), seed=draw(st.integers(0, 2**16)))


def _body(c, xs):
    # the carry gains every name of the slices (it is widened when init lacks some), in the slices' order
    new = nx.tanh(xs["u"] * xs["v"] + c * 0.5) + xs["w"]
    # the positional axes summed (a value of names only has none: axis=None would be refused there)
    return new, {"twice": new * 2.0, "plain": 1.0, "sum": new.sum(tuple(range(new.ndim)))}


@settings(max_examples=20, deadline=None)
@given(scan_cases())
def test_scan_equals_a_python_loop_over_the_axis(case):
    rng = np.random.default_rng(case["seed"])
    axis = case["axis"]
    xs = {key: _named(rng, *op) for key, op in zip("uvw", case["xs"])}
    init = _named(rng, *case["carry"])

    carry, ys = nx.scan(_body, init, xs, axis=axis, reverse=case["reverse"], unroll=case["unroll"])

    steps = range(xs["u"].named_shape[axis])
    ref_c, ref_ys = init, {}
    for t in (reversed(steps) if case["reverse"] else steps):
        step = {k: v[{axis: t}] if axis in v.named_shape else v for k, v in xs.items()}
        ref_c, ref_ys[t] = _body(ref_c, step)
    order = sorted(ref_c.named_shape)
    assert carry.named_shape == ref_c.named_shape and carry.shape == ref_c.shape
    np.testing.assert_allclose(_dense(carry, order), _dense(ref_c, order), rtol=1e-5, atol=1e-6)
    assert ys["twice"].named_shape == {**ref_c.named_shape, axis: len(steps)}
    assert ys["plain"].named_shape == {axis: len(steps)}
    for t in steps:
        np.testing.assert_allclose(_dense(ys["twice"][{axis: t}], order), _dense(ref_ys[t]["twice"], order),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(_dense(ys["sum"][{axis: t}], order), _dense(ref_ys[t]["sum"], order),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(ys["plain"].unwrap([axis])), np.ones(len(steps)))


# --------------------------------------------------------------------------------------------------------
# The stacked-layers pattern, against the same model on plain arrays with jax.lax.scan

L, B, E, M = 3, 4, 5, 6


def _stack_params(rng, layers=L, embed=E, mlp=M):
    w1 = rng.normal(size=(layers, embed, mlp)).astype(np.float32) / np.sqrt(embed)
    b1 = rng.normal(size=(layers, mlp)).astype(np.float32)
    w2 = rng.normal(size=(layers, mlp, embed)).astype(np.float32) / np.sqrt(mlp)
    return {"w1": w1, "b1": b1, "w2": w2}


def _named_params(p):
    # stored in three different orders: the layer axis first, last, and in the middle
    return {"w1": nx.wrap(p["w1"], ["layer", "embed", "mlp"]),
            "b1": nx.wrap(p["b1"].T, ["mlp", "layer"]),
            "w2": nx.wrap(p["w2"].transpose(1, 0, 2), ["mlp", "layer", "embed"])}


def _block(h, p):
    a = nx.nn.relu(nx.dot(h, p["w1"], axis="embed") + p["b1"])
    return h + nx.dot(a, p["w2"], axis="mlp"), None


def _block_positional(h, p):
    a = jax.nn.relu(h @ p["w1"] + p["b1"])
    return h + a @ p["w2"], None


def _loss(params, x, remat=False):
    h, _ = nx.scan(_block, x, params, axis="layer", remat=remat)
    return (h * h).sum(("batch", "embed")).unwrap()


def _loss_positional(params, x):
    h, _ = jax.lax.scan(_block_positional, x, params)
    return jnp.sum(h * h)


@pytest.mark.parametrize("remat", [False, True, jax.checkpoint_policies.dots_saveable])
def test_grad_through_scan_equals_the_positional_gradient(remat):
    rng = np.random.default_rng(1)
    p = _stack_params(rng)
    x = rng.normal(size=(B, E)).astype(np.float32)
    named_p, named_x = _named_params(p), nx.wrap(x, ["batch", "embed"])
    loss, (gp, gx) = jax.jit(jax.value_and_grad(_loss, argnums=(0, 1)), static_argnums=2)(named_p, named_x,
                                                                                           remat)
    ref_loss, (ref_gp, ref_gx) = jax.value_and_grad(_loss_positional, argnums=(0, 1))(p, x)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    np.testing.assert_allclose(gx.unwrap(["batch", "embed"]), ref_gx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gp["w1"].unwrap(["layer", "embed", "mlp"]), ref_gp["w1"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gp["b1"].unwrap(["layer", "mlp"]), ref_gp["b1"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gp["w2"].unwrap(["layer", "mlp", "embed"]), ref_gp["w2"], rtol=1e-4, atol=1e-5)


def test_remat_lowers_the_temp_memory_of_a_12_layer_grad_step():
    rng = np.random.default_rng(2)
    p = _named_params(_stack_params(rng, layers=12, embed=64, mlp=256))
    x = nx.wrap(rng.normal(size=(128, 64)).astype(np.float32), ["batch", "embed"])

    def temp_bytes(remat):
        step = jax.jit(jax.grad(lambda p, x: _loss(p, x, remat)))
        return step.lower(p, x).compile().memory_analysis().temp_size_in_bytes

    plain, remat = temp_bytes(False), temp_bytes(True)
    # without remat the backward pass keeps each layer's (batch, mlp) activations: 12 x 128 x 256 floats
    assert remat < plain - 12 * 128 * 256 * 4 // 2, (remat, plain)


def test_scan_over_a_name_costs_no_more_transposes_than_over_a_position():
    # the same named model, its layer axis named (nx.scan) or positional (nx.lax.scan): equal programs
    rng = np.random.default_rng(3)
    p = _stack_params(rng)
    x = nx.wrap(rng.normal(size=(B, E)).astype(np.float32), ["batch", "embed"])
    by_name = {"w1": nx.wrap(p["w1"], ["layer", "embed", "mlp"]), "b1": nx.wrap(p["b1"], ["layer", "mlp"]),
               "w2": nx.wrap(p["w2"], ["layer", "mlp", "embed"])}
    by_position = {"w1": nx.wrap(p["w1"], [None, "embed", "mlp"]), "b1": nx.wrap(p["b1"], [None, "mlp"]),
                   "w2": nx.wrap(p["w2"], [None, "mlp", "embed"])}

    def over_position(params, x):
        h, _ = nx.lax.scan(_block, x, params)
        return (h * h).sum(("batch", "embed")).unwrap()

    def ops(f, *args):
        text = str(jax.make_jaxpr(jax.grad(f))(*args))
        return {op: text.count(op + "[") for op in ("transpose", "dot_general", "reshape", "broadcast")}

    with fresh_canonical_orders():  # each name set flattens as built here: the layer axis first
        assert ops(_loss, by_name, x) == ops(over_position, by_position, x)


def test_a_stack_drawn_by_name_layer_first_is_scanned_without_a_transpose():
    # what the library guide tells authors: list `layer` first in named_shape, and the stack is stored,
    # crosses jit and is sliced by the scan as a positional program's (layer, ...) array would be
    def init(key):
        return {"w": nx.random.normal(key, named_shape={"layer": 3, "embed": E, "embed_out": E}),
                "b": nx.nn.initializers.zeros(key, (), named_shape={"layer": 3, "embed_out": E})}

    def block(h, p):
        return nx.tanh(nx.dot(h, p["w"], axis="embed") + p["b"]).rename({"embed_out": "embed"}), None

    def loss(params, x):
        h, _ = nx.scan(block, x, params, axis="layer")
        return (h * h).sum(("batch", "embed"))

    x = nx.wrap(np.ones((B, E), np.float32), ["batch", "embed"])
    with fresh_canonical_orders():
        params = jax.jit(init)(jax.random.key(0))
        assert params["w"].names == ("layer", "embed", "embed_out") and params["w"].data.shape == (3, E, E)
        assert params["b"].names == ("layer", "embed_out")
        assert "transpose[" not in str(jax.make_jaxpr(loss)(params, x))


# --------------------------------------------------------------------------------------------------------
# Carries, leaves without the axis, nx.map


def test_carries_in_any_storage_order_and_a_carry_that_loses_a_name():
    rng = np.random.default_rng(4)
    xs = nx.wrap(rng.normal(size=(3, 2, 4)).astype(np.float32), ["t", "a", "b"])
    init = nx.wrap(np.zeros((4, 2), np.float32), ["b", "a"])

    def body(c, x):
        flipped = nx.wrap(c.unwrap(["a", "b"]), ["a", "b"])  # the carry comes back in another order
        return flipped + x.sum("a"), c.sum("b")  # ... and its 'a' broadcast back from a sum over it

    carry, ys = nx.scan(body, init, xs, axis="t")
    d = np.asarray(xs.unwrap(["t", "a", "b"]))
    ref = np.zeros((2, 4), np.float32)
    for t in range(3):
        ref = ref + d[t].sum(0)
    np.testing.assert_allclose(carry.unwrap(["a", "b"]), ref, rtol=1e-5)
    assert ys.named_shape == {"t": 3, "a": 2}


def test_leaves_without_the_axis_reach_every_step_whole():
    xs = {"x": nx.wrap(jnp.arange(3.0), ["t"]), "scale": nx.wrap(jnp.array([1.0, 10.0]), ["k"]),
          "offset": 5.0, "name": None}
    _, ys = nx.scan(lambda c, s: (c, s["x"] * s["scale"] + s["offset"]), 0.0, xs, axis="t")
    np.testing.assert_allclose(ys.unwrap(["t", "k"]), np.arange(3.0)[:, None] * [1.0, 10.0] + 5.0)
    out = nx.map(lambda s: s["x"] * s["scale"], xs, axis="t")
    np.testing.assert_allclose(out.unwrap(["t", "k"]), np.arange(3.0)[:, None] * [1.0, 10.0])


@pytest.mark.parametrize("batch_size", [None, 1, 3, 7, 10])
def test_map_equals_the_vectorised_result(batch_size):
    rng = np.random.default_rng(5)
    x = nx.wrap(rng.normal(size=(2, 7, 3)).astype(np.float32), [None, "row", "k"])
    w = nx.wrap(rng.normal(size=(3, 4)).astype(np.float32), ["k", "m"])

    def f(r):
        return nx.nn.softmax(nx.dot(r, w, axis="k"), "m"), r.sum("k")

    out, sums = jax.jit(lambda x: nx.map(f, x, axis="row", batch_size=batch_size))(x)
    ref, ref_sums = f(x)  # every named op is vectorised over 'row' already
    np.testing.assert_allclose(_dense(out, ["row", "m"]), _dense(ref, ["row", "m"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_dense(sums, ["row"]), _dense(ref_sums, ["row"]), rtol=1e-5)


def test_scan_and_map_inside_xmap_and_under_vmap():
    rng = np.random.default_rng(6)
    d = rng.normal(size=(4, 3, 2)).astype(np.float32)

    def body(v):  # v: {'i', 't'} with one positional axis; the carry loses 'i' through a psum
        c, _ = nx.scan(lambda c, x: (nx.psum(c + x, "i"), None), nx.zeros(2), v, axis="t")
        return c

    out = nx.xmap(body, in_axes=["i", "t", ...], out_axes=["i", ...])(d)
    ref = np.zeros((4, 2), np.float32)
    for t in range(3):
        ref = np.broadcast_to((ref + d[:, t]).sum(0), (4, 2))
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    mapped = jax.vmap(lambda v: nx.map(lambda r: r * 2.0, nx.wrap(v, ["t", ...]), axis="t"))(d)
    np.testing.assert_allclose(mapped.unwrap([None, "t", ...]), 2 * d)


# --------------------------------------------------------------------------------------------------------
# Bad input


def test_scan_over_a_missing_name_says_what_the_leaves_carry():
    params = {"w": nx.wrap(jnp.ones((3, 4)), ["layers", "embed"]), "b": nx.wrap(jnp.ones(4), ["embed"])}
    with pytest.raises(errors.AxisSpecError, match=r"no leaf of xs carries axis 'layer'.*"
                                                   r"xs\['b'\] has 'embed'; xs\['w'\] has 'layers', 'embed'"):
        nx.scan(lambda c, p: (c, None), 0.0, params, axis="layer")
    with pytest.raises(errors.AxisSpecError, match="no leaf of xs carries axis 'row'"):
        nx.map(lambda r: r, nx.wrap(jnp.ones(3), ["col"]), axis="row")
    with pytest.raises(errors.AxisSpecError, match="axis names must be non-empty strings"):
        nx.scan(lambda c, p: (c, None), 0.0, params, axis=0)


def test_scan_input_errors():
    x = nx.wrap(jnp.ones((3, 4)), ["t", "k"])
    with pytest.raises(errors.AxisSizeError, match=r"axis 't' has size 3 in xs\[0\] but size 5 in xs\[1\]"):
        nx.scan(lambda c, x: (c, None), 0.0, (x, nx.wrap(jnp.ones(5), ["t"])), axis="t")
    with pytest.raises(errors.AxisSpecError, match=r"xs\[1\] is a positional array of shape \(3,\).*"
                                                   r"nx.wrap\(a, \['t', ...\]\)"):
        nx.scan(lambda c, x: (c, None), 0.0, (x, jnp.ones(3)), axis="t")
    with pytest.raises(errors.DuplicateAxisError, match=r"y\['z'\] of f already has an axis 't'"):
        nx.scan(lambda c, x: (c, {"z": nx.wrap(jnp.zeros(2), ["t"])}), 0.0, x, axis="t")
    with pytest.raises(TypeError, match="f must return a pair"):
        nx.scan(lambda c, x: c, 0.0, x, axis="t")
    with pytest.raises(TypeError, match="remat must be True, False or a jax.checkpoint_policies policy"):
        nx.scan(lambda c, x: (c, None), 0.0, x, axis="t", remat="yes")


def test_scan_carry_that_cannot_be_broadcast():
    x = nx.wrap(jnp.ones((3, 4)), ["t", "k"])
    init = nx.wrap(jnp.zeros(5), ["k"])
    with pytest.raises(errors.AxisSizeError, match=r"nx.scan: axis 'k' has size 5 in init but size 4 in the "
                                                   r"carry f returns"):
        nx.scan(lambda c, x: (x, None), init, x, axis="t")


@pytest.mark.parametrize("batch_size", [0, -2, 2.5, True, "2", np.float32(2.0)])
def test_map_batch_size_must_be_a_positive_int(batch_size):
    with pytest.raises(errors.NamedAxisError, match=r"batch_size must be a positive int .*'row'.*got"):
        nx.map(lambda r: r, nx.wrap(jnp.ones(3), ["row"]), axis="row", batch_size=batch_size)


def test_map_batch_size_may_be_a_numpy_int():
    out = nx.map(lambda r: r + 1, nx.wrap(jnp.arange(5.0), ["row"]), axis="row", batch_size=np.int64(2))
    np.testing.assert_array_equal(out.unwrap(["row"]), np.arange(5.0) + 1)


def test_lax_scan_over_a_named_layer_axis_says_to_use_nx_scan():
    # the first thing a new user tries: jax.lax.scan slices the first *storage* axis, a named one
    params = {"w": nx.wrap(jnp.ones((12, 4, 8)), ["layer", "embed", "mlp"])}
    x = nx.wrap(jnp.ones((2, 4)), ["batch", "embed"])

    def block(h, p):
        return nx.dot(nx.dot(h, p["w"], axis="embed"), p["w"], axis="mlp"), None

    with pytest.raises(errors.AxisSpecError, match=r"mapped one of its named axes.*nx.scan\(f, init, xs, "
                                                   r"axis=name\)"):
        jax.lax.scan(block, x, params)
    with pytest.raises(errors.AxisSpecError, match=r"nx.lax.scan: xs\['w'\] has no positional axis to loop "
                                                   r"over .*nx.scan"):
        nx.lax.scan(block, x, params)
    out, _ = nx.scan(block, x, params, axis="layer")
    assert out.named_shape == {"batch": 2, "embed": 4}


def test_an_eager_loop_over_the_same_function_is_traced_once_and_never_stale():
    traces = []

    def step(c, x):
        traces.append(1)
        return c + x["v"] * x["scale"], None  # the carry becomes a NamedArray: fitted, found again too

    v = nx.wrap(jnp.arange(3.0), ["t"])
    seen = []
    for scale in (1.0, 2.0, 1.0, 2.0):  # a static leaf: part of what the step is kept for
        total, _ = nx.scan(step, 0.0, {"v": v, "scale": scale}, axis="t")
        assert float(total) == 3.0 * scale
        seen.append(len(traces))
    assert seen[1] == seen[2] == seen[3]  # the last two calls trace nothing
    for scale in (1.0, 2.0):  # an array reaching every step whole: the step closes over it, afresh
        total, _ = nx.scan(step, 0.0, {"v": v, "scale": nx.wrap(jnp.asarray(scale))}, axis="t")
        assert float(total) == 3.0 * scale
    flagged = lambda c, x: (c + (x["v"] * 2 if x["flag"] is True else x["v"]), None)  # noqa: E731
    assert [float(nx.scan(flagged, 0.0, {"v": v, "flag": flag}, axis="t")[0]) for flag in (1, True)] == [3, 6]
    double = lambda r: (traces.append(1), r * 2)[1]  # noqa: E731
    before = len(traces)
    for _ in range(3):
        np.testing.assert_array_equal(nx.map(double, v, axis="t").unwrap(["t"]), [0.0, 2.0, 4.0])
    assert len(traces) == before + 1
