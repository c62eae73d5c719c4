"""nx.nn against jax.nn on the aligned positional arrays, names in ``axis``, one_hot by name, gradients."""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import namedarray as nx
from namedarray import errors

NAMES = ["a", "bb", "batch", "classes", "z"]  # multi-character names on purpose (xmap broke on those)


@st.composite
def named_arrays(draw, min_names=1, max_names=3, max_pos=2):
    R = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    """(positional data d, positions {name: axis of d}, x = nx.wrap(d, ...)) with a random storage order."""
    k = draw(st.integers(min_names, max_names))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=k, max_size=k, unique=True))
    p = draw(st.integers(0, max_pos))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=k + p, max_size=k + p)))
    axes = draw(st.permutations(range(k + p)))[:k]
    d = np.asarray(R.normal(size=shape), np.float32)
    pos = dict(zip(names, axes))
    return d, pos, nx.wrap(d, {a: n for n, a in pos.items()})


def _positional_axes(pos, ndim):
    return [i for i in range(ndim) if i not in pos.values()]


def _translate(axis_items, pos, ndim):
    """``axis`` entries (names, or ints over the positional axes of x) as axes of the positional data."""
    free = _positional_axes(pos, ndim)
    return tuple(pos[a] if isinstance(a, str) else free[a] for a in axis_items)


def _spec_after_reduce(pos, reduced, ndim):
    kept = [i for i in range(ndim) if i not in reduced]
    return {kept.index(a): n for n, a in pos.items() if a not in reduced}


ACTIVATIONS = ["relu", "relu6", "gelu", "sigmoid", "silu", "swish", "softplus", "tanh", "elu", "celu", "selu",
               "leaky_relu", "log_sigmoid", "soft_sign", "hard_sigmoid", "hard_silu", "hard_tanh", "mish",
               "squareplus", "sparse_plus", "sparse_sigmoid"]


@settings(max_examples=15, deadline=None)
@given(named_arrays(), st.sampled_from(ACTIVATIONS))
def test_activations_match_jax(arr, name):
    d, pos, x = arr
    out = getattr(nx.nn, name)(x)
    assert out.named_shape == x.named_shape and out.shape == x.shape
    np.testing.assert_allclose(nx.unwrap(out, {a: n for n, a in pos.items()}), getattr(jax.nn, name)(d),
                               rtol=1e-5, atol=1e-6)


def test_activation_options_and_broadcasting():
    R = np.random.default_rng(101)
    d = R.normal(size=(2, 3)).astype(np.float32)
    x = nx.wrap(d, ["batch", ...])
    np.testing.assert_allclose(nx.nn.gelu(x, approximate=False).unwrap(["batch", ...]),
                               jax.nn.gelu(d, approximate=False), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(nx.nn.leaky_relu(x, 0.3).unwrap(["batch", ...]), jax.nn.leaky_relu(d, 0.3))
    # an array-valued parameter with its own name broadcasts by name
    slope = nx.wrap(jnp.array([0.1, 0.2, 0.3, 0.4]), ["feat"])
    out = nx.nn.leaky_relu(x, negative_slope=slope)
    assert out.named_shape == {"batch": 2, "feat": 4}
    ref = jax.nn.leaky_relu(d[:, None, :], np.array([0.1, 0.2, 0.3, 0.4], np.float32)[None, :, None])
    np.testing.assert_allclose(nx.unwrap(out, ["batch", "feat", ...]), ref, rtol=1e-6, atol=1e-6)
    assert isinstance(nx.nn.relu(jnp.ones(2)), jax.Array)  # positional in, positional out


@st.composite
def axis_choices(draw, arr):
    d, pos, x = arr
    items = list(pos) + list(range(x.ndim))
    chosen = draw(st.lists(st.sampled_from(items), min_size=1, max_size=len(items), unique=True))
    return chosen[0] if len(chosen) == 1 and draw(st.booleans()) else tuple(chosen)


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_axis_functions_match_jax(data):
    d, pos, x = arr = data.draw(named_arrays(max_pos=2))
    axis = data.draw(axis_choices(arr))
    items = axis if isinstance(axis, tuple) else (axis,)
    axes = _translate(items, pos, d.ndim)
    spec = {a: n for n, a in pos.items()}
    kind = data.draw(st.sampled_from(["softmax", "log_softmax", "standardize", "logsumexp", "logmeanexp"]))
    out = getattr(nx.nn, kind)(x, axis=axis)
    if kind in ("logsumexp", "logmeanexp"):
        ref = getattr(jax.nn, kind)(d, axis=axes)
        spec = _spec_after_reduce(pos, set(axes), d.ndim)
        assert set(out.named_shape) == set(spec.values())
    else:
        ref = getattr(jax.nn, kind)(d, axis=axes)
        assert out.named_shape == x.named_shape
    np.testing.assert_allclose(nx.unwrap(out, spec), ref, rtol=1e-4, atol=1e-5)


def test_axis_none_reduces_positional_axes_only():
    R = np.random.default_rng(102)
    d = R.normal(size=(3, 4, 2)).astype(np.float32)
    x = nx.wrap(d, {1: "classes"})
    out = nx.nn.logsumexp(x)  # axis=None: positional axes only, as in xmap
    assert out.named_shape == {"classes": 4} and out.shape == ()
    np.testing.assert_allclose(out.unwrap(["classes"]), jax.nn.logsumexp(d, axis=(0, 2)), rtol=1e-6,
                               atol=1e-6)
    kept = nx.nn.logsumexp(x, axis=("classes", 0), keepdims=True)
    assert kept.shape == (1, 2) and kept.named_shape == {}  # keepdims keeps positional axes only
    np.testing.assert_allclose(kept.data, jax.nn.logsumexp(d, axis=(0, 1), keepdims=True)[:, 0],
                               rtol=1e-6, atol=1e-6)


def test_logsumexp_options():
    R = np.random.default_rng(103)
    d = R.normal(size=(2, 5)).astype(np.float32)
    bvals = R.normal(size=(5,)).astype(np.float32)
    x = nx.wrap(d, ["batch", "classes"])
    b = nx.wrap(bvals, ["classes"])
    out, sign = nx.nn.logsumexp(x, "classes", b=b, return_sign=True)
    ref, ref_sign = jax.nn.logsumexp(d, axis=1, b=bvals[None], return_sign=True)
    np.testing.assert_allclose(out.unwrap(["batch"]), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sign.unwrap(["batch"]), ref_sign)
    mask = nx.wrap(jnp.array([True, True, False, True, False]), ["classes"])
    out = nx.nn.softmax(x, "classes", where=mask)
    np.testing.assert_allclose(out.unwrap(["batch", "classes"]),
                               jax.nn.softmax(d, axis=1, where=np.array([[1, 1, 0, 1, 0]], bool)),
                               rtol=1e-5, atol=1e-6)


def test_standardize_with_given_statistics_and_where():
    R = np.random.default_rng(104)
    d = R.normal(size=(4, 3)).astype(np.float32)
    x = nx.wrap(d, ["batch", "feat"])
    mean = nx.mean(x, "batch")
    var = nx.var(x, "batch")
    out = nx.nn.standardize(x, "batch", mean=mean, variance=var)
    np.testing.assert_allclose(out.unwrap(["batch", "feat"]), jax.nn.standardize(d, axis=0), rtol=1e-4,
                               atol=1e-5)
    mask = nx.wrap(jnp.array([True, False, True, True]), ["batch"])
    out = nx.nn.standardize(x, "batch", where=mask)
    np.testing.assert_allclose(out.unwrap(["batch", "feat"]),
                               jax.nn.standardize(d, axis=0, where=np.array([1, 0, 1, 1], bool)[:, None]),
                               rtol=1e-4, atol=1e-5)


def test_standardize_with_a_named_epsilon():
    R = np.random.default_rng(110)
    d = R.normal(size=(4, 3)).astype(np.float32)
    eps = np.array([1e-5, 0.5, 3.0], np.float32)
    out = nx.nn.standardize(nx.wrap(d, ["batch", "feat"]), "batch", epsilon=nx.wrap(eps, ["feat"]))
    np.testing.assert_allclose(out.unwrap(["batch", "feat"]), jax.nn.standardize(d, axis=0, epsilon=eps),
                               rtol=1e-5, atol=1e-6)


def test_over_bound_names_the_value_lacks():
    R = np.random.default_rng(105)
    # the value is constant along 'k': the answer is what the broadcast value would give
    d = R.normal(size=(3, 2)).astype(np.float32)
    x = nx.wrap(d, ["classes", ...])
    full = np.broadcast_to(d[:, None, :], (3, 4, 2))  # (classes, k, pos)
    with nx.env.bind({"k": 4}):
        sm = nx.nn.softmax(x, ("classes", "k"))
        assert sm.named_shape == {"classes": 3}  # nothing new: the result is constant along k too
        np.testing.assert_allclose(sm.unwrap(["classes", ...]), jax.nn.softmax(full, axis=(0, 1))[:, 0],
                                   rtol=1e-6, atol=1e-6)
        lsm = nx.nn.log_softmax(x, "k")
        np.testing.assert_allclose(lsm.unwrap(["classes", ...]), jax.nn.log_softmax(full, axis=1)[:, 0],
                                   rtol=1e-5, atol=1e-6)
        lse = nx.nn.logsumexp(x, ("k", "classes"))
        assert lse.named_shape == {}
        np.testing.assert_allclose(lse.data, jax.nn.logsumexp(full, axis=(0, 1)), rtol=1e-6, atol=1e-6)
        st_ = nx.nn.standardize(x, ("classes", "k"))
        np.testing.assert_allclose(st_.unwrap(["classes", ...]), jax.nn.standardize(full, axis=(0, 1))[:, 0],
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(errors.UnboundAxisError, match="'k'"):
        nx.nn.softmax(x, "k")


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "logsumexp", "standardize"])
def test_gradients_equal_positional(kind):
    R = np.random.default_rng(106)
    d = jnp.asarray(R.normal(size=(3, 4, 2)).astype(np.float32))
    axis = (1, 2) if kind in ("softmax", "log_softmax", "standardize") else (1,)
    out_ref = getattr(jax.nn, kind)(d, axis=axis)
    w = jnp.asarray(R.normal(size=out_ref.shape).astype(np.float32))
    spec_in = {0: "rows", 2: "ch"}  # positional (4,)
    nx_axis = (0, "ch") if len(axis) == 2 else (0,)
    spec_out = spec_in if len(axis) == 2 else {0: "rows", 1: "ch"}

    def f(d):
        return jnp.sum(w * nx.unwrap(getattr(nx.nn, kind)(nx.wrap(d, spec_in), axis=nx_axis), spec_out))

    g_ref = jax.grad(lambda d: jnp.sum(w * getattr(jax.nn, kind)(d, axis=axis)))(d)
    np.testing.assert_allclose(jax.grad(f)(d), g_ref, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(d), g_ref, rtol=1e-4, atol=1e-6)


def test_gradient_over_bound_name_the_value_lacks():
    R = np.random.default_rng(107)
    d = jnp.asarray(R.normal(size=(3,)).astype(np.float32))
    w = jnp.asarray(R.normal(size=(3,)).astype(np.float32))
    with nx.env.bind({"k": 4}):
        g = jax.grad(lambda d: jnp.sum(w * nx.nn.logsumexp(nx.wrap(d, ["c"]), ("c", "k")).data))(d)
    g_ref = jax.grad(lambda d: jnp.sum(w * jax.nn.logsumexp(jnp.broadcast_to(d[:, None], (3, 4)))))(d)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-6)


def test_one_hot_by_name():
    # xmap's testOneHot: one_hot([1, 2, 0], 3, axis='i') under i = 3, out ['i', ...]
    with nx.env.bind({"i": 3}):
        out = nx.nn.one_hot(jnp.array([1, 2, 0]), 3, axis="i")
        assert out.named_shape == {"i": 3} and out.shape == (3,)
        expected = np.array([[0, 1, 0], [0, 0, 1], [1, 0, 0]]).T
        np.testing.assert_array_equal(nx.unwrap(out, ["i", ...]), expected)
        # testOneHotOutOfBound: all zeros
        np.testing.assert_array_equal(nx.unwrap(nx.nn.one_hot(jnp.array([-1, 3]), 3, axis="i"), ["i", ...]),
                                      np.zeros((3, 2)))
    labels = nx.wrap(jnp.array([2, 0]), ["batch"])
    out = nx.nn.one_hot(labels, 4, axis="classes", dtype=jnp.int8)
    assert out.named_shape == {"batch": 2, "classes": 4} and out.dtype == jnp.int8
    np.testing.assert_array_equal(nx.unwrap(out, ["classes", "batch"]),
                                  jax.nn.one_hot(jnp.array([2, 0]), 4).T)
    pos = nx.nn.one_hot(labels, 4)  # int axis: positional class axis, names are batch axes
    assert pos.shape == (4,) and pos.named_shape == {"batch": 2}
    out = jax.jit(lambda l: nx.unwrap(nx.nn.one_hot(nx.wrap(l, ["batch"]), 4, axis="classes"),
                                      ["batch", "classes"]))(jnp.array([2, 0]))
    np.testing.assert_array_equal(out, jax.nn.one_hot(jnp.array([2, 0]), 4))


def test_one_hot_errors():
    # testOneHotAxisSizeMismatch
    with nx.env.bind({"i": 5}), pytest.raises(
            errors.AxisSizeError, match="Expected num_classes to match the size of axis i, but 3 != 5"):
        nx.nn.one_hot(jnp.array([0, 1]), 3, axis="i")
    with pytest.raises(errors.DuplicateAxisError, match="already carry axis 'classes'"):
        nx.nn.one_hot(nx.wrap(jnp.array([0, 1]), ["classes"]), 2, axis="classes")
    with pytest.raises(TypeError, match="num_classes must be a static int, got 3.5"):
        nx.nn.one_hot(jnp.array([0, 1]), 3.5, axis="classes")  # not silently 3 classes


@pytest.mark.parametrize("f", [
    lambda x: nx.nn.logsumexp(x, "q"),
    lambda x: nx.nn.logmeanexp(x, ("q", 0)),
    lambda x: nx.nn.standardize(x, "q"),
    lambda x: nx.nn.softmax(x, "q", where=nx.wrap(jnp.ones(3, bool), ["b"])),
    lambda x: nx.nn.glu(x, "q"),
], ids=["logsumexp", "logmeanexp", "standardize", "softmax_where", "glu"])
def test_an_axis_neither_carried_nor_bound_is_an_unbound_axis_error(f):
    x = nx.wrap(jnp.ones((2, 3, 4)), ["a", "b", ...])
    with pytest.raises(errors.UnboundAxisError, match=r"unbound axis name 'q'.*'a', 'b' \(positional shape "
                                                      r"\(4,\)\)"):
        f(x)


def test_shapes_that_do_not_fit_are_named_errors():
    x = nx.wrap(jnp.ones((2, 3, 4)), ["a", "b", ...])
    with pytest.raises(errors.AxisSizeError, match=r"positional shapes do not broadcast: \(4,\) in 'a', "
                                                   r"\(7,\) in 'b'"):
        nx.nn.logsumexp(x, "a", b=jnp.ones(7))
    with pytest.raises(errors.AxisSizeError, match=r"\(4,\) in 'x', \(2,\) in 'where'"):
        nx.nn.standardize(x, "a", where=jnp.ones(2, bool))
    with pytest.raises(errors.AxisSizeError, match="axis 'b' has size 3, which cannot be split into two"):
        nx.nn.glu(x, "b")
    with pytest.raises(errors.AxisSizeError, match="axis 0 has size 5"):
        nx.nn.glu(nx.wrap(jnp.ones((2, 5)), ["a", ...]), 0)


def test_tutorial_loss():
    R = np.random.default_rng(108)
    # the xmap tutorial's named_loss, with num_classes = psum(1, 'classes')
    logits_d = R.normal(size=(6, 4)).astype(np.float32)
    labels_d = np.array([0, 3, 1, 1, 2, 0])
    with nx.env.bind({"batch": 6, "classes": 4}):
        logits = nx.wrap(logits_d, ["batch", "classes"])
        predictions = logits - nx.nn.logsumexp(logits, "classes")
        num_classes = nx.lax.psum(1, "classes")
        targets = nx.nn.one_hot(nx.wrap(labels_d, ["batch"]), num_classes, axis="classes")
        losses = nx.lax.psum(targets * predictions, "classes")
        loss = -nx.lax.pmean(losses, "batch")
    ref = -jnp.mean(jnp.sum(jax.nn.one_hot(labels_d, 4) * jax.nn.log_softmax(logits_d, axis=1), axis=1))
    np.testing.assert_allclose(float(loss), ref, rtol=1e-6, atol=1e-6)


def test_glu_and_lifted_rest():
    R = np.random.default_rng(109)
    d = R.normal(size=(2, 6)).astype(np.float32)
    x = nx.wrap(d, ["b", "hidden"])
    out = nx.nn.glu(x, axis="hidden")
    assert out.named_shape == {"b": 2, "hidden": 3}
    np.testing.assert_allclose(out.unwrap(["b", "hidden"]), jax.nn.glu(d, axis=1), rtol=1e-6, atol=1e-6)
    # without names, nx.nn.initializers are jax's (the same values)
    w = nx.nn.initializers.glorot_uniform()(jax.random.key(3), (4, 5))
    np.testing.assert_array_equal(w, jax.nn.initializers.glorot_uniform()(jax.random.key(3), (4, 5)))
    # any other jax.nn function is lifted over names
    q = nx.wrap(R.normal(size=(2, 3, 1, 4)).astype(np.float32), ["b", ...])
    att = nx.nn.dot_product_attention(q, q, q)
    assert att.named_shape == {"b": 2} and att.shape == (3, 1, 4)
    np.testing.assert_allclose(att.unwrap(["b", ...]), jax.nn.dot_product_attention(q.unwrap(["b", ...]),
                               q.unwrap(["b", ...]), q.unwrap(["b", ...])), rtol=1e-5, atol=1e-6)


def test_inside_xmap():
    # xmap's testOneHot and testOneHotAxisSizeMismatch with the real adapter; jax.nn.relu passed directly
    f = nx.xmap(lambda _: nx.nn.one_hot(jnp.array([1, 2, 0]), 3, axis="i"), ["i", ...], ["i", ...])
    np.testing.assert_array_equal(f(jnp.ones(3)), np.array([[0, 1, 0], [0, 0, 1], [1, 0, 0]]).T)
    with pytest.raises(errors.AxisSizeError, match="to match the size of axis i, but 3 != 5"):
        f(jnp.ones(5))
    np.testing.assert_array_equal(nx.xmap(jax.nn.relu, ["i", ...], ["i", ...])(jnp.arange(-2.0, 2.0)),
                                  [0.0, 0.0, 0.0, 1.0])
    # the xmap docstring's example that multi-character names broke
    spec = ["out_features", ...]
    sm = nx.xmap(lambda x: nx.nn.softmax(x, axis="out_features"), spec, spec)
    np.testing.assert_allclose(sm(jnp.zeros((4, 2))), np.full((4, 2), 0.25))
