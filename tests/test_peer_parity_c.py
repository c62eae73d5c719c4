"""What users of the peer libraries expect of named keys and squared ReLU, against positional jax.

* ``nx.random.split(key, named_shape=...)``: a named key array equal to ``jax.random.split(key, sizes)``
  with the names sorted, and samplers given it draw with each key (``jax.random.<f>`` per key);
* ``nx.nn.relu_squared`` elementwise.

Values come in random storage orders and with random axis names; references see the logical layout
(positional axes first, then the names in a fixed order).
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

KEY = jax.random.key(0)
NAME = st.text("abcxyz_", min_size=1, max_size=4)


def _stored(draw, logical, names) -> nx.NamedArray:
    """``logical`` (positional axes first, then ``names`` in order) stored in a random order."""
    names = list(names)
    p = logical.ndim - len(names)
    perm, named_at = storage_order(draw, p, names)
    return nx.wrap(jnp.transpose(logical, perm), named_at)


def _logical(x: nx.NamedArray, names):
    """``x``'s positional axes, then ``names`` in that order."""
    p = len(x.shape)
    return nx.unwrap(x, {p + i: n for i, n in enumerate(names)})


# --------------------------------------------------------------------------------------------------------
# 1. Named keys


def _data(keys):
    return np.asarray(jax.random.key_data(keys))


@st.composite
def split_cases(draw):
    pool = draw(st.lists(NAME, min_size=4, max_size=4, unique=True))
    names = pool[:draw(st.integers(1, 3))]
    extra = pool[3]  # a name only the sampler asks for
    sizes = {n: draw(st.integers(1, 3)) for n in pool}
    listed = draw(st.permutations(names))
    num = draw(st.sampled_from([None, 2, (2, 1)]))
    raw = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    return names, extra, sizes, listed, num, raw, seed, draw


@settings(max_examples=20, deadline=None)
@given(split_cases())
def test_split_is_jax_split_over_sorted_names_and_samplers_draw_per_key(case):
    names, extra, sizes, listed, num, raw, seed, draw = case
    key = jax.random.PRNGKey(seed) if raw else jax.random.key(seed)
    typed = jax.random.wrap_key_data(key) if raw else key
    keys = nx.random.split(key, num, named_shape={n: sizes[n] for n in listed})
    pshape = () if num is None else ((num,) if isinstance(num, int) else num)
    assert keys.shape == pshape and keys.named_shape == {n: sizes[n] for n in names}
    assert keys.names == tuple(listed)  # stored as listed
    assert jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
    s = sorted(names)
    ref = jax.random.split(typed, pshape + tuple(sizes[n] for n in s))
    p = len(pshape)
    ref = jnp.transpose(ref, list(range(p)) + [p + s.index(n) for n in names])  # into the logical order
    np.testing.assert_array_equal(_data(_logical(keys, names)), _data(ref))
    if p:
        return
    # samplers accept the named key, stored in any order: one positional draw per key
    stored = _stored(draw, ref, names)
    out = nx.random.normal(stored, (2,), named_shape={extra: sizes[extra]})
    assert out.shape == (2,) and out.named_shape == {**{n: sizes[n] for n in names}, extra: sizes[extra]}
    flat = ref.reshape(-1)
    per_key = jax.vmap(lambda k: jax.random.normal(k, (2, sizes[extra])))(flat)
    per_key = per_key.reshape(ref.shape + (2, sizes[extra]))
    got = nx.unwrap(out, list(names) + [None, extra])
    np.testing.assert_allclose(got, per_key, rtol=1e-6, atol=1e-6)
    # a bernoulli with a parameter that shares a key name: each key draws with its own p
    pn = names[0]
    prob = nx.wrap(jnp.linspace(0.0, 1.0, sizes[pn]), [pn])
    b = nx.random.bernoulli(stored, prob, (3,))
    assert b.named_shape == keys.named_shape and b.shape == (3,)


def test_split_of_a_named_key_splits_each_key():
    keys = nx.random.split(KEY, named_shape={"layer": 3})
    sub = nx.random.split(keys, named_shape={"head": 2, "layer": 3})  # may list the key's names
    assert sub.named_shape == {"layer": 3, "head": 2} and sub.shape == ()
    got = _data(_logical(sub, ["layer", "head"]))
    ks = jax.random.split(KEY, 3)
    for i in range(3):
        np.testing.assert_array_equal(got[i], _data(jax.random.split(ks[i], 2)))
    # the key's storage order does not matter
    both = nx.random.split(KEY, named_shape={"a": 2, "b": 3})
    flipped = nx.wrap(jnp.transpose(_logical(both, ["a", "b"])), ["b", "a"])
    for k in (both, flipped):
        d = nx.random.uniform(k, named_shape={"c": 4})
        np.testing.assert_array_equal(nx.unwrap(d, ["a", "b", "c"]),
                                      jax.vmap(jax.vmap(lambda k: jax.random.uniform(k, (4,))))(
                                          jax.random.split(KEY, (2, 3))))
    # the same under jit
    f = jax.jit(lambda k: nx.unwrap(nx.random.normal(nx.random.split(k, named_shape={"b": 3, "a": 2})),
                                    ["a", "b"]))
    np.testing.assert_array_equal(f(KEY), jax.vmap(jax.vmap(lambda k: jax.random.normal(k)))(
        jax.random.split(KEY, (2, 3))))


def test_split_errors_and_positional_split():
    assert nx.random.split(KEY).shape == (2,) and nx.random.split(KEY, 3).shape == (3,)
    keys = nx.random.split(KEY, named_shape={"a": 2})
    assert nx.random.split(keys).named_shape == {"a": 2} and nx.random.split(keys).shape == (2,)
    with pytest.raises(errors.AxisSizeError,
                       match="axis 'a' has size 3 in named_shape but size 2 in the key"):
        nx.random.split(keys, named_shape={"a": 3})
    with pytest.raises(errors.AxisSpecError, match=r"positional shape \(3,\)"):
        nx.random.split(jax.random.split(KEY, 3), named_shape={"a": 2})
    with pytest.raises(errors.AxisSpecError, match="non-negative int"):
        nx.random.split(KEY, named_shape={"a": 2.5})
    with nx.env.bind({"i": 4}):  # bare names take the sizes an enclosing nx.xmap binds
        assert nx.random.split(KEY, named_shape=["i"]).named_shape == {"i": 4}


# --------------------------------------------------------------------------------------------------------
# 2. Squared ReLU


@st.composite
def activation_cases(draw):
    names = draw(st.lists(NAME, min_size=0, max_size=3, unique=True))
    sizes = {n: draw(st.integers(1, 4)) for n in names}
    pshape = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2))))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xlog = rng.normal(size=pshape + tuple(sizes[n] for n in names)).astype(np.float32)
    return _stored(draw, xlog, names), xlog, names


@settings(max_examples=30, deadline=None)
@given(activation_cases())
def test_relu_squared_is_elementwise(case):
    x, xlog, names = case
    y = nx.nn.relu_squared(x)
    assert y.named_shape == x.named_shape and y.shape == x.shape
    np.testing.assert_allclose(_logical(y, names), np.maximum(xlog, 0) ** 2, rtol=1e-6)


def test_relu_squared_broadcasts_by_name_and_differentiates():
    x = nx.wrap(jnp.array([-1.0, 0.0, 2.0]), ["i"])
    assert nx.nn.relu_squared(x).unwrap(["i"]).tolist() == [0.0, 0.0, 4.0]
    g = nx.grad(lambda v: nx.sum(nx.nn.relu_squared(v), "i"))(x)
    assert g.unwrap(["i"]).tolist() == [0.0, 0.0, 4.0]
    np.testing.assert_array_equal(nx.nn.relu_squared(jnp.array([-3.0, 3.0])), [0.0, 9.0])  # plain: plain
    assert "relu_squared" in set(dir(nx.nn)) & set(nx.nn.__all__)

