"""Trace-time plans: what a traced operation decided from names, abstract values and the environment is kept,
and a second trace of the same layout gets the same values, the same errors and the jaxpr positional code
would give.

A plan is keyed on everything its decision depends on: names, shapes, dtypes (abstract values), the axis
environment (rules, bound names) and NumPy's rank promotion. A call that fails leaves no plan, and
``nx.clear_caches()`` empties them.
"""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import namedarray as nx
from namedarray import errors
from namedarray.core import caches, kernels


def _data(v):
    return v.data if isinstance(v, nx.NamedArray) else v


def test_a_traced_layer_gives_the_jaxpr_positional_code_gives():
    """Broadcasting a bias by name, a named dot and a reduction: the same equations as jnp's, on the first
    trace and on the second (from the plans)."""
    h, w, b = jnp.ones((4, 8)), jnp.ones((8, 3)), jnp.arange(3.0)

    def named(h, w, b):
        hn, wn = nx.wrap(h, ["tp_batch", "tp_in"]), nx.wrap(w, ["tp_in", "tp_out"])
        out = nx.dot(hn, wn, "tp_in") + nx.wrap(b, ["tp_out"])
        return nx.sum(out * 2, "tp_out").unwrap(["tp_batch"])

    def positional(h, w, b):
        return jnp.sum((h @ w + b) * 2, axis=1)

    want = str(jax.make_jaxpr(positional)(h, w, b))
    assert str(jax.make_jaxpr(named)(h, w, b)) == want
    assert str(jax.make_jaxpr(named)(h, w, b)) == want
    np.testing.assert_array_equal(jax.jit(named)(h, w, b), positional(h, w, b))


def test_another_shape_of_a_planned_layout_is_checked_again():
    a = nx.wrap(jnp.ones((2, 3)), ["tp_x", "tp_y"])
    jax.jit(lambda a, b: a + b)(a, nx.wrap(jnp.ones(3), ["tp_y"]))  # planned
    with pytest.raises(errors.AxisSizeError, match="tp_y"):
        jax.jit(lambda a, b: a + b)(a, nx.wrap(jnp.ones(4), ["tp_y"]))
    w = nx.wrap(jnp.ones((3, 5)), ["tp_y", "tp_z"])
    jax.jit(lambda a, w: nx.dot(a, w, "tp_y"))(a, w)
    with pytest.raises(errors.AxisSizeError, match="tp_y"):
        jax.jit(lambda a, w: nx.dot(a, w, "tp_y"))(a, nx.wrap(jnp.ones((4, 5)), ["tp_y", "tp_z"]))


def test_a_failed_trace_leaves_no_plan():
    a = nx.wrap(jnp.ones((2, 3)), ["tf_x", "tf_y"])
    bad = nx.wrap(jnp.ones(4), ["tf_y"])
    jax.tree_util.tree_flatten_with_path((a, bad))  # the arguments' path keys (a trace flattens them first)
    before = len(kernels.plans)
    for _ in range(2):  # the same error both times: nothing the first failure did stays behind
        with pytest.raises(errors.AxisSizeError, match="tf_y"):
            jax.make_jaxpr(lambda a, b: a + b)(a, bad)
        with pytest.raises(errors.AxisSpecError, match="tf_z"):
            jax.make_jaxpr(lambda a: nx.dot(a, a, "tf_z"))(a)
        with pytest.raises(errors.UnboundAxisError, match="tf_z"):
            jax.make_jaxpr(lambda a: nx.sum(a, "tf_z"))(a)
    assert len(kernels.plans) == before


def test_plans_follow_the_environment():
    """The same layout under two bindings of a name it lacks: each reduction means what its own binding
    says (a sum over a bound name multiplies by its size)."""
    x = nx.wrap(jnp.ones(3), ["te_a"])

    def total(x):
        return nx.sum(x, ("te_a", "te_bound"))

    with nx.env.bind({"te_bound": 2}):
        two = jax.make_jaxpr(total)(x)
    with nx.env.bind({"te_bound": 5}):
        five = jax.make_jaxpr(total)(x)
    assert float(jax.core.eval_jaxpr(two.jaxpr, two.consts, x.data)[0]) == 6.0
    assert float(jax.core.eval_jaxpr(five.jaxpr, five.consts, x.data)[0]) == 15.0


def test_rank_promotion_raise_still_aligns_by_name():
    """With rank promotion refused, a missing leading name is laid out by nx itself (equal ranks reach the
    operation), also where the same layout was planned while promotion was allowed."""
    a = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["tr_x", "tr_y"])
    b = nx.wrap(jnp.arange(3.0), ["tr_y"])
    f = jax.jit(lambda a, b: (a + b).unwrap(["tr_x", "tr_y"]))
    allowed = f(a, b)
    with jax.numpy_rank_promotion("raise"):
        refused = jax.jit(lambda a, b: (a + b).unwrap(["tr_x", "tr_y"]))(a, b)
    np.testing.assert_array_equal(allowed, refused)
    np.testing.assert_array_equal(refused, np.arange(6.0).reshape(2, 3) + np.arange(3.0))


def test_clear_caches_empties_the_plans():
    x = nx.wrap(jnp.ones((2, 3)), ["tc_a", "tc_b"])
    jax.make_jaxpr(lambda v: nx.sum(v + 1, "tc_b"))(x)
    assert caches.sizes()["trace-time plans"] > 0
    nx.clear_caches()
    assert caches.sizes()["trace-time plans"] == 0


def test_plans_stay_within_their_bound():
    old = kernels.plans.resize(4)
    try:
        for i in range(10):
            x = nx.wrap(jnp.ones((2, 3)), [f"tb_a{i}", f"tb_b{i}"])
            jax.make_jaxpr(lambda v: v * 2)(x)
        assert len(kernels.plans) <= 4
    finally:
        kernels.plans.resize(old)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_broadcasting_by_name_matches_numpy_whatever_the_sizes(data):
    """Operands that lack names, with sizes of 1 among them (where an added axis cannot be told from an
    axis the operand has by its size), give NumPy's broadcast of the aligned arrays, eager and traced, with
    positional axes in front or without."""
    names = data.draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True))
    sizes = {n: data.draw(st.integers(1, 3)) for n in names}
    positional = data.draw(st.sampled_from([(), (2,), (1,)]))
    operands, aligned = [], []
    for _ in range(data.draw(st.integers(2, 3))):
        keep = len(names) if not operands else data.draw(st.integers(0, len(names)))  # the first has all
        own = data.draw(st.permutations(names))[:keep]
        lead = data.draw(st.sampled_from([(), positional]))
        x = np.random.default_rng(len(operands)).normal(size=lead + tuple(sizes[n] for n in own))
        operands.append(nx.wrap(jnp.asarray(x, jnp.float32), [*(None,) * len(lead), *own]) if own
                        else jnp.asarray(x, jnp.float32))
        # the same array laid out as (positional axes, names), size 1 where it lacks a name
        order = [n for n in names if n in own]
        y = np.moveaxis(x, [len(lead) + own.index(n) for n in order],
                        range(len(lead), len(lead) + len(order))) if own else x
        aligned.append(y.reshape(lead + tuple(sizes[n] if n in own else 1 for n in names)))
    rank = max(a.ndim - len(names) for a in aligned)
    want = sum(a.reshape((1,) * (rank + len(names) - a.ndim) + a.shape) for a in aligned)

    def add(*vs):
        out = vs[0]
        for v in vs[1:]:
            out = out + v
        return out

    for got in (add(*operands), jax.jit(add)(*operands), jax.jit(add)(*operands)):
        assert set(got.names) == set(names)
        spec = [*(None,) * rank, *names]
        np.testing.assert_allclose(np.asarray(got.unwrap(spec)), want, rtol=1e-5, atol=1e-5)


def _traced_twice(f, a):
    """``f(a)`` from two fresh traces (the second finds the plans the first left), each evaluated primitive
    by primitive: the traced programs' values without compiling each whole."""
    out = []
    for _ in range(2):
        closed, shape = jax.make_jaxpr(lambda v: f(v), return_shape=True)(a)
        leaves = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, a)
        out.append(jax.tree.unflatten(jax.tree.structure(shape), leaves))
    return out


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_traced_reductions_by_name_match_numpy_on_every_trace(data):
    """A reduction over one name (the form with its own kernel index: ``x.sum("b")``, ``nx.max(x, "b")``),
    traced twice in each storage order, the second time from its plan, with and without keepdims and a
    positional axis in front: NumPy's answer on the aligned array every time."""
    names = data.draw(st.lists(st.sampled_from("pqrs"), min_size=1, max_size=3, unique=True))
    sizes = {n: data.draw(st.integers(1, 3)) for n in names}
    lead = data.draw(st.sampled_from([(), (2,)]))
    over = data.draw(st.sampled_from(names))
    keepdims = data.draw(st.booleans())
    fn, ref = data.draw(st.sampled_from([(nx.sum, np.sum), (nx.mean, np.mean), (nx.max, np.max),
                                         (nx.min, np.min)]))
    base = np.random.default_rng(0).normal(size=lead + tuple(sizes[n] for n in names)).astype(np.float32)
    want = ref(base, axis=len(lead) + names.index(over), keepdims=keepdims)
    if keepdims:  # keepdims keeps positional axes only: the reduced name leaves the named shape
        want = np.squeeze(want, axis=len(lead) + names.index(over))
    rest = [n for n in names if n != over]
    for _ in range(2):  # every storage order, each traced twice (the second from its plan)
        order = data.draw(st.permutations(names))
        stored = np.moveaxis(base, [len(lead) + names.index(n) for n in order],
                             range(len(lead), len(lead) + len(order)))
        spec = [*(None,) * len(lead), *order]  # named inside the trace: a jit argument would arrive in
        # its boundary order, the same for every storage order
        forms = [lambda v: fn(v, over, keepdims=keepdims)]
        if fn is nx.sum:
            forms.append(lambda v: v.sum(over, keepdims=keepdims))
        for f in forms:
            traced = _traced_twice(lambda a, f=f, spec=spec: f(nx.wrap(a, spec)), jnp.asarray(stored))
            for got in (*traced, f(nx.wrap(jnp.asarray(stored), spec))):
                assert set(got.names) == set(rest)
                np.testing.assert_allclose(np.asarray(got.unwrap([*(None,) * len(lead), *rest])), want,
                                           rtol=1e-5, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_traced_softmax_by_name_matches_numpy_on_every_trace(data):
    """softmax and log_softmax over a name, traced twice in each storage order (the second time from the
    plan of its storage axes): NumPy's answer on the aligned array every time."""
    names = data.draw(st.lists(st.sampled_from("pqr"), min_size=1, max_size=3, unique=True))
    sizes = {n: data.draw(st.integers(1, 3)) for n in names}
    over = data.draw(st.sampled_from(names))
    log = data.draw(st.booleans())
    base = np.random.default_rng(1).normal(size=tuple(sizes[n] for n in names)).astype(np.float32)
    i = names.index(over)
    shifted = base - base.max(axis=i, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=i, keepdims=True))
    want = shifted - lse if log else np.exp(shifted - lse)
    fn = nx.nn.log_softmax if log else nx.nn.softmax
    for _ in range(2):
        order = data.draw(st.permutations(names))
        stored = np.transpose(base, [names.index(n) for n in order])
        traced = _traced_twice(lambda a, order=order: fn(nx.wrap(a, list(order)), axis=over),
                               jnp.asarray(stored))
        for got in (*traced, fn(nx.wrap(jnp.asarray(stored), list(order)), axis=over)):
            np.testing.assert_allclose(np.asarray(got.unwrap(names)), want, rtol=1e-5, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_named_constant_closed_over_aligns_by_name_on_every_trace(data):
    """A concrete NamedArray the traced function closes over (a bias captured, not passed) is aligned by
    name as a traced operand is, from the plan on a later trace, whatever the storage order of each."""
    names = data.draw(st.lists(st.sampled_from("pqr"), min_size=2, max_size=3, unique=True))
    sizes = {n: data.draw(st.integers(1, 3)) for n in names}
    rng = np.random.default_rng(2)
    base = rng.normal(size=tuple(sizes[n] for n in names)).astype(np.float32)
    own = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
    const = rng.normal(size=tuple(sizes[n] for n in own)).astype(np.float32)
    aligned = np.transpose(const, [own.index(n) for n in names if n in own]).reshape(
        tuple(sizes[n] if n in own else 1 for n in names))
    want = base * 2 + aligned
    for _ in range(3):  # storage orders of the traced value and of the constant, each traced twice
        order = data.draw(st.permutations(names))
        c_order = data.draw(st.permutations(own))
        c = nx.wrap(jnp.asarray(np.transpose(const, [own.index(n) for n in c_order])), list(c_order))
        stored = jnp.asarray(np.transpose(base, [names.index(n) for n in order]))
        for got in _traced_twice(lambda a, order=order, c=c: nx.wrap(a, list(order)) * 2 + c, stored):
            np.testing.assert_allclose(np.asarray(got.unwrap(names)), want, rtol=1e-6, atol=1e-6)
