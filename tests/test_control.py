"""Control flow in ``nx.lax``: loop carries and branch outputs broadcast by name (xmap's behaviour), a name
with two sizes is an ``nx.errors`` error, and everything else is still ``jax.lax``'s."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors


def _dense(x, order):
    return np.asarray(x.unwrap([n for n in order if n in x.named_shape] + [...]))


# --------------------------------------------------------------------------------------------------------
# JAX's xmap test suite: testControlFlow


@pytest.mark.parametrize("jit", [False, True])
def test_xmap_test_control_flow_psum_in_a_fori_loop_carry(jit):
    # xmap_test.testControlFlow: the carry loses 'i' through the psum and is broadcast back along it
    x = jnp.arange(5)
    f = nx.xmap(lambda x: nx.lax.fori_loop(0, 10, lambda _, x: nx.lax.psum(x, "i"), x),
                in_axes=["i", ...], out_axes=["i", ...])
    out = (jax.jit(f) if jit else f)(x)
    ref = np.arange(5, dtype=np.int32)  # the loop per element: each takes the sum over 'i' ten times
    for _ in range(10):
        ref = np.full_like(ref, ref.sum())
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)


def test_cond_of_xmaps_and_a_while_loop_whose_carry_loses_a_name():
    # the rest of testControlFlow's pattern: branches and a while_loop whose body reduces the carry's name
    x = np.arange(5.0, dtype=np.float32)

    def body(v):
        v = nx.lax.while_loop(lambda c: (c.sum("i") < 100.0), lambda c: nx.psum(c, "i") + 1.0, v)
        return nx.lax.cond(nx.pmax(v, "i") > 0, lambda c: c.sum("i"), lambda c: c, v)

    out = nx.xmap(body, ["i", ...], ["i", ...])(x)
    ref = x.copy()
    while ref.sum() < 100:
        ref = np.full_like(ref, ref.sum() + 1.0)
    np.testing.assert_allclose(out, np.full(5, ref.sum()))


# --------------------------------------------------------------------------------------------------------
# Loops: the carry is the union of the names it enters with and the names the body returns


NAMES = {"a": 2, "bb": 3, "k": 1, "feat": 2}


@st.composite
def loop_cases(draw):
    carry = draw(st.lists(st.sampled_from(sorted(NAMES)), unique=True, max_size=3))
    added = draw(st.lists(st.sampled_from(sorted(NAMES)), unique=True, max_size=3))
    return carry, added, draw(st.sampled_from(["fori_loop", "while_loop", "scan"])), draw(st.integers(0, 99))


@settings(max_examples=25, deadline=None)
@given(loop_cases())
def test_loops_equal_a_python_loop_on_broadcast_values(case):
    carry_names, added_names, loop, seed = case
    rng = np.random.default_rng(seed)
    universe = sorted(set(carry_names) | set(added_names))
    perm = rng.permutation(len(carry_names))
    init_d = rng.normal(size=[NAMES[n] for n in carry_names]).astype(np.float32)
    init = nx.wrap(init_d.transpose(perm), [carry_names[i] for i in perm])  # stored in a random order
    add_d = rng.normal(size=[NAMES[n] for n in added_names]).astype(np.float32)
    add = nx.wrap(add_d, list(added_names))

    def step(c):
        # another storage order on the way out, and a name the carry may lack
        return nx.wrap(c.unwrap(list(reversed(c.names))), list(reversed(c.names))) * 0.5 + add

    if loop == "fori_loop":
        out = nx.lax.fori_loop(0, 3, lambda i, c: step(c), init)
    elif loop == "while_loop":
        n, out = nx.lax.while_loop(lambda nc: nc[0] < 3, lambda nc: (nc[0] + 1, step(nc[1])), (0, init))
        assert int(n) == 3
    else:
        out, ys = nx.lax.scan(lambda c, _: (step(c), c.sum(tuple(c.names))), init, None, length=3)
        assert ys.shape == (3,) and not ys.named_shape

    def dense(d, names):  # positional reference on values broadcast to the universe
        shape = [NAMES[n] if n in names else 1 for n in universe]
        return np.broadcast_to(d.transpose([names.index(n) for n in universe if n in names]).reshape(shape),
                               [NAMES[n] for n in universe])

    ref = dense(init_d, carry_names)
    for _ in range(3):
        ref = ref * 0.5 + dense(add_d, added_names)
    assert out.named_shape == {n: NAMES[n] for n in universe}
    np.testing.assert_allclose(_dense(out, universe), ref, rtol=1e-6)


def test_loop_carry_gains_names_from_a_plain_initial_value():
    x = nx.wrap(jnp.arange(3.0), ["k"])
    out = nx.lax.fori_loop(0, 4, lambda i, c: c + x * i, 0.0)
    np.testing.assert_allclose(out.unwrap(["k"]), np.arange(3.0) * 6)
    total, ys = nx.lax.scan(lambda c, r: (c + r, c), jnp.zeros(2), nx.wrap(jnp.ones((4, 2, 3)), {2: "k"}))
    assert total.named_shape == {"k": 3} and ys.shape == (4, 2) and ys.named_shape == {"k": 3}
    np.testing.assert_allclose(_dense(total, ["k"]), np.full((3, 2), 4.0))


@pytest.mark.parametrize("loop", ["fori_loop", "scan"])
def test_grad_through_a_carry_that_loses_a_name_equals_the_positional_gradient(loop):
    rng = np.random.default_rng(7)
    d = rng.normal(size=(4, 3)).astype(np.float32)

    def named(w):
        x = nx.wrap(w, ["i", "k"])
        step = lambda c: nx.tanh(nx.psum(c, "i") * 0.3) + x  # noqa: E731
        if loop == "fori_loop":
            c = nx.lax.fori_loop(0, 3, lambda _, c: step(c), x)
        else:
            c = nx.lax.scan(lambda c, _: (step(c), None), x, None, length=3)[0]
        return (c * c).sum(("i", "k")).unwrap()

    def positional(w):
        step = lambda c: jnp.tanh(c.sum(0, keepdims=True) * 0.3) + w  # noqa: E731
        if loop == "scan":
            c = jax.lax.scan(lambda c, _: (step(c), None), w, None, length=3)[0]
        else:
            c = jax.lax.fori_loop(0, 3, lambda _, c: step(c), w)
        return jnp.sum(c * c)

    np.testing.assert_allclose(jax.grad(named)(d), jax.grad(positional)(d), rtol=1e-5)


# --------------------------------------------------------------------------------------------------------
# Conditionals: each output leaf is the union of the branches' names


@pytest.mark.parametrize("pred", [True, False])
def test_cond_outputs_broadcast_to_the_union_of_the_branches(pred):
    rng = np.random.default_rng(8)
    d = rng.normal(size=(2, 3)).astype(np.float32)
    x = nx.wrap(d, ["a", "b"])

    def f(pred, x):
        return nx.lax.cond(pred, lambda v: {"s": v.sum("a"), "p": 1.0, "same": v},
                           lambda v: {"s": nx.wrap(v.unwrap(["b", "a"]), ["b", "a"]), "p": v.max("b"),
                                      "same": v * 2}, x)

    for g in (f, jax.jit(f)):
        out = g(pred, x)
        assert out["s"].named_shape == {"a": 2, "b": 3} and out["p"].named_shape == {"a": 2}
        np.testing.assert_allclose(_dense(out["s"], "ab"), np.broadcast_to(d.sum(0), (2, 3)) if pred else d)
        np.testing.assert_allclose(_dense(out["p"], "a"), np.ones(2) if pred else d.max(1))
        np.testing.assert_allclose(_dense(out["same"], "ab"), d if pred else 2 * d)


def test_switch_outputs_broadcast_and_named_indices_without_names():
    x = nx.wrap(jnp.arange(3.0), ["k"])
    branches = [lambda v: v.sum("k"), lambda v: v * 2, lambda v: jnp.asarray(7.0)]
    for i, ref in enumerate([[3.0] * 3, [0.0, 2.0, 4.0], [7.0] * 3]):
        out = nx.lax.switch(nx.wrap(jnp.asarray(i)), branches, x)
        np.testing.assert_allclose(out.unwrap(["k"]), ref)


# --------------------------------------------------------------------------------------------------------
# Bad input


def test_a_carry_that_cannot_be_broadcast_names_the_axis_and_sizes():
    x = nx.wrap(jnp.ones(5), ["i"])
    with pytest.raises(errors.AxisSizeError, match=r"nx.lax.fori_loop: axis 'i' has size 5 in init_val\[0\] "
                                                   r"but size 3 in body_fun's result\[0\]"):
        nx.lax.fori_loop(0, 2, lambda _, c: (c[0][{"i": slice(0, 3)}],), (x,))
    with pytest.raises(errors.AxisSizeError, match=r"nx.lax.while_loop: axis 'i' has size 5 in init_val but "
                                                   r"size 2"):
        nx.lax.while_loop(lambda c: False, lambda c: c[{"i": slice(0, 2)}], x)
    with pytest.raises(errors.AxisSizeError, match=r"nx.lax.scan: axis 'i' has size 5 in init\['c'\] but "
                                                   r"size 4 in the carry f returns\['c'\]"):
        nx.lax.scan(lambda c, _: ({"c": c["c"][{"i": slice(1, 5)}]}, None), {"c": x}, None, length=2)


def test_branches_that_cannot_be_broadcast_name_the_axis_and_sizes():
    with pytest.raises(errors.AxisSizeError, match=r"nx.lax.cond: axis 'k' has size 3 in branch 0's "
                                                   r"output\[1\] but size 4 in branch 1's output\[1\]"):
        nx.lax.cond(True, lambda: (1.0, nx.wrap(jnp.ones(3), ["k"])),
                    lambda: (1.0, nx.wrap(jnp.ones(4), ["k"])))
    with pytest.raises(errors.AxisSizeError, match=r"nx.lax.switch: axis 'k' has size 3 in branch 0's output "
                                                   r"but size 2 in branch 2's output"):
        nx.lax.switch(0, [lambda: nx.wrap(jnp.ones(3), ["k"]), lambda: 1.0,
                          lambda: nx.wrap(jnp.ones(2), ["k"])])


def test_named_predicates_and_indices_are_errors():
    p = nx.wrap(jnp.array([True, False]), ["b"])
    with pytest.raises(errors.AxisSpecError, match=r"nx.lax.cond: the predicate has named axes 'b' \(size 2"):
        nx.lax.cond(p, lambda: 1.0, lambda: 2.0)
    with pytest.raises(errors.AxisSpecError, match="nx.lax.switch: the index has named axes 'b'"):
        nx.lax.switch(nx.wrap(jnp.array([0, 1]), ["b"]), [lambda: 1.0, lambda: 2.0])
    with pytest.raises(errors.AxisSpecError, match="nx.lax.while_loop: cond_fun's result has named axes 'b'"):
        nx.lax.while_loop(lambda c: c < 3, lambda c: c + 1, nx.wrap(jnp.zeros(2), ["b"]))


def test_positional_shapes_and_dtypes_that_differ_name_the_leaf_in_user_terms():
    # names broadcast; positional axes and dtypes do not: the error says so, with positional and named shapes
    # (jax's own says `loop_carry[1].data` has float32[8], the storage of a value the user never wrote)
    v = nx.wrap(jnp.ones((8, 3)), ["i", None])
    with pytest.raises(errors.CarryError, match=r"nx.lax.fori_loop: the carry must keep its positional shape "
                                                r".*init_val has positional shape \(\), named shape \{\}.*"
                                                r"body_fun's result has positional shape \(3,\), named shape "
                                                r"\{'i': 8\}"):
        nx.lax.fori_loop(0, 2, lambda i, c: c + v, 0.0)
    with pytest.raises(errors.CarryError, match=r"nx.lax.scan: .*init\['b'\] has positional shape \(\)"):
        nx.lax.scan(lambda c, _: ({"b": c["b"] + jnp.ones(2)}, None), {"b": 0.0}, None, length=2)
    with pytest.raises(errors.CarryError, match=r"nx.lax.while_loop: .*positional shape \(1,\).*\(2,\)"):
        nx.lax.while_loop(lambda c: c.sum() < 3, lambda c: jnp.concatenate([c, c]), jnp.ones(1))
    x = nx.wrap(jnp.ones(3), ["k"])
    with pytest.raises(errors.CarryError, match=r"nx.lax.cond: the branches must return equal positional "
                                                r"shapes and dtypes .* dtype float32; .* dtype int32"):
        nx.lax.cond(True, lambda: x, lambda: x.astype(jnp.int32))
    with pytest.raises(TypeError):  # also the class jax.lax raises, for code that catches it
        nx.lax.switch(0, [lambda: x, lambda: x.sum("k") + jnp.ones(2)])
    # a Python scalar is weakly typed: jax promotes it, so the leaf at fault is the other one
    with pytest.raises(errors.CarryError, match=r"init_val\[1\] has positional shape \(2,\), named shape "
                                                r"\{\}, dtype float32; .* dtype float16"):
        nx.lax.fori_loop(0, 3, lambda i, c: (c[0] + jnp.int8(1), c[1].astype(jnp.float16)), (0, jnp.zeros(2)))


def test_errors_that_are_not_about_the_carry_stay_jaxs():
    step = lambda c: c + jnp.int8(1)  # noqa: E731  (jax promotes the weakly typed 0 to int8: a fine carry)
    with pytest.raises(TypeError, match="lower and upper arguments to fori_loop must have equal types"):
        nx.lax.fori_loop(0, 3.0, lambda i, c: step(c), 0)
    with pytest.raises(TypeError, match="cond_fun must return a boolean scalar"):
        nx.lax.while_loop(lambda c: jnp.array([True, False]), step, 0)
    assert nx.lax.fori_loop(0, 3, lambda i, c: step(c), 0).dtype == jnp.int8


def test_mismatches_other_than_names_are_still_jaxs_errors():
    x = nx.wrap(jnp.ones(3), ["k"])
    with pytest.raises(TypeError, match="pytree structure"):
        nx.lax.fori_loop(0, 2, lambda _, c: (c, c), x)
    with pytest.raises(TypeError, match="pytree structure|must have the same"):
        nx.lax.cond(True, lambda: (x,), lambda: [x])


def test_lax_map_over_a_named_array_without_positional_axes_says_to_use_nx_map():
    with pytest.raises(errors.AxisSpecError, match=r"nx.lax.map: xs has no positional axis .*nx.map\(f, xs"):
        nx.lax.map(lambda r: r, nx.wrap(jnp.ones(3), ["row"]))
    out = nx.lax.map(lambda r: r.sum("k"), nx.wrap(jnp.ones((3, 2)), [None, "k"]), batch_size=2)
    np.testing.assert_array_equal(out, np.full(3, 2.0))


def test_where_names_agree_the_users_functions_reach_jax_as_they_are():
    # jax caches a traced body by the function: repeated eager calls with the same body trace it once
    traces = {"body": 0, "yes": 0, "no": 0}

    def body(i, c):
        traces["body"] += 1
        return c * 0.5

    def yes(v):
        traces["yes"] += 1
        return v + 1.0

    def no(v):
        traces["no"] += 1
        return v - 1.0

    x = nx.wrap(jnp.ones((2, 3)), ["a", "b"])
    for _ in range(3):
        nx.lax.fori_loop(0, 2, body, x)
        nx.lax.cond(True, yes, no, x)
    assert traces == {"body": 1, "yes": 1, "no": 1}
