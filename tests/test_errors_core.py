"""Bad input to the core raises a clear ``nx.errors`` error naming the axis, the sizes and the argument."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import namedarray as nx
from namedarray import errors
from namedarray.errors import (
    AxisSizeError,
    AxisSpecError,
    DuplicateAxisError,
    NamedAxisError,
    PositionalMisuseError,
    RankError,
    UnboundAxisError,
    UnplacedAxisError,
)


@pytest.fixture
def x():
    return nx.wrap(jnp.ones((2, 3, 5)), {0: "batch", 2: "k"})  # positional (3,), batch=2, k=5


def test_every_error_is_a_named_axis_error_and_a_value_error():
    for cls in (AxisSizeError, AxisSpecError, DuplicateAxisError, RankError, UnboundAxisError,
                UnplacedAxisError, PositionalMisuseError):
        assert issubclass(cls, NamedAxisError) and issubclass(cls, ValueError)
    assert issubclass(PositionalMisuseError, TypeError)


# --------------------------------------------------------------------------------------------------------
# The same name with two sizes


@pytest.mark.parametrize("op", [lambda a, b: a + b, lambda a, b: b * a, nx.maximum, nx.subtract,
                                lambda a, b: nx.where(True, a, b)])
def test_same_name_two_sizes_across_operands(x, op):
    y = nx.wrap(jnp.ones(4), ["k"])
    with pytest.raises(AxisSizeError) as e:
        op(x, y)
    msg = str(e.value)
    assert "'k'" in msg and "size 5" in msg and "size 4" in msg and "argument" in msg


def test_size_error_names_the_operation_and_both_arguments(x):
    with pytest.raises(AxisSizeError, match=r"^nx.add: axis 'k' has size 5 in argument 0 but size 4 in "
                                            r"argument 1"):
        x + nx.wrap(jnp.ones(4), ["k"])
    with pytest.raises(AxisSizeError, match=r"nx.where: axis 'batch' has size 2 in argument 0 but size 7 in "
                                            r"argument 2"):
        nx.where(nx.wrap(jnp.ones(2) > 0, ["batch"]), 1.0, nx.wrap(jnp.ones(7), ["batch"]))


def test_size_error_between_a_value_and_its_where_mask(x):
    with pytest.raises(AxisSizeError, match=r"^nx.sum: axis 'k' has size 5 in argument 0 but size 4 in "
                                            r"where="):
        nx.sum(x, "batch", where=nx.wrap(np.ones(4, bool), ["k"]))


def test_size_error_in_nmap_names_the_argument_and_pytree_path(x):
    y = nx.wrap(jnp.ones(4), ["k"])
    with pytest.raises(AxisSizeError, match=r"'k' has size 5 in argument 1 but size 4 in argument 2"):
        nx.nmap(lambda p, a, b: a)(jnp.ones(3), x, y)
    with pytest.raises(AxisSizeError, match=r"'k' has size 5 in argument 0 but size 4 in keyword argument "
                                            r"'extra'\['w'\]\[1\]"):
        nx.nmap(lambda a, extra: a)(x, extra={"w": [1.0, y]})


def test_size_error_under_jit_too(x):
    with pytest.raises(AxisSizeError, match="'k'.*5.*4"):
        jax.jit(lambda a, b: a - b)(x, nx.wrap(jnp.ones(4), ["k"]))


# --------------------------------------------------------------------------------------------------------
# Reducing over a name the value lacks


@pytest.mark.parametrize("call", [
    lambda v: nx.sum(v, "kk"), lambda v: v.mean("kk"), lambda v: nx.max(v, axis=(0, "kk")),
    lambda v: nx.argmax(v, "kk"), lambda v: nx.cumsum(v, axis="kk"), lambda v: nx.sort(v, axis="kk"),
    lambda v: np.sum(v, axis="kk"), lambda v: nx.var(v, ("batch", "kk")),
], ids=["sum", "mean-method", "max-mixed", "argmax", "cumsum", "sort", "np.sum", "var"])
def test_reducing_over_an_unknown_name(x, call):
    with pytest.raises(UnboundAxisError) as e:
        call(x)
    msg = str(e.value)
    assert "'kk'" in msg and "'batch', 'k'" in msg and "nx.xmap" in msg


def test_unknown_name_error_names_the_operation(x):
    with pytest.raises(UnboundAxisError, match=r"^nx.sum: unbound axis name 'kk'"):
        nx.sum(x, "kk")


def test_a_bound_name_the_value_lacks_reduces_as_xmap_did(x):
    with nx.env.bind({"r": 4}):
        s = nx.sum(x, ("k", "r"))
        m = nx.mean(x, "r")
    np.testing.assert_allclose(s.unwrap([None, "batch"]), np.full((3, 2), 20.0))
    np.testing.assert_allclose(m.unwrap([None, "batch", "k"]), np.ones((3, 2, 5)))


def test_a_masked_reduction_over_a_bound_name_the_value_lacks(x):
    d = np.arange(30.0).reshape(2, 3, 5)  # (batch, positional, k)
    v = nx.wrap(d, {0: "batch", 2: "k"})
    keep = np.array([True, False, True, True, False])
    mask = nx.wrap(keep, ["k"])
    with nx.env.bind({"r": 4}):
        s = nx.sum(v, ("r", "k"), where=mask)
        m = nx.max(v, ("r", 0), where=mask, initial=-1.0)
    np.testing.assert_allclose(s.unwrap([None, "batch"]), 4 * np.sum(d, 2, where=keep).T)
    np.testing.assert_allclose(m.unwrap(["batch", "k"]), np.max(d, 1, where=keep[None, None], initial=-1.0))


@pytest.mark.parametrize("call", [lambda v: nx.sort(v, 1), lambda v: nx.cumsum(v, 1),
                                  lambda v: nx.flip(v, (0, 1)), lambda v: nx.roll(v, 1, axis=-2),
                                  lambda v: nx.diff(v, axis=-2)],
                         ids=["sort", "cumsum", "flip", "roll", "diff"])
def test_positional_axis_of_an_operation_along_an_axis_out_of_bounds(call):
    v = nx.wrap(jnp.ones((3, 4)), ["k", ...])
    with pytest.raises(AxisSpecError, match=r"positional axis -?\d is out of bounds for a value with 1 "
                                            r"positional axes.*named axes are addressed by name"):
        call(v)
    w = nx.wrap(jnp.ones(3), ["k"])
    with pytest.raises(AxisSpecError, match="0 positional axes"):
        nx.sort(w)


def test_bad_axis_arguments(x):
    with pytest.raises(AxisSpecError, match="positional axis 1 is out of bounds.*1 positional"):
        nx.sum(x, 1)
    with pytest.raises(AxisSpecError, match="an int, an axis name or a tuple"):
        nx.sum(x, 1.5)
    with pytest.raises(DuplicateAxisError, match="duplicate value in 'axis': 'k'"):
        nx.sum(x, ("k", "k"))
    with pytest.raises(DuplicateAxisError, match="duplicate value in 'axis': 0"):
        nx.sum(x, (0, -1))
    with pytest.raises(AxisSpecError, match="exactly one axis"):
        nx.argmax(x, (0, "k"))


# --------------------------------------------------------------------------------------------------------
# Duplicate names


def test_duplicate_name_in_one_array():
    with pytest.raises(DuplicateAxisError, match="'a' appears twice"):
        nx.NamedArray(jnp.ones((2, 3)), ("a", "a"))


@pytest.mark.parametrize("spec", [["a", "a"], {0: "a", 1: "a"}, ("a", "a"), ["a", "a", ...]])
def test_duplicate_name_in_one_spec(spec):
    with pytest.raises(DuplicateAxisError, match="'a' appears twice"):
        nx.wrap(jnp.ones((2, 3)), spec)
    with pytest.raises(DuplicateAxisError, match="'a' appears twice"):
        nx.unwrap(nx.wrap(jnp.ones((2, 3)), ["a", None]), spec)


def test_naming_an_axis_the_array_already_has(x):
    with pytest.raises(DuplicateAxisError, match="already has named axes 'k'"):
        nx.wrap(x, ["k"])
    with pytest.raises(DuplicateAxisError, match="'batch' twice"):
        x.rename({"k": "batch"})
    with pytest.raises(DuplicateAxisError, match="argument 1 already has an axis 'k'"):
        nx.stack([jnp.ones(3), x], axis="k")


# --------------------------------------------------------------------------------------------------------
# Specs that do not fit the rank; negative positions; malformed specs


@pytest.mark.parametrize("spec, words", [
    (["a"], ["shape (2, 3)", "rank 2", "['a']", "rank 1"]),
    (["a", None, None], ["shape (2, 3)", "rank 2", "rank 3"]),
    ({2: "a"}, ["{2: 'a'}", "at least 3", "shape (2, 3)"]),
    (["a", "b", "c", ...], ["at least 3", "shape (2, 3)"]),
    (("a",), ["rank 1", "shape (2, 3)"]),
])
def test_wrap_spec_that_does_not_fit_the_rank(spec, words):
    with pytest.raises(RankError) as e:
        nx.wrap(jnp.ones((2, 3)), spec)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_unwrap_spec_that_does_not_fit_the_rank(x):
    with pytest.raises(RankError, match=r"asserts a result of rank 4.*1 positional axes and 2 named"):
        nx.unwrap(x, ["batch", "k", None, None])
    with pytest.raises(RankError, match=r"\{0: 'batch', 5: 'k'\}.*at least 4 positional.*only has 1"):
        nx.unwrap(x, {0: "batch", 5: "k"})


@pytest.mark.parametrize("spec", [{-1: "a"}, {0: "b", -2: "a"}])
def test_negative_position_in_an_axis_map(spec):
    with pytest.raises(AxisSpecError, match=r"negative axes.*position -\d for axis 'a'"):
        nx.wrap(jnp.ones((2, 3)), spec)
    with pytest.raises(AxisSpecError, match=r"negative axes.*position -\d for axis 'a'"):
        nx.unwrap(nx.wrap(jnp.ones((2, 3)), ["a", "b"]), spec)


@pytest.mark.parametrize("spec, words", [
    ("batch", "bare string 'batch'"),
    ({"a": 0}, "dictionary that maps positional axes"),
    ([0], "list of axis names"),
    (["a", ..., "b"], "ellipsis may only end"),
    ([""], "non-empty strings"),
    (3, "but got: 3"),
])
def test_malformed_specs(spec, words):
    with pytest.raises(AxisSpecError, match=words):
        nx.wrap(jnp.ones((2, 3)), spec)


# --------------------------------------------------------------------------------------------------------
# unwrap leaving a name unplaced, or placing one the value lacks


def test_unwrap_leaving_a_name_unplaced(x):
    with pytest.raises(UnplacedAxisError, match=r"'k'.*\['batch', Ellipsis\]|'k'.*does not place"):
        nx.unwrap(x, ["batch", ...])
    with pytest.raises(UnplacedAxisError, match="'batch', 'k'"):
        x.unwrap()
    # a misspelled name: both halves of the mistake are said
    with pytest.raises(UnplacedAxisError,
                       match=r"places 'kk', which the value does not carry, and leaves its axes 'k'"):
        x.unwrap(["batch", "kk", ...])


def test_unwrap_placing_a_name_the_value_lacks(x):
    with pytest.raises(UnboundAxisError, match="does not carry axis 'zz'.*size is unknown"):
        nx.unwrap(x, ["batch", "k", "zz", ...])
    # inside a binding of its size, the name is broadcast
    with nx.env.bind({"zz": 2}):
        out = nx.unwrap(x, ["batch", "k", "zz", ...])
    assert out.shape == (2, 5, 2, 3)


# --------------------------------------------------------------------------------------------------------
# Positional functions given named arrays


@pytest.mark.parametrize("f", [jnp.sum, jnp.exp, lambda v: jnp.add(v, 1), lambda v: jnp.dot(v, v),
                               lambda v: jax.lax.add(v, 1.0), jax.nn.relu, jnp.asarray, np.asarray],
                         ids=["jnp.sum", "jnp.exp", "jnp.add", "jnp.dot", "lax.add", "jax.nn.relu",
                              "jnp.asarray", "np.asarray"])
def test_named_array_to_a_positional_function_is_a_type_error(x, f):
    with pytest.raises(TypeError):
        f(x)


def test_the_ways_in_work_instead(x):
    assert nx.sum(x).named_shape == {"batch": 2, "k": 5}
    assert nx.exp(x).named_shape == x.named_shape
    out = nx.nmap(jax.nn.relu)(x)
    assert isinstance(out, nx.NamedArray) and out.named_shape == x.named_shape
    assert isinstance(jnp.asarray(nx.wrap(jnp.ones(3))), jax.Array)  # no names: nothing to guess


def test_conversion_error_says_how_to_get_out(x):
    with pytest.raises(PositionalMisuseError, match=r"'batch', 'k'.*unwrap"):
        np.asarray(x)


def test_quantiles_at_named_points(x):
    q = nx.wrap(jnp.array([0.25, 0.75]), ["q"])
    with pytest.raises(PositionalMisuseError, match="nx.quantile: q has named axes 'q'.*nx.nmap"):
        nx.quantile(x, q, axis="k")
    # the way the message gives
    d = np.arange(30.0).reshape(2, 3, 5)  # (batch, positional, k)
    v = nx.wrap(d, {0: "batch", 2: "k"})
    out = nx.nmap(lambda p: nx.quantile(v, p, axis="k"))(q)
    assert out.named_shape == {"batch": 2, "q": 2} and out.shape == (3,)
    np.testing.assert_allclose(out.unwrap(["q", None, "batch"]),
                               np.quantile(d, [0.25, 0.75], axis=2).transpose(0, 2, 1))


def test_array_valued_reduction_options_other_than_where(x):
    with pytest.raises(TypeError, match=r"nx.max: array-valued options \['initial'\]"):
        nx.max(x, "k", initial=jnp.zeros(()))


def test_a_misspelled_axis_name_gets_a_did_you_mean():
    x = nx.wrap(jnp.ones((2, 3)), ["batch", "embed"])
    cases = [lambda: x.sum("btach"), lambda: x[{"embd": 0}], lambda: nx.nn.softmax(x, "embd"),
             lambda: nx.unbind(x, "bacth")]
    for case, right in zip(cases, ["batch", "embed", "embed", "batch"]):
        with pytest.raises(errors.NamedAxisError, match=f"did you mean '{right}'"):
            case()
    # a name nothing resembles gets no guess
    with pytest.raises(errors.NamedAxisError) as caught:
        x.sum("zzz")
    assert "did you mean" not in str(caught.value)


def test_a_mesh_argument_that_is_not_a_mesh_and_bind_without_sizes_are_type_errors():
    x = nx.wrap(jnp.ones((8, 3)), ["b", "a"])
    for call, where in [(lambda: nx.shard(x, {"b": "d"}, mesh="notamesh"), "nx.shard"),
                        (lambda: x.shard({"b": "d"}, mesh=3), "x.shard()"),
                        (lambda: nx.sharding(x, {"b": "d"}, mesh=[1]), "nx.sharding")]:
        with pytest.raises(TypeError, match=rf"^{re.escape(where)}: mesh must be a jax.sharding.Mesh"):
            call()
    with pytest.raises(TypeError, match="sizes must be a mapping"):
        nx.env.bind(None)
