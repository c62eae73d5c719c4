"""``jax.export`` of functions that take and return NamedArrays: nx registers the type for serialization, so
an exported function round-trips through bytes and is called with NamedArrays as before.

The serialized calling convention holds each NamedArray's names in the boundary order its value flattened
in; a program whose values flatten in another order is refused with an nx error naming the names and both
orders, never given a transposed argument.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import fresh_canonical_orders
from jax import export

import namedarray as nx


def _layer(x, w):
    return nx.tanh(nx.einsum("{batch,embed},{embed,mlp}->{batch,mlp}", x, w)).sum("mlp")


def _values():
    x = nx.wrap(jnp.arange(12.0).reshape(3, 4) / 10, ["batch", "embed"])
    w = nx.wrap(jnp.linspace(-1, 1, 20).reshape(4, 5), ["embed", "mlp"])
    return x, w


@pytest.mark.parametrize("jit", [nx.jit, jax.jit], ids=["nx.jit", "jax.jit"])
def test_export_serialize_deserialize_call_round_trip(jit):
    x, w = _values()
    f = jit(_layer)
    blob = export.export(f)(x, w).serialize()
    back = export.deserialize(blob)
    y = back.call(x, w)
    assert isinstance(y, nx.NamedArray) and y.named_shape == {"batch": 3}
    np.testing.assert_allclose(y.unwrap("batch"), f(x, w).unwrap("batch"), rtol=1e-6)
    # arguments stored in another order flatten to the same boundary order: the same results
    xt = nx.wrap(x.unwrap("embed", "batch"), ["embed", "batch"])
    np.testing.assert_allclose(back.call(xt, w).unwrap("batch"), y.unwrap("batch"), rtol=1e-6)
    # abstract arguments export too
    spec = jax.eval_shape(lambda: _values())
    assert export.deserialize(export.export(f)(*spec).serialize()).call(x, w).named_shape == {"batch": 3}


def test_an_exported_function_refuses_values_flattened_in_another_order():
    with fresh_canonical_orders():
        nx.fix_canonical_order(["batch", "embed"], ["embed", "mlp"])
        x, w = _values()
        blob = export.export(jax.jit(_layer))(x, w).serialize()
        expected = _layer(x, w).unwrap("batch")
    with fresh_canonical_orders():  # another program, where {batch, embed} crosses jit as (embed, batch)
        nx.fix_canonical_order(["embed", "batch"], ["embed", "mlp"])
        back = export.deserialize(blob)
        x, w = _values()
        # the names, the order the record holds, the order this program passes, and what to do
        with pytest.raises(nx.errors.AxisSpecError,
                           match=r"^nx: the exported function takes the names \['batch', 'embed'\] in "
                                 r"the order \('batch', 'embed'\).*this program passes them as \('embed', "
                                 r"'batch'\).*nx.fix_canonical_order\(\['batch', 'embed'\]\)"):
            back.call(x, w)
        with pytest.raises(nx.errors.AxisSpecError, match="the order"):  # storage order changes nothing
            back.call(nx.wrap(x.unwrap("batch", "embed"), ["batch", "embed"]), w)
    with fresh_canonical_orders():  # the advice: the recorded order, given before anything flattens them
        nx.fix_canonical_order(["batch", "embed"])
        back = export.deserialize(blob)
        x, w = _values()
        np.testing.assert_allclose(back.call(x, w).unwrap("batch"), expected, rtol=1e-6)
        xt = nx.wrap(x.unwrap("embed", "batch"), ["embed", "batch"])
        np.testing.assert_allclose(back.call(xt, w).unwrap("batch"), expected, rtol=1e-6)


def test_other_structure_mismatches_stay_jax_s_messages():
    x, w = _values()
    back = export.deserialize(export.export(jax.jit(_layer))(x, w).serialize())
    with pytest.raises(ValueError, match=r"args is a tuple of length 1 in the invocation and a tuple of "
                                         r"length 2 when exported") as e:
        back.call(x)
    assert not isinstance(e.value, nx.errors.NamedAxisError)


def test_export_on_a_mesh_keeps_the_layouts_by_name():
    mesh = jax.make_mesh((8,), ("data",))
    x = nx.wrap(jnp.arange(32.0).reshape(8, 4), ["batch", "embed"])
    w = nx.wrap(jnp.ones((4, 5)), ["embed", "mlp"])
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
        f = nx.jit(_layer)
        exp = export.export(f)(x, w)
        back = export.deserialize(exp.serialize())
        assert back.nr_devices == 8
        y = back.call(nx.shard(x), w)
        np.testing.assert_allclose(y.unwrap("batch"), f(x, w).unwrap("batch"), rtol=1e-6)


def test_abstract_arguments_in_any_storage_order_lower_trace_and_export():
    # an abstract NamedArray stored (b, a) while the boundary order of {a, b} is (a, b): it flattens in that
    # order like a concrete one, its sharding permuted alike
    from namedarray.core.array import _make

    with fresh_canonical_orders():
        _abstract_arguments_in_another_order(_make)


def _abstract_arguments_in_another_order(_make):
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
    jax.tree.leaves(x)  # fixes the boundary order (a, b)
    assert nx.canonical_order(["b", "a"]) == ("a", "b")
    mesh = jax.make_mesh((2, 4), ("p", "q"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    sharded = jax.ShapeDtypeStruct((4, 2), jnp.float32, sharding=jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec("q", "p")))
    leaf = jax.tree.leaves(_make(sharded, ("b", "a")))[0]
    assert leaf.shape == (2, 4) and leaf.sharding.spec == jax.sharding.PartitionSpec("p", "q")
    abstract = _make(jax.ShapeDtypeStruct((3, 2), jnp.float32), ("b", "a"))
    f = nx.jit(lambda v: v.sum("a"))
    transposed = nx.wrap(jnp.arange(6.0).reshape(2, 3).T, ["b", "a"])
    assert f.lower(abstract).compile()(transposed).unwrap(["b"]).tolist() == [3.0, 5.0, 7.0]
    assert f.trace(abstract).out_info.named_shape == {"b": 3}
    exported = jax.export.export(jax.jit(lambda v: v.sum("a")))(abstract)
    for arg in (x, transposed):
        assert exported.call(arg).unwrap(["b"]).tolist() == [3.0, 5.0, 7.0]
