"""nx.xmap with axis_resources on the simulated 8-device CPU mesh (tests/conftest.py).

Resources never change results: every program here is compared with the same program without resources
(or with NumPy). The layouts are xmap's partitioning rule: a value is split over a mesh axis iff its named
shape has a name mapped to it. Auto meshes (`jax.sharding.Mesh`, `jax.make_mesh(..., axis_types=Auto)`),
Explicit meshes, `jax.set_mesh` and the legacy `with Mesh(...)` are all covered, and serial loops.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from meshes import auto_mesh, in_context, legacy, same_spec

import namedarray as nx
from namedarray import errors


def xm(f, in_axes, out_axes, **kw):
    return nx.xmap(f, in_axes=in_axes, out_axes=out_axes, **kw)


KINDS = ["auto", "explicit", "legacy"]


def spec_of(a):
    return a.sharding.spec


# ------------------------------------------------------------------------------------------------------
# XMapTest with meshes


@pytest.mark.parametrize("kind", KINDS)
def test_basic_two_names_share_a_mesh_axis_without_co_occurring(kind):
    # testBasic
    a, b = np.arange(640).reshape(16, 8, 5), np.arange(14).reshape(2, 7)
    f = xm(
        lambda a, b: (a * 2, b * 4),
        ({0: "a", 1: "b"}, ["c", ...]),
        ({0: "a", 1: "b"}, ["c", ...]),
        axis_resources={"a": "x", "b": "y", "c": "x"},
    )
    with in_context(kind, (2, 2), ("x", "y")):
        ra, rb = f(a, b)
    np.testing.assert_array_equal(ra, a * 2)
    np.testing.assert_array_equal(rb, b * 4)
    assert same_spec(spec_of(ra), P("x", "y"))
    assert same_spec(spec_of(rb), P("x"))


@pytest.mark.parametrize("kind", KINDS)
def test_collectives_and_multiple_calls_with_mesh(kind):
    # testMultipleCallsMesh, testCollectiveReduce, testAxisSizesMesh, testBroadcastMesh,
    # testCollectiveAllGather
    x = np.arange(30.0).reshape(2, 3, 5)
    with in_context(kind, (2, 2), ("x", "y")):
        f = xm(
            lambda x, y: nx.tensordot(x, y, axes=([1], [1])),
            (["i", ...], ["j", ...]),
            ["i", "j", ...],
            axis_resources={"i": "x", "j": "y"},
        )
        for _ in range(3):
            np.testing.assert_allclose(f(x, x), np.einsum("imk,jnk->ijmn", x, x))
        a = np.arange(640).reshape(16, 8, 5)
        r = xm(
            lambda a: nx.psum(a * 2, "a"), ["a", "b", ...], ["b", ...], axis_resources={"a": "x", "b": "y"}
        )(a)
        np.testing.assert_array_equal(r, (a * 2).sum(0))
        r = xm(lambda: nx.axis_index("i"), (), ["i", ...], axis_sizes={"i": 6}, axis_resources={"i": "x"})()
        np.testing.assert_array_equal(r, np.arange(6))
        r = xm(lambda v: v, {}, ["i"], axis_sizes={"i": 4}, axis_resources={"i": "x"})(2.0)
        np.testing.assert_array_equal(r, [2.0] * 4)
        v = np.arange(4, dtype=np.int32)
        r = xm(
            lambda v: nx.all_gather(v, "i") + nx.axis_index("i"),
            ["i", ...],
            ["i", ...],
            axis_resources={"i": "x"},
        )(v)
        np.testing.assert_array_equal(r, v[None] + v[None].T)


@pytest.mark.parametrize("kind", KINDS)
def test_one_logical_two_mesh_axes(kind):
    # testOneLogicalTwoMeshAxesBasic and ...Sharding: major to minor
    v = np.arange(20).reshape(4, 5)
    for axes in [("x", "y"), ("y", "x")]:
        f = xm(lambda v: (nx.psum(v * 2, "a"), v * 4), ["a", ...], ({}, {1: "a"}), axis_resources={"a": axes})
        with in_context(kind, (2, 2), ("x", "y")):
            r0, r1 = f(v)
        np.testing.assert_array_equal(r0, (v * 2).sum(0))
        np.testing.assert_array_equal(r1, v.T * 4)
        assert same_spec(spec_of(r1), P(None, axes))
        order = [s.index[1].start for s in sorted(r1.addressable_shards, key=lambda s: s.device.id)]
        # devices 0..3 of the 2x2 mesh hold columns in major-to-minor order of the resource tuple
        assert order == ([0, 1, 2, 3] if axes == ("x", "y") else [0, 2, 1, 3])


def test_skip_first_mesh_dim():
    # testSkipFirstMeshDim
    with jax.set_mesh(auto_mesh((2, 2), ("x", "y"))):
        for r in ("x", "y"):
            out = xm(lambda x: x * 2, ["i", ...], ["i", ...], axis_resources={"i": r})(np.ones(4))
            np.testing.assert_array_equal(out, np.full(4, 2.0))
            assert same_spec(spec_of(out), P(r))


@pytest.mark.parametrize("kind", ["auto", "explicit"])
@pytest.mark.parametrize("multiple", [False, True])
def test_nested_mesh(kind, multiple):
    # testNestedMeshOneToOne / testNestedMeshMultiple
    x = np.arange(40.0).reshape(4, 2, 5)

    def f(x):
        y = x * 2

        def h(y):
            return nx.sin(y) * jnp.arange(5.0), nx.psum(y, ("a", "b"))

        return xm(h, {0: "b"}, ({1: "b"}, {}), axis_resources={"b": ("x", "z") if multiple else "x"})(y)

    g = xm(f, {1: "a"}, ({0: "a"}, {}), axis_resources={"a": "y"})
    with in_context(kind, (2, 2, 2) if multiple else (2, 2), ("x", "y", "z") if multiple else ("x", "y")):
        r0, r1 = g(x)
    np.testing.assert_allclose(r0, (np.sin(x * 2) * np.arange(5.0)).transpose(1, 2, 0), rtol=1e-6)
    np.testing.assert_allclose(r1, (x * 2).sum((0, 1)), rtol=1e-6)
    # the outer output is split along 'a' only: the inner names became positional axes there (xmap's
    # tile assignment for this test was [2, 1, 1, m])
    assert same_spec(spec_of(r0), P("y"))


@pytest.mark.parametrize("kind", KINDS)
def test_output_layout_follows_the_names(kind):
    # the probe table of xmap.md §2.9: in ['i','j'] -> out ['j','i'] gives P('y','x'); reduced gives P()
    x = np.arange(8.0).reshape(4, 2)
    with in_context(kind, (2, 2), ("x", "y")):
        t = xm(lambda v: v, ["i", "j"], ["j", "i"], axis_resources={"i": "x", "j": "y"})(x)
        s = xm(lambda v: nx.sum(v, "i"), ["i", "j"], ["j"], axis_resources={"i": "x"})(x)
        n = xm(lambda v: v, ["i", ...], [None, "i", ...], axis_resources={"i": "x"})(x)
    np.testing.assert_array_equal(t, x.T)
    assert same_spec(spec_of(t), P("y", "x"))
    np.testing.assert_array_equal(s, x.sum(0))
    assert same_spec(spec_of(s), P())
    np.testing.assert_array_equal(n, x.T)
    assert same_spec(spec_of(n), P(None, "x"))


def test_values_inside_are_constrained_by_their_names():
    # every argument and output inside the body carries a sharding constraint for its storage
    with jax.set_mesh(auto_mesh((2,), ("x",))):
        f = xm(lambda a, b: a * nx.sum(b), (["a", ...], [...]), ["a", ...], axis_resources={"a": "x"})
        text = f.lower(np.ones((4, 3)), np.ones(3)).as_text()
    constraints = [line for line in text.splitlines() if "sharding_constraint" in line]
    # a's storage split over x (named dim last), b replicated, the output split over x in its final layout
    assert any('[{}, {"x"}]' in line for line in constraints)
    assert any("[{}]" in line for line in constraints)
    assert any('[{"x"}, {}]' in line for line in constraints)


@pytest.mark.parametrize("kind", ["auto", "legacy"])
def test_buffer_donation_with_mesh(kind):
    # a donated argument already laid out as its names require (e.g. the result of a previous call) is reused
    mesh = auto_mesh((2,), ("x",))
    with in_context(kind, (2,), ("x",)):
        f = xm(
            lambda x, y: x + y * 4,
            (["i", ...], ["i", ...]),
            ["i", ...],
            axis_resources={"i": "x"},
            donate_argnums=0,
        )
        x = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P("x")))
        y = jnp.ones((4, 2))
        out = f(x, y)
        np.testing.assert_array_equal(out, np.full((4, 2), 5.0))
        assert x.is_deleted() and not y.is_deleted()
        out2 = f(out, y)  # the output has the layout the next call wants
        np.testing.assert_array_equal(out2, np.full((4, 2), 9.0))
        assert out.is_deleted()


@pytest.mark.parametrize("kind", KINDS)
def test_arguments_arrive_split_so_each_device_gets_its_block(kind):
    # xmap's in_shardings: an argument is laid out by its names before the call (1/N bytes per device)
    with in_context(kind, (4,), ("x",)):
        f = xm(lambda a, w: nx.sum(a * w, "k"), (["b", "k"], ["k"]), ["b"], axis_resources={"b": "x"})
        compiled = f.lower(jnp.ones((16, 4)), jnp.ones(4)).compile()
        a_sharding, w_sharding = compiled.input_shardings[0]
        assert same_spec(a_sharding.spec, P("x")) and same_spec(w_sharding.spec, P())
        assert a_sharding.shard_shape((16, 4)) == (4, 4)
        np.testing.assert_allclose(f(np.ones((16, 4)), np.arange(4.0)), np.full(16, 6.0))


@pytest.mark.parametrize("types", [(AxisType.Explicit, AxisType.Auto), (AxisType.Auto, AxisType.Explicit)])
def test_mixed_axis_types_compose_with_jit_grad_and_vmap(types):
    rng = np.random.default_rng(0)
    w, x = rng.normal(size=(4, 6)), rng.normal(size=(8, 4))

    def positional(w, x):
        return jnp.sum(jnp.tanh(x @ w))

    f = xm(lambda w, x: nx.sum(nx.tanh(nx.pdot(x, w, "k")), axis=("b", "h")), (["k", "h"], ["b", "k"]), [...],
           axis_resources={"b": "x", "h": "y"})
    with jax.set_mesh(jax.make_mesh((4, 2), ("x", "y"), axis_types=types)):
        np.testing.assert_allclose(jax.jit(f)(w, x), positional(w, x), rtol=1e-5)
        np.testing.assert_allclose(jax.grad(f)(w, x), jax.grad(positional)(w, x), rtol=1e-5, atol=1e-6)
        ws = np.stack([w, 2 * w])
        np.testing.assert_allclose(jax.vmap(f, (0, None))(ws, x), jax.vmap(positional, (0, None))(ws, x),
                                   rtol=1e-5)


# ------------------------------------------------------------------------------------------------------
# jax.Array integration (XMapArrayTest)


def test_committed_sharded_arrays():
    # test_basic / test_xmap_array_double_input
    mesh = auto_mesh((4, 2), ("x", "y"))
    data = np.arange(16.0).reshape(8, 2)
    arr = jax.device_put(data, NamedSharding(mesh, P("x", "y")))
    with jax.set_mesh(mesh):
        out = xm(lambda v: v, {0: "a", 1: "b"}, {0: "a", 1: "b"}, axis_resources={"a": "x", "b": "y"})(arr)
    np.testing.assert_array_equal(out, data)
    assert out.addressable_shards[0].data.shape == (2, 1)
    for s in out.addressable_shards:
        np.testing.assert_array_equal(s.data, data[s.index])
    ax = jax.device_put(data, NamedSharding(mesh, P("x")))
    ay = jax.device_put(data, NamedSharding(mesh, P("y")))
    with jax.set_mesh(mesh):
        r1, r2 = xm(
            lambda x, y: (nx.dot(x, x), nx.dot(y, y)),
            ({0: "a"}, ["c", ...]),
            ({0: "a"}, ["c", ...]),
            axis_resources={"a": "x", "c": "y"},
        )(ax, ay)
    ref = np.diag(data @ data.T)
    np.testing.assert_allclose(r1, ref)
    np.testing.assert_allclose(r2, ref)
    assert r1.addressable_shards[0].data.shape == (2,)
    assert r2.addressable_shards[0].data.shape == (4,)


def test_input_with_other_partitioning_is_resharded():
    # test_xmap_array_sharding_mismatch: xmap required equal partitioning; nx reshards instead (same values)
    mesh = auto_mesh((4, 2), ("x", "y"))
    data = np.arange(16.0).reshape(8, 2)
    arr = jax.device_put(data, NamedSharding(mesh, P("x", "y")))
    with jax.set_mesh(mesh):
        out = xm(lambda v: v * 2, {0: "a"}, {0: "a"}, axis_resources={"a": "x"})(arr)
    np.testing.assert_array_equal(out, data * 2)
    assert same_spec(spec_of(out), P("x"))


def test_jit_of_xmap_with_resources_and_in_shardings():
    # XMapTestManualSPMD.testInPJit: inside jit with input shardings
    mesh = auto_mesh((2, 1), ("x", "y"))
    f = xm(lambda v: nx.sin(v), ["i"], ["i"], axis_resources={"i": "x"})
    x = np.arange(8.0)
    with jax.set_mesh(mesh):
        g = jax.jit(lambda x: f(x * x) + x, in_shardings=NamedSharding(mesh, P("y")))
        np.testing.assert_allclose(g(x), np.sin(x * x) + x, rtol=1e-6)
        h = jax.jit(
            lambda x: xm(
                lambda v: jax.lax.with_sharding_constraint(v.data, P()) + v * 0,
                [...],
                [...],
                axis_sizes={"i": 4},
                axis_resources={"i": "x"},
            )(x)
        )
        np.testing.assert_allclose(h(x), x)


def test_mesh_cannot_change_inside():
    # testNestedDifferentResources
    def outer_body(v):
        with legacy(Mesh(np.array(jax.devices()[:4]), ("x",))):
            return xm(lambda w: w, ["j", ...], ["j", ...], axis_resources={"j": "x"})(v)

    with legacy(Mesh(np.array(jax.devices()[:2]), ("x",))):
        with pytest.raises(
            errors.MeshChangeError, match="Changing the physical mesh is not allowed inside nx.xmap"
        ) as caught:
            xm(outer_body, ["i", ...], ["i", ...], axis_resources={"i": "x"})(np.ones((2, 4)))
    # xmap raised a RuntimeError here
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("inner", ["empty", "other"])
def test_entering_another_or_no_mesh_inside_a_body_is_an_error(inner):
    other = auto_mesh((2, 4), ("x", "y"))

    def body(v):
        mesh = jax.sharding.AbstractMesh((), ()) if inner == "empty" else other.abstract_mesh
        # a body on NamedArrays: its nx operations check the mesh (a positional body's jax operations are
        # jax's, which allow another mesh)
        v.named_shape  # noqa: B018 - an attribute only NamedArrays have
        with jax.sharding.use_abstract_mesh(mesh):
            return v * 2

    f = xm(body, ["i", ...], ["i", ...], axis_resources={"i": "x"})
    with jax.set_mesh(auto_mesh((4, 2), ("x", "y"))):
        with pytest.raises(errors.MeshChangeError,
                           match=r"nx.multiply at .*Changing the physical mesh is not allowed inside nx.xmap "
                                 r".*\{'x': 4, 'y': 2\}"):
            f(jnp.arange(8.0))
        # the same body without the inner mesh runs
        np.testing.assert_array_equal(xm(lambda v: v * 2, ["i", ...], ["i", ...],
                                         axis_resources={"i": "x"})(jnp.arange(8.0)), 2 * np.arange(8.0))


# ------------------------------------------------------------------------------------------------------
# pdot and einsum with meshes (PDotTests)


@pytest.mark.parametrize("kind", KINDS)
def test_pdot_with_mesh(kind):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 8)), rng.normal(size=(8, 5))
    with in_context(kind, (2,), ("r1",)):
        # testPdotBasic
        r = xm(lambda x, y: nx.pdot(x, y, "i"), ({1: "i"}, {0: "i"}), {}, axis_resources={"i": "r1"})(x, y)
        np.testing.assert_allclose(r, x @ y, rtol=1e-5)
        # testPdotBatching / testPdotBatchingShardUncontractedDim
        xb, yb = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 8, 5))
        for res in ({"i": "r1"}, {"j": "r1"}):
            r = xm(
                lambda x, y: nx.pdot(x, y, "i"),
                ({0: "j", 2: "i"}, {0: "j", 1: "i"}),
                ["j", ...],
                axis_resources=res,
            )(xb, yb)
            np.testing.assert_allclose(r, np.einsum("nij,njk->nik", xb, yb), rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_pdot_vjp_with_mesh(kind):
    # testPdotVJPSystematic (one case): the vjp inside xmap equals dot_general's
    rng = np.random.default_rng(1)
    x, y, g = rng.normal(size=(4, 6)), rng.normal(size=(6, 3)), rng.normal(size=(4, 3))

    def body(x, y, g):
        out, pull = jax.vjp(lambda x, y: nx.pdot(x, y, "i"), x, y)
        return pull(g)

    with in_context(kind, (2,), ("r1",)):
        gx, gy = xm(body, ({1: "i"}, {0: "i"}, [...]), ({1: "i"}, {0: "i"}), axis_resources={"i": "r1"})(
            x, y, g
        )
    rx, ry = jax.vjp(lambda x, y: x @ y, x, y)[1](g)
    np.testing.assert_allclose(gx, rx, rtol=1e-5)
    np.testing.assert_allclose(gy, ry, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_einsum_named_axes_with_mesh(kind):
    # test_xeinsum_named_axes_reduce_with_mesh / _batch_matmul_with_mesh / _unary_reduce_with_mesh
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(4, 2)), rng.normal(size=(2,))
    with in_context(kind, (2, 2), ("x", "y")):
        for spec in ("{i,j},{k}->{i,k}", "{j,i},{k}->{i,k}", "{i,j},{k}->{k,i}", "{j,i},{k}->{k,i}"):
            r = xm(
                functools.partial(nx.einsum, spec),
                (["i", "j"], ["k"]),
                ["i", "k"],
                axis_resources={"i": "x", "k": "y"},
            )(x, y)
            np.testing.assert_allclose(r, np.einsum("ij,k->ik", x, y), rtol=1e-5)
        a, b = rng.normal(size=(2, 4, 6)), rng.normal(size=(2, 6, 4))
        for spec in ("{b,i,j},{b,j,k}->{b,i,k}", "{j,i,b},{j,b,k}->{i,b,k}"):
            r = xm(
                functools.partial(nx.einsum, spec),
                (["b", "i", "j"], ["b", "j", "k"]),
                ["b", "i", "k"],
                axis_resources={"b": "x", "j": "y"},
            )(a, b)
            np.testing.assert_allclose(r, np.einsum("bij,bjk->bik", a, b), rtol=1e-5)
        r = xm(
            lambda u: nx.einsum("{b,i,j}->{b}", u),
            ["b", "i", "j"],
            ["b"],
            axis_resources={"b": "x", "i": "y"},
        )(a)
        np.testing.assert_allclose(r, a.sum((1, 2)), rtol=1e-5)
        z = rng.normal(size=(8, 6, 4, 4))
        r = xm(
            lambda u: nx.einsum("jk{i,b}->k{b}", u),
            ["b", "i", ...],
            ["b", ...],
            axis_resources={"b": "x", "i": "y"},
        )(z)
        np.testing.assert_allclose(r, np.einsum("bijk->bk", z), rtol=1e-5)


# ------------------------------------------------------------------------------------------------------
# Random samples do not depend on resources (NamedRandomTest.testSamplerResourceIndependence)


def test_random_samples_do_not_depend_on_resources():
    key = jax.random.key(0)

    def sample():
        return nx.random.normal(key, (3,), named_shape={"i": 4, "j": 6})

    ref = np.asarray(xm(sample, (), [None, "i", "j"], axis_sizes={"i": 4, "j": 6})())
    assert len({tuple(ref[:, i, j]) for i in range(4) for j in range(6)}) == 24
    with jax.set_mesh(auto_mesh((2, 2), ("x", "y"))):
        for resources in (
            {"i": "x"},
            {"j": "x"},
            {"i": "x", "j": "y"},
            {"i": ("y", "x")},
            {"i": "y", "j": "x"},
        ):
            out = xm(sample, (), [None, "i", "j"], axis_sizes={"i": 4, "j": 6}, axis_resources=resources)()
            np.testing.assert_array_equal(np.asarray(out), ref)


# ------------------------------------------------------------------------------------------------------
# Serial loops


def test_loop_basic_named_and_anonymous():
    # testLoopBasic / testLoopAnonBasic
    x = np.arange(16.0)
    with nx.serial_loop("l", 4):
        out = xm(lambda v: v + 4, ["i", ...], ["i", ...], axis_resources={"i": "l"})(x)
    np.testing.assert_array_equal(out, x + 4)
    out = xm(lambda v: v + 4, ["i", ...], ["i", ...], axis_resources={"i": nx.SerialLoop(4)})(x)
    np.testing.assert_array_equal(out, x + 4)


def test_serial_loop_as_decorator():
    @nx.serial_loop("l", 2)
    def run(x):
        return xm(lambda v: v * 3, ["i"], ["i"], axis_resources={"i": "l"})(x)

    np.testing.assert_array_equal(run(np.arange(4.0)), np.arange(4.0) * 3)


@pytest.mark.parametrize("kind", KINDS)
def test_loop_with_mesh(kind):
    # testLoopWithMesh / testLoopAnonWithMesh: mesh axis major, loop minor
    x = np.arange(16.0)
    with in_context(kind, (2,), ("x",)):
        with nx.serial_loop("l", 4):
            out = xm(lambda v: v * 2 + 1, ["i", ...], ["i", ...], axis_resources={"i": ("x", "l")})(x)
        out2 = xm(lambda v: v * 2 + 1, ["i", ...], ["i", ...], axis_resources={"i": ("x", nx.SerialLoop(4))})(
            x
        )
    np.testing.assert_array_equal(out, x * 2 + 1)
    np.testing.assert_array_equal(out2, x * 2 + 1)
    assert same_spec(spec_of(out), P("x"))


def test_loop_over_a_program_with_other_names_and_unlooped_outputs():
    rng = np.random.default_rng(0)
    a, w = rng.normal(size=(8, 4)), rng.normal(size=(4,))
    f = lambda a, w: (nx.tanh(a * w), nx.sum(w * 2, "j"), w * 3, nx.sum(a, "j"))  # noqa: E731
    specs = ((["i", "j"], ["j"]), (["i", "j"], [], ["i", "j"], ["i"]))
    ref = xm(f, *specs)(a, w)
    with jax.set_mesh(auto_mesh((2,), ("x",))):
        for res in (
            {"i": nx.SerialLoop(2)},
            {"i": ("x", nx.SerialLoop(4))},
            {"i": nx.SerialLoop(8), "j": "x"},
        ):
            out = xm(f, *specs, axis_resources=res)(a, w)
            for o, r in zip(out, ref):
                np.testing.assert_allclose(o, r, rtol=1e-6)


def test_names_sharing_a_loop_that_never_co_occur():
    x, y = np.arange(4.0), np.arange(6.0)
    with nx.serial_loop("l", 2):
        a, b = xm(
            lambda x, y: (x * 2, y + 1), (["a"], ["b"]), (["a"], ["b"]), axis_resources={"a": "l", "b": "l"}
        )(x, y)
    np.testing.assert_array_equal(a, x * 2)
    np.testing.assert_array_equal(b, y + 1)


def test_loop_gradients_and_vmap():
    x = np.arange(8.0) / 8
    f = xm(lambda x, w: nx.sin(x * w), (["i"], {}), ["i"], axis_resources={"i": nx.SerialLoop(4)})
    np.testing.assert_allclose(
        jax.grad(lambda w: f(x, w).sum())(0.3), jax.grad(lambda w: jnp.sin(x * w).sum())(0.3), rtol=1e-6
    )
    out = jax.vmap(lambda w: f(x, w))(jnp.arange(3.0))
    np.testing.assert_allclose(out, np.sin(x[None] * np.arange(3.0)[:, None]), rtol=1e-6)


def test_loop_bounds_the_memory_of_the_body():
    # the point of a serial loop: intermediates are one chunk at a time (the product needs the whole
    # (i, 128, 128) intermediate at once without the loop)
    def body(x, y):
        return nx.sum(nx.tanh(nx.outer(x, y)) @ y)

    args = (jax.ShapeDtypeStruct((16, 128), jnp.float32), jax.ShapeDtypeStruct((128,), jnp.float32))
    full = xm(body, (["i", ...], [...]), ["i"]).lower(*args).compile().memory_analysis().temp_size_in_bytes
    looped = (
        xm(body, (["i", ...], [...]), ["i"], axis_resources={"i": nx.SerialLoop(8)})
        .lower(*args)
        .compile()
        .memory_analysis()
        .temp_size_in_bytes
    )
    assert looped * 4 <= full


def test_equal_construction_under_a_new_but_equal_mesh_does_not_retrace():
    # testCaching: the same xmap built twice, each time under a new but equal Mesh
    calls = []

    def f(x):
        calls.append(1)
        return x * 2

    for _ in range(2):
        with jax.set_mesh(Mesh(np.array(jax.devices()[:2]), ("x",))):
            out = xm(f, ["a"], ["a"], axis_resources={"a": "x"})(np.arange(4.0))
    np.testing.assert_array_equal(out, np.arange(4.0) * 2)
    assert len(calls) == 1
    with jax.set_mesh(Mesh(np.array(jax.devices()[:4]), ("x",))):  # a different mesh: traced again
        xm(f, ["a"], ["a"], axis_resources={"a": "x"})(np.arange(4.0))
    assert len(calls) == 2


def test_nested_anonymous_loops_are_distinct_resources():
    # an inner loop inside a looped outer body: two loops, values may carry both looped names
    x = np.arange(24.0).reshape(4, 6)

    def outer_body(row):
        return xm(lambda v: v * 2, ["j"], ["j"], axis_resources={"j": nx.SerialLoop(3)})(row)

    out = xm(outer_body, ["i", ...], ["i", ...], axis_resources={"i": nx.SerialLoop(2)})(x)
    np.testing.assert_array_equal(out, x * 2)
    calls = []

    def f(v):
        calls.append(1)
        return v + 1

    for _ in range(2):
        xm(f, ["i"], ["i"], axis_resources={"i": nx.SerialLoop(2)})(np.arange(4.0))
    assert len(calls) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_resources_only_on_the_inner_xmap(kind):
    x = np.arange(24.0).reshape(4, 6)

    def outer_body(row):
        return xm(lambda v: v * 2 + nx.psum(v, "j"), ["j"], ["j"], axis_resources={"j": "x"})(row)

    with in_context(kind, (2,), ("x",)):
        out = xm(outer_body, ["i", ...], ["i", ...])(x)
        looped = jax.jit(xm(outer_body, ["i", ...], ["i", ...], axis_resources={"i": nx.SerialLoop(2)}))(x)
    ref = x * 2 + x.sum(1, keepdims=True)
    np.testing.assert_allclose(out, ref)
    np.testing.assert_allclose(looped, ref)
