"""Grouped-query attention by name in nx.nn.dot_product_attention: a name that only the query carries is
more query heads over the same keys and values, as jax's N query heads over K key heads, never a copy of the
keys and values along it."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import storage_order
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors

Q_NAMES = ["b", "q", "kvh", "grp", "hd"]  # the query: batch, sequence, key heads, query heads per key head
KV_NAMES = ["b", "k", "kvh", "hd"]


def _store(draw, logical, names):
    """``logical`` (axes named ``names`` in order) as a NamedArray stored in a random order."""
    perm, named_at = storage_order(draw, 0, names)
    return nx.wrap(np.transpose(logical, perm), named_at)


def _arrays(B, T, S, K, G, H, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, T, K, G, H)).astype(np.float32)
    k = rng.normal(size=(B, S, K, H)).astype(np.float32)
    v = rng.normal(size=(B, S, K, H)).astype(np.float32)
    return q, k, v


def _named_call(heads_axis="kvh", **kw):
    return lambda q, k, v: nx.nn.dot_product_attention(q, k, v, seq_axis="q", kv_seq_axis="k", head_axis="hd",
                                                       heads_axis=heads_axis, **kw)


def _positional(q5):
    """The query (B, T, K, G, H) as jax's (B, T, N, H): query head n = kv * G + g uses key head n // G."""
    B, T, K, G, H = q5.shape
    return q5.reshape(B, T, K * G, H)


# --------------------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("K,G", [(1, 4), (2, 2), (4, 1), (3, 2), (2, 3)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_values_match_jax_with_n_query_heads_over_k_key_heads(K, G, is_causal):
    B, T, S, H = 2, 5, 7, 8
    q, k, v = _arrays(B, T, S, K, G, H, seed=K * 10 + G)
    ref = jax.nn.dot_product_attention(_positional(q), k, v, is_causal=is_causal)
    out = _named_call(is_causal=is_causal)(nx.wrap(q, Q_NAMES), nx.wrap(k, KV_NAMES), nx.wrap(v, KV_NAMES))
    assert out.named_shape == {"b": B, "q": T, "kvh": K, "grp": G, "hd": H} and out.shape == ()
    np.testing.assert_allclose(_positional(np.asarray(out.unwrap(Q_NAMES))), ref, rtol=1e-5, atol=1e-5)


@st.composite
def gqa_cases(draw):
    B, T, S, H = (draw(st.integers(1, 4)) for _ in range(4))
    K, G = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    N = K * G
    q, k, v = _arrays(B, T, S, K, G, H, seed=draw(st.integers(0, 2**32 - 1)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # with heads_axis, or with the key heads one more batch name: either way the group rides on the query
    kw = dict(seq_axis="q", kv_seq_axis="k", head_axis="hd", heads_axis=draw(st.sampled_from(["kvh", None])))
    case = dict(q=_store(draw, q, Q_NAMES), k=_store(draw, k, KV_NAMES), v=_store(draw, v, KV_NAMES),
                ref_args=[_positional(q), k, v], ref_kw={}, kw=kw, B=B, T=T, S=S, N=N)
    for what in ("mask", "bias"):
        over = draw(st.sampled_from([None, (), ("grp",), ("kvh",), ("kvh", "grp"), ("b", "grp")]))
        if over is None:
            continue
        # logical (B, K, G, T, S), size 1 along the names it lacks
        shape = tuple(n if name in over or name in ("q", "k") else 1
                      for n, name in zip((B, K, G, T, S), ("b", "kvh", "grp", "q", "k")))
        ref = (rng.random(shape) < 0.7) if what == "mask" else rng.normal(size=shape).astype(np.float32)
        names = [n for n in ("b", "kvh", "grp", "q", "k") if n in over or n in ("q", "k")]
        keep = tuple(i for i, name in enumerate(("b", "kvh", "grp", "q", "k")) if name in names)
        logical = ref.reshape(tuple(shape[i] for i in keep))
        case["kw"][what] = _store(draw, logical, names)
        full = np.broadcast_to(ref, (shape[0], K, G, T, S)) if ("kvh" in over or "grp" in over) else ref
        case["ref_kw"][what] = full.reshape(shape[0], full.shape[1] * full.shape[2], T, S)
    if draw(st.booleans()):
        case["kw"]["is_causal"] = case["ref_kw"]["is_causal"] = True
    if draw(st.booleans()):
        lengths = rng.integers(1, S + 1, size=B).astype(np.int32)
        case["kw"]["key_value_seq_lengths"] = nx.wrap(lengths, ["b"])
        case["ref_kw"]["key_value_seq_lengths"] = lengths
    return case


@settings(max_examples=15, deadline=None)  # each example compiles its own kernels: few, varied ones
@given(gqa_cases())
def test_values_match_jax_in_any_storage_order_with_masks_and_biases(case):
    ref = jax.nn.dot_product_attention(*case["ref_args"], **case["ref_kw"])
    out = nx.nn.dot_product_attention(case["q"], case["k"], case["v"], **case["kw"])
    assert out.named_shape == case["q"].named_shape and out.shape == ()
    np.testing.assert_allclose(_positional(np.asarray(out.unwrap(Q_NAMES))), ref, rtol=1e-5, atol=1e-5)


def test_unflatten_names_jax_head_order():
    """A query stored in jax's (B, T, N, H) layout, its heads split by name, gives jax's grouping."""
    B, T, S, K, G, H = 2, 3, 4, 2, 3, 4
    q, k, v = _arrays(B, T, S, K, G, H, seed=7)
    qn = nx.unflatten(nx.wrap(_positional(q), ["b", "q", "heads", "hd"]), "heads", {"kvh": K, "grp": G})
    out = _named_call()(qn, nx.wrap(k, KV_NAMES), nx.wrap(v, KV_NAMES))
    out = nx.flatten(out, ["kvh", "grp"], "heads").unwrap(["b", "q", "heads", "hd"])
    np.testing.assert_allclose(out, jax.nn.dot_product_attention(_positional(q), k, v), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------------------
# no copy of the keys and values at the query's head count


# T < S and T < H: only a key or value copy reaches B*S*K*G*H elements
B_, T_, S_, K_, G_, H_ = 2, 5, 7, 3, 4, 11
_COPY = B_ * S_ * K_ * G_ * H_


def _big_buffers(hlo_text):
    """The array shapes of at least B*S*K*G*H elements: keys or values at the query heads' count (the query,
    the output and the logits are all smaller by construction)."""
    shapes = {tuple(int(d) for d in dims.split(",") if d)
              for dims in re.findall(r"\b(?:f32|bf16|f16|pred)\[([\d,]*)\]", hlo_text)}
    return sorted(s for s in shapes if math.prod(s) >= _COPY)


def _operands():
    q, k, v = _arrays(B_, T_, S_, K_, G_, H_)
    return q, k, v, nx.wrap(q, Q_NAMES), nx.wrap(k, KV_NAMES), nx.wrap(v, KV_NAMES)


def test_detector_sees_a_broadcast_copy():
    """The controls: the copy this module avoids is visible to ``_big_buffers``, positional and named."""
    q, k, v, qn, kn, vn = _operands()

    def repeated(q, k, v):  # multi-head attention over keys and values repeated per query head
        return jax.nn.dot_product_attention(q, jnp.repeat(k, G_, axis=2), jnp.repeat(v, G_, axis=2))

    text = jax.jit(repeated).lower(_positional(q), k, v).compile().as_text()
    assert (B_, S_, K_ * G_, H_) in _big_buffers(text)
    group = nx.ones({"grp": G_})  # keys and values broadcast over the group by hand: now a shared batch name
    broadcast = jax.jit(lambda q, k, v: _named_call()(q, k * group, v * group))
    text = broadcast.lower(qn, kn, vn).compile().as_text()
    assert _big_buffers(text), "the named control holds no copy: the check below would prove nothing"


@pytest.mark.parametrize("heads_axis", ["kvh", None])
@pytest.mark.parametrize("with_mask", [False, True])
def test_compiled_program_holds_no_key_or_value_at_query_head_count(heads_axis, with_mask):
    q, k, v, qn, kn, vn = _operands()
    kw = dict(is_causal=True)
    if with_mask:  # a mask varying along the key heads: broadcast over the group, the logits' size
        kw["mask"] = nx.wrap(np.random.default_rng(1).random((K_, T_, S_)) < 0.7, ["kvh", "q", "k"])
    f = _named_call(heads_axis=heads_axis, **kw)
    text = jax.jit(f).lower(qn, kn, vn).compile().as_text()
    assert not _big_buffers(text), f"keys or values copied per query head: {_big_buffers(text)}"

    def loss(q, k, v):
        return (f(q, k, v) * qn).sum(axis=tuple(Q_NAMES)).unwrap()

    text = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(qn, kn, vn).compile().as_text()
    assert not _big_buffers(text), f"the gradient copies keys or values per query head: {_big_buffers(text)}"


# --------------------------------------------------------------------------------------------------------
# memory


@pytest.mark.parametrize("B,T,S,K,G,H,causal", [(2, 16, 16, 4, 2, 32, False), (1, 32, 24, 2, 4, 16, True),
                                                 (2, 8, 8, 1, 8, 64, True), (2, 64, 64, 8, 4, 64, False)])
def test_temp_bytes_no_larger_than_jax(B, T, S, K, G, H, causal):
    q, k, v = _arrays(B, T, S, K, G, H)
    ref = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal))
    ref_temp = ref.lower(_positional(q), k, v).compile().memory_analysis().temp_size_in_bytes
    named = jax.jit(_named_call(is_causal=causal))
    compiled = named.lower(nx.wrap(q, Q_NAMES), nx.wrap(k, KV_NAMES), nx.wrap(v, KV_NAMES)).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp <= 1.05 * ref_temp + 1024, (temp, ref_temp)


# --------------------------------------------------------------------------------------------------------
# gradients


@pytest.mark.parametrize("K,G", [(1, 3), (2, 2), (3, 1)])
def test_gradients_match_jax(K, G):
    B, T, S, H = 2, 4, 6, 8
    q, k, v = _arrays(B, T, S, K, G, H, seed=3)
    w = np.random.default_rng(4).normal(size=(B, T, K, G, H)).astype(np.float32)

    def ref_loss(q, k, v):
        return (jax.nn.dot_product_attention(q, k, v, is_causal=True) * _positional(w)).sum()

    f = _named_call(is_causal=True)
    wn = nx.wrap(w, Q_NAMES)

    def loss(q, k, v):
        return (f(q, k, v) * wn).sum(axis=tuple(Q_NAMES)).unwrap()

    ref = jax.grad(ref_loss, argnums=(0, 1, 2))(_positional(q), k, v)
    got = jax.grad(loss, argnums=(0, 1, 2))(nx.wrap(q, Q_NAMES), nx.wrap(k, KV_NAMES), nx.wrap(v, KV_NAMES))
    np.testing.assert_allclose(_positional(np.asarray(got[0].unwrap(Q_NAMES))), ref[0], rtol=1e-5, atol=1e-5)
    for g, r in zip(got[1:], ref[1:]):
        np.testing.assert_allclose(g.unwrap(KV_NAMES), r, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------------------
# errors


def test_head_count_mismatch_names_the_axis_and_says_how_to_group():
    q = nx.zeros({"b": 2, "q": 3, "heads": 6, "hd": 4})
    kv = nx.zeros({"b": 2, "k": 5, "heads": 2, "hd": 4})
    with pytest.raises(errors.AxisSizeError, match=r"nx\.nn\.dot_product_attention: axis 'heads' has size 6 "
                       r"in the query but size 2 in the key; for grouped-query attention .*nx\.unflatten"):
        nx.nn.dot_product_attention(q, kv, kv, seq_axis="q", kv_seq_axis="k", head_axis="hd",
                                    heads_axis="heads")
    mask = nx.ones({"kvh": 2, "q": 3, "k": 5}, bool)
    qn = nx.zeros({"b": 2, "q": 3, "kvh": 3, "grp": 2, "hd": 4})
    kn = nx.zeros({"b": 2, "k": 5, "kvh": 3, "hd": 4})
    with pytest.raises(errors.AxisSizeError, match="'kvh' has size 3 in the query but size 2 in the mask"):
        _named_call(mask=mask)(qn, kn, kn)
    with pytest.raises(errors.AxisSizeError, match="axis 'kvh' has size 3 in query but size 2 in mask"):
        _named_call(heads_axis=None, mask=mask)(qn, kn, kn)
    with pytest.raises(errors.AxisSizeError, match="axis 'grp' has size 2 in query but size 3 in bias"):
        _named_call(bias=nx.zeros({"grp": 3}))(qn, kn, kn)
