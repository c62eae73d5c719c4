"""The NumPy mirror: ``nx.<f>`` for jax.numpy, NumPy's protocols, positional operands on either side."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import namedarray as nx
from namedarray.errors import PositionalMisuseError
from namedarray.ops.mirror import REDUCTIONS as REDUCTION_NAMES

D = np.arange(1, 25, dtype=np.float32).reshape(2, 3, 4) / 4


@pytest.fixture
def x():
    return nx.wrap(D, {0: "a", 2: "b"})  # positional (3,); a=2, b=4


def ab(v):
    """Positional array with a, b after the positional axes (the layout of the references below)."""
    return np.asarray(nx.unwrap(v, {v.ndim: "a", v.ndim + 1: "b"}))


REF = D.transpose(1, 0, 2)  # (3, a, b)


# --------------------------------------------------------------------------------------------------------
# NumPy's protocols


def test_numpy_ufuncs_return_named_arrays(x):
    for out, want in ((np.exp(x), np.exp(REF)), (np.add(x, 1), REF + 1), (np.sqrt(x), np.sqrt(REF)),
                      (np.maximum(x, 2.0), np.maximum(REF, 2.0)), (np.negative(x), -REF)):
        assert isinstance(out, nx.NamedArray) and out.named_shape == {"a": 2, "b": 4} and out.shape == (3,)
        np.testing.assert_allclose(ab(out), want, rtol=1e-6)


def test_numpy_reductions_reduce_positional_axes_by_default_and_names_when_named(x):
    m = np.mean(x)
    assert isinstance(m, nx.NamedArray) and m.shape == () and m.named_shape == {"a": 2, "b": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(m, ["a", "b"])), REF.mean(0), rtol=1e-6)
    s = np.sum(x, axis="b")
    assert isinstance(s, nx.NamedArray) and s.named_shape == {"a": 2} and s.shape == (3,)
    np.testing.assert_allclose(np.asarray(nx.unwrap(s, [None, "a"])), REF.sum(2), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(np.std(x, axis=(0, "a"), ddof=1).unwrap(["b"])),
                               REF.std(axis=(0, 1), ddof=1), rtol=1e-5)
    np.testing.assert_array_equal(np.argmax(x, axis="b").unwrap([None, "a"]), REF.argmax(2))
    np.testing.assert_allclose(ab(np.cumsum(x, axis="a")), REF.cumsum(1), rtol=1e-6)
    np.testing.assert_allclose(np.median(x, axis=("a", "b")).unwrap(), np.median(REF, axis=(1, 2)))


def test_ufunc_reduce_and_accumulate(x):
    np.testing.assert_allclose(np.add.reduce(x).unwrap(["a", "b"]), REF.sum(0), rtol=1e-6)  # axis 0
    np.testing.assert_allclose(np.maximum.reduce(x, axis="b").unwrap([None, "a"]), REF.max(2))
    np.testing.assert_allclose(ab(np.add.accumulate(x, axis="b")), np.add.accumulate(REF, axis=2), rtol=1e-6)
    np.testing.assert_allclose(ab(np.multiply.accumulate(x)), np.multiply.accumulate(REF, axis=0), rtol=1e-6)


def test_ufunc_dtype_keyword(x):
    out = np.sin(x, dtype=np.float16)
    assert out.dtype == jnp.float16 and out.named_shape == x.named_shape


def test_numpy_array_functions(x):
    np.testing.assert_allclose(ab(np.where(x > 2, x, 0.0)), np.where(REF > 2, REF, 0), rtol=1e-6)
    np.testing.assert_allclose(ab(np.clip(x, 1, 3)), np.clip(REF, 1, 3))
    np.testing.assert_allclose(ab(np.round(x * 3, 1)), np.round(REF * 3, 1), rtol=1e-6)
    assert np.transpose(x).named_shape == x.named_shape  # positional transpose: rank 1, a no-op
    c = np.concatenate([x, x], axis="b")
    assert c.named_shape == {"a": 2, "b": 8}
    np.testing.assert_allclose(ab(c), np.concatenate([REF, REF], axis=2))
    st = np.stack([x, 2 * x], axis="layer")
    assert st.named_shape == {"a": 2, "b": 4, "layer": 2}
    np.testing.assert_allclose(np.asarray(st.unwrap([None, "a", "b", "layer"]))[..., 1], 2 * REF)
    assert np.shape(x) == (3,) and np.ndim(x) == 1 and np.size(x) == 3
    assert bool(np.isclose(x, x).all(("a", "b", 0)))


def test_numpy_submodule_functions_vectorise_over_names():
    m = nx.wrap(np.random.default_rng(0).normal(size=(2, 3, 3)).astype(np.float32), ["batch", ...])
    det = np.linalg.det(m)
    assert isinstance(det, nx.NamedArray) and det.named_shape == {"batch": 2}
    np.testing.assert_allclose(det.unwrap(["batch"]), np.linalg.det(np.asarray(m.unwrap(["batch", ...]))),
                               rtol=1e-4)
    norm = np.linalg.norm(m, axis=-1)
    np.testing.assert_allclose(norm.unwrap(["batch", ...]), np.linalg.norm(m.unwrap(["batch", ...]), axis=-1),
                               rtol=1e-5)
    spec = np.fft.rfft(m)
    assert spec.shape == (3, 2) and spec.named_shape == {"batch": 2}
    # a norm along a name is a reduction over it, as in nx.linalg.norm
    np.testing.assert_allclose(np.linalg.norm(m, axis="batch"),
                               np.linalg.norm(m.unwrap(["batch", ...]), axis=0), rtol=1e-5)


def test_np_unwrap_is_phase_unwrapping_not_nx_unwrap():
    phases = np.array([0.0, 3.0, 6.5, 0.5], np.float32)
    p = nx.wrap(np.stack([phases, phases + 1]), ["batch", ...])
    out = np.unwrap(p)
    assert isinstance(out, nx.NamedArray) and out.named_shape == {"batch": 2}
    np.testing.assert_allclose(out[{"batch": 0}].unwrap(), np.unwrap(phases), rtol=1e-6)


def test_out_argument_is_refused(x):
    with pytest.raises(TypeError):
        np.add(x, 1, out=np.zeros((3, 2, 4), np.float32))


def test_dtype_queries_look_at_the_storage(x):
    assert nx.result_type(x, 1) == jnp.float32
    assert nx.can_cast(x, jnp.float64) and not nx.can_cast(x, jnp.int8)
    assert np.can_cast(x, np.float64)
    assert nx.iscomplexobj(x) is False and nx.isrealobj(x) is True


# --------------------------------------------------------------------------------------------------------
# Positional operands on either side


@pytest.mark.parametrize("make", [jnp.asarray, np.asarray], ids=["jax", "numpy"])
def test_positional_arrays_on_either_side(x, make):
    p = make(np.array([1.0, 2.0, 4.0], np.float32))
    col = p[:, None, None]
    cases = [(p + x, col + REF), (x + p, REF + col), (p * x, col * REF), (p - x, col - REF),
             (x / p, REF / col), (p ** x, col ** REF), (p // x, col // REF), (x % p, REF % col),
             (p < x, col < REF), (p >= x, col >= REF), (p == x, col == REF)]
    for out, want in cases:
        assert isinstance(out, nx.NamedArray), type(out)
        assert out.named_shape == {"a": 2, "b": 4} and out.shape == (3,)
        np.testing.assert_allclose(ab(out), want, rtol=1e-5)


def test_positional_operand_with_more_axes_broadcasts_positionally(x):
    p = jnp.ones((5, 1))
    out = p + x
    assert out.shape == (5, 3) and out.named_shape == {"a": 2, "b": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, {2: "a", 3: "b"})),
                               1 + np.broadcast_to(REF, (5, 3, 2, 4)))


def test_matmul_and_divmod_from_either_side(x):
    v = jnp.array([1.0, 0.0, 2.0])
    np.testing.assert_allclose(nx.unwrap(v @ x, ["a", "b"]), np.einsum("p,pab->ab", v, REF), rtol=1e-6)
    np.testing.assert_allclose(nx.unwrap(x @ v, ["a", "b"]), np.einsum("pab,p->ab", REF, v), rtol=1e-6)
    q, r = divmod(jnp.float32(7.0), x)
    np.testing.assert_allclose(ab(q), 7 // REF)
    np.testing.assert_allclose(ab(r), 7 % REF, rtol=1e-6)
    q, r = divmod(x, 2)
    np.testing.assert_allclose(ab(q), REF // 2)


def test_python_scalars_keep_weak_typing():
    i = nx.wrap(jnp.arange(3, dtype=jnp.int8), ["k"])
    assert (i + 1).dtype == jnp.int8 and (2 * i).dtype == jnp.int8
    assert (i + 1.5).dtype == jnp.float32
    h = nx.wrap(jnp.ones(3, jnp.bfloat16), ["k"])
    assert (h * 2.0).dtype == jnp.bfloat16 and (1.0 - h).dtype == jnp.bfloat16


def test_bitwise_and_shifts():
    i = nx.wrap(np.array([[1, 2, 3], [4, 5, 6]], np.int32), ["a", "b"])
    ref = np.array([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal((i & 3).unwrap(["a", "b"]), ref & 3)
    np.testing.assert_array_equal((6 | i).unwrap(["a", "b"]), 6 | ref)
    np.testing.assert_array_equal((i ^ i.T).unwrap(["a", "b"]), np.zeros((2, 3)))
    np.testing.assert_array_equal((~i).unwrap(["a", "b"]), ~ref)
    np.testing.assert_array_equal((i << 2).unwrap(["a", "b"]), ref << 2)
    np.testing.assert_array_equal((64 >> i).unwrap(["a", "b"]), 64 >> ref)


# --------------------------------------------------------------------------------------------------------
# The breadth of nx.<f>


def test_every_jax_numpy_function_has_an_nx_counterpart():
    missing = [n for n in dir(jnp) if not n.startswith("_") and not hasattr(nx, n)]
    assert missing == []
    # nx.unwrap is the inverse of nx.wrap; jax.numpy's phase unwrapping stays reachable through nx.nmap
    assert nx.unwrap is not jnp.unwrap


@pytest.mark.parametrize("name, args, kwargs", [
    ("diff", (), {}), ("trace", (), {}), ("flip", (), {}), ("roll", (1,), {}), ("cumsum", (), {"axis": -1}),
    ("convolve", (np.ones(2, np.float32),), {}),
    ("interp", (np.array([0.0, 10.0]), np.array([0.0, 1.0])), {}),
    ("polyval", (np.array([1.0, 2.0]),), {}), ("outer", (np.arange(2.0),), {}), ("sort", (), {}),
    ("tril", (), {}), ("diagonal", (), {}), ("linspace", (5.0, 3), {}), ("repeat", (2,), {"axis": 0}),
    ("split", (2,), {"axis": -1}), ("pad", (1,), {}), ("expand_dims", (0,), {}),
])
def test_lifted_functions_run_slice_by_slice(name, args, kwargs):
    # positional (2, 2) with one name of size 3; the NamedArray is the first argument
    d = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    v = nx.wrap(d, ["n", ...])
    if name in ("interp", "polyval", "convolve", "outer", "linspace"):
        d, v = d[:, 0], nx.wrap(d[:, 0], ["n", ...])  # these take 1-d (or scalar) arguments
    if name == "linspace":
        d, v = d[:, 0], nx.wrap(d[:, 0], ["n"])
    f = getattr(nx, name)
    out = f(v, *args, **kwargs)
    outs = out if isinstance(out, (list, tuple)) else [out]
    for i in range(3):
        want = getattr(jnp, name)(d[i], *args, **kwargs)
        wants = want if isinstance(want, (list, tuple)) else [want]
        for o, w in zip(outs, wants, strict=True):
            assert o.named_shape == {"n": 3}
            np.testing.assert_allclose(o[{"n": i}].unwrap(), w, rtol=1e-6)


@pytest.mark.parametrize("call", [
    lambda v: nx.squeeze(v, axis="n"), lambda v: nx.expand_dims(v, "new"), lambda v: nx.moveaxis(v, "n", 0),
    lambda v: v.transpose(("n", 0, 1)), lambda v: v.swapaxes(0, "n"),
    lambda v: nx.linalg.vecdot(v, v, axis="n"), lambda v: np.average(v, axis=("n", 0)),
    lambda v: nx.fft.fft(v, axis="n"),
], ids=["squeeze", "expand_dims", "moveaxis", "transpose", "swapaxes", "linalg.vecdot", "np.average", "fft"])
def test_a_name_where_a_lifted_function_takes_positions(call):
    v = nx.wrap(np.ones((3, 2, 2), np.float32), ["n", ...])
    with pytest.raises(nx.errors.AxisSpecError, match=r"lifted over named axes, so its \w+ counts positional "
                                                      r"axes only; got .*'(n|new)'"):
        call(v)


def test_operations_along_a_named_axis_with_positional_options():
    v = nx.wrap(np.arange(12, dtype=np.float32).reshape(4, 3), ["t", "f"])
    ref = np.arange(12, dtype=np.float32).reshape(4, 3)
    pieces = nx.split(v, [1, 3], axis="t")
    assert [p.named_shape for p in pieces] == [{"t": 1, "f": 3}, {"t": 2, "f": 3}, {"t": 1, "f": 3}]
    np.testing.assert_array_equal(pieces[1].unwrap(["t", "f"]), ref[1:3])
    np.testing.assert_array_equal(nx.roll(v, 1, axis="t").unwrap(["t", "f"]), np.roll(ref, 1, axis=0))
    np.testing.assert_array_equal(nx.diff(v, 2, axis="t").unwrap(["t", "f"]), np.diff(ref, 2, axis=0))
    np.testing.assert_array_equal(nx.repeat(v, 2, axis="f").unwrap(["t", "f"]), np.repeat(ref, 2, axis=1))
    np.testing.assert_array_equal(nx.flip(v, axis="f").unwrap(["t", "f"]), ref[:, ::-1])
    rows = nx.unstack(v, axis="t")
    assert len(rows) == 4 and all(r.named_shape == {"f": 3} for r in rows)
    np.testing.assert_array_equal(rows[2].unwrap(["f"]), ref[2])


def test_value_dependent_functions_refuse_named_axes():
    v = nx.wrap(np.array([[1, 1], [2, 3]]), ["n", ...])
    with pytest.raises(PositionalMisuseError, match="unique.*'n'"):
        nx.unique(v)
    with pytest.raises(PositionalMisuseError, match="where.*'n'"):
        nx.where(v > 1)
    np.testing.assert_array_equal(nx.unique(nx.wrap(np.array([3, 1, 3]))), [1, 3])


def test_nmap_under_jit_and_with_named_collectives():
    v = nx.wrap(np.arange(6, dtype=np.float32).reshape(2, 3), ["a", "b"])
    # inside nmap each name is also a vmap axis name: lax collectives over it work
    centred = nx.nmap(lambda t: t - jax.lax.pmean(t, "b"))(v)
    np.testing.assert_allclose(centred.unwrap(["a", "b"]), [[-1, 0, 1], [-1, 0, 1]])
    out = jax.jit(nx.nmap(jnp.linalg.norm))(nx.wrap(np.ones((4, 2, 3), np.float32), ["batch", ...]))
    np.testing.assert_allclose(out.unwrap(["batch"]), np.full(4, np.sqrt(6.0)), rtol=1e-6)


# --------------------------------------------------------------------------------------------------------
# Joining and selecting along a name


def test_concatenate_along_a_name_aligns_other_names_by_name():
    a = nx.wrap(np.arange(6.0).reshape(2, 3), ["t", "f"])
    b = nx.wrap(np.arange(12.0).reshape(3, 4) + 100, ["f", "t"])  # the other storage order
    out = nx.concatenate([a, b], axis="t")
    assert out.named_shape == {"t": 6, "f": 3}
    want = np.concatenate([np.arange(6.0).reshape(2, 3), (np.arange(12.0).reshape(3, 4) + 100).T])
    np.testing.assert_array_equal(out.unwrap(["t", "f"]), want)
    jitted = jax.jit(lambda u, v: nx.concatenate([u, v], axis="t"))(a, b)
    np.testing.assert_array_equal(jitted.unwrap(["t", "f"]), want)
    # an operand without "f" broadcasts along it
    c = nx.wrap(np.array([50.0, 51.0]), ["t"])
    np.testing.assert_array_equal(nx.concatenate([a, c], axis="t").unwrap(["t", "f"])[2:],
                                  np.repeat([[50.0], [51.0]], 3, 1))
    np.testing.assert_array_equal(nx.append(a, c, axis="t").unwrap(["t", "f"])[2:], [[50.0] * 3, [51.0] * 3])


def test_stack_along_a_new_name_and_positional_stack():
    a = nx.wrap(np.arange(6.0).reshape(2, 3), ["t", "f"])
    s = nx.stack([a, 2 * a, 3 * a], axis="layer")
    assert s.named_shape == {"t": 2, "f": 3, "layer": 3}
    np.testing.assert_array_equal(s.unwrap(["layer", "t", "f"]),
                                  np.arange(6.0).reshape(2, 3) * np.arange(1, 4)[:, None, None])
    p = nx.stack([a, a + 1], axis=0)
    assert p.shape == (2,) and p.named_shape == {"t": 2, "f": 3}
    np.testing.assert_array_equal(p[1].unwrap(["t", "f"]), np.arange(6.0).reshape(2, 3) + 1)


def test_take_along_a_name():
    a = nx.wrap(np.arange(6.0).reshape(2, 3), ["t", "f"])
    ref = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(nx.take(a, jnp.array([2, 0]), axis="f").unwrap(["t", "f"]), ref[:, [2, 0]])
    one = nx.take(a, 1, axis="f")
    assert one.named_shape == {"t": 2}
    np.testing.assert_array_equal(one.unwrap(["t"]), ref[:, 1])
    by_name = nx.take(a, nx.wrap(jnp.array([2, 0]), ["j"]), axis="f")
    assert by_name.named_shape == {"t": 2, "j": 2}
    np.testing.assert_array_equal(by_name.unwrap(["t", "j"]), ref[:, [2, 0]])


def test_take_along_a_name_counts_the_rank_of_list_indices():
    a = nx.wrap(np.arange(6.0).reshape(2, 3), ["t", "f"])
    np.testing.assert_array_equal(nx.take(a, [2, 0], axis="f").unwrap(["t", "f"]),
                                  np.arange(6.0).reshape(2, 3)[:, [2, 0]])
    with pytest.raises(nx.errors.AxisSpecError, match=r"scalar or 1-d \(got shape \(1, 2\)\)"):
        nx.take(a, [[2, 0]], axis="f")


def test_joining_along_a_name_needs_equal_positional_shapes():
    with pytest.raises(nx.errors.AxisSizeError, match=r"positional shapes must agree.*argument 0 has shape "
                                                      r"\(3,\) and argument 1 has shape \(4,\)"):
        nx.concatenate([nx.wrap(np.ones((2, 3)), ["t", ...]), nx.wrap(np.ones((2, 4)), ["t", ...])], axis="t")


def test_stacking_positional_arrays_along_a_new_name():
    s = nx.stack([jnp.zeros(2), jnp.ones(2), np.full(2, 2.0)], axis="layer")
    assert s.shape == (2,) and s.named_shape == {"layer": 3}
    np.testing.assert_array_equal(s.unwrap([None, "layer"]), [[0, 1, 2], [0, 1, 2]])


def test_linalg_and_fft_namespaces_lift_over_names():
    d = np.random.default_rng(0).normal(size=(2, 3, 3)).astype(np.float32)
    m = nx.wrap(d, ["batch", ...])
    np.testing.assert_allclose(nx.linalg.det(m).unwrap(["batch"]), np.linalg.det(d), rtol=1e-4)
    np.testing.assert_allclose(nx.linalg.norm(m, axis=0).unwrap(["batch", ...]), np.linalg.norm(d, axis=1),
                               rtol=1e-5)
    u, s, vt = nx.linalg.svd(m)
    assert s.named_shape == {"batch": 2} and s.shape == (3,)
    np.testing.assert_allclose(s.unwrap(["batch", ...]), np.linalg.svd(d)[1], rtol=1e-4)
    np.testing.assert_allclose(nx.fft.rfft(m).unwrap(["batch", ...]), np.fft.rfft(d), rtol=1e-4, atol=1e-5)
    from namedarray.linalg import inv

    np.testing.assert_allclose(inv(m).unwrap(["batch", ...]), np.linalg.inv(d), rtol=1e-3, atol=1e-4)


# --------------------------------------------------------------------------------------------------------
# Arguments as jax.numpy takes them


@pytest.mark.parametrize("name", sorted(REDUCTION_NAMES))
def test_reductions_of_plain_arrays_take_the_axis_by_position(name):
    d = np.arange(1, 13, dtype=np.float32).reshape(3, 4) / 8
    args = (0.25,) if "quantile" in name else (50.0,) if "percentile" in name else ()
    for a in (d, jnp.asarray(d)):
        np.testing.assert_allclose(getattr(nx, name)(a, *args, 1), getattr(jnp, name)(d, *args, 1), rtol=1e-6)
        np.testing.assert_allclose(getattr(nx, name)(a, *args, -1, keepdims=True),
                                   getattr(jnp, name)(d, *args, -1, keepdims=True), rtol=1e-6)


def test_axis_given_twice_is_refused_as_python_would():
    v = nx.wrap(D, {0: "a", 2: "b"})
    for call in (lambda: v.sum("a", axis="b"), lambda: nx.max(v, 0, axis="a"),
                 lambda: nx.quantile(v, 0.5, "a", axis="b")):
        with pytest.raises(TypeError, match="multiple values for argument 'axis'"):
            call()


def test_per_axis_options_pair_with_axes_in_the_order_given():
    d = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    v = nx.wrap(d, {1: "a"})  # positional (2, 4), a=3
    ref = d.transpose(0, 2, 1)
    np.testing.assert_array_equal(ab_last(nx.roll(v, (1, 2), axis=("a", 0))),
                                  np.roll(ref, (1, 2), axis=(2, 0)))
    np.testing.assert_array_equal(ab_last(nx.roll(v, (2, 1), ("a", -1))), np.roll(ref, (2, 1), axis=(2, 1)))


def ab_last(v):
    """Positional array with v's names after its positional axes, sorted."""
    return np.asarray(nx.unwrap(v, {v.ndim + i: n for i, n in enumerate(sorted(v.named_shape))}))


def test_options_after_axis_given_by_position():
    ref = np.arange(12, dtype=np.float32).reshape(4, 3)
    v = nx.wrap(ref, ["t", "f"])
    out = nx.cumsum(v, "t", jnp.int32)
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(out.unwrap(["t", "f"]), np.cumsum(ref, 0))
    np.testing.assert_array_equal(nx.diff(v, 1, "f", 0.0).unwrap(["t", "f"]), np.diff(ref, 1, 1, prepend=0.0))
    np.testing.assert_array_equal(nx.partition(v, 1, "t").unwrap(["t", "f"])[1], np.partition(ref, 1, 0)[1])
    np.testing.assert_array_equal(nx.gradient(v, 2.0, axis="t").unwrap(["t", "f"]),
                                  np.gradient(ref, 2.0, axis=0))
    with pytest.raises(TypeError, match="multiple values"):
        nx.roll(v, 1, "t", axis="f")


def test_trapezoid_on_plain_arrays_along_positions_and_along_names():
    y = np.arange(12, dtype=np.float32).reshape(3, 4) ** 2
    xs = np.array([0.0, 1.0, 3.0, 4.0], np.float32)
    np.testing.assert_allclose(nx.trapezoid(jnp.asarray(y)), np.trapezoid(y), rtol=1e-6)
    np.testing.assert_allclose(nx.trapezoid(jnp.asarray(y), jnp.asarray(xs)), np.trapezoid(y, xs), rtol=1e-6)
    v = nx.wrap(y, ["b", ...])
    np.testing.assert_allclose(nx.trapezoid(v, xs).unwrap(["b"]), np.trapezoid(y, xs), rtol=1e-6)
    np.testing.assert_allclose(nx.trapezoid(v, dx=0.5, axis=0).unwrap(["b"]), np.trapezoid(y, dx=0.5),
                               rtol=1e-6)
    t = nx.wrap(y, ["b", "t"])
    np.testing.assert_allclose(nx.trapezoid(t, axis="b").unwrap(["t"]), np.trapezoid(y, axis=0), rtol=1e-6)
    # sample points that carry the name are matched by it
    out = nx.trapezoid(t, nx.wrap(xs, ["t"]), axis="t")
    assert out.named_shape == {"b": 3}
    np.testing.assert_allclose(out.unwrap(["b"]), np.trapezoid(y, xs, axis=1), rtol=1e-6)
    with pytest.raises(nx.errors.UnboundAxisError, match="'zz'"):
        nx.trapezoid(t, axis="zz")


def test_size_of_given_positional_axes():
    v = nx.wrap(np.zeros((2, 3, 5)), {1: "a"})
    assert nx.size(v, 0) == 2 and nx.size(v, -1) == 5 and nx.size(v, (0, 1)) == 10 and nx.size(v) == 10
    assert nx.size(np.zeros((2, 3)), 1) == 3


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.float32, np.bool_])
@pytest.mark.parametrize("exponent", [2, 3, np.int64(3), np.int8(2), True, 0, jnp.asarray(2)], ids=repr)
def test_integer_powers_as_jax_numpy_computes_them(dtype, exponent):
    d = (np.arange(6).reshape(2, 3) - (0 if np.dtype(dtype).kind in "ub" else 2)).astype(dtype)
    want = jnp.power(jnp.asarray(d), exponent)
    for got in (nx.wrap(d, ["a", "b"]) ** exponent, nx.power(nx.wrap(d, ["a", "b"]), exponent)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.unwrap(["a", "b"]), want)


def test_integer_power_precision_and_errors_match_jax_numpy():
    d = np.float32([1.1, -3.7, 1e-3])
    np.testing.assert_array_equal((nx.wrap(d, ["k"]) ** 3).unwrap(["k"]), jnp.asarray(d) ** 3)
    with pytest.raises(TypeError, match="negative powers"):
        nx.wrap(np.arange(3), ["k"]) ** -1
