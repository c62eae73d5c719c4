"""What users of the peer libraries expect of dropout, named keys and squared ReLU, against positional jax.

* ``nx.nn.dropout(key, rate, x, broadcast_axes=...)``: the mask is constant along the broadcast axes and
  independent along the others, the mean is kept in expectation, and the mask is the positional draw
  ``jax.random.bernoulli(key, 1 - rate, shape)`` over x's axes less the broadcast ones, names in sorted
  order, whatever order x stores its axes in; under ``jit`` and ``grad``; its errors;
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
from meshes import auto_mesh

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


def _reference_mask(key, keep, pshape, names, sizes, shared_positions, shared_names):
    """The positional draw dropout makes, laid out as (positional..., ``names``...), size 1 where shared."""
    drawn = sorted(n for n in names if n not in shared_names)
    mshape = tuple(1 if i in shared_positions else s for i, s in enumerate(pshape))
    m = np.asarray(jax.random.bernoulli(key, keep, mshape + tuple(sizes[n] for n in drawn)))
    p = len(pshape)
    kept = [n for n in names if n not in shared_names]  # into the logical order of the names drawn
    m = np.transpose(m, list(range(p)) + [p + drawn.index(n) for n in kept])
    for i, n in enumerate(names):
        if n in shared_names:
            m = np.expand_dims(m, p + i)
    return m


# --------------------------------------------------------------------------------------------------------
# 1. Dropout


@st.composite
def dropout_cases(draw):
    names = draw(st.lists(NAME, min_size=0, max_size=3, unique=True))
    sizes = {n: draw(st.integers(1, 4)) for n in names}
    p = draw(st.integers(0, 2))
    pshape = tuple(draw(st.integers(1, 4)) for _ in range(p))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xlog = rng.normal(size=pshape + tuple(sizes[n] for n in names)).astype(np.float32)
    shared_names = [n for n in names if draw(st.booleans())]
    shared_positions = [i for i in range(p) if draw(st.booleans())]
    # positions may be given counting from the end, and names and positions in any order
    spec = shared_names + [i - p if draw(st.booleans()) else i for i in shared_positions]
    spec = draw(st.permutations(spec))
    rate = draw(st.sampled_from([0.1, 0.5, 0.9]))
    seed = draw(st.integers(0, 2**31 - 1))
    x = _stored(draw, xlog, names)
    return x, xlog, names, sizes, pshape, shared_names, shared_positions, spec, rate, seed


@settings(max_examples=20, deadline=None)
@given(dropout_cases())
def test_dropout_is_the_positional_draw_over_sorted_names(case):
    x, xlog, names, sizes, pshape, shared_names, shared_positions, spec, rate, seed = case
    key = jax.random.key(seed)
    with jax.numpy_rank_promotion("raise"):
        y = nx.nn.dropout(key, rate, x, broadcast_axes=tuple(spec))
    assert y.named_shape == x.named_shape and y.shape == x.shape and y.dtype == x.dtype
    keep = 1.0 - rate
    m = _reference_mask(key, keep, pshape, names, sizes, set(shared_positions), set(shared_names))
    ref = np.where(m, xlog / np.float32(keep), 0).astype(np.float32)
    np.testing.assert_allclose(_logical(y, names), ref, rtol=1e-6, atol=0)


def test_dropout_mask_is_constant_along_broadcast_axes_and_varies_along_the_others():
    x = nx.wrap(jnp.ones((5, 6, 7, 8)), [None, "batch", "seq", "embed"])  # positional (5,)
    y = nx.nn.dropout(KEY, 0.5, x, broadcast_axes=("seq", 0))
    kept = np.asarray(_logical(y, ["batch", "seq", "embed"])) != 0
    assert (kept == kept[:1]).all() and (kept == kept[:, :, :1]).all()  # shared along 0 and seq
    assert not (kept == kept[:, :1]).all() and not (kept == kept[..., :1]).all()  # drawn along batch, embed
    # a name's mask does not depend on the other names' storage order
    z = nx.nn.dropout(KEY, 0.5, nx.wrap(jnp.ones((8, 5, 6, 7)), ["embed", None, "batch", "seq"]),
                      broadcast_axes=["seq", -1])
    order = ["batch", "seq", "embed"]
    np.testing.assert_array_equal(_logical(z, order), _logical(y, order))


def test_dropout_keeps_the_mean_in_expectation():
    x = nx.full({"draw": 200_000}, 3.0)
    for rate in (0.1, 0.5, 0.8):
        y = nx.nn.dropout(jax.random.key(7), rate, x)
        assert abs(float(nx.mean(y, "draw")) - 3.0) < 0.05, rate
        dropped = float(nx.mean((y == 0).astype(jnp.float32), "draw"))
        assert abs(dropped - rate) < 0.01, rate
    # shared along a name: each index of the others is one decision, still with mean 3
    z = nx.nn.dropout(jax.random.key(8), 0.5, nx.full({"draw": 40_000, "feat": 4}, 3.0),
                      broadcast_axes="feat")
    assert abs(float(nx.mean(z, ("draw", "feat"))) - 3.0) < 0.1
    # a normal x: the mean of the dropped values is the mean of x (to sampling error)
    v = nx.random.normal(jax.random.key(9), named_shape={"draw": 200_000}) + 1.0
    dropped_mean = float(nx.mean(nx.nn.dropout(jax.random.key(10), 0.3, v), "draw"))
    assert abs(dropped_mean - float(nx.mean(v, "draw"))) < 0.05


def test_dropout_identity_cases_and_keys():
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
    assert nx.nn.dropout(KEY, 0.0, x) is x and nx.nn.dropout(None, 0, x) is x
    assert nx.nn.dropout(None, 0.5, x, deterministic=True) is x
    # a uint32 key draws the same mask as the typed key with the same bits
    raw = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(_logical(nx.nn.dropout(raw, 0.5, x), ["a", "b"]),
                                  _logical(nx.nn.dropout(jax.random.wrap_key_data(raw), 0.5, x), ["a", "b"]))
    # a plain array: broadcast_axes by position, as Flax's broadcast_dims; the result is plain
    plain = nx.nn.dropout(KEY, 0.5, jnp.ones((4, 6)), broadcast_axes=0)
    assert not isinstance(plain, nx.NamedArray) and (plain == plain[:1]).all()
    np.testing.assert_array_equal(plain, np.broadcast_to(np.where(jax.random.bernoulli(KEY, 0.5, (1, 6)),
                                                                  2.0, 0.0), (4, 6)))
    # half precision stays half precision
    h = nx.nn.dropout(KEY, 0.5, x.astype(jnp.bfloat16))
    assert h.dtype == jnp.bfloat16


def test_dropout_with_a_named_key_draws_each_index_with_its_own_key():
    keys = nx.random.split(KEY, named_shape={"batch": 3})
    x = nx.wrap(jnp.ones((4, 3, 5)), ["seq", "batch", "embed"])
    y = nx.nn.dropout(keys, 0.5, x, broadcast_axes="seq")
    assert y.named_shape == x.named_shape
    for b in range(3):
        one = nx.nn.dropout(keys[{"batch": b}], 0.5, x[{"batch": b}], broadcast_axes="seq")
        np.testing.assert_array_equal(_logical(y[{"batch": b}], ["seq", "embed"]),
                                      _logical(one, ["seq", "embed"]))
    rows = np.asarray(_logical(y, ["batch", "seq", "embed"]))
    assert not (rows == rows[:1]).all()


def test_dropout_under_jit_and_grad():
    x = nx.wrap(jnp.arange(1.0, 25.0).reshape(2, 3, 4), ["a", None, "b"])  # stored (a, positional, b)
    eager = nx.nn.dropout(KEY, 0.4, x, broadcast_axes="b")
    jitted = jax.jit(lambda k, v: nx.nn.dropout(k, 0.4, v, broadcast_axes="b"))(KEY, x)
    np.testing.assert_array_equal(_logical(jitted, ["a", "b"]), _logical(eager, ["a", "b"]))
    # a traced rate: the same computation (no range check is possible on it)
    traced = jax.jit(lambda k, v, r: nx.nn.dropout(k, r, v, broadcast_axes="b"))(KEY, x, 0.4)
    np.testing.assert_allclose(_logical(traced, ["a", "b"]), _logical(eager, ["a", "b"]), rtol=1e-6)
    # the gradient of sum(dropout(x)) is the mask scaled by 1 / (1 - rate)
    g = nx.grad(lambda v: nx.sum(nx.nn.dropout(KEY, 0.4, v, broadcast_axes="b"), (0, "a", "b")))(x)
    mask = np.asarray(_logical(eager, ["a", "b"])) != 0
    np.testing.assert_allclose(_logical(g, ["a", "b"]), mask / np.float32(0.6), rtol=1e-6)
    # and through jax.grad on a positional function of the key and value
    f = jax.jit(jax.grad(lambda v: jnp.sum(nx.unwrap(nx.nn.dropout(KEY, 0.4, nx.wrap(v, ["a", None, "b"])),
                                                         ["a", None, "b"]))))
    assert f(jnp.ones((2, 3, 4))).shape == (2, 3, 4)


def test_dropout_errors():
    x = nx.wrap(jnp.ones((2, 3)), ["a", "b"])
    for rate in (1.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"nx.nn.dropout: rate must be in \[0, 1\)"):
            nx.nn.dropout(KEY, rate, x)
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\)"):  # checked even when deterministic
        nx.nn.dropout(KEY, 1.0, x, deterministic=True)
    with pytest.raises(ValueError, match="rate must be a scalar"):
        nx.nn.dropout(KEY, jnp.array([0.1, 0.2]), x)
    with pytest.raises(errors.AxisSpecError, match="rate must be a scalar, got a NamedArray"):
        nx.nn.dropout(KEY, nx.full({"a": 2}, 0.1), x)
    with pytest.raises(errors.AxisSpecError, match="broadcast_axes names axis 'c', which x does not carry"):
        nx.nn.dropout(KEY, 0.5, x, broadcast_axes="c")
    with pytest.raises(errors.AxisSpecError, match="position 0 is out of range for the 0 positional axes"):
        nx.nn.dropout(KEY, 0.5, x, broadcast_axes=0)
    with pytest.raises(errors.AxisSpecError, match="names .str. and positions .int., got 1.5"):
        nx.nn.dropout(KEY, 0.5, x, broadcast_axes=[1.5])
    with pytest.raises(ValueError, match="a key is needed"):
        nx.nn.dropout(None, 0.5, x)
    keys = nx.random.split(KEY, named_shape={"c": 2})
    with pytest.raises(errors.AxisSpecError, match="the key carries axis 'c', which x does not"):
        nx.nn.dropout(keys, 0.5, x)
    with pytest.raises(errors.AxisSizeError, match="axis 'b' has size 2 in the key but size 3 in x"):
        nx.nn.dropout(nx.random.split(KEY, named_shape={"b": 2}), 0.5, x)
    with pytest.raises(errors.AxisSpecError, match="shares the mask along 'a', but the key carries 'a'"):
        nx.nn.dropout(nx.random.split(KEY, named_shape={"a": 2}), 0.5, x, broadcast_axes="a")
    # inside nx.xmap a bound name x lacks may be listed: x is constant along it already
    with nx.env.bind({"z": 4}):
        assert nx.nn.dropout(KEY, 0.5, x, broadcast_axes=("z", "a")).named_shape == x.named_shape


def test_dropout_inside_shard_map():
    x = nx.ones({"batch": 8, "embed": 4})
    keys = nx.random.split(KEY, named_shape={"batch": 8})
    with jax.set_mesh(auto_mesh((4,), ("data",))):
        # a key per index of the split name: each device draws its block's masks, the same as unsplit
        got = nx.shard_map(lambda k, v: nx.nn.dropout(k, 0.5, v), resources={"batch": "data"})(keys, x)
        # a mask shared along the split name: every block uses the same one
        shared = nx.shard_map(lambda v: nx.nn.dropout(KEY, 0.5, v, broadcast_axes="batch"),
                              resources={"batch": "data"})(x)
        with pytest.raises(errors.SplitAxisError, match="dropout: axis 'batch' is split across devices"):
            nx.shard_map(lambda v: nx.nn.dropout(KEY, 0.5, v), resources={"batch": "data"})(x)
    order = ["batch", "embed"]
    np.testing.assert_array_equal(_logical(got, order), _logical(nx.nn.dropout(keys, 0.5, x), order))
    np.testing.assert_array_equal(_logical(shared, order),
                                  _logical(nx.nn.dropout(KEY, 0.5, x, broadcast_axes="batch"), order))


# --------------------------------------------------------------------------------------------------------
# 2. Named keys


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


@settings(max_examples=12, deadline=None)
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
# 3. Squared ReLU


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
    assert {"relu_squared", "dropout"} <= set(dir(nx.nn)) & set(nx.nn.__all__)
