"""nx.xmap's error contract: every error of xmap's test suite (and its untested messages) that applies,
raised as an nx.errors error carrying the same information: the axis, the sizes and which argument."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import namedarray as nx
from namedarray import errors


def xm(f, in_axes, out_axes, **kw):
    return nx.xmap(f, in_axes=in_axes, out_axes=out_axes, **kw)


def mesh(shape, names):
    n = int(np.prod(shape))
    return Mesh(np.array(jax.devices()[:n]).reshape(shape), names)


def test_all_errors_are_value_errors_of_the_nx_hierarchy():
    with pytest.raises(ValueError):
        xm(lambda x: x, ["i", ...], ["i", ...])(np.ones(3), np.ones(4))


# ------------------------------------------------------------------------------------------------------
# Spec syntax (at construction)


def test_negative_axes():
    with pytest.raises(errors.AxisSpecError, match=r"negative axes.*in_axes.*position -1 for axis 'i'"):
        xm(lambda x: x, {-1: "i"}, {0: "i"})
    with pytest.raises(errors.AxisSpecError, match=r"negative axes.*out_axes.*position -1 for axis 'i'"):
        xm(lambda x: x, {0: "i"}, {-1: "i"})


def test_duplicate_names_in_one_spec():
    with pytest.raises(
        errors.DuplicateAxisError, match=r"unique within each in_axes argument specification.*'i'"
    ):
        xm(lambda x: x, ["i", "i", ...], ["i", ...])


def test_value_mapping_specification_message():
    # an int (the vmap habit), a tuple-valued name, a bare string among the argument specs
    for bad in ((0,), ([("a", "b"), ...],), (["i", ...], "j")):
        with pytest.raises(
            errors.AxisSpecError,
            match=r"(?s)value mapping specification can be either.*"
            r"list of axis names.*dictionary that maps.*but got",
        ):
            xm(lambda *x: x[0], bad, [...])


def test_out_axes_empty_tuple():
    with pytest.raises(errors.AxisSpecError, match="cannot have no return values"):
        xm(lambda x: x, ["i", ...], ())


def test_undefined_out_axis_at_construction():
    # testUndefinedOutAxis
    with pytest.raises(errors.UnplacedAxisError, match=re.escape("but the following are missing: {'c'}")):
        xm(lambda a, b: a + b, (["a", ...], ["b", ...]), ["c", ...])


def test_inner_xmap_cannot_place_an_outer_name():
    def outer_body(x):
        return xm(lambda y: y, ["b", ...], ["a", "b", ...])(x)

    with pytest.raises(errors.UnplacedAxisError, match=re.escape("missing: {'a'}")):
        xm(outer_body, ["a", ...], ["a", ...])(np.ones((2, 3)))


def test_undefined_axis_in_axis_resources_at_construction():
    with pytest.raises(
        errors.MissingResourceError,
        match=re.escape(
            "assigned resources have to appear in in_axes or axis_sizes, but the following are missing: {'b'}"
        ),
    ):
        xm(lambda a: a, ["a", ...], ["a", ...], axis_resources={"a": "x", "b": "y"})


def test_repeated_axis_resource():
    with pytest.raises(
        errors.ResourceConflictError,
        match=r"distinct resources, but specified \('x', 'x'\) for axis a\. "
        r"Axis 'a' lists 'x' more than once",
    ):
        xm(lambda a: a, ["a", ...], ["a", ...], axis_resources={"a": ("x", "x")})


def test_loop_before_mesh_axis_and_two_loops():
    with pytest.raises(errors.MissingResourceError, match="loop resources cannot appear before mesh axes"):
        xm(lambda a: a, ["a", ...], ["a", ...], axis_resources={"a": (nx.SerialLoop(2), "x")})
    with pytest.raises(errors.MissingResourceError, match="only one loop per nx.xmap"):
        xm(
            lambda a, b: (a, b),
            (["a"], ["b"]),
            (["a"], ["b"]),
            axis_resources={"a": nx.SerialLoop(2), "b": nx.SerialLoop(2)},
        )
    with nx.serial_loop("l", 2), nx.serial_loop("m", 2):
        with pytest.raises(errors.MissingResourceError, match="only one loop per nx.xmap"):
            xm(lambda a, b: (a, b), (["a"], ["b"]), (["a"], ["b"]), axis_resources={"a": "l", "b": "m"})(
                np.ones(2), np.ones(2)
            )
    with jax.set_mesh(mesh((2,), ("x",))), nx.serial_loop("l", 2):
        with pytest.raises(
            errors.MissingResourceError, match="loop resources cannot appear before mesh axes"
        ):
            xm(lambda a: a, ["a"], ["a"], axis_resources={"a": ("l", "x")})(np.ones(4))


def test_axes_mismatch_in_and_out():
    # testAxesMismatch
    p = [["x"], ["x"], ["x"]]
    x = np.ones((4,))
    with pytest.raises(
        errors.AxisSpecError,
        match=r"(?s)in_axes specification must be a tree prefix of the corresponding value, got "
        r"specification \(\['x'\], \['x'\], \['x'\]\) for value tree PyTreeDef\(\(\*, \*\)\)\. "
        r"Note that xmap in_axes",
    ):
        xm(lambda x, y: x, p, p)(x, x)
    with pytest.raises(
        errors.AxisSpecError,
        match=r"out_axes specification must be a tree prefix of the corresponding value, got "
        r"specification \(\[\['x'\], \['x'\], \['x'\]\], \['x'\]\) for value tree "
        r"PyTreeDef\([\[(]\*, \*, \*[\])]\)",
    ):
        xm(lambda x: [x, x, x], (["x"],), ([["x"], ["x"], ["x"]], ["x"]))(x)
    with pytest.raises(errors.AxisSpecError, match="single argument.*singleton tuple"):
        xm(lambda x: x, [["x"], ["x"]], ["x"])(x)


# ------------------------------------------------------------------------------------------------------
# Sizes and ranks (at call time)


def test_inconsistent_axis_sizes_between_arguments_and_axis_sizes():
    # testInconsistentAxisSizes
    x5, x6 = np.arange(5), np.arange(6)
    f = xm(lambda x, y: x + y, (["i", ...], ["i", ...]), ["i", ...])
    with pytest.raises(
        errors.AxisSizeError,
        match=re.escape(
            "The size of axis i was previously inferred to be 5, but found an argument of shape (6,) with "
            "in_axes specification ['i', ...]. Shape mismatch occurs in dimension 0: 6 != 5. Axis 'i' has "
            "size 5 inferred from argument 0 and 6 in argument 1."
        ),
    ):
        f(x5, x6)
    g = xm(lambda x: x, ["i", ...], ["i", ...], axis_sizes={"i": 5})
    with pytest.raises(
        errors.AxisSizeError,
        match=re.escape("Axis 'i' has size 5 given in axis_sizes and 6 in argument 0."),
    ):
        g(x6)


def test_size_error_names_the_pytree_path():
    f = xm(lambda t: t["a"] + t["b"], (["i", ...],), ["i", ...])
    with pytest.raises(errors.AxisSizeError,
                       match=re.escape("size 2 inferred from argument 0 at ['a'] and 3 in argument 0 at "
                                       "['b']")):
        f({"a": np.ones(2), "b": np.ones(3)})


def test_empty_argument_trees():
    # testEmptyArgumentTrees
    with pytest.raises(errors.AxisSizeError, match="Failed to infer size of axes: i.*axis_sizes"):
        xm(lambda x: x, ["i", ...], ["i", ...])({})


def test_in_axes_rank_error():
    with pytest.raises(
        errors.RankError,
        match=re.escape(
            "One of xmap arguments has an in_axes specification of ['i', 'j', ...], which implies "
            "that it has at least 2 dimensions, but the argument has rank 1. It is argument 0, of shape (5,)."
        ),
    ):
        xm(lambda x: x, ["i", "j", ...], ["i", "j", ...])(np.ones(5))


def test_out_axes_rank_error():
    with pytest.raises(
        errors.RankError,
        match=re.escape(
            "One of xmap outputs has an out_axes specification of {1: 'i'}, which requires the result of "
            "the xmapped function to have at least 1 positional dimensions, but it "
            "only has 0. It is the output of <lambda>, of positional shape ()."
        ),
    ):
        xm(lambda x: x, {0: "i"}, {1: "i"})(np.ones(5))


def test_list_axes_rank_assertion():
    with pytest.raises(
        errors.RankError,
        match=re.escape(
            "xmap argument has an in_axes specification of ['i', None], which asserts that "
            "it should be of rank 2, but the argument has rank 1 (and shape (5,)). It is argument 0."
        ),
    ):
        xm(lambda x: x, ["i", None], ["i", ...])(np.ones(5))
    with pytest.raises(
        errors.RankError,
        match=re.escape(
            "xmap output has an out_axes specification of ['i', None], which asserts that it should "
            "be of rank 2, but the output has rank 3 (and shape (5, 2, 2)). It is the output of <lambda>."
        ),
    ):
        xm(lambda x: x, ["i", ...], ["i", None])(np.ones((5, 2, 2)))


def test_return_extra_mapped_axes():
    # testReturnExtraMappedAxes: the check xmap dropped in 2024
    f = xm(lambda x, y: (x, x + y), (["a", ...], ["b", ...]), (["a", ...], ["a", ...]))
    with pytest.raises(
        errors.UnplacedAxisError,
        match=re.escape(
            "One of xmap results has an out_axes specification of ['a', ...], but is actually "
            "mapped along more axes defined by this xmap call: b. It is output [1] of <lambda>."
        ),
    ):
        f(np.ones(2), np.ones(3))


def test_extra_axes_check_counts_only_names_of_this_xmap():
    # an inner xmap may return values that vary along an outer name
    def outer_body(w):
        return xm(lambda v: v + nx.axis_index("a"), ["b", ...], ["b", ...])(w)

    out = xm(outer_body, ["a", ...], ["a", ...])(np.zeros((2, 3)))
    np.testing.assert_array_equal(out, np.arange(2)[:, None] * np.ones((2, 3)))


def test_name_shadowing_between_nested_xmaps():
    def outer_body(x):
        return xm(lambda y: y, ["i", ...], ["i", ...])(x)

    with pytest.raises(errors.AxisNameShadowingError, match=r"'i'.*shadowing"):
        xm(outer_body, ["i", ...], ["i", ...])(np.ones((2, 2)))

    def outer_sizes(x):
        return xm(lambda: nx.axis_index("i"), (), ["i"], axis_sizes={"i": 3})()

    with pytest.raises(errors.AxisNameShadowingError, match=r"'i'.*already bound by an enclosing nx.xmap"):
        xm(outer_sizes, ["i", ...], [...])(np.ones((2, 2)))


def test_unbound_axis_name_inside():
    with pytest.raises(errors.UnboundAxisError, match="'k'"):
        xm(lambda x: nx.psum(x, "k"), ["i", ...], ["i", ...])(np.ones(3))


def test_one_hot_and_random_size_mismatch_inside():
    # testOneHotAxisSizeMismatch, testSamplerSharding's error
    with pytest.raises(errors.AxisSizeError, match=r"axis i.*3 != 5"):
        xm(lambda _: nx.nn.one_hot(jnp.array([1, 2, 0]), 3, axis="i"), ["i", ...], ["i", ...])(np.ones(5))
    with pytest.raises(errors.AxisSizeError, match=r"axis i was specified as 4, but it really is 5"):
        xm(
            lambda: nx.random.normal(jax.random.key(0), (3,), named_shape={"i": 4}),
            (),
            [None, "i", ...],
            axis_sizes={"i": 5},
        )()


# ------------------------------------------------------------------------------------------------------
# Resources


def test_undefined_axis_resource():
    f = xm(lambda x: x, ["a", ...], ["a", ...], axis_resources={"a": "x"})
    with pytest.raises(
        errors.MissingResourceError,
        match=re.escape(
            "In-scope resources are insufficient to execute the xmapped function. The "
            "missing resources are: {'x'} (asked for 'x' by axis 'a'; in scope: no mesh"
        ),
    ):
        f(np.ones(4))
    with jax.set_mesh(mesh((2,), ("y",))):
        with pytest.raises(
            errors.MissingResourceError, match=r"missing resources are: \{'x'\}.*mesh axes \['y'\]"
        ):
            f(np.ones(4))


def test_missing_resources_are_listed_sorted():
    # one order whatever the hash seed, so the message reads the same on every run
    names = "fedcba"
    f = xm(lambda *xs: xs, [[n, ...] for n in names], [[n, ...] for n in names],
           axis_resources={n: f"r{i}" for i, n in enumerate(names)} | {"a": "r0"})
    with pytest.raises(errors.MissingResourceError,
                       match=re.escape("missing resources are: {'r0', 'r1', 'r2', 'r3', 'r4'} (asked for "
                                       "'r0' by axes 'f', 'a'; 'r1' by axis 'e'; 'r2' by axis 'd';")):
        f(*[np.ones(2)] * len(names))


def test_axes_not_divisible_by_resources():
    with jax.set_mesh(mesh((2, 2), ("x", "y"))):
        with pytest.raises(
            errors.DivisibilityError,
            match=re.escape(
                "Size of axis i (5) is not divisible by the total number of resources assigned to this "
                "axis (('x', 'y'), 4 in total). Axis 'i' has size 5 (given in axis_sizes), split over "
                "x=2, y=2."
            ),
        ):
            xm(
                lambda: nx.axis_index("i"),
                (),
                ["i", ...],
                axis_sizes={"i": 5},
                axis_resources={"i": ("x", "y")},
            )()
        # for sizes inferred from arguments too (a bare AssertionError in xmap)
        with pytest.raises(errors.DivisibilityError,
                           match=r"Axis 'i' has size 5 \(inferred from argument 0\), split over x=2"):
            xm(lambda x: x, ["i", ...], ["i", ...], axis_resources={"i": "x"})(np.ones(5))
    with pytest.raises(errors.DivisibilityError,
                       match=r"Axis 'i' has size 6 \(inferred from argument 0\), split over l=4"):
        with nx.serial_loop("l", 4):
            xm(lambda x: x, ["i"], ["i"], axis_resources={"i": "l"})(np.ones(6))


def _conflict_cases():
    return {
        "args": (
            lambda x: x,
            ["a", "b", ...],
            ["a", "b", ...],
            (np.ones((2, 2)),),
            r"Axes `a` and `b` are both mapped to the resource `x`, but they coincide in the named_shape of "
            r"an input to an xmapped function <lambda> \(xmap called at .*test_xmap_errors.py:\d+ "
            r"\(test_resource_conflicts\)\): argument 0 carries both",
        ),
        "inner": (
            lambda x, y: x + y,
            (["a", ...], ["b", ...]),
            ["a", "b", ...],
            (np.ones(2), np.ones(2)),
            r"Axes `a` and `b` are both mapped to the resource `x`, but they coincide in the named_shape of "
            r"a value returned from a primitive add created at .*test_xmap_errors.py",
        ),
        "inner_einsum": (
            lambda x, y: nx.einsum("{a},{b}->{a,b}", x, y),
            (["a", ...], ["b", ...]),
            ["a", "b", ...],
            (np.ones(2), np.ones(2)),
            r"Axes `a` and `b` are both mapped to the resource `x`, but they coincide in the named_shape of "
            r"a value returned from a primitive einsum created at .*test_xmap_errors.py",
        ),
        "out": (
            lambda x, y: (x, y),
            (["a", ...], ["b", ...]),
            (["a", "b", ...], ["b", ...]),
            (np.ones(2), np.ones(2)),
            r"One of xmapped function \(<lambda>\) outputs is broadcast along axis `b` which is assigned to "
            r"resources `x`, but the output is already partitioned along `x`, because its named shape "
            r"contains `a`\. It is output \[0\]",
        ),
    }


@pytest.mark.parametrize("case", ["args", "inner", "inner_einsum", "out"])
def test_resource_conflicts(case):
    f, ia, oa, args, msg = _conflict_cases()[case]
    with jax.set_mesh(mesh((2,), ("x",))):
        with pytest.raises(errors.ResourceConflictError, match=msg) as caught:
            xm(f, ia, oa, axis_resources={"a": "x", "b": "x"})(*args)
    # xmap raised a TypeError here: xmap-era `except TypeError` clauses still catch it, and so does ValueError
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("case", ["args", "inner", "out"])
def test_resource_conflicts_across_nesting(case):
    # testResourceConflictNest*: 'i' (outer) and 'j' (inner) both on 'x'
    x = np.ones((2, 2))

    def outer_body(v):
        if case == "args":
            return xm(lambda w: w, ["j", ...], ["j", ...], axis_resources={"j": "x"})(v)
        if case == "inner":
            return xm(lambda w, u: w + u, ([...], ["j", ...]), ["j", ...], axis_resources={"j": "x"})(
                v, jnp.ones(2)
            )
        return xm(lambda w: w, [...], ["j", ...], axis_sizes={"j": 2}, axis_resources={"j": "x"})(v)

    msg = {
        "args": r"Axes `i` and `j` are both mapped to the resource `x`, but they coincide in the named_shape "
        r"of an input to an xmapped function <lambda> \(xmap called at .*\): argument 0 carries both",
        "inner": r"Axes `i` and `j` .*resource `x`.*value returned from a primitive add created at",
        "out": r"broadcast along axis `j` which is assigned to resources `x`.*contains `i`",
    }[case]
    with jax.set_mesh(mesh((2,), ("x",))):
        with pytest.raises(errors.ResourceConflictError, match=msg):
            xm(outer_body, ["i", ...], ["i", ...], axis_resources={"i": "x"})(x)


def test_resource_conflict_args_loop():
    with nx.serial_loop("l", 2):
        with pytest.raises(
            errors.ResourceConflictError,
            match=r"Axes `a` and `b` are both mapped to the resource `l`, but they coincide",
        ):
            xm(lambda x: x, ["a", "b", ...], ["a", "b", ...], axis_resources={"a": "l", "b": "l"})(
                np.ones((2, 2))
            )


@pytest.mark.parametrize("body", ["psum", "sum", "axis_index", "one_hot", "random"])
def test_loop_axis_cannot_be_referenced_in_the_body(body):
    # testLoopCollectives
    # the message starts with the operation that referred to the loop axis
    where, fn = {
        "psum": ("nx.psum", lambda x: nx.psum(x, "i")),
        "sum": ("nx.sum", lambda x: nx.sum(x, "i")),
        "axis_index": ("nx.axis_index", lambda x: x + nx.axis_index("i")),
        "one_hot": ("nx.nn.one_hot", lambda x: x + nx.nn.one_hot(jnp.array(1), 8, axis="i")),
        "random": ("nx.random.normal",
                   lambda x: x + nx.random.normal(jax.random.key(0), named_shape={"i": 8})),
    }[body]
    with pytest.raises(
        errors.LoopAxisError,
        match=rf"^{re.escape(where)}: Named axes with loop resources assigned to them cannot be referenced "
        r"inside the xmapped computation \(e\.g\. in collectives\), but `i` violates that rule: the body "
        r"sees one chunk of 'i' at a time",
    ) as caught:
        xm(fn, ["i"], [...], axis_resources={"i": nx.SerialLoop(2)})(np.ones(8))
    # xmap raised a RuntimeError here
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, errors.ResourceError)


def test_a_jax_lax_collective_over_a_bound_name_binds():
    # as in xmap, a positional body sees the map's names as JAX axis names
    x = jnp.arange(3.0)
    np.testing.assert_allclose(nx.xmap(lambda v: jax.lax.psum(v, "i"), ["i", ...], [...])(x), 3.0)
    np.testing.assert_allclose(nx.xmap(lambda v: v - jax.lax.pmean(v, "i"), ["i", ...], ["i", ...])(x),
                               x - 1.0)
    # xmap raised a NameError for unbound axis names; nx's error is one too
    with pytest.raises(NameError):
        nx.xmap(lambda v: nx.psum(v, "k"), ["i", ...], ["i", ...])(x)


def test_resource_conflicts_are_jax_type_errors():
    # xmap raised jax.errors.JAXTypeError for conflicts: except clauses naming it still catch nx's error
    import pickle

    with jax.set_mesh(mesh((2,), ("x",))):
        with pytest.raises(jax.errors.JAXTypeError) as caught:
            xm(lambda x: x, ["a", "b", ...], ["a", "b", ...], axis_resources={"a": "x", "b": "x"})(
                np.ones((2, 2)))
    e = caught.value
    assert isinstance(e, errors.ResourceConflictError) and isinstance(e, ValueError)
    # the message is nx's alone (no link to jax's page of its own errors), and survives pickling
    assert "docs.jax.dev" not in str(e) and str(e).startswith("nx.xmap: ")
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is type(e) and str(again) == str(e)


# ------------------------------------------------------------------------------------------------------
# xmap's own sentences: each message contains the sentence xmap raised (its tests matched on it), after
# the "nx.xmap" prefix and before nx's added detail, and the error is also of xmap's class


def _mesh_call(shape, names, f, *args, legacy=False):
    def run():
        devices = mesh(shape, names)
        with devices if legacy else jax.set_mesh(devices):
            return f(*args)

    return run


def _loop_call(f, *args):
    def run():
        with nx.serial_loop("l", 2):
            return f(*args)

    return run


def _changes_mesh():
    def body(v):
        with Mesh(np.empty((), dtype=object), ()):
            return xm(lambda w: w, {0: "b"}, {0: "b"})(v)

    # entered as xmap's code entered meshes (`with Mesh(...)`), around the map and inside its body
    return _mesh_call((2,), ("x",), xm(body, {0: "a"}, {0: "a"}, axis_resources={"a": "x"}),
                      jnp.ones((2, 5, 6)), legacy=True)


_TREE = [["x"], ["x"], ["x"]]
_XMAP_SENTENCES = {
    "repeated_resource": (
        lambda: xm(lambda v: v, ["a", ...], ["a", ...], axis_resources={"a": ("x", "x")}),
        ValueError, "Resource assignment of a single axis must be a tuple of distinct resources, but "
        "specified ('x', 'x') for axis a"),
    "missing_resource": (
        _mesh_call((2,), ("y",), xm(lambda v: v, ["a", ...], ["a", ...], axis_resources={"a": "x"}),
                   jnp.zeros(4)),
        ValueError, "In-scope resources are insufficient to execute the xmapped function. The missing "
        "resources are: {'x'}"),
    "mesh_change": (_changes_mesh(), RuntimeError, "Changing the physical mesh is not allowed"),
    "empty_arguments": (
        lambda: xm(lambda v: v, ["i", ...], ["i", ...])({}), ValueError, "Failed to infer size of axes: i."),
    "not_divisible": (
        _mesh_call((2, 2), ("x", "y"), xm(lambda: 0.0, (), ["i", ...], axis_sizes={"i": 5},
                                          axis_resources={"i": ("x", "y")})),
        ValueError, "Size of axis i (5) is not divisible by the total number of resources assigned to this "
        "axis (('x', 'y'), 4 in total)"),
    "inconsistent_sizes": (
        lambda: xm(lambda a, b: a, (["i", ...], ["i", ...]), ["i", ...])(jnp.arange(5), jnp.arange(6)),
        ValueError, "The size of axis i was previously inferred to be 5, but found an argument of shape (6,) "
        "with in_axes specification ['i', ...]. Shape mismatch occurs in dimension 0: 6 != 5"),
    "inconsistent_with_axis_sizes": (
        lambda: xm(lambda v: v, ["i", ...], ["i", ...], axis_sizes={"i": 5})(jnp.arange(6)),
        ValueError, "The size of axis i was previously inferred to be 5, but found an argument of shape (6,) "
        "with in_axes specification ['i', ...]. Shape mismatch occurs in dimension 0: 6 != 5"),
    "in_axes_rank": (
        lambda: xm(lambda v: v, ["i", "j", ...], ["j", "i", ...])(jnp.ones(5)),
        ValueError, "One of xmap arguments has an in_axes specification of ['i', 'j', ...], which implies "
        "that it has at least 2 dimensions, but the argument has rank 1"),
    "out_axes_rank": (
        lambda: xm(lambda v: v, ["i", ...], {1: "i"})(jnp.ones(5)),
        ValueError, "One of xmap outputs has an out_axes specification of {1: 'i'}, which requires the "
        "result of the xmapped function to have at least 1 positional dimensions, but it only has 0"),
    "negative_in_axes": (
        lambda: xm(lambda v: v, {-1: "i"}, {0: "i"})(jnp.ones(5)),
        ValueError, "xmap doesn't support negative axes in in_axes"),
    "negative_out_axes": (
        lambda: xm(lambda v: v, {0: "i"}, {-1: "i"})(jnp.ones(5)),
        ValueError, "xmap doesn't support negative axes in out_axes"),
    "list_rank_argument": (
        lambda: xm(lambda v: v, ["i", None], ["i", None])(jnp.ones(5)),
        ValueError, "xmap argument has an in_axes specification of ['i', None], which asserts that it should "
        "be of rank 2, but the argument has rank 1 (and shape (5,))"),
    "list_rank_output": (
        lambda: xm(lambda v: v.reshape((2, 2)), ["i", None], ["i", None])(jnp.ones((5, 4))),
        ValueError, "xmap output has an out_axes specification of ['i', None], which asserts that it should "
        "be of rank 2, but the output has rank 3 (and shape (5, 2, 2))"),
    "extra_mapped_axes": (
        lambda: xm(lambda a, b: a + b, (["a", ...], ["b", ...]), ["a", ...])(jnp.ones((4, 3)),
                                                                             jnp.ones((2, 3))),
        ValueError, "One of xmap results has an out_axes specification of ['a', ...], but is actually mapped "
        "along more axes defined by this xmap call: b"),
    "undefined_out_axis": (
        lambda: xm(lambda a, b: a + b, (["a", ...], ["b", ...]), ["c", ...]),
        ValueError, "All axis names appearing in out_axes must also appear in in_axes or axis_sizes, but the "
        "following are missing: {'c'}"),
    "undefined_resourced_axis": (
        lambda: xm(lambda a, b: a + b, (["a", ...], ["a", ...]), ["a", ...], axis_resources={"b": "x"}),
        ValueError, "All axes that were assigned resources have to appear in in_axes or axis_sizes, but the "
        "following are missing: {'b'}"),
    "conflict_in_arguments": (
        _mesh_call((2,), ("x",), xm(lambda v: jax.lax.psum(v, ("a", "b")), ["a", "b"], [],
                                    axis_resources={"a": "x", "b": "x"}), np.arange(16).reshape(4, 4)),
        jax.errors.JAXTypeError, "Axes `a` and `b` are both mapped to the resource `x`, but they coincide in "
        "the named_shape of an input to an xmapped function <lambda>"),
    "conflict_inside": (
        _mesh_call((2,), ("x",), xm(lambda a, b: a + b, (["a", ...], ["b", ...]), ["a", "b", ...],
                                    axis_resources={"a": "x", "b": "x"}), np.ones((4, 3)), np.ones((2, 3))),
        jax.errors.JAXTypeError, "Axes `a` and `b` are both mapped to the resource `x`, but they coincide in "
        "the named_shape of a value returned from a primitive add created at"),
    "conflict_in_outputs": (
        _mesh_call((2,), ("x",), xm(lambda a, b: a, (["a", ...], ["b", ...]), ["a", "b", ...],
                                    axis_resources={"a": "x", "b": "x"}), np.ones((4, 3)), np.ones((2, 3))),
        jax.errors.JAXTypeError, "One of xmapped function (<lambda>) outputs is broadcast along axis `b` "
        "which is assigned to resources `x`, but the output is already partitioned along `x`, because its "
        "named shape contains `a`"),
    "conflict_on_a_loop": (
        _loop_call(xm(lambda v: v, ["a", "b"], ["a", "b"], axis_resources={"a": "l", "b": "l"}),
                   np.ones((4, 4))),
        jax.errors.JAXTypeError, "Axes `a` and `b` are both mapped to the resource `l`, but they coincide in "
        "the named_shape of an input to an xmapped function <lambda>"),
    "loop_axis_in_a_collective": (
        _loop_call(xm(lambda v: jax.lax.psum(v, "i"), ["i"], [], axis_resources={"i": "l"}), np.arange(16.0)),
        RuntimeError, "Named axes with loop resources assigned to them cannot be referenced inside the "
        "xmapped computation (e.g. in collectives), but `i` violates that rule"),
    "in_axes_tree_prefix": (
        lambda: xm(lambda a, b: a, _TREE, _TREE)(jnp.ones(4), jnp.ones(4)),
        ValueError, "xmap in_axes specification must be a tree prefix of the corresponding value, got "
        "specification (['x'], ['x'], ['x']) for value tree PyTreeDef((*, *)). Note that xmap in_axes that "
        "are non-trivial pytrees should always be wrapped in a tuple representing the argument list."),
    "out_axes_tree_prefix": (
        lambda: xm(lambda v: v, (_TREE,), (_TREE, ["x"]))([jnp.ones(4)] * 3),
        ValueError, "xmap out_axes specification must be a tree prefix of the corresponding value, got "
        "specification ([['x'], ['x'], ['x']], ['x']) for value tree PyTreeDef([*, *, *])."),
}


@pytest.mark.parametrize("case", sorted(_XMAP_SENTENCES))
def test_messages_contain_xmaps_sentence(case):
    call, xmap_class, sentence = _XMAP_SENTENCES[case]
    with pytest.raises(errors.NamedAxisError) as caught:
        call()
    message = str(caught.value)
    assert message.startswith("nx.xmap"), message
    assert sentence in message, message
    assert isinstance(caught.value, xmap_class)


# ------------------------------------------------------------------------------------------------------
# Conflicts across nested maps whose bodies are positional (jax.lax.axis_index keeps them positional:
# nx cannot call them on NamedArrays instead): still ResourceConflictErrors naming both names and the
# mesh axis, never jax's internal errors about spmd_axis_name or duplicate mesh axes in a spec


def _nested(inner_body, inner_in, inner_out, inner_mesh_axis="x", **inner_kw):
    inner = xm(inner_body, inner_in, inner_out, axis_resources={"i": inner_mesh_axis}, **inner_kw)
    return xm(inner, ["j", ...], ["j", ...], axis_resources={"j": "x"})


@pytest.mark.parametrize("entered", ["set_mesh", "legacy"])
def test_nested_conflict_made_inside_a_positional_inner_body(entered):
    # the inner map computes a value varying along 'i' from one varying along the outer 'j'; both on 'x'
    h = _nested(lambda v: jax.lax.axis_index("i") + v, [], ["i"], axis_sizes={"i": 4})
    devices = mesh((2,), ("x",))
    with jax.set_mesh(devices) if entered == "set_mesh" else devices:
        with pytest.raises(errors.ResourceConflictError) as caught:
            h(np.arange(4, dtype=np.int32))
    message = str(caught.value)
    assert message.startswith("nx.xmap: Axes `i` and `j` are both mapped to the resource `x`, but they "
                              "coincide in the named_shape of a value returned from an xmapped function "
                              "<lambda>"), message
    assert "vmap spmd_axis_name" not in message.splitlines()[0]
    assert isinstance(caught.value, jax.errors.JAXTypeError)


def test_nested_conflicts_at_a_positional_inner_maps_edges():
    with jax.set_mesh(mesh((2,), ("x",))):
        # an argument of the inner map varying along 'j' and mapped along 'i'
        args = _nested(lambda v: v + jax.lax.axis_index("i"), ["i"], ["i"])
        with pytest.raises(errors.ResourceConflictError,
                           match=r"Axes `i` and `j` are both mapped to the resource `x`, but they coincide "
                                 r"in the named_shape of an input to an xmapped function <lambda>"):
            args(np.arange(16.0).reshape(4, 4))
        # an output of the inner map broadcast along 'i' while varying along 'j'
        out = _nested(lambda v: v + 0 * jax.lax.axis_index("i"), [], ["i"], axis_sizes={"i": 4})
        with pytest.raises(errors.ResourceConflictError, match=r"Axes `i` and `j` .* resource `x`"):
            out(np.arange(4.0))


def test_a_positional_bodys_output_carrying_two_names_of_one_mesh_axis():
    # xmap reported it at the add; a positional body's jax operations are jax's, so nx reports it where the
    # value leaves the body, naming both names and the mesh axis (not jax's duplicate-spec error)
    f = xm(lambda a, b: a + b + 0 * jax.lax.axis_index("a"), (["a", ...], ["b", ...]), ["a", "b", ...],
           axis_resources={"a": "x", "b": "x"})
    with jax.set_mesh(mesh((2,), ("x",))):
        with pytest.raises(errors.ResourceConflictError,
                           match=r"Axes `a` and `b` are both mapped to the resource `x`, but they coincide "
                                 r"in the named_shape of a value returned from an xmapped function <lambda> "
                                 r".*: the output carries both"):
            f(np.ones(4), np.ones(2))


def test_nested_positional_maps_on_different_mesh_axes_run():
    # no conflict where the names are on different mesh axes: the values are the plain ones
    h = _nested(lambda v: jax.lax.axis_index("i") + v, [], ["i"], inner_mesh_axis="y", axis_sizes={"i": 4})
    with jax.set_mesh(mesh((2, 2), ("x", "y"))):
        out = h(np.arange(4, dtype=np.int32))
    np.testing.assert_array_equal(out, np.arange(4)[:, None] + np.arange(4)[None, :])


def test_nested_conflict_names_the_shared_mesh_axis_of_several():
    # the inner name is split over ('y', 'x'), the enclosing one over 'x': they meet on 'x'
    h = _nested(lambda v: jax.lax.axis_index("i") + v, [], ["i"], inner_mesh_axis=("y", "x"),
                axis_sizes={"i": 4})
    with jax.set_mesh(mesh((2, 2), ("x", "y"))):
        with pytest.raises(errors.ResourceConflictError,
                           match=r"Axes `i` and `j` are both mapped to the resource `x`, but they coincide "):
            h(np.arange(4, dtype=np.int32))
