"""Bad input reaches a clear namedarray error naming the argument, the axis and the sizes, not a jax one."""

import jax.numpy as jnp
import numpy as np
import pytest

import namedarray as nx
from namedarray.errors import AxisSpecError, EinsumSpecError, RankError


@pytest.fixture
def x():
    return nx.wrap(jnp.ones((2, 3)), ["a", None])  # named a=2, positional (3,)


# --------------------------------------------------------------------------------------------------------
# wrap / unwrap: the array argument


def test_wrap_none_with_axes():
    with pytest.raises(TypeError, match=r"^nx.wrap: array must be an array or scalar, got None$"):
        nx.wrap(None, ["a"])


def test_wrap_none_without_axes():
    with pytest.raises(TypeError, match=r"nx.wrap: array must be an array or scalar, got None"):
        nx.wrap(None)


def test_wrap_dict():
    with pytest.raises(TypeError, match=r"nx.wrap: array must be an array or scalar, got \{'a': 1\} \(dict\)"):
        nx.wrap({"a": 1}, ["a"])


def test_wrap_string():
    with pytest.raises(TypeError, match=r"nx.wrap: array must be .* got the string 'abc'"):
        nx.wrap("abc", ["a", ...])


def test_wrap_object():
    with pytest.raises(TypeError, match=r"nx.wrap: array must be an array or scalar, got .*\(object\)"):
        nx.wrap(object())


def test_wrap_ragged_list():
    with pytest.raises(ValueError, match=r"nx.wrap: array cannot be converted to an array: .*inhomogeneous"):
        nx.wrap([[1, 2], [3]], ["a", ...])


def test_unwrap_none():
    with pytest.raises(TypeError, match=r"nx.unwrap: x must be an array or scalar, got None"):
        nx.unwrap(None, ["a"])


def test_unwrap_string():
    with pytest.raises(TypeError, match=r"nx.unwrap: x must be an array or scalar, got the string 'abc'"):
        nx.unwrap("abc")


def test_unwrap_sizes_not_a_dict(x):
    with pytest.raises(TypeError, match=r"nx.unwrap: sizes must be a dict \{name: size\}, got 3 \(int\)"):
        nx.unwrap(x, ["a", "z", ...], sizes=3)


def test_rename_mapping_not_a_dict(x):
    with pytest.raises(TypeError, match=r"renaming must be a dict \{old_name: new_name\}, got \['b'\]"):
        nx.rename(x, ["b"])


# --------------------------------------------------------------------------------------------------------
# wrap / unwrap: the axis specification


_FORMS = r"dict \{position: name\}.*list of names .* ending with \.\.\..*asserts the rank"


def test_wrap_numpy_integer_spec():
    with pytest.raises(AxisSpecError, match=_FORMS + r".*but got: np.int64\(0\) \(int64\); to name positional "
                                         r"axis 0, write \{0: 'name'\}"):
        nx.wrap(jnp.ones((2, 3)), np.int64(0))


def test_wrap_int_spec():
    with pytest.raises(AxisSpecError, match=r"but got: 1 \(int\); to name positional axis 1, write \{1: 'name'\}"):
        nx.wrap(jnp.ones((2, 3)), 1)


def test_wrap_numpy_float_scalar_spec():
    with pytest.raises(AxisSpecError, match=_FORMS + r".*but got: np.float32\(0.0\) \(float32\)"):
        nx.wrap(jnp.ones((2, 3)), np.float32(0))


def test_wrap_numpy_array_of_names_spec():
    with pytest.raises(AxisSpecError, match=r"but got: array\(\['a', 'b'\].*write the names as a list, e.g. "
                                            r"\['a', 'b', \.\.\.\]"):
        nx.wrap(jnp.ones((2, 3)), np.array(["a", "b"]))


def test_wrap_empty_numpy_array_spec():
    with pytest.raises(AxisSpecError, match=_FORMS + r".*but got: array\(\[\]"):
        nx.wrap(jnp.ones((2, 3)), np.array([]))


def test_wrap_jax_array_spec():
    with pytest.raises(AxisSpecError, match=_FORMS + r".*but got: Array\(\[0, 1\]"):
        nx.wrap(jnp.ones((2, 3)), jnp.array([0, 1]))


def test_wrap_set_spec():
    with pytest.raises(AxisSpecError, match=r"\(set\); a set has no order"):
        nx.wrap(jnp.ones((2, 3)), {"a", "b"})


def test_unwrap_numpy_integer_spec(x):
    with pytest.raises(AxisSpecError, match=r"nx.unwrap: axes must be an axis specification.*but got: "
                                            r"np.int64\(0\)"):
        nx.unwrap(x, np.int64(0))


def test_unwrap_numpy_array_spec(x):
    with pytest.raises(AxisSpecError, match=r"nx.unwrap: .*but got: array\(\['a'\]"):
        x.unwrap(np.array(["a"]))


def test_xmap_numpy_integer_spec():
    with pytest.raises(AxisSpecError, match=r"(?s)in_axes at \[0\]: a value mapping specification .*but got: "
                                            r"np.int64\(0\)"):
        nx.xmap(lambda v: v, in_axes=(np.int64(0),), out_axes=[...])(jnp.ones(3))


# --------------------------------------------------------------------------------------------------------
# NamedArray(data, names)


def test_named_array_float_names():
    with pytest.raises(TypeError, match=r"NamedArray\(data, names\): names must be an axis name \(a str\) or a "
                                        r"sequence of them.*got 1.5 \(float\)"):
        nx.NamedArray(jnp.ones((2, 3)), 1.5)


def test_named_array_int_names():
    with pytest.raises(AxisSpecError, match=r"NamedArray\(data, names\): axis names must be non-empty strings, "
                                            r"got 1 at index 0 of \[1, 2\].*nx.wrap\(data, \{position: name\}\)"):
        nx.NamedArray(jnp.ones((2, 3)), [1, 2])


def test_named_array_none_among_names():
    with pytest.raises(AxisSpecError, match=r"got None at index 1 of \['a', None\]"):
        nx.NamedArray(jnp.ones((2, 3)), ["a", None])


def test_named_array_none_names():
    with pytest.raises(TypeError, match=r"names must be an axis name .* got None \(NoneType\)"):
        nx.NamedArray(jnp.ones((2, 3)), None)


def test_named_array_dict_names():
    with pytest.raises(TypeError, match=r"got \{'a': 1\} \(dict\); to name axes by position use "
                                        r"nx.wrap\(data, \{position: name\}\)"):
        nx.NamedArray(jnp.ones((2, 3)), {"a": 1})


def test_named_array_set_names():
    with pytest.raises(TypeError, match=r"names must be an axis name .*\(set\)"):
        nx.NamedArray(jnp.ones((2, 3)), {"a", "b"})


def test_named_array_bytes_names():
    with pytest.raises(TypeError, match=r"got b'ab' \(bytes\)"):
        nx.NamedArray(jnp.ones((2, 3)), b"ab")


def test_named_array_more_names_than_axes():
    with pytest.raises(RankError, match=r"3 axis names 'a', 'b', 'c' for data of shape \(2, 3\) \(rank 2\)"):
        nx.NamedArray(jnp.ones((2, 3)), ["a", "b", "c"])


def test_named_array_none_data():
    with pytest.raises(TypeError, match=r"NamedArray\(data, names\): data must be an array or scalar, got None"):
        nx.NamedArray(None, ["a"])


def test_named_array_numpy_string_names_become_str():
    y = nx.NamedArray(jnp.ones((2, 3)), np.array(["a", "b"]))
    assert y.names == ("a", "b") and all(type(n) is str for n in y.names)
    assert y.named_shape == {"a": 2, "b": 3}


# --------------------------------------------------------------------------------------------------------
# einsum


def test_einsum_none_operand(x):
    with pytest.raises(TypeError, match=r"nx.einsum\('\{a\},\{a\}->'\): operand 1 must be an array or scalar, "
                                        r"got None"):
        nx.einsum("{a},{a}->", x, None)


def test_einsum_string_operand(x):
    with pytest.raises(TypeError, match=r"operand 1 must be an array or scalar, got the string 'abc'"):
        nx.einsum("{a},{a}->", x, "abc")


def test_einsum_dict_operand(x):
    with pytest.raises(TypeError, match=r"operand 0 must be an array or scalar, got \{'a': 1\} \(dict\)"):
        nx.einsum("{a},{a}->", {"a": 1}, x)


def test_einsum_string_array_operand():
    with pytest.raises(TypeError, match=r"nx.einsum\('i->'\): operand 0 must be an array or scalar, got "
                                        r"array\(\['a'\]"):
        nx.einsum("i->", np.array(["a"]))


def test_einsum_spec_not_a_string(x):
    with pytest.raises(EinsumSpecError, match=r"subscripts string first, got NoneType"):
        nx.einsum(None, x, x)


# --------------------------------------------------------------------------------------------------------
# contractions


def test_dot_by_name_none_operand(x):
    with pytest.raises(TypeError, match=r"^nx.dot: argument 1 must be an array or scalar, got None$"):
        nx.dot(x, None, axis="a")


def test_dot_positional_none_operand(x):
    with pytest.raises(TypeError, match=r"^nx.dot: argument 1 must be an array or scalar, got None$"):
        nx.dot(x, None)


def test_dot_string_operand(x):
    with pytest.raises(TypeError, match=r"nx.dot: argument 0 must be an array or scalar, got the string 's'"):
        nx.dot("s", x, axis="a")


def test_matmul_none_operand(x):
    with pytest.raises(TypeError, match=r"nx.matmul: argument 0 must be an array or scalar, got None"):
        nx.matmul(None, x)


def test_tensordot_none_operand(x):
    with pytest.raises(TypeError, match=r"nx.tensordot: argument 1 must be an array or scalar, got None"):
        nx.tensordot(x, None, axes="a")


def test_vdot_none_operand(x):
    with pytest.raises(TypeError, match=r"nx.vdot: argument 1 must be an array or scalar, got None"):
        nx.vdot(x, None)


def test_inner_dict_operand(x):
    with pytest.raises(TypeError, match=r"nx.inner: argument 1 must be an array or scalar, got \{'a': 1\}"):
        nx.inner(x, {"a": 1})


def test_outer_none_operand(x):
    with pytest.raises(TypeError, match=r"nx.outer: argument 0 must be an array or scalar, got None"):
        nx.outer(None, x)


def test_pdot_none_operand(x):
    with pytest.raises(TypeError, match=r"nx.pdot: argument 1 must be an array or scalar, got None"):
        nx.pdot(x, None, "a")


def test_contractions_still_take_lists_and_scalars(x):
    assert nx.matmul(x, [1.0, 1.0, 1.0]).named_shape == {"a": 2}
    assert nx.dot(x, 2.0).shape == (3,)
    assert nx.einsum("ij->", [[1.0, 2.0], [3.0, 4.0]]).item() == 10.0
