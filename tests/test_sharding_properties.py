"""Property: sharding by name never changes values.

Random named programs (elementwise, reductions, einsum, dot, softmax) on random names, sizes and storage
orders, run under jit with `.shard()` on their inputs and results, with random legal rules on (8,), (4, 2)
and (2, 2, 2) meshes of Auto or Explicit axes, give the values of the same program on one device, and lay
their result out as the rules say.
"""


import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P
from meshes import MESHES, NAMES, legal_mapping, named_operands, same_spec, sharded_program

import namedarray as nx


@st.composite
def problems(draw, mesh_shape):
    sizes, x_names, y_names = draw(named_operands())
    rules = draw(legal_mapping(NAMES, sizes, mesh_shape, with_none=True))
    op = draw(st.sampled_from(["elementwise", "reduce", "einsum", "dot", "softmax"]))
    return sizes, x_names, y_names, rules, op, draw(st.booleans()), draw(st.integers(0, 2**16))


@pytest.mark.parametrize("mesh_shape", list(MESHES))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_random_programs_under_random_rules_give_the_single_device_values(mesh_shape, data):
    sizes, x_names, y_names, rules, op, explicit, seed = data.draw(problems(mesh_shape))
    rng = np.random.default_rng(seed)
    x = nx.wrap(jnp.asarray(rng.normal(size=[sizes[n] for n in x_names]), jnp.float32), x_names)
    y = nx.wrap(jnp.asarray(rng.normal(size=[sizes[n] for n in y_names]), jnp.float32), y_names)
    expected = sharded_program(op, x, y)  # one device, no rules: .shard() does nothing
    axes = MESHES[mesh_shape]
    kind = AxisType.Explicit if explicit else AxisType.Auto
    mesh = jax.make_mesh(mesh_shape, axes, axis_types=(kind,) * len(axes))
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        got = jax.jit(lambda a, b: sharded_program(op, a, b))(x, y)
    assert got.named_shape == expected.named_shape and got.shape == expected.shape
    order = {i: n for i, n in enumerate(expected.names, start=expected.ndim)}
    np.testing.assert_allclose(np.asarray(got.unwrap(order)), np.asarray(expected.unwrap(order)),
                               rtol=2e-5, atol=2e-5)
    want = P(*([None] * got.ndim), *[rules.get(n) for n in got.names])
    assert same_spec(got.sharding.spec, want)
