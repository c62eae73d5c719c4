"""The per-call fast path of nx.jit and nx.xmap: what serves a call of one argument structure in one context
(mesh, rules, axis environment) serves the next such call with one flatten and jax.jit's dispatch. Every
case here is one where reusing it would be wrong, or where it must still do what the full path does: values
laid out otherwise are placed, a new mesh, new rules or new names decide afresh, donation still donates,
sizes the layout does not divide are still reported by nx, and a step is traced once, not once per path.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from meshes import auto_mesh, same_spec

import namedarray as nx
from namedarray import errors


def state(batch=8):
    return {"w": nx.wrap(jnp.arange(batch * 4.0).reshape(batch, 4), ["batch", "embed"]),
            "b": nx.wrap(jnp.arange(4.0), ["embed"])}


def step(s, lr=0.5):
    return {"w": s["w"] * lr + s["b"], "b": s["b"] - lr}


def expected(s, lr=0.5):
    return {"w": np.asarray(s["w"].unwrap(["batch", "embed"])) * lr + np.asarray(s["b"].unwrap(["embed"])),
            "b": np.asarray(s["b"].unwrap(["embed"])) - lr}


def check(out, s, lr=0.5):
    want = expected(s, lr)
    np.testing.assert_allclose(np.asarray(out["w"].unwrap(["batch", "embed"])), want["w"])
    np.testing.assert_allclose(np.asarray(out["b"].unwrap(["embed"])), want["b"])


def test_a_step_is_traced_once_and_each_call_gets_its_own_values():
    traces = []

    def counted(s, lr):
        traces.append(1)
        return step(s, lr)

    f = nx.jit(counted)
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules({"batch": "data"}):
        s = state()
        for k in range(4):
            out = f(s, 0.25 * k)  # a Python number is a leaf: its value is not baked in
            check(out, s, 0.25 * k)
            assert same_spec(out["w"].sharding.spec, P("data"))
            s = out
    assert len(traces) == 1


def test_clear_caches_drops_what_served_the_last_call():
    traces = []

    def counted(s):
        traces.append(1)
        return step(s)

    f = nx.jit(counted)
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules({"batch": "data"}):
        s = f(f(state()))
        nx.clear_caches()
        out = f(s)  # compiled again, not served by a function the caches no longer hold
    assert len(traces) == 2
    check(out, s)


def test_an_argument_laid_out_otherwise_is_placed_again():
    mesh = auto_mesh((4, 2), ("data", "model"))
    f = nx.jit(step)
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data", "embed": "model"}):
        s = f(state())
        f(s)  # the fast path now serves this structure
        other = {"w": nx.shard(s["w"], {"embed": "data"}), "b": s["b"]}  # committed to another layout
        out = f(other)
        check(out, other)
        assert same_spec(out["w"].sharding.spec, P("data", "model"))
        again = f(s)  # and back
        check(again, s)


def test_new_rules_between_calls_decide_afresh():
    f = nx.jit(step)
    s = state()
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
        with nx.axis_rules({"batch": "data"}):
            a = f(s)
            a = f(a)
        with nx.axis_rules({"batch": "model", "embed": "data"}):
            b = f(a)
        with nx.axis_rules({"batch": "data"}):
            c = f(b)
    assert same_spec(a["w"].sharding.spec, P("data"))
    assert same_spec(b["w"].sharding.spec, P("model", "data"))
    assert same_spec(c["w"].sharding.spec, P("data"))
    check(c, b)


def test_a_new_mesh_between_calls_decides_afresh():
    f = nx.jit(step)
    s = state()
    with nx.axis_rules({"batch": "data"}):
        with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))):
            a = f(f(s))
        with jax.set_mesh(auto_mesh((8,), ("data",))):
            b = f(a)
    assert b["w"].sharding.mesh.shape == {"data": 8}
    assert same_spec(b["w"].sharding.spec, P("data"))
    check(b, a)


def test_other_names_in_the_same_positions_decide_afresh():
    f = nx.jit(lambda v: v * 2)
    rules = {"batch": "data", "heads": "data"}
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules(rules):
        x = nx.wrap(jnp.ones((8, 4)), ["batch", "embed"]).shard()
        f(f(x))
        # same shape, same layout, other names: jit would take the leaf, and the last call would name it
        y = nx.wrap(jnp.arange(32.0).reshape(8, 4), ["heads", "embed"]).shard()
        out = f(y)
    assert out.names == ("heads", "embed")
    assert same_spec(out.sharding.spec, P("data"))
    np.testing.assert_allclose(np.asarray(out.unwrap(["heads", "embed"])), np.arange(32.0).reshape(8, 4) * 2)


def test_sizes_the_layout_does_not_divide_are_reported_by_name():
    f = nx.jit(step)
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules({"batch": "data"}):
        f(f(state(8)))
        with pytest.raises(errors.DivisibilityError, match="batch"):
            f(state(6))
        check(f(state(4)), state(4))


@pytest.mark.parametrize("how", ["position", "name"])
def test_donation_still_donates_on_the_fast_path(how):
    kwargs = {"donate_argnums": 0} if how == "position" else {"donate_argnames": "s"}
    f = nx.jit(lambda s, scale: {k: v * scale for k, v in s.items()}, **kwargs)
    with jax.set_mesh(auto_mesh((4, 2), ("data", "model"))), nx.axis_rules({"batch": "data"}):
        s = f(state(), 1.0) if how == "position" else f(s=state(), scale=1.0)
        for _ in range(2):
            before = s
            s = f(s, 2.0) if how == "position" else f(scale=2.0, s=s)
            assert before["w"].data.is_deleted() and before["b"].data.is_deleted()
    np.testing.assert_allclose(np.asarray(s["b"].unwrap(["embed"])), np.arange(4.0) * 4)


def test_keyword_arguments_in_any_order():
    f = nx.jit(lambda a, b: a - b)
    x, y = nx.wrap(jnp.arange(8.0), ["batch"]), nx.wrap(jnp.ones(8), ["batch"])
    with jax.set_mesh(auto_mesh((8,), ("data",))), nx.axis_rules({"batch": "data"}):
        first = f(a=x, b=y)
        second = f(b=y, a=x)
        swapped = f(a=y, b=x)
    np.testing.assert_allclose(np.asarray(first.unwrap(["batch"])), np.arange(8.0) - 1)
    np.testing.assert_allclose(np.asarray(second.unwrap(["batch"])), np.arange(8.0) - 1)
    np.testing.assert_allclose(np.asarray(swapped.unwrap(["batch"])), 1 - np.arange(8.0))


# ------------------------------------------------------------------------------------------------------
# nx.xmap


def test_xmap_places_an_argument_laid_out_otherwise_and_follows_a_new_mesh():
    traces = []

    def body(x):
        traces.append(1)
        return x * 2

    f = nx.xmap(body, in_axes=["i", ...], out_axes=["i", ...], axis_resources={"i": "d"})
    x = jnp.arange(32.0).reshape(8, 4)
    mesh = auto_mesh((4, 2), ("d", "e"))
    with jax.set_mesh(mesh):
        a = f(x)
        b = f(a)
        traced = len(traces)
        b = f(f(b) / 2) / 2  # the same layout again: traced no more
        assert len(traces) == traced
        moved = f(jax.device_put(a, NamedSharding(mesh, P(None, "d"))))  # another layout, same structure
        c = f(a)
    with jax.set_mesh(auto_mesh((8,), ("d",))):
        d = f(c)
    for got, times in [(a, 2), (b, 4), (moved, 4), (c, 4), (d, 8)]:
        np.testing.assert_allclose(np.asarray(got), np.asarray(x) * times)
    assert same_spec(moved.sharding.spec, P("d")) and d.sharding.mesh.shape == {"d": 8}


def test_xmap_arguments_of_another_structure_are_not_served_by_the_last_call():
    def body(t):
        return t["b"] * 10 + t.get("a", 0) + t.get("c", 0) * 100

    f = nx.xmap(body, in_axes=(["i", ...],), out_axes=["i", ...], axis_resources={"i": "d"})
    x, y = jnp.arange(8.0), jnp.ones(8)
    with jax.set_mesh(auto_mesh((8,), ("d",))):
        f({"a": x, "b": y})
        first = f({"a": x, "b": y})
        other = f({"b": x, "c": y})  # as many leaves, laid out alike: read as {"a": x, "b": y} if reused
        more = f({"a": y, "b": x, "c": x})
    np.testing.assert_allclose(np.asarray(first), 10 + np.arange(8.0))
    np.testing.assert_allclose(np.asarray(other), np.arange(8.0) * 10 + 100)
    np.testing.assert_allclose(np.asarray(more), np.arange(8.0) * 110 + 1)
