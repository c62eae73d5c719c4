"""What users of the peer libraries expect of squared ReLU, against NumPy.

* ``nx.nn.relu_squared`` elementwise.

Values come in random storage orders and with random axis names; references see the logical layout
(positional axes first, then the names in a fixed order).
"""

import jax
import jax.numpy as jnp
import numpy as np
from conftest import storage_order
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx

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
# 1. Squared ReLU


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

