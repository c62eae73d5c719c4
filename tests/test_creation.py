"""Building arrays by named shape: nx.zeros/ones/empty/full(named_shape=...) and ranges with a named axis.

Each is checked for the named shape and dtype asked, eagerly and under jit, for its values against jnp, and
for the jaxpr it traces to (the same as the positional call's: naming costs nothing).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors

NAMES = ("batch", "seq", "k", "x1")
DTYPES = (None, jnp.float32, jnp.int32, jnp.bool_, jnp.bfloat16)


def _creators():
    return {
        "zeros": (lambda s, dt, ns: nx.zeros(s, dt, named_shape=ns), lambda s, dt: jnp.zeros(s, dt)),
        "ones": (lambda s, dt, ns: nx.ones(s, dt, named_shape=ns), lambda s, dt: jnp.ones(s, dt)),
        "empty": (lambda s, dt, ns: nx.empty(s, dt, named_shape=ns), lambda s, dt: jnp.empty(s, dt)),
        "full": (lambda s, dt, ns: nx.full(s, 3, dt, named_shape=ns), lambda s, dt: jnp.full(s, 3, dt)),
    }


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(_creators())), st.sampled_from(DTYPES),
       st.lists(st.integers(1, 3), max_size=2).map(tuple),
       st.lists(st.sampled_from(NAMES), max_size=3, unique=True), st.data())
def test_named_shape_and_dtype_eager_and_under_jit(kind, dtype, shape, names, data):
    named = {n: data.draw(st.integers(1, 3)) for n in names}
    make, ref = _creators()[kind]
    expected = ref(shape + tuple(named.values()), dtype)  # the storage a positional programmer writes
    for out in (make(shape, dtype, named), jax.jit(lambda: make(shape, dtype, named))()):
        assert isinstance(out, nx.NamedArray)
        assert out.shape == shape and out.named_shape == named and out.dtype == expected.dtype
        got = nx.unwrap(out, {len(shape) + i: n for i, n in enumerate(named)})
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    assert make(shape, dtype, named).names == tuple(named)  # the order written: no transpose, no sorting


def test_a_mapping_as_shape_names_every_axis():
    x = nx.ones({"batch": 2, "embed": 3}, jnp.int32)
    assert x.shape == () and x.named_shape == {"batch": 2, "embed": 3} and x.dtype == jnp.int32
    assert nx.zeros(x.named_shape).named_shape == x.named_shape  # a NamedShape is a mapping too
    assert nx.full({"k": 2}, 1.5).unwrap(["k"]).tolist() == [1.5, 1.5]
    with pytest.raises(errors.AxisSpecError, match="give the named axes once"):
        nx.zeros({"a": 2}, named_shape={"b": 3})


def test_without_names_it_is_jax_numpy():
    assert isinstance(nx.zeros((2, 3)), jax.Array) and isinstance(nx.arange(3), jax.Array)
    assert isinstance(nx.zeros((2,), named_shape={}), nx.NamedArray)  # asked for a NamedArray: gets one


def test_creation_traces_to_the_positional_jaxpr():
    def prims(f):
        return [e.primitive.name for e in jax.make_jaxpr(f)().jaxpr.eqns]

    assert prims(lambda: nx.zeros((2,), named_shape={"b": 3}).data) == prims(lambda: jnp.zeros((2, 3)))
    assert prims(lambda: nx.full({"b": 3}, 2.0).data) == prims(lambda: jnp.full((3,), 2.0))
    assert prims(lambda: nx.arange(5, name="i").data) == prims(lambda: jnp.arange(5))
    assert prims(lambda: nx.linspace(0.0, 1.0, 5, name="t").data) == prims(lambda: jnp.linspace(0.0, 1.0, 5))


def test_named_shape_from_the_enclosing_xmap():
    def body(x):
        z = nx.zeros((), named_shape=["i"])  # the size comes from the binding
        assert z.named_shape == {"i": 4}
        r = nx.arange(4, name="i")
        return x + z + r

    out = nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...])(jnp.ones(4))
    np.testing.assert_array_equal(out, np.arange(4) + 1.0)
    with pytest.raises(errors.AxisSizeError, match="axis i was specified as 3, but it really is 4"):
        nx.xmap(lambda x: x + nx.zeros({"i": 3}), in_axes=["i", ...], out_axes=["i", ...])(jnp.ones(4))
    with pytest.raises(errors.AxisSizeError, match="axis i was specified as 3, but it really is 4"):
        nx.xmap(lambda x: x + nx.arange(3, name="i"), in_axes=["i", ...], out_axes=["i", ...])(jnp.ones(4))
    with pytest.raises(errors.UnboundAxisError, match="'i'"):
        nx.zeros(named_shape=["i"])


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 3), max_size=2).map(tuple), st.lists(st.sampled_from(NAMES), max_size=3,
                                                                    unique=True), st.data())
def test_full_broadcasts_a_named_fill_value_by_name(shape, names, data):
    named = {n: data.draw(st.integers(1, 3)) for n in names}
    own = data.draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    fill_shape = shape[data.draw(st.integers(0, len(shape))):]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    fill_data = rng.normal(size=fill_shape + tuple(named[n] for n in own)).astype(np.float32)
    fill = nx.wrap(fill_data, {len(fill_shape) + i: n for i, n in enumerate(own)})
    for out in (nx.full(shape, fill, named_shape=named),
                jax.jit(lambda f: nx.full(shape, f, named_shape=named))(fill)):
        assert out.shape == shape and out.named_shape == named
        got = nx.unwrap(out, {len(shape) + i: n for i, n in enumerate(named)})
        ref = _align(fill_data, fill_shape, own, named, len(shape))
        np.testing.assert_array_equal(np.asarray(got), np.broadcast_to(ref, shape + tuple(named.values())))


def _align(d, fill_shape, own, named, p):
    """``d`` (positional fill_shape, then names ``own``) laid out as (p positional, then ``named``)."""
    k = len(fill_shape)
    d = np.transpose(d, list(range(k)) + [k + own.index(n) for n in named if n in own])
    return d.reshape((1,) * (p - k) + fill_shape + tuple(named[n] if n in own else 1 for n in named))


def test_full_errors_name_the_axis():
    fill = nx.wrap(jnp.ones((2, 3)), ["a", "b"])
    with pytest.raises(errors.AxisSpecError, match="fill_value has named axes 'b'"):
        nx.full({"a": 2}, fill)
    with pytest.raises(errors.AxisSizeError, match="axis 'b' has size 3 in fill_value but size 4"):
        nx.full({"a": 2, "b": 4}, fill)
    with pytest.raises(errors.AxisSizeError, match=r"shape \(5,\) does not broadcast to shape \(2,\)"):
        nx.full((2,), nx.wrap(jnp.ones((5, 2)), [None, "a"]), named_shape={"a": 2})


def test_full_broadcasts_a_positional_array_fill_against_the_positional_shape_only():
    # as jnp.full: the fill's axes are the trailing positional ones, never the named axes stored after them
    out = nx.full((2, 3), jnp.arange(3.0), named_shape={"a": 4})
    ref = np.broadcast_to(np.arange(3.0)[None, :, None], (2, 3, 4))
    np.testing.assert_array_equal(out.unwrap([None, None, "a"]), ref)
    with pytest.raises(errors.AxisSizeError, match=r"shape \(4,\) does not broadcast to shape \(3,\)"):
        nx.full((3,), jnp.arange(4.0), named_shape={"a": 4})  # the size of 'a', but a positional fill
    with pytest.raises(errors.AxisSizeError, match=r"shape \(2,\) does not broadcast to shape \(\)"):
        nx.full({"a": 2}, jnp.arange(2.0))


@pytest.mark.parametrize("fn, args, kw", [
    (nx.arange, (5,), {}), (nx.arange, (1, 9, 2), {"dtype": jnp.float32}),
    (nx.linspace, (0.0, 1.0, 7), {}), (nx.linspace, (0.0, 1.0, 4), {"endpoint": False}),
    (nx.logspace, (0.0, 2.0, 3), {}), (nx.geomspace, (1.0, 8.0, 4), {}),
])
def test_ranges_name_their_axis(fn, args, kw):
    ref = getattr(jnp, fn.__name__)(*args, **kw)
    for out in (fn(*args, **kw, name="t"), jax.jit(lambda: fn(*args, **kw, name="t"))()):
        assert out.shape == () and out.named_shape == {"t": ref.shape[0]} and out.dtype == ref.dtype
        np.testing.assert_allclose(np.asarray(out.unwrap(["t"])), np.asarray(ref), rtol=1e-6)


def test_linspace_with_array_endpoints_keeps_their_axes():
    start = nx.wrap(jnp.array([0.0, 10.0]), ["b"])
    stop = jnp.array([1.0, 2.0]) + 10.0  # positional: each b pairs with both stops
    out, step = nx.linspace(start, stop, 3, name="t", retstep=True)
    ref = np.stack([jnp.linspace(s, stop, 3, axis=-1) for s in (0.0, 10.0)], axis=1)  # (stop, b, t)
    ref_step = np.stack([jnp.linspace(s, stop, 3, retstep=True)[1] for s in (0.0, 10.0)], axis=1)
    assert out.shape == (2,) and out.named_shape == {"b": 2, "t": 3}
    np.testing.assert_allclose(np.asarray(out.unwrap([None, "b", "t"])), ref, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(step.unwrap([None, "b"])), ref_step, rtol=1e-6)
    with pytest.raises(errors.AxisSpecError, match="either a position .* or a name"):
        nx.linspace(0.0, 1.0, 3, axis=0, name="t")
    with pytest.raises(errors.DuplicateAxisError, match="argument 0 already has an axis 'b'"):
        nx.linspace(start, 20.0, 3, name="b")


def test_causal_mask_from_named_ranges():
    q, k = nx.arange(4, name="q"), nx.arange(4, name="k")
    mask = q >= k
    np.testing.assert_array_equal(np.asarray(mask.unwrap(["q", "k"])), np.tril(np.ones((4, 4), bool)))
