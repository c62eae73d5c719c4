"""The cases of xmap's own test suite, with positional bodies as xmap's users wrote them: ``jax.lax``
collectives over the map's names and ``jax.numpy`` inside, on 8 simulated devices, with and without mesh
resources. Each compares against the positional computation the case stands for."""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import Mesh

import namedarray as nx
from namedarray.maps import SerialLoop, serial_loop, xmap


def mesh(*axes):
    names = tuple(n for n, _ in axes)
    sizes = tuple(s for _, s in axes)
    return Mesh(np.array(jax.devices()[:math.prod(sizes)]).reshape(sizes), names)


def close(a, b, **kw):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=1e-6,
                               **kw)


def test_basic_with_two_mesh_axes():
    with mesh(("x", 2), ("y", 2)):
        fm = xmap(lambda a, b: (a * 2, b * 4), in_axes=({0: "a", 1: "b"}, ["c", ...]),
                  out_axes=({0: "a", 1: "b"}, ["c", ...]), axis_resources={"a": "x", "b": "y", "c": "x"})
        a = jnp.arange(16 * 8 * 5).reshape(16, 8, 5)
        b = jnp.arange(14).reshape(2, 7)
        c, d = fm(a, b)
    close(c, a * 2)
    close(d, b * 4)


def test_collective_reduce():
    with mesh(("x", 2), ("y", 2)):
        fm = xmap(lambda a, b: (lax.psum(a * 2, "a"), b * 4), in_axes=(["a", "b", ...], {0: "c"}),
                  out_axes=(["b", ...], {0: "c"}), axis_resources={"a": "x", "b": "y", "c": "x"})
        a = jnp.arange(16 * 8 * 5).reshape(16, 8, 5)
        b = jnp.arange(14).reshape(2, 7)
        c, d = fm(a, b)
    close(c, (a * 2).sum(0))
    close(d, b * 4)


@pytest.mark.parametrize("resources", [{}, {"i": "x", "j": "y"}])
def test_collective_permute_2d(resources):
    # over two names at once: nx's spelling (jax's vmap permutes along one vmapped name at a time)
    perm = np.array([3, 1, 2, 0])
    with mesh(("x", 2), ("y", 2)):
        result = xmap(lambda x: nx.pshuffle(x, ("i", "j"), perm), in_axes=["i", "j", ...],
                      out_axes=["i", "j", ...], axis_resources=resources)(jnp.arange(4).reshape(2, 2))
        shifted = xmap(lambda x: nx.ppermute(x, ("i", "j"), [(0, 1), (1, 3)]), in_axes=["i", "j", ...],
                       out_axes=["i", "j", ...], axis_resources=resources)(jnp.arange(1, 5).reshape(2, 2))
    close(result.reshape(-1), perm)
    close(shifted.reshape(-1), [0, 1, 0, 2])


def test_collective_permute_1d():
    perm = np.array([3, 1, 2, 0])
    close(xmap(lambda x: lax.pshuffle(x, "i", perm), in_axes=["i", ...], out_axes=["i", ...])(jnp.arange(4)),
          perm)


def test_collective_all_gather_and_axis_index():
    x = jnp.arange(4, dtype=jnp.int32)
    result = xmap(lambda v: lax.all_gather(v, "i") + lax.axis_index("i"), in_axes=["i", ...],
                  out_axes=["i", ...])(x)
    close(result, x[None] + x[None].T)


def test_one_logical_axis_over_two_mesh_axes():
    with mesh(("x", 2), ("y", 2)):
        fm = xmap(lambda v: (lax.psum(v * 2, "a"), v * 4), in_axes=["a", ...], out_axes=({}, {1: "a"}),
                  axis_resources={"a": ("x", "y")})
        v = jnp.arange(20).reshape(4, 5)
        ans, ans2 = fm(v)
        fyx = xmap(lambda v: v * 4, in_axes=["a", ...], out_axes={1: "a"}, axis_resources={"a": ("y", "x")})
        zyx = fyx(v)
    close(ans, (v * 2).sum(0))
    close(ans2, v.T * 4)
    close(zyx, v.T * 4)
    assert zyx.sharding.spec == jax.sharding.PartitionSpec(None, ("y", "x"))


def test_nested_maps_with_meshes_and_a_psum_over_both_names():
    with mesh(("x", 2), ("y", 2), ("z", 2)):
        @partial(xmap, in_axes={1: "a"}, out_axes=({0: "a"}, {}), axis_resources={"a": "y"})
        def f(x):
            y = x * 2

            @partial(xmap, in_axes={0: "b"}, out_axes=({1: "b"}, {}), axis_resources={"b": ("x", "z")})
            def h(y):
                return jnp.sin(y) * np.arange(y.size, dtype=float), lax.psum(y, ("a", "b"))

            return h(y)

        x = jnp.arange(40, dtype=float).reshape(4, 2, 5)
        y = f(x)
    close(y[0], (jnp.sin(x * 2) * np.arange(5, dtype=float)[None, None]).transpose((1, 2, 0)))
    close(y[1], (x * 2).sum((0, 1)))


@pytest.mark.parametrize("resources", [{}, {"i": "x"}, {"i": "x", "j": "y"}])
def test_multiple_calls_of_a_positional_tensordot(resources):
    def f(x, y):
        assert x.shape == y.shape == (3, 5)  # the body sees per-element arrays
        return jnp.tensordot(x, y, axes=([1], [1]))

    with mesh(("x", 2), ("y", 2)):
        fm = xmap(f, in_axes=(["i", ...], ["j", ...]), out_axes=["i", "j", ...], axis_resources=resources)
        x = jnp.arange(30).reshape(2, 3, 5)
        for _ in range(3):
            close(fm(x, x), jnp.einsum("imk,jnk->ijmn", x, x))


def test_control_flow_with_a_collective_in_the_loop():
    x = jnp.arange(5)
    out = xmap(lambda v: lax.fori_loop(0, 3, lambda _, c: lax.psum(c, "i"), v), in_axes=["i", ...],
               out_axes=["i", ...])(x)
    close(out, np.full(5, x.sum() * 5 * 5))


@pytest.mark.parametrize("resources", [{}, {"i": "x"}])
def test_axis_sizes_and_axis_index(resources):
    with mesh(("x", 2)):
        result = xmap(lambda: lax.axis_index("i"), in_axes=(), out_axes=["i", ...], axis_sizes={"i": 6},
                      axis_resources=resources)()
    close(result, np.arange(6))


def test_collective_over_a_name_no_argument_carries():
    f = xmap(lambda: lax.psum(jnp.array(2) ** 2, "i"), in_axes={}, out_axes={}, axis_sizes={"i": 4})
    assert int(f()) == 16


def test_vmap_of_an_xmap_closing_over_the_vmapped_value():
    x = jnp.arange(10).reshape(5, 2)
    f = jax.vmap(lambda y: xmap(lambda v: v + y, in_axes=["i", ...], out_axes=["i", ...])(x))
    ref = jax.vmap(lambda y: jax.vmap(lambda v: v + y)(x))
    close(f(x * 2), ref(x * 2))


def test_autodiff_without_broadcast_checks_numerically():
    f = xmap(lambda x, y: jnp.cos(lax.dot(x, jnp.sin(y), precision=lax.Precision.HIGHEST)),
             in_axes=(["i", ...], [None, "i"]), out_axes=["i"])
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) / 100
    y = jnp.arange(12, dtype=jnp.float32).reshape(4, 3) / 100
    from jax.test_util import check_grads

    check_grads(f, (x, y), order=2, eps=1e-2, atol=5e-3, rtol=5e-3)


def test_broadcast_outputs_and_nested_broadcast():
    x = jnp.asarray(2.0)
    f = xmap(lambda v: v, in_axes={}, out_axes=["i"], axis_sizes={"i": 4})
    close(f(x), [2.0] * 4)
    g = xmap(f, in_axes={}, out_axes=["j", ...], axis_sizes={"j": 7})
    close(g(x), np.full((7, 4), 2.0))


@serial_loop("l", 4)
def test_named_loop():
    x = jnp.arange(16)
    close(xmap(lambda v: v + 4, in_axes=["i"], out_axes=["i"], axis_resources={"i": "l"})(x), x + 4)


def test_anonymous_loop_with_and_without_a_mesh():
    x = jnp.arange(16)
    close(xmap(lambda v: v + 4, in_axes=["i"], out_axes=["i"], axis_resources={"i": SerialLoop(4)})(x), x + 4)
    with mesh(("x", 2)):
        y = xmap(lambda v: v + 4, in_axes=["i"], out_axes=["i"],
                 axis_resources={"i": ("x", SerialLoop(4))})(x)
    close(y, x + 4)


def test_lower_compile_and_text():
    f = xmap(lambda v: v + 4, in_axes=["i", ...], out_axes=["i", ...])
    x = jnp.arange(4, dtype=jnp.float32).reshape(2, 2)
    exe = f.lower(x).compile()
    close(exe(x), f(x))
    assert isinstance(f.lower(jax.ShapeDtypeStruct((2, 2), jnp.float32)).as_text(), str)
    with pytest.raises(TypeError):
        exe(x.astype(jnp.int32))


def test_docstring_gram_matrix_and_transpose():
    x = jnp.arange(10).reshape(2, 5)
    assert xmap(jnp.vdot, in_axes=({0: "left"}, {1: "right"}), out_axes=["left", "right", ...])(
        x, x.T).tolist() == [[30, 80], [80, 255]]
    close(xmap(lambda v: v, in_axes={0: "batch"}, out_axes={1: "batch"})(x), x.T)


def test_named_and_positional_bodies_compose_in_one_program():
    # an outer body on NamedArrays around an inner positional xmap: the inner body sees per-element arrays
    inner = xmap(lambda v: v * lax.psum(v, "j"), in_axes=["j", ...], out_axes=["j", ...])

    def outer(v):
        assert isinstance(v, nx.NamedArray)
        return nx.sum(inner(v), "i")

    x = jnp.arange(6.0).reshape(2, 3)
    out = xmap(outer, in_axes=[None, "i", ...], out_axes=[...])(x.T)
    close(out, (x * x.sum(1, keepdims=True)).sum(0))
