"""The NamedArray type: shapes as xmap defines them, NamedShape, dtype, conversions, pytree identity, repr."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import fresh_canonical_orders

import namedarray as nx
from namedarray.errors import AxisSizeError, AxisSpecError, PositionalMisuseError


@pytest.fixture
def x():
    # storage order given: (positional 2, batch 3, positional 4, k 5)
    return nx.wrap(np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5), {1: "batch", 3: "k"})


# --------------------------------------------------------------------------------------------------------
# Shapes


def test_shape_ndim_size_count_positional_axes_only(x):
    assert x.shape == (2, 4)
    assert x.named_shape == {"batch": 3, "k": 5}
    assert x.ndim == 2 and x.size == 8
    assert len(x) == 2
    assert nx.shape(x) == np.shape(x) == (2, 4)
    assert nx.ndim(x) == np.ndim(x) == 2
    assert nx.size(x) == np.size(x) == 8


def test_a_fully_named_array_is_positionally_a_scalar():
    y = nx.wrap(jnp.ones((3, 4)), ["a", "b"])
    assert y.shape == () and y.ndim == 0 and y.size == 1
    assert y.named_shape == {"a": 3, "b": 4}
    with pytest.raises(TypeError, match="no positional axes"):
        len(y)


def test_positional_operations_leave_names_alone(x):
    assert x.T.shape == (4, 2) and x.T.named_shape == x.named_shape
    assert x.reshape(-1).shape == (8,) and x.reshape((4, 2)).shape == (4, 2)
    assert x.reshape(8, 1).named_shape == {"batch": 3, "k": 5}
    np.testing.assert_array_equal(x.T.unwrap([None, None, "batch", "k"]),
                                  np.arange(120).reshape(2, 3, 4, 5).transpose(2, 0, 1, 3))
    assert [r.shape for r in x] == [(4,), (4,)]


def test_named_shape_is_unordered_and_equals_a_dict():
    a = nx.NamedShape({"a": 2, "b": 5})
    b = nx.NamedShape({"b": 5, "a": 2})
    assert a == b and hash(a) == hash(b)
    assert a == {"b": 5, "a": 2} and {"a": 2, "b": 5} == a
    assert a != {"a": 2} and a != {"a": 2, "b": 4} and a != nx.NamedShape({"a": 2, "c": 5})
    assert list(a) == ["a", "b"] == list(b) and a.names == ("a", "b")
    assert len(a) == 2 and "a" in a and "c" not in a and a["b"] == 5
    assert dict(a) == {"a": 2, "b": 5}
    assert repr(b) == "{'a': 2, 'b': 5}"
    assert {a: 1}[b] == 1  # usable as a dict key
    with pytest.raises(TypeError):
        a["c"] = 3  # immutable


def test_named_shape_union_and_its_size_check():
    a = nx.NamedShape({"a": 2, "b": 5})
    assert a | {"c": 1} == {"a": 2, "b": 5, "c": 1}
    assert a | {"b": 5} == a
    with pytest.raises(AxisSizeError, match="'b'.*5.*4"):
        a | {"b": 4}


def test_named_shape_rejects_non_string_names():
    with pytest.raises(AxisSpecError, match="non-empty strings"):
        nx.NamedShape({0: 3})
    with pytest.raises(AxisSpecError, match="non-empty strings"):
        nx.NamedShape({"": 3})


def test_x_named_shape_is_a_named_shape_in_any_order(rng):
    d = rng.normal(size=(2, 3, 4)).astype(np.float32)
    u = nx.wrap(d, ["a", "b", "c"])
    v = nx.wrap(d.transpose(2, 0, 1), ["c", "a", "b"])
    assert isinstance(u.named_shape, nx.NamedShape)
    assert u.named_shape == v.named_shape == {"c": 4, "b": 3, "a": 2}


# --------------------------------------------------------------------------------------------------------
# Names


def test_multi_character_names_are_single_axes():
    y = nx.wrap(np.arange(24.0).reshape(2, 3, 4), ["batch", "b", "ab"])
    s = nx.sum(y, "batch")
    assert s.named_shape == {"b": 3, "ab": 4}
    np.testing.assert_array_equal(s.unwrap(["b", "ab"]), np.arange(24.0).reshape(2, 3, 4).sum(0))
    assert y.sum("ab").named_shape == {"batch": 2, "b": 3}
    assert nx.mean(y, ("batch", "ab")).named_shape == {"b": 3}
    assert y.rename({"batch": "time_step"}).named_shape == {"time_step": 2, "b": 3, "ab": 4}


def test_names_that_sort_differently_from_their_order_of_appearance():
    y = nx.wrap(np.arange(6.0).reshape(2, 3), ["zeta", "alpha"])
    assert list(y.named_shape) == ["alpha", "zeta"]
    np.testing.assert_array_equal(y.unwrap(["zeta", "alpha"]), np.arange(6.0).reshape(2, 3))


# --------------------------------------------------------------------------------------------------------
# dtype and conversions


def test_dtype_and_astype(x):
    assert x.dtype == jnp.float32
    y = x.astype(jnp.int32)
    assert y.dtype == jnp.int32 and y.named_shape == x.named_shape and y.shape == x.shape
    np.testing.assert_array_equal(y.unwrap({1: "batch", 3: "k"}), np.arange(120).reshape(2, 3, 4, 5))
    assert x.astype("bfloat16").dtype == jnp.bfloat16
    assert nx.astype(x, bool).dtype == jnp.bool_


def test_python_scalar_conversions_need_no_names():
    s = nx.wrap(jnp.float32(2.5))
    assert float(s) == 2.5 and int(nx.wrap(jnp.int32(3))) == 3 and bool(nx.wrap(jnp.bool_(True)))
    assert s.item() == 2.5
    assert np.asarray(nx.wrap(jnp.arange(3))).tolist() == [0, 1, 2]
    assert nx.wrap(jnp.arange(3)).tolist() == [0, 1, 2]
    assert [0, 1, 2][nx.wrap(jnp.int32(1))] == 1  # __index__
    assert f"{s:.2f}" == "2.50" and f"{s}" == str(s)


@pytest.mark.parametrize("convert", [float, int, bool, np.asarray, lambda v: v.tolist(), lambda v: v.item()])
def test_conversions_with_named_axes_are_refused(convert):
    y = nx.wrap(jnp.ones(3), ["batch"])
    with pytest.raises(PositionalMisuseError, match="batch"):
        convert(y)


def test_named_arrays_are_unhashable(x):
    with pytest.raises(TypeError):
        hash(x)


# --------------------------------------------------------------------------------------------------------
# Pytree identity


def test_one_leaf_and_equal_structure_whatever_the_storage_order(rng):
    d = rng.normal(size=(2, 3, 4)).astype(np.float32)
    u = nx.wrap(d, {0: "a", 2: "b"})
    v = nx.wrap(d.transpose(2, 1, 0), {0: "b", 2: "a"})
    assert len(jax.tree.leaves(u)) == 1
    assert jax.tree.structure(u) == jax.tree.structure(v)
    np.testing.assert_array_equal(np.asarray(jax.tree.leaves(u)[0]), np.asarray(jax.tree.leaves(v)[0]))
    w = nx.wrap(d, {0: "a", 2: "c"})
    assert jax.tree.structure(u) != jax.tree.structure(w)


def test_low_level_constructor_names_the_trailing_axes():
    y = nx.NamedArray(jnp.zeros((5, 2, 3)), ("b", "a"))
    assert y.shape == (5,) and y.named_shape == {"a": 3, "b": 2}
    with pytest.raises(PositionalMisuseError):
        nx.NamedArray(y, ("c",))


# --------------------------------------------------------------------------------------------------------
# Display


def test_repr_shows_dtype_positional_shape_named_shape_and_values(x):
    text = repr(x)
    assert text.startswith("NamedArray(float32, shape=(2, 4), named_shape={'batch': 3, 'k': 5}")
    assert "axes=[#0, #1, batch, k]" in text
    assert "119." in text  # values are shown
    assert repr(nx.wrap(jnp.arange(3), ["b"])) == (
        "NamedArray(int32, shape=(), named_shape={'b': 3}, axes=[b])\n[0 1 2]")


def test_repr_under_tracing_shows_the_type_only(x):
    seen = []
    with fresh_canonical_orders():  # traced in the order x was built, whatever flattened first in the worker
        jax.jit(lambda v: seen.append(repr(v)) or v)(x)
    assert seen[0] == ("NamedArray(float32, shape=(2, 4), named_shape={'batch': 3, 'k': 5}, "
                       "axes=[#0, #1, batch, k])")


def test_repr_html(x):
    html = x._repr_html_()
    assert "NamedArray" in html and "float32" in html
    assert "<b>batch</b></td><td>3</td>" in html and "<b>k</b></td><td>5</td>" in html
    assert "<td>#1</td><td>4</td><td>positional</td>" in html
    assert "<pre" in html
    assert "&lt;" in nx.wrap(jnp.ones(2), ["<b>"])._repr_html_()  # names are escaped


def test_operators_defer_to_foreign_types_like_jax_arrays_do(x):
    assert (x == None) is False and (x != None) is True  # noqa: E711
    with pytest.raises(TypeError, match="unsupported operand"):
        x + "a"

    class Other:
        def __radd__(self, other):
            return "Other.__radd__"

    assert x + Other() == "Other.__radd__"


def test_python_round(x):
    r = round(x / 3)
    assert isinstance(r, nx.NamedArray) and r.named_shape == x.named_shape
    np.testing.assert_array_equal(r.unwrap({1: "batch", 3: "k"}),
                                  np.round(np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5) / 3))


def test_repr_of_an_abstract_value(x):
    r = jax.eval_shape(lambda v: v.sum("k"), x)
    assert isinstance(r.data, jax.ShapeDtypeStruct)
    assert r.shape == (2, 4) and r.named_shape == {"batch": 3}
    assert repr(r) == "NamedArray(float32, shape=(2, 4), named_shape={'batch': 3}, axes=[#0, #1, batch])"
    assert "<pre" not in r._repr_html_()


@pytest.mark.parametrize("module", ["core.array", "core.shape", "core.specs", "core.wrapping", "core.env",
                                    "engine.dispatch", "engine.nmap", "ops.mirror", "ops.structural",
                                    "ops.indexing", "surface.methods", "interop.render", "errors"])
def test_docstring_examples_of_the_core_modules(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"namedarray.{module}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_array_methods(x):
    ref = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)  # (p0, batch, p1, k)
    spec = {1: "batch", 3: "k"}
    np.testing.assert_array_equal(x.copy().unwrap(spec), ref)
    np.testing.assert_allclose(x.dot(jnp.ones(4)).unwrap([None, "batch", "k"]), ref.sum(2))
    np.testing.assert_array_equal(x.cumsum("k").unwrap(spec), ref.cumsum(3))
    np.testing.assert_array_equal(x.max(("batch", 1)).unwrap([None, "k"]), ref.max((1, 2)))
    np.testing.assert_array_equal(x.argsort("batch").unwrap(spec), np.argsort(ref, 1, kind="stable"))
    np.testing.assert_array_equal(x.clip(10, 20).unwrap(spec), ref.clip(10, 20))
    np.testing.assert_array_equal(x.swapaxes(0, 1).unwrap({1: "batch", 3: "k"}), ref.transpose(2, 1, 0, 3))
    np.testing.assert_array_equal(x.ravel().unwrap([None, "batch", "k"]),
                                  ref.transpose(0, 2, 1, 3).reshape(8, 3, 5))


def test_low_level_constructor_takes_a_string_as_one_name():
    y = nx.NamedArray(jnp.zeros((5, 2)), "batch")
    assert y.shape == (5,) and y.named_shape == {"batch": 2}


@pytest.mark.parametrize("convert, what", [(int, "int()"), (lambda v: v.item(), "item()"),
                                           (lambda v: v.tolist(), "tolist()"), (bool, "bool()")])
def test_conversion_errors_say_which_conversion(convert, what):
    with pytest.raises(PositionalMisuseError, match=rf"^{re.escape(what)} of a NamedArray with named axes "
                                                    r"'batch': reduce them first \(e.g. x.sum\('batch'\)\)"):
        convert(nx.wrap(jnp.ones(3), ["batch"]))


@pytest.mark.parametrize("value", [np.float32(2.0), np.arange(3), 2.0, [1, 2]], ids=repr)
def test_host_values_are_stored_as_jax_arrays(value):
    for x in (nx.NamedArray(value), nx.wrap(value)):
        assert isinstance(x.data, jax.Array)
        np.testing.assert_array_equal(x.unwrap(), np.asarray(value))
