"""nx.random: named shapes, independence along names, order- and jit-independence, moments, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import namedarray as nx
from namedarray import errors

KEY = jax.random.key(0)

SAMPLERS = {
    "normal": lambda k, shape, ns: nx.random.normal(k, shape, named_shape=ns),
    "uniform": lambda k, shape, ns: nx.random.uniform(k, shape, minval=-1.0, maxval=2.0, named_shape=ns),
    "bernoulli": lambda k, shape, ns: nx.random.bernoulli(k, 0.3, shape, named_shape=ns),
    "randint": lambda k, shape, ns: nx.random.randint(k, shape, 0, 7, named_shape=ns),
    "truncated_normal": lambda k, shape, ns: nx.random.truncated_normal(k, -2.0, 2.0, shape, named_shape=ns),
    "gumbel": lambda k, shape, ns: nx.random.gumbel(k, shape, named_shape=ns),
    "exponential": lambda k, shape, ns: nx.random.exponential(k, shape, named_shape=ns),
    "gamma": lambda k, shape, ns: nx.random.gamma(k, 2.0, shape, named_shape=ns),
    "categorical": lambda k, shape, ns: nx.random.categorical(k, jnp.zeros(5), shape=shape, named_shape=ns),
}


# every sampler but categorical shares one code path: a few suffice to check it, keeping the file fast
@pytest.mark.parametrize("name", ["normal", "bernoulli", "randint", "categorical"])
def test_named_shape_order_and_jit_independence(name):
    f = SAMPLERS[name]
    a = f(KEY, (3,), {"i": 4, "long_name": 5})
    assert a.shape == (3,) and a.named_shape == {"i": 4, "long_name": 5}
    b = f(KEY, (3,), {"long_name": 5, "i": 4})
    # stored as listed, as a positional program lays its axes out; the values do not depend on the listing
    assert a.names == ("i", "long_name") and b.names == ("long_name", "i")
    spec = [None, "i", "long_name"]
    np.testing.assert_array_equal(nx.unwrap(a, spec), nx.unwrap(b, spec))
    c = jax.jit(lambda k: nx.unwrap(f(k, (3,), {"i": 4, "long_name": 5}), spec))(KEY)
    np.testing.assert_array_equal(nx.unwrap(a, spec), c)
    with nx.env.bind({"i": 4, "long_name": 5}):  # bound sizes: bare names work and give the same sample
        d = f(KEY, (3,), ["long_name", "i"])
    np.testing.assert_array_equal(nx.unwrap(a, spec), nx.unwrap(d, spec))


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_independent_along_names_identical_without(name):
    # xmap's testSamplerSharding: a named shape gives distinct columns, a positional one identical columns
    f = SAMPLERS[name]
    with nx.env.bind({"i": 4}):
        named = nx.unwrap(f(KEY, (3,), {"i": 4}), [None, "i"])
        positional = nx.unwrap(f(KEY, (3,), None), [None, "i"])
    assert len({tuple(np.asarray(named[:, j]).tolist()) for j in range(4)}) == 4 or name in (
        "bernoulli", "randint", "categorical")  # discrete: columns may repeat by chance; checked below
    assert not all(np.array_equal(named[:, 0], named[:, j]) for j in range(4))
    assert all(np.array_equal(positional[:, 0], positional[:, j]) for j in range(4))


def test_does_not_depend_on_sharding():
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(AxisType.Auto, AxisType.Auto))
    ref = nx.unwrap(nx.random.normal(KEY, (6,), named_shape={"i": 8, "j": 4}), [None, "i", "j"])
    draws = nx.unwrap(nx.random.randint(KEY, (6,), 0, 2**30, named_shape={"i": 8, "j": 4}), [None, "i", "j"])
    for spec in (P(None, "x", "y"), P("y", None, "x"), P(None, ("x", "y"), None)):
        sharding = NamedSharding(mesh, spec)

        @jax.jit
        def f(k, sharding=sharding):
            x = nx.random.normal(k, (6,), named_shape={"i": 8, "j": 4})
            n = nx.random.randint(k, (6,), 0, 2**30, named_shape={"i": 8, "j": 4})
            return [jax.lax.with_sharding_constraint(nx.unwrap(v, [None, "i", "j"]), sharding)
                    for v in (x, n)]

        normal, ints = f(KEY)
        np.testing.assert_array_equal(ints, draws)  # the same random bits, element for element
        # the same samples, to float tolerance (XLA may fuse the transform of the bits differently)
        np.testing.assert_allclose(normal, ref, rtol=1e-6, atol=1e-6)


def test_moments():
    n = {"draws": 20000}
    x = nx.random.normal(KEY, named_shape=n)
    assert abs(float(nx.mean(x, "draws"))) < 0.05 and abs(float(nx.std(x, "draws")) - 1) < 0.05
    u = nx.random.uniform(KEY, minval=-1.0, maxval=2.0, named_shape=n)
    assert abs(float(nx.mean(u, "draws")) - 0.5) < 0.05 and abs(float(nx.var(u, "draws")) - 0.75) < 0.05
    g = nx.random.gumbel(KEY, named_shape=n)
    assert abs(float(nx.mean(g, "draws")) - np.euler_gamma) < 0.05
    t = nx.random.truncated_normal(KEY, -1.0, 1.0, named_shape=n)
    assert float(nx.max(nx.abs(t), "draws")) < 1
    r = nx.random.randint(KEY, (), 0, 7, named_shape=n)
    counts = np.bincount(np.asarray(r.unwrap(["draws"])), minlength=7)
    assert counts.min() > 2500 and counts.max() < 3200
    # parameters with their own names: one probability per index of 'p'
    p = nx.wrap(jnp.array([0.1, 0.5, 0.9]), ["p"])
    b = nx.random.bernoulli(KEY, p, named_shape=n)
    assert b.named_shape == {"draws": 20000, "p": 3}
    np.testing.assert_allclose(nx.mean(b.astype(jnp.float32), "draws").unwrap(["p"]), [0.1, 0.5, 0.9],
                               atol=0.02)


def test_parameters_with_names_broadcast_by_name():
    lo = nx.wrap(jnp.array([0.0, 10.0]), ["band"])
    hi = nx.wrap(jnp.array([[1.0, 2.0, 3.0], [11.0, 12.0, 13.0]]), ["band", "other"])
    with pytest.raises(errors.AxisSizeError,
                       match="axis 'band' has size 3 in named_shape but size 2 in argument 'minval'"):
        nx.random.uniform(KEY, (4,), minval=lo, maxval=1.0, named_shape={"band": 3})
    u = nx.random.uniform(KEY, (4,), minval=lo, maxval=hi, named_shape={"draw": 3})
    assert u.shape == (4,) and u.named_shape == {"band": 2, "other": 3, "draw": 3}
    v = nx.unwrap(u, [None, "band", "other", "draw"])
    assert bool(jnp.all(v[:, 0] >= 0) & jnp.all(v[:, 1] >= 10))
    assert bool(jnp.all(v < np.asarray(hi.unwrap(["band", "other"]))[None, :, :, None]))


def test_keys_that_carry_names():
    # a key per index of 'b' (xmap's fold_in(key, axis_index) idiom): each index samples with its own key
    with nx.env.bind({"b": 3}):
        keys = nx.random.fold_in(KEY, nx.axis_index("b"))
    assert keys.named_shape == {"b": 3}
    s = nx.random.normal(keys, (2,), named_shape={"i": 4, "b": 3})
    assert s.shape == (2,) and s.named_shape == {"b": 3, "i": 4}
    got = nx.unwrap(s, ["b", None, "i"])
    for b in range(3):
        np.testing.assert_allclose(got[b], jax.random.normal(jax.random.fold_in(KEY, b), (2, 4)), rtol=1e-6)
    # a split key, named with nx.wrap, and a parameter that shares the key's name
    split = nx.wrap(jax.random.split(KEY, 2), ["b"])
    p = nx.wrap(jnp.array([0.0, 1.0]), ["b"])
    out = nx.random.bernoulli(split, p, (5,))
    np.testing.assert_array_equal(nx.unwrap(out, ["b", ...]), np.array([[False] * 5, [True] * 5]))
    with pytest.raises(errors.AxisSizeError, match="'b'.*3.*2|'b'.*2.*3"):
        nx.random.normal(split, named_shape={"b": 3})


def test_categorical_along_a_name():
    logits = nx.wrap(jnp.log(jnp.array([[0.2, 0.8, 0.0], [0.5, 0.0, 0.5]])), ["row", "classes"])
    out = nx.random.categorical(KEY, logits, axis="classes", named_shape={"draws": 4000})
    assert out.named_shape == {"row": 2, "draws": 4000} and out.shape == ()
    draws = np.asarray(nx.unwrap(out, ["row", "draws"]))
    counts = [np.bincount(draws[r], minlength=3) / 4000 for r in range(2)]
    np.testing.assert_allclose(counts[0], [0.2, 0.8, 0.0], atol=0.03)
    np.testing.assert_allclose(counts[1], [0.5, 0.0, 0.5], atol=0.03)
    with pytest.raises(errors.AxisSpecError, match="out of range"):  # the logits have no positional axis
        nx.random.categorical(KEY, logits, axis=0)
    # a positional class axis: names are batch axes
    pos = nx.random.categorical(KEY, nx.wrap(jnp.log(jnp.array([[0.0, 1.0], [1.0, 0.0]])), ["row", ...]))
    assert pos.named_shape == {"row": 2} and pos.unwrap(["row"]).tolist() == [1, 0]


def test_permutation():
    x = nx.wrap(jnp.arange(12).reshape(4, 3), ["i", "j"])
    same = nx.unwrap(nx.random.permutation(KEY, x, axis="i"), ["i", "j"])
    # one permutation of 'i' applied to every index of 'j'
    assert sorted(same[:, 0].tolist()) == [0, 3, 6, 9]
    np.testing.assert_array_equal(same - same[:, :1], np.broadcast_to(np.arange(3), (4, 3)))
    indep = nx.unwrap(nx.random.permutation(KEY, x, axis="i", independent=True), ["i", "j"])
    for j in range(3):
        assert sorted(indep[:, j].tolist()) == [3 * i + j for i in range(4)]
    assert nx.random.permutation(KEY, x, axis="j").named_shape == x.named_shape
    np.testing.assert_array_equal(nx.random.permutation(KEY, 6), jax.random.permutation(KEY, 6))
    with pytest.raises(errors.AxisSpecError, match="'k'"):
        nx.random.permutation(KEY, x, axis="k")


def test_errors():
    # xmap's testSamplerSharding: a named size that conflicts with the bound size
    with nx.env.bind({"i": 5}):
        with pytest.raises(errors.AxisSizeError,
                           match="The shape of axis i was specified as 4, but it really is 5"):
            nx.random.normal(KEY, (3,), named_shape={"i": 4})
        with pytest.raises(errors.UnboundAxisError, match="'j'"):
            nx.random.normal(KEY, named_shape=["i", "j"])
    with pytest.raises(errors.AxisSpecError, match="size of axis 'i'"):
        nx.random.normal(KEY, named_shape={"i": 2.5})
    with pytest.raises(errors.AxisSpecError, match="named_shape"):
        nx.random.normal(KEY, {"i": 2})
    # positional parameter shapes must broadcast to `shape`, as in jax.random (names are not part of them)
    lo = nx.wrap(jnp.zeros((4, 2)), [None, "i"])
    with pytest.raises(errors.AxisSizeError, match=r"\('minval' \(4,\)\) do not broadcast to shape=\(3,\)"):
        nx.random.uniform(KEY, (3,), minval=lo)
    with pytest.raises(errors.AxisSizeError, match=r"\('minval' \(4,\)\) do not broadcast to shape=\(3,\)"):
        nx.random.uniform(KEY, (3,), minval=jnp.zeros(4), named_shape={"i": 2})
    with pytest.raises(errors.AxisSizeError, match=r"\('a' \(2,\), 'b' \(3,\)\) do not broadcast together"):
        nx.random.beta(KEY, jnp.ones(2), nx.wrap(jnp.ones((3, 2)), [None, "i"]))
    u = nx.random.uniform(KEY, (3, 2), minval=jnp.array([0.0, 10.0]), named_shape={"i": 5})
    assert bool(nx.all(u[:, 1] >= 10, axis=(0, "i"))) and bool(nx.all(u[:, 0] < 1, axis=(0, "i")))


def test_plain_calls_are_jax_random_and_lifted_rest():
    np.testing.assert_array_equal(nx.random.normal(KEY, (3,)), jax.random.normal(KEY, (3,)))
    assert not isinstance(nx.random.uniform(KEY, (3,)), nx.NamedArray)
    assert nx.random.key is jax.random.key and nx.random.PRNGKey is jax.random.PRNGKey
    keys = nx.random.split(nx.wrap(jax.random.split(KEY, 3), ["b"]))
    assert keys.shape == (2,) and keys.named_shape == {"b": 3}
    # another jax.random function is lifted over the names of its arguments (here, the key's)
    c = nx.random.choice(nx.wrap(jax.random.split(KEY, 3), ["b"]), 10, (2,))
    assert c.named_shape == {"b": 3} and c.shape == (2,)


def test_inside_xmap():
    # xmap's testSamplerSharding with the real adapter: named sizes come from the binding
    def sample(named_shape):
        return lambda: nx.random.uniform(KEY, (3,), named_shape=named_shape)

    out = nx.xmap(sample(["i"]), in_axes=(), out_axes=[None, "i", ...], axis_sizes={"i": 4})()
    assert out.shape == (3, 4) and len({tuple(np.asarray(out[:, j]).tolist()) for j in range(4)}) == 4
    eager = nx.random.uniform(KEY, (3,), named_shape={"i": 4})
    np.testing.assert_array_equal(out, nx.unwrap(eager, [None, "i"]))
    g = nx.xmap(sample({"i": 4}), in_axes=(), out_axes=[None, "i", ...], axis_sizes={"i": 5})
    with pytest.raises(errors.AxisSizeError,
                       match="The shape of axis i was specified as 4, but it really is 5"):
        g()
