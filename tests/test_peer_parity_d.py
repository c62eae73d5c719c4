"""What users of the peer libraries expect of foreign functions along a name, array-valued options along a
name, padded dynamic slices and counting a tree of NamedArrays, against positional NumPy/jax.

* ``nx.along(name, f)``: ``f`` written for a trailing positional axis (optax losses, ``jax.nn.softmax``)
  runs along a named axis; batch names map; outputs that kept the axis get the name back;
* ``nx.nmap`` of such an ``f`` fails with an error that points to ``nx.along``;
* ``nx.roll`` / ``nx.repeat`` along a name with array-valued shifts and counts (traced under jit);
* ``nx.dynamic_slice(..., fill_value=)``: an unclamped window whose outside reads ``fill_value``;
* ``x.named_size``, ``x.nbytes``, ``x.devices()``, ``x.is_fully_addressable``, ``nx.tree_map``,
  ``nx.tree_leaves``, ``nx.is_named``.

Values come in random storage orders and with random axis names; references see the logical layout
(positional axes first, then the names in a fixed order).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import logical_order, stored_randomly
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors

NAME = st.text("abcxyz_", min_size=1, max_size=4)


# --------------------------------------------------------------------------------------------------------
# 1. nx.along


def _cumsum_last(a):
    return jnp.cumsum(a, axis=-1)


def _logsumexp_last(a):
    return jax.nn.logsumexp(a, axis=-1)


def _center(a, scale):  # a positional function of two arguments, one of them without the core axis
    return (a - a.mean(axis=-1, keepdims=True)) * scale[..., None]


FUNCTIONS = {  # f, reference on the logical array with the core axis last, whether the axis is kept
    "softmax": (jax.nn.softmax, lambda a: np.asarray(jax.nn.softmax(a, axis=-1)), True),
    "logsumexp": (_logsumexp_last, lambda a: np.asarray(jax.nn.logsumexp(a, axis=-1)), False),
    "cumsum": (_cumsum_last, lambda a: np.cumsum(a, axis=-1), True),
}


@st.composite
def along_cases(draw):
    names = draw(st.lists(NAME, min_size=1, max_size=4, unique=True))
    core = draw(st.sampled_from(names))
    p = draw(st.integers(0, 1))
    sizes = [draw(st.integers(1, 4)) for _ in range(p + len(names))]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logical = rng.normal(size=sizes).astype(np.float32)
    x = stored_randomly(draw, logical, names)
    return x, logical, names, core, p, draw(st.sampled_from(sorted(FUNCTIONS)))


@settings(max_examples=15, deadline=None)
@given(along_cases())
def test_along_equals_the_positional_function_on_the_axis_moved_last(case):
    x, logical, names, core, p, fname = case
    f, ref, kept = FUNCTIONS[fname]
    batch = [n for n in names if n != core]
    # the reference: the core axis last, after the positional axes and the other names
    moved = np.moveaxis(logical, p + names.index(core), -1)
    want = ref(moved)
    for run in (nx.along(core, f), nx.jit(nx.along(core, f))):
        y = run(x)
        if kept:
            assert y.named_shape == x.named_shape and y.shape == x.shape
            got = logical_order(y, batch + [core])
        else:
            assert y.named_shape == {n: x.named_shape[n] for n in batch} and y.shape == x.shape
            got = logical_order(y, batch)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_along_passes_arguments_without_the_axis_through_and_maps_their_names(data):
    names = data.draw(st.lists(NAME, min_size=2, max_size=3, unique=True))
    core, batch = names[0], names[1:]
    sizes = [data.draw(st.integers(1, 4)) for _ in names]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    logical = rng.normal(size=sizes).astype(np.float32)
    scale_logical = rng.normal(size=sizes[1:]).astype(np.float32)
    x = stored_randomly(data.draw, logical, names)
    scale = stored_randomly(data.draw, scale_logical, batch)
    y = nx.along(core, _center)(x, scale)
    a = np.moveaxis(logical, 0, -1)  # (batch..., core)
    want = (a - a.mean(-1, keepdims=True)) * scale_logical[..., None]
    np.testing.assert_allclose(logical_order(y, batch + [core]), want, rtol=1e-5, atol=1e-5)


def test_along_runs_an_optax_loss_and_its_gradient_as_the_positional_model():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 11)).astype(np.float32)
    labels = rng.integers(0, 11, size=6)
    x = nx.wrap(jnp.asarray(logits.T), ["vocab", "batch"])  # stored vocab-major
    lab = nx.wrap(jnp.asarray(labels), ["batch"])
    loss = nx.along("vocab", optax.softmax_cross_entropy_with_integer_labels)
    want = optax.softmax_cross_entropy_with_integer_labels(jnp.asarray(logits), jnp.asarray(labels))
    np.testing.assert_allclose(nx.unwrap(loss(x, lab), ["batch"]), want, rtol=1e-6)
    g = nx.grad(lambda x: loss(x, lab).mean("batch"))(x)
    want_g = jax.grad(lambda a: optax.softmax_cross_entropy_with_integer_labels(a, jnp.asarray(labels))
                      .mean())(jnp.asarray(logits))
    np.testing.assert_allclose(nx.unwrap(g, ["batch", "vocab"]), want_g, rtol=1e-5, atol=1e-7)
    # the one-hot form: both arguments carry the axis
    onehot = nx.wrap(jax.nn.one_hot(jnp.asarray(labels), 11), ["batch", "vocab"])
    dense = nx.along("vocab", optax.softmax_cross_entropy)(x, onehot)
    np.testing.assert_allclose(nx.unwrap(dense, ["batch"]), want, rtol=1e-6)


def test_along_several_axes_decorator_and_keep():
    x = nx.wrap(jnp.arange(24.0).reshape(2, 3, 4), ["b", "h", "w"])

    @nx.along(("w", "h"))  # the axes arrive in the order given: (..., w, h)
    def last_two(a):
        assert a.shape == (4, 3)
        return a.T

    y = last_two(x)  # (h, w): ends in sizes (4, 3)? no: (3, 4), so it stays positional
    assert y.shape == (3, 4) and y.named_shape == {"b": 2}
    np.testing.assert_array_equal(np.asarray(y.unwrap(["b", ...])), np.asarray(x.unwrap("b", "h", "w")))
    same = nx.along(("w", "h"), lambda a: a * 2)(x)
    assert same.named_shape == x.named_shape and same.shape == ()
    # keep=False leaves the kept axes positional; keep=True insists on them
    kept_out = nx.along("w", jax.nn.softmax, keep=False)(x)
    assert kept_out.shape == (4,) and kept_out.named_shape == {"b": 2, "h": 3}
    with pytest.raises(errors.RankError, match="keep=True"):
        nx.along("w", jax.nn.logsumexp, keep=True)(x)
    # an output of the axis's size that is a reduction of a value with positional axes stays positional
    z = nx.wrap(jnp.ones((4, 2, 4)), [None, "b", "w"])
    r = nx.along("w", lambda a: a.sum(-1))(z)
    assert r.shape == (4,) and r.named_shape == {"b": 2}


def test_along_errors_name_the_axes_and_arguments():
    x = nx.wrap(jnp.ones((2, 3)), ["b", "v"])
    with pytest.raises(errors.UnboundAxisError, match=r"nx.along\('q', softmax\): no argument carries 'q'"):
        nx.along("q", jax.nn.softmax)(x)
    with pytest.raises(errors.AxisSpecError, match="argument 1 carries 'v' but not 'b'"):
        nx.along(("v", "b"), lambda a, c: a)(x, nx.wrap(jnp.ones(3), ["v"]))
    with pytest.raises(errors.AxisSizeError, match="'v' has size 3 in argument 0 but size 4 in argument 1"):
        nx.along("v", lambda a, c: a + c)(x, nx.wrap(jnp.ones(4), ["v"]))
    with pytest.raises(errors.AxisSpecError, match="axis takes an axis name"):
        nx.along(None, jax.nn.softmax)
    with pytest.raises(errors.DuplicateAxisError):
        nx.along(("v", "v"), jax.nn.softmax)
    with pytest.raises(TypeError, match="the function to run along"):
        nx.along("v", 3)


def test_nmap_of_a_function_along_an_axis_points_to_along():
    logits = nx.wrap(jnp.ones((4, 10)), ["batch", "vocab"])
    with pytest.raises(errors.PositionalAxisError, match=r"axis -1 is out of bounds.*nx.along\(name, f\)"):
        nx.nmap(jax.nn.softmax)(logits)
    # other errors of the function are not rewritten
    with pytest.raises(ValueError, match="boom") as info:
        nx.nmap(lambda a: (_ for _ in ()).throw(ValueError("boom")))(logits)
    assert not isinstance(info.value, errors.NamedAxisError)


# --------------------------------------------------------------------------------------------------------
# 2. Array-valued options along a name


@st.composite
def two_axis_cases(draw):
    names = draw(st.lists(NAME, min_size=2, max_size=2, unique=True))
    sizes = [draw(st.integers(1, 5)) for _ in names]
    logical = np.arange(np.prod(sizes), dtype=np.float32).reshape(sizes)
    return stored_randomly(draw, logical, names), logical, names


@settings(max_examples=15, deadline=None)
@given(two_axis_cases(), st.integers(-7, 7))
def test_roll_by_an_array_shift_along_a_name(case, shift):
    x, logical, names = case
    want = np.roll(logical, shift, axis=1)
    eager = nx.roll(x, jnp.asarray(shift), names[1])
    traced = nx.jit(lambda x, s: nx.roll(x, s, axis=names[1]))(x, jnp.asarray(shift))
    for y in (eager, traced):
        np.testing.assert_array_equal(logical_order(y, names), want)
    both = nx.roll(x, shift=jnp.asarray([shift, 1]), axis=(names[1], names[0]))
    np.testing.assert_array_equal(logical_order(both, names), np.roll(logical, (shift, 1), axis=(1, 0)))


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_repeat_by_array_counts_along_a_name(data):
    x, logical, names = data.draw(two_axis_cases())
    n = logical.shape[1]
    counts = np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    want = np.repeat(logical, counts, axis=1)
    y = nx.repeat(x, jnp.asarray(counts), axis=names[1])
    np.testing.assert_array_equal(logical_order(y, names), want)
    assert y.named_shape[names[1]] == int(counts.sum())
    np.testing.assert_array_equal(logical_order(nx.repeat(x, list(counts), axis=names[1]), names), want)
    # traced counts with the output size given: jnp.repeat's rule (padded with the last element's copies)
    total = int(counts.sum()) + 2
    traced = nx.jit(lambda x, c: nx.repeat(x, c, axis=names[1], total_repeat_length=total))(x, counts)
    ref = jnp.repeat(jnp.asarray(logical), jnp.asarray(counts), axis=1, total_repeat_length=total)
    np.testing.assert_array_equal(logical_order(traced, names), np.asarray(ref))


def test_array_options_errors():
    x = nx.wrap(jnp.ones((2, 3)), ["a", "h"])
    with pytest.raises(TypeError, match="traced repeats need total_repeat_length"):
        nx.jit(lambda x, r: nx.repeat(x, r, axis="h"))(x, jnp.array([1, 2, 1]))
    with pytest.raises(errors.PositionalMisuseError, match=r"option shift= has named axes 'a'.*nx.along"):
        nx.roll(x, nx.wrap(jnp.array([1, 2]), ["a"]), "h")


# --------------------------------------------------------------------------------------------------------
# 3. Dynamic slices that read past the ends


def _padded_window(a, axis, start, size, fill):
    n = a.shape[axis]
    idx = np.arange(start, start + size)
    out = np.take(a, np.clip(idx, 0, max(n - 1, 0)), axis=axis)
    outside = (idx < 0) | (idx >= n)
    shape = [1] * a.ndim
    shape[axis] = size
    return np.where(outside.reshape(shape), fill, out)


@settings(max_examples=25, deadline=None)
@given(two_axis_cases(), st.integers(-8, 8), st.integers(0, 5), st.booleans())
def test_dynamic_slice_with_fill_reads_fill_outside_the_axis(case, start, size, traced):
    x, logical, names = case
    size = min(size, logical.shape[1])
    want = _padded_window(logical, 1, start, size, -1.0)
    if traced:
        y = nx.jit(lambda x, i: nx.dynamic_slice(x, {names[1]: i}, {names[1]: size}, fill_value=-1))(x, start)
    else:
        y = nx.dynamic_slice(x, {names[1]: start}, {names[1]: size}, fill_value=-1.0)
    np.testing.assert_array_equal(logical_order(y, names), want)


def test_dynamic_slice_fill_with_named_starts_and_plain_arrays():
    x = nx.wrap(jnp.arange(12).reshape(3, 4), ["b", "seq"])
    starts = nx.wrap(jnp.array([-1, 0, 3]), ["b"])
    y = nx.dynamic_slice(x, {"seq": starts}, {"seq": 2}, fill_value=0)
    assert y.unwrap(["b", "seq"]).tolist() == [[0, 0], [4, 5], [11, 0]]
    np.testing.assert_array_equal(nx.dynamic_slice(jnp.arange(5), [3], [3], fill_value=9), [3, 4, 9])
    with pytest.raises(TypeError, match="fill_value must be a number"):
        nx.dynamic_slice(x, {"seq": 0}, {"seq": 2}, fill_value="x")
    with pytest.raises(errors.AxisSizeError, match="size 5 along axis 'seq', which has size 4"):
        nx.dynamic_slice(x, {"seq": 0}, {"seq": 5}, fill_value=0)


# --------------------------------------------------------------------------------------------------------
# 4. Counting and walking trees of NamedArrays


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_sizes_and_bytes_count_named_axes(data):
    names = data.draw(st.lists(NAME, min_size=0, max_size=3, unique=True))
    p = data.draw(st.integers(0, 2))
    sizes = [data.draw(st.integers(1, 4)) for _ in range(p + len(names))]
    dtype = data.draw(st.sampled_from([np.float32, np.int8, np.float16]))
    logical = np.zeros(sizes, dtype)
    x = stored_randomly(data.draw, logical, names)
    assert x.size == int(np.prod(sizes[:p]))
    assert x.named_size == int(np.prod(sizes[p:]))
    assert x.size * x.named_size == logical.size
    assert x.nbytes == logical.nbytes
    assert x.devices() == {jax.devices()[0]} and x.is_fully_addressable


def test_tree_map_and_leaves_stop_at_named_arrays():
    params = {"w": nx.zeros((), named_shape={"in": 3, "out": 2}),
              "b": nx.zeros((), named_shape={"out": 2}), "step": 7}
    assert nx.tree_map(lambda p: p.named_shape if nx.is_named(p) else p, params) == {
        "w": {"in": 3, "out": 2}, "b": {"out": 2}, "step": 7}
    named = [p for p in nx.tree_leaves(params) if nx.is_named(p)]
    assert sum(p.size * p.named_size for p in named) == 8
    # two trees, as jax.tree.map takes them: an optimizer-style update
    grads = nx.tree_map(lambda p: p + 1 if nx.is_named(p) else p, params)
    new = nx.tree_map(lambda p, g: p - 0.5 * g if nx.is_named(p) else p, params, grads)
    assert float(new["w"].sum(("in", "out"))) == -3.0
    # plain jax.tree.map reaches the storage array, which is what tree_map avoids
    assert not any(nx.is_named(v) for v in jax.tree.leaves(params))
