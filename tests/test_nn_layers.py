"""nx.nn's layers by name against jax on the unwrapped arrays: dot_product_attention, layer_norm, rms_norm,
and the initializers' named_shape=."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import storage_order
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors


def _store(draw, logical, names):
    """``logical`` (axes named ``names`` in order) as a NamedArray stored in a random order."""
    perm, named_at = storage_order(draw, 0, names)
    return nx.wrap(np.transpose(logical, perm), named_at)


# --------------------------------------------------------------------------------------------------------
# dot_product_attention


@st.composite
def attention_cases(draw):
    B, T, N, H = (draw(st.integers(1, 3)) for _ in range(4))
    cross = draw(st.booleans())
    S = draw(st.integers(1, 4)) if cross else T
    seq, kv_seq = ("q", "k") if cross else ("seq", "seq")
    use_heads = draw(st.booleans())
    shared_kv = use_heads and draw(st.booleans())  # multi-query: keys and values without the heads axis
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    K = 1 if shared_kv else N
    q = rng.normal(size=(B, T, N, H)).astype(np.float32)
    k = rng.normal(size=(B, S, K, H)).astype(np.float32)
    v = rng.normal(size=(B, S, K, H)).astype(np.float32)
    kv_names = ["b", kv_seq] + ([] if shared_kv else ["heads"]) + ["hd"]
    kv_logical = (lambda a: a[:, :, 0]) if shared_kv else (lambda a: a)
    case = dict(q=_store(draw, q, ["b", seq, "heads", "hd"]), k=_store(draw, kv_logical(k), kv_names),
                v=_store(draw, kv_logical(v), kv_names), ref_args=[q, k, v], ref_kw={},
                kw=dict(seq_axis=seq, head_axis="hd"))
    if kv_seq != seq:
        case["kw"]["kv_seq_axis"] = kv_seq
    if use_heads:
        case["kw"]["heads_axis"] = "heads"
    if cross and draw(st.booleans()):  # a mask by name: from named ranges, or random over some of its names
        if draw(st.booleans()):
            mask = nx.arange(T, name="q") + (S - T) >= nx.arange(S, name="k")
            ref_mask = np.asarray(mask.unwrap(["q", "k"]))[None, None]
        else:
            ref_mask = rng.random((B, 1, T, S)) < 0.7
            mask = _store(draw, ref_mask[:, 0], ["b", "q", "k"])
        case["kw"]["mask"], case["ref_kw"]["mask"] = mask, ref_mask
    if cross and draw(st.booleans()):
        ref_bias = rng.normal(size=(1, N, T, S)).astype(np.float32)
        case["kw"]["bias"] = _store(draw, ref_bias[0], ["heads", "q", "k"])
        case["ref_kw"]["bias"] = ref_bias  # without heads_axis, heads is one more batch name to the bias
    if draw(st.booleans()):
        case["kw"]["is_causal"] = case["ref_kw"]["is_causal"] = True
    if draw(st.booleans()):
        lengths = rng.integers(1, S + 1, size=B).astype(np.int32)
        case["kw"]["key_value_seq_lengths"] = nx.wrap(lengths, ["b"])
        case["ref_kw"]["key_value_seq_lengths"] = lengths
    return case


@settings(max_examples=12, deadline=None)  # each example compiles its own kernels: few, varied ones
@given(attention_cases())
def test_dot_product_attention_matches_jax_on_the_unwrapped_arrays(case):
    ref = jax.nn.dot_product_attention(*case["ref_args"], **case["ref_kw"])
    seq = case["kw"]["seq_axis"]
    out = nx.nn.dot_product_attention(case["q"], case["k"], case["v"], **case["kw"])
    assert out.named_shape == case["q"].named_shape and out.shape == ()
    np.testing.assert_allclose(out.unwrap(["b", seq, "heads", "hd"]), ref, rtol=2e-5, atol=2e-5)


def test_dot_product_attention_under_jit_with_positional_batch_axes():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(2, 3, 5, 4)).astype(np.float32)  # (batch, extra batch, seq, head features)
    x = nx.wrap(q, [None, None, "seq", "hd"])
    out = jax.jit(lambda v: nx.nn.dot_product_attention(v, v, v, seq_axis="seq", head_axis="hd"))(x)
    ref = jax.nn.dot_product_attention(q.reshape(6, 5, 1, 4), q.reshape(6, 5, 1, 4), q.reshape(6, 5, 1, 4))
    assert out.shape == (2, 3) and out.named_shape == {"seq": 5, "hd": 4}
    np.testing.assert_allclose(out.unwrap([None, None, "seq", "hd"]), ref.reshape(2, 3, 5, 4), rtol=2e-5,
                               atol=2e-5)


def test_dot_product_attention_errors():
    q = nx.zeros({"b": 2, "seq": 3, "heads": 2, "hd": 4})
    with pytest.raises(errors.AxisSpecError, match=r"no positional ones: say which names are which"):
        nx.nn.dot_product_attention(q, q, q)  # it used to return v: attention over scalars
    with pytest.raises(errors.AxisSpecError, match="give both seq_axis .* and head_axis"):
        nx.nn.dot_product_attention(q, q, q, seq_axis="seq")
    with pytest.raises(errors.AxisSpecError, match="the key lacks axis 'kv'"):
        nx.nn.dot_product_attention(q, q, q, seq_axis="seq", kv_seq_axis="kv", head_axis="hd")
    mask = nx.ones({"seq": 3}, bool)
    with pytest.raises(errors.AxisSpecError, match="names both the query and the key sequence"):
        nx.nn.dot_product_attention(q, q, q, mask=mask, seq_axis="seq", head_axis="hd")
    with pytest.raises(errors.AxisSizeError, match="axis 'b' has size 2 in query but size 3 in key"):
        k = nx.zeros({"b": 3, "seq": 3, "hd": 4})
        nx.nn.dot_product_attention(q, k, k, seq_axis="seq", head_axis="hd")
    kv = nx.zeros({"b": 2, "kv": 5, "hd": 4})
    for what, extra, msg in [("mask", nx.ones({"seq": 3, "kv": 4}, bool), "'kv' has size 4 in the mask but "
                              "size 5 in the key"),
                             ("bias", nx.zeros({"seq": 2, "kv": 5}),
                              "'seq' has size 2 in the bias but size 3 in the query")]:
        with pytest.raises(errors.AxisSizeError, match=msg):
            nx.nn.dot_product_attention(q, kv, kv, **{what: extra}, seq_axis="seq", kv_seq_axis="kv",
                                        head_axis="hd")


# --------------------------------------------------------------------------------------------------------
# layer_norm, rms_norm


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_layer_norm_and_rms_norm_match_the_formula(data):
    names = data.draw(st.lists(st.sampled_from(["b", "seq", "embed"]), min_size=1, max_size=3, unique=True))
    sizes = {n: data.draw(st.integers(1, 4)) for n in names}
    p = data.draw(st.integers(0, 1))
    pshape = (data.draw(st.integers(1, 3)),) * p
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    d = rng.normal(size=pshape + tuple(sizes[n] for n in names)).astype(np.float32) * 3 + 1
    perm, named_at = storage_order(data.draw, p, names)
    x = nx.wrap(np.transpose(d, perm), named_at)
    axis = tuple(data.draw(st.lists(st.sampled_from(names + list(range(p))), min_size=1, unique=True)))
    axes = tuple(a if isinstance(a, int) else p + names.index(a) for a in axis)
    scaled = [n for n in names if data.draw(st.booleans())]
    scale_d = rng.normal(size=tuple(sizes[n] for n in scaled)).astype(np.float32)
    scale = nx.wrap(scale_d, scaled)
    ref_scale = scale_d.reshape(tuple(sizes[n] if n in scaled else 1 for n in names))
    mean = d.mean(axis=axes, keepdims=True)
    var = ((d - mean) ** 2).mean(axis=axes, keepdims=True)
    ln = nx.nn.layer_norm(x, axis, scale, scale, eps=1e-5)
    ref = (d - mean) / np.sqrt(var + 1e-5) * ref_scale + ref_scale
    order = {p + i: n for i, n in enumerate(names)}
    np.testing.assert_allclose(nx.unwrap(ln, order), ref, rtol=1e-4, atol=1e-4)
    rms = nx.nn.rms_norm(x, axis, scale, eps=1e-6)
    ref = d / np.sqrt((d ** 2).mean(axis=axes, keepdims=True) + 1e-6) * ref_scale
    np.testing.assert_allclose(nx.unwrap(rms, order), ref, rtol=1e-4, atol=1e-4)


def test_norms_keep_half_precision_and_refuse_foreign_names():
    x = nx.wrap(jnp.arange(8.0, dtype=jnp.bfloat16).reshape(2, 4), ["b", "embed"])
    y = nx.nn.layer_norm(x, "embed")
    assert y.dtype == jnp.bfloat16
    ref = jax.nn.standardize(jnp.arange(8.0).reshape(2, 4), axis=1, epsilon=1e-5)
    np.testing.assert_allclose(np.asarray(y.unwrap(["b", "embed"]), np.float32), ref, rtol=1e-2, atol=1e-2)
    with pytest.raises(errors.AxisSpecError, match="the scale has axes 'hidden' that x lacks"):
        nx.nn.layer_norm(x, "embed", nx.ones({"hidden": 4}))
    with pytest.raises(errors.AxisSpecError, match="axis=None reduces the positional axes only"):
        nx.nn.rms_norm(x, None)


# --------------------------------------------------------------------------------------------------------
# initializers


def test_variance_scaling_takes_fans_from_named_axes():
    key = jax.random.key(1)
    for mode, fan in (("fan_in", 9 * 64), ("fan_out", 9 * 32), ("fan_avg", 9 * 48)):
        init = nx.nn.initializers.variance_scaling(2.0, mode, "normal", in_axis="i", out_axis="o")
        w = init(key, (3, 3), named_shape={"i": 64, "o": 32})  # a 3x3 receptive field, named fans
        assert w.shape == (3, 3) and w.named_shape == {"i": 64, "o": 32} and w.dtype == jnp.float32
        var = float(nx.var(w, axis=(0, 1, "i", "o")))
        assert abs(var * fan / 2.0 - 1) < 0.05, (mode, var * fan / 2.0)
    init = nx.nn.initializers.lecun_uniform(in_axis=("h", 0), out_axis="o")
    w = init(key, (4,), named_shape={"h": 8, "o": 5})
    assert float(nx.max(nx.abs(w), axis=(0, "h", "o"))) <= (3 / 32) ** 0.5
    w = nx.nn.initializers.he_normal(in_axis="i", out_axis="o", dtype=jnp.bfloat16)(key, {"i": 4, "o": 2})
    assert w.dtype == jnp.bfloat16 and w.named_shape == {"i": 4, "o": 2}


def test_initializers_without_names_are_jax_and_with_names_have_the_named_shape():
    key = jax.random.key(2)
    for name, args in (("glorot_normal", ()), ("he_uniform", ()), ("lecun_normal", ()), ("normal", (0.1,)),
                       ("uniform", (0.3,)), ("truncated_normal", (0.2,)), ("constant", (4.0,))):
        ours, theirs = getattr(nx.nn.initializers, name)(*args), getattr(jax.nn.initializers, name)(*args)
        np.testing.assert_array_equal(ours(key, (4, 3)), theirs(key, (4, 3)))
        w = ours(key, (2, 5), jnp.float16, named_shape={"k": 3})  # k: part of the receptive field
        assert w.shape == (2, 5) and w.named_shape == {"k": 3} and w.dtype == jnp.float16
    assert nx.nn.initializers.zeros(key, (), named_shape={"k": 2}).named_shape == {"k": 2}
    assert nx.nn.initializers.ones(key, {"k": 2}, jnp.int32).dtype == jnp.int32
    w = nx.nn.initializers.uniform(0.5)(key, (), named_shape={"k": 1000})
    assert 0 <= float(nx.min(w, axis="k")) and float(nx.max(w, axis="k")) < 0.5


def test_initializer_errors():
    key = jax.random.key(0)
    init = nx.nn.initializers.glorot_uniform(in_axis="i", out_axis="o")
    with pytest.raises(errors.AxisSpecError, match=r"in_axis='i' names axis 'i', which the named shape 'x'"):
        init(key, (), named_shape={"x": 2, "o": 3})
    with pytest.raises(errors.AxisSpecError, match=r"out_axis=-1: positional axis -1 is out of range for"):
        nx.nn.initializers.glorot_uniform(in_axis="i")(key, (), named_shape={"i": 2})
    with pytest.raises(errors.AxisSpecError, match="builds matrices along positional axes"):
        nx.nn.initializers.orthogonal()(key, (2, 2), named_shape={"b": 3})
    with pytest.raises(TypeError, match="real floating-point values"):
        init(key, (), jnp.int32, named_shape={"i": 2, "o": 3})


def test_initializers_inside_xmap_take_sizes_from_the_binding():
    init = nx.nn.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis="i", out_axis="o")

    def body(x):
        w = init(jax.random.key(0), (), named_shape=["i", "o"])
        return nx.dot(x, w, axis="i")

    out = nx.xmap(body, in_axes=(["i", ...],), out_axes=["o", ...], axis_sizes={"o": 3})(jnp.ones(4))
    assert out.shape == (3,)
