"""Every code example of the xmap tutorial and of xmap's docstring, ported to nx, gives the values its text
states; and examples/tutorial.py (`make demo`) runs, with the toy network's named loss equal to the
positional one under every parallel strategy."""

import functools
import importlib.util
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import namedarray as nx
from namedarray import errors


def xm(f, in_axes, out_axes, **kw):
    return nx.xmap(f, in_axes=in_axes, out_axes=out_axes, **kw)


def _load_tutorial():
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "tutorial.py"
    if str(path.parent) not in sys.path:  # as when run as a script: its sibling modules import
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("nx_tutorial_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tutorial = _load_tutorial()


# ------------------------------------------------------------------------------------------------------
# "Tensors with named axes", "Introducing and eliminating named axes", "Named axis propagation"


def test_tutorial_my_func_and_transpose():
    def my_func(x):
        assert x.shape == (5,)
        assert x.named_shape == {"batch": 20}
        return x

    x = np.arange(100).reshape(5, 20)
    np.testing.assert_array_equal(xm(my_func, {1: "batch"}, {1: "batch"})(x), x)
    np.testing.assert_array_equal(xm(my_func, {1: "batch"}, {0: "batch"})(x), x.T)
    np.testing.assert_array_equal(xm(my_func, {1: "batch"}, {0: "batch"})(x), np.einsum("xb->bx", x))


def test_docstring_vdot():
    x = np.arange(10).reshape(2, 5)
    out = xm(jnp.vdot, ({0: "left"}, {1: "right"}), ["left", "right", ...])(x, x.T)
    np.testing.assert_array_equal(out, [[30, 80], [80, 255]])


def test_tutorial_named_broadcasting():
    def named_broadcasting(x, y, z):
        return x + y + z

    x, y, z = np.ones((2, 2, 1, 1)), np.ones((3, 1, 3, 1)), np.ones((5, 1, 1, 5))
    out = xm(named_broadcasting, (["a", ...], ["b", ...], ["c", ...]), ["a", "b", "c", ...])(x, y, z)
    assert out.shape == (2, 3, 5, 2, 3, 5)
    ref = x[:, None, None] + y[None, :, None] + z[None, None, :]
    np.testing.assert_array_equal(out, ref)


def test_tutorial_reductions_mixed_axes():
    z = np.arange(60.0).reshape(2, 3, 2, 5)  # (pos 0, x, pos 1, y) -> x, y named
    f = xm(lambda v: nx.sum(v, axis=(0, "x", "y")), {1: "x", 3: "y"}, [...])
    np.testing.assert_allclose(f(z), z.sum(axis=(0, 1, 3)))
    g = xm(lambda v: nx.sum(nx.sum(nx.sum(v, 0), "x"), "y"), {1: "x", 3: "y"}, [...])
    np.testing.assert_allclose(g(z), z.sum(axis=(0, 1, 3)))


def test_tutorial_einsum_with_braces():
    x, y = np.arange(24.0).reshape(2, 3, 4), np.arange(20.0).reshape(4, 5)
    f = xm(
        lambda a, b: nx.einsum("n{b,k},{k,m}->n{b,m}", a, b),
        ({0: "b", 2: "k"}, ["k", "m", ...]),
        {0: "b", 2: "m"},
    )
    np.testing.assert_allclose(f(x, y), np.einsum("bnk,km->bnm", x, y))


def test_tutorial_pshuffle_reverse():
    out = xm(lambda x: nx.pshuffle(x, "i", list(reversed(range(8)))), ["i", ...], ["i", ...])(np.arange(8))
    np.testing.assert_array_equal(out, np.arange(8)[::-1])


def test_docstring_linear_regression_with_multi_character_names():
    # xmap's docstring example failed there: jnp.sum(x, 'out_features') read the string as 6 names.
    def regression_loss(x, y, w, b):
        y_pred = nx.einsum("{in_features},{in_features,out_features}->{out_features}", x, w) + b
        error = nx.sum((y - y_pred) ** 2, axis="out_features")
        return nx.mean(error, axis="batch")

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)), rng.normal(size=(8, 2))
    w, b = rng.normal(size=(3, 2)), rng.normal(size=(2,))
    f = xm(
        regression_loss,
        in_axes=(
            ["batch", "in_features"],
            ["batch", "out_features"],
            ["in_features", "out_features"],
            ["out_features"],
        ),
        out_axes={},
    )
    ref = np.mean(np.sum((y - (x @ w + b)) ** 2, axis=1))
    np.testing.assert_allclose(f(x, y, w, b), ref, rtol=1e-5)


def test_tutorial_expm_frechet_batch_and_all_pairs():
    import scipy.linalg
    from jax.scipy.linalg import expm_frechet

    rng = np.random.default_rng(0)
    a, e = rng.normal(size=(3, 2, 2)) * 0.1, rng.normal(size=(3, 2, 2)) * 0.1

    def ref(i, j):
        return scipy.linalg.expm_frechet(a[i], e[j], compute_expm=False)

    # a jax.scipy function passed directly (through a partial) is lifted over the names
    frechet = functools.partial(expm_frechet, compute_expm=False)
    batched = xm(frechet, (["b", ...], ["b", ...]), ["b", ...])
    np.testing.assert_allclose(batched(a, e), np.stack([ref(i, i) for i in range(3)]), rtol=1e-5, atol=1e-6)
    out = xm(frechet, (["ba", ...], ["be", ...]), ["ba", "be", ...])(a, e)
    assert out.shape == (3, 3, 2, 2)
    np.testing.assert_allclose(out, [[ref(i, j) for j in range(3)] for i in range(3)], rtol=1e-5, atol=1e-6)


def test_tutorial_size_mismatch_example():
    # "x = arange(5); y = arange(7)" under one name: an error naming the axis and both sizes
    with pytest.raises(errors.AxisSizeError, match=r"shape \(7,\).*7 != 5\. "
                       r"Axis 'i' has size 5 inferred from argument 0 and 7 in argument 1"):
        xm(lambda x, y: x * y, (["i", ...], ["i", ...]), ["i", ...])(np.arange(5), np.arange(7))


# ------------------------------------------------------------------------------------------------------
# "From positions to names in a toy neural network" and "Parallelism support"


SMALL = dict(batch=16, inputs=24, hidden=16, classes=10)


def test_toy_network_named_loss_equals_positional_loss():
    data = tutorial.make_data(**SMALL)
    named = nx.xmap(tutorial.named_loss, in_axes=tutorial.IN_AXES, out_axes=[...])
    np.testing.assert_allclose(named(*data), tutorial.loss(*data), rtol=1e-6)
    for g, r in zip(jax.grad(named, argnums=(0, 1))(*data), jax.grad(tutorial.loss, argnums=(0, 1))(*data)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-7)
    logits = nx.xmap(tutorial.named_predict, in_axes=tutorial.IN_AXES[:3], out_axes=["batch", "classes", ...])
    np.testing.assert_allclose(logits(*data[:3]), tutorial.predict(*data[:3]), rtol=1e-5, atol=1e-6)


def test_toy_network_parallel_strategies_give_the_same_loss():
    data = tutorial.make_data(**SMALL)
    ref = float(tutorial.loss(*data))
    for title, resources, mesh in tutorial.strategies():
        with jax.set_mesh(mesh):
            f = nx.xmap(
                tutorial.named_loss, in_axes=tutorial.IN_AXES, out_axes=[...], axis_resources=resources
            )
            np.testing.assert_allclose(float(f(*data)), ref, rtol=1e-5, err_msg=title)


def test_tutorial_local_and_distributed_matmul():
    # local_matmul vs distr_matmul on a 2x4 mesh; without a mesh, the "insufficient resources" error
    x = np.arange(64.0, dtype=np.float32).reshape(8, 8) / 64
    local = xm(jnp.vdot, ({0: "left"}, {1: "right"}), ["left", "right", ...])
    distr = xm(
        jnp.vdot,
        ({0: "left"}, {1: "right"}),
        ["left", "right", ...],
        axis_resources={"left": "x", "right": "y"},
    )
    with pytest.raises(errors.MissingResourceError, match="In-scope resources are insufficient"):
        distr(x, x)
    with jax.set_mesh(Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))):
        out = distr(x, x)
    np.testing.assert_allclose(out, local(x, x), rtol=1e-6)
    np.testing.assert_allclose(out, x @ x, rtol=1e-6)
    assert out.sharding.spec == jax.sharding.PartitionSpec("x", "y")


def test_tutorial_sum_two_args_shares_a_resource():
    # both names on one mesh axis is fine when they never meet in one value
    def sum_two_args(x, y):
        return nx.sum(x, "a") + nx.sum(y, "b")

    with jax.set_mesh(Mesh(np.array(jax.devices()[:4]), ("x",))):
        q = xm(sum_two_args, ({0: "a"}, {0: "b"}), {}, axis_resources={"a": "x", "b": "x"})
        np.testing.assert_allclose(q(np.ones(4), np.ones(12)), 16.0)
        # ... and an error when they do
        with pytest.raises(
            errors.ResourceConflictError, match="`a` and `b` are both mapped to the resource `x`"
        ):
            xm(
                lambda x, y: x + y,
                ({0: "a"}, {0: "b"}),
                {0: "a", 1: "b"},
                axis_resources={"a": "x", "b": "x"},
            )(np.ones(4), np.ones(12))


def test_demo_runs(capsys):
    tutorial.main(**SMALL)
    out = capsys.readouterr().out
    positional = float(out.split("positional loss: ")[1].split()[0])
    named = float(out.split("nx.xmap loss: ")[1].split()[0])
    assert positional == pytest.approx(named, rel=1e-6)
    for title in ("data parallel", "model parallel", "data x model"):
        line = next(ln for ln in out.splitlines() if ln.startswith(title))
        assert float(re.search(r"\}\s+(-?[\d.]+)", line).group(1)) == pytest.approx(positional, rel=1e-5)
    # section 4: one model, four nx.axis_rules strategies, equal losses and a layout picture each
    curves = {}
    for title in ("replicated", "data parallel", "model parallel", "data x model"):
        line = next(ln for ln in out.splitlines() if ln.startswith(title) and "losses" in ln)
        curves[title] = [float(v) for v in line.split("losses")[1].split()]
    first = curves["replicated"]
    assert len(first) == 3 and first[-1] < first[0]
    for curve in curves.values():
        np.testing.assert_allclose(curve, first, rtol=1e-5)
    assert "every strategy gives the same losses: True" in out
    assert "split batch over data, hidden over model" in out and "hidden[8:16]" in out
    assert "at once and in 4 chunks, equal: True" in out
    assert "a wrong dtype is caught" in out
