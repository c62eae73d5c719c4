"""Lifted jax functions never compute silently on scalars, and reductions never reduce nothing.

Every lifted function of ``nx.nn``, ``nx.lax``, ``nx.linalg``, ``nx.fft``, ``nx.random`` (and the
``jax.numpy`` mirror) that acts along axes is applied to an all-named value: it must raise an ``nx.errors``
error naming the positional shape and the named axes, or, where its arguments say "no positional axis"
explicitly, equal the positional function applied element by element. A completeness check makes sure no
function with an axis argument is left out of the table.
"""

import inspect
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import namedarray as nx
from namedarray import errors
from namedarray.engine import lifting as lifted
from namedarray.ops import mirror

X = nx.wrap(np.arange(12, dtype=np.float32).reshape(3, 4) / 12 + 0.5, ["a", "b"])  # all named: shape ()
KEY = jax.random.key(0)
I = nx.wrap(np.arange(12, dtype=np.int32).reshape(3, 4), ["a", "b"])

# qualified name -> a call on all-named operands that must raise an nx error
RAISES = {
    # nx.nn
    "nn.dot_product_attention": lambda: nx.nn.dot_product_attention(X, X, X),
    "nn.scaled_matmul": lambda: nx.nn.scaled_matmul(X, X, X, X),
    "nn.softmax": lambda: nx.nn.softmax(X),
    "nn.log_softmax": lambda: nx.nn.log_softmax(X),
    "nn.logsumexp": lambda: nx.nn.logsumexp(X),
    "nn.logmeanexp": lambda: nx.nn.logmeanexp(X),
    "nn.standardize": lambda: nx.nn.standardize(X),
    "nn.glu": lambda: nx.nn.glu(X),
    # nx.lax
    "lax.approx_max_k": lambda: nx.lax.approx_max_k(X, 1),
    "lax.approx_min_k": lambda: nx.lax.approx_min_k(X, 1),
    "lax.argmax": lambda: nx.lax.argmax(X, 0, jnp.int32),
    "lax.argmin": lambda: nx.lax.argmin(X, 0, jnp.int32),
    "lax.batch_matmul": lambda: nx.lax.batch_matmul(X, X),
    "lax.collapse": lambda: nx.lax.collapse(X, 0),
    "lax.concatenate": lambda: nx.lax.concatenate([X, X], 0),
    "lax.conv": lambda: nx.lax.conv(X, X, (1,), "SAME"),
    "lax.conv_general_dilated": lambda: nx.lax.conv_general_dilated(X, X, (1,), "SAME"),
    "lax.conv_general_dilated_local": lambda: nx.lax.conv_general_dilated_local(X, X, (1,), "SAME", (1,)),
    "lax.conv_general_dilated_patches": lambda: nx.lax.conv_general_dilated_patches(X, (1,), (1,), "SAME"),
    "lax.conv_transpose": lambda: nx.lax.conv_transpose(X, X, (1,), "SAME"),
    "lax.conv_with_general_padding": lambda: nx.lax.conv_with_general_padding(X, X, (1,), [(0, 0)], None,
                                                                              None),
    "lax.cumlogsumexp": lambda: nx.lax.cumlogsumexp(X),
    "lax.cummax": lambda: nx.lax.cummax(X),
    "lax.cummin": lambda: nx.lax.cummin(X),
    "lax.cumprod": lambda: nx.lax.cumprod(X),
    "lax.cumsum": lambda: nx.lax.cumsum(X),
    "lax.dot": lambda: nx.lax.dot(X, X),
    "lax.dynamic_index_in_dim": lambda: nx.lax.dynamic_index_in_dim(X, 0),
    "lax.dynamic_slice_in_dim": lambda: nx.lax.dynamic_slice_in_dim(X, 0, 1),
    "lax.dynamic_update_index_in_dim": lambda: nx.lax.dynamic_update_index_in_dim(X, X, 0, 0),
    "lax.dynamic_update_slice_in_dim": lambda: nx.lax.dynamic_update_slice_in_dim(X, X, 0, 0),
    "lax.index_in_dim": lambda: nx.lax.index_in_dim(X, 0),
    "lax.index_take": lambda: nx.lax.index_take(X, (jnp.array([0]),), (0,)),
    "lax.ragged_dot": lambda: nx.lax.ragged_dot(X, X, jnp.array([1])),
    "lax.reduce": lambda: nx.lax.reduce(X, 0.0, jax.lax.add, (0,)),
    "lax.reduce_and": lambda: nx.lax.reduce_and(X > 0, (0,)),
    "lax.reduce_max": lambda: nx.lax.reduce_max(X, (0,)),
    "lax.reduce_min": lambda: nx.lax.reduce_min(X, (0,)),
    "lax.reduce_or": lambda: nx.lax.reduce_or(X > 0, (0,)),
    "lax.reduce_prod": lambda: nx.lax.reduce_prod(X, (0,)),
    "lax.reduce_sum": lambda: nx.lax.reduce_sum(X, (0,)),
    "lax.reduce_xor": lambda: nx.lax.reduce_xor(I, (0,)),
    "lax.rev": lambda: nx.lax.rev(X, (0,)),
    "lax.slice_in_dim": lambda: nx.lax.slice_in_dim(X, 0, 1),
    "lax.sort": lambda: nx.lax.sort(X),
    "lax.sort_key_val": lambda: nx.lax.sort_key_val(X, X),
    "lax.split": lambda: nx.lax.split(X, (1,)),
    "lax.squeeze": lambda: nx.lax.squeeze(X, (0,)),
    "lax.top_k": lambda: nx.lax.top_k(X, 1),
    "lax.unstack": lambda: nx.lax.unstack(X),
    # nx.fft
    **{f"fft.{f}": (lambda f=f: getattr(nx.fft, f)(X)) for f in """fft fft2 fftn fftshift hfft ifft ifft2
       ifftn ifftshift ihfft irfft irfft2 irfftn rfft rfft2 rfftn""".split()},
    # nx.linalg
    **{f"linalg.{f}": (lambda f=f: getattr(nx.linalg, f)(X)) for f in """cholesky cond det diagonal eig
       eigh eigvals eigvalsh inv matrix_norm matrix_rank matrix_transpose norm pinv qr slogdet svd svdvals
       tensorinv trace vector_norm""".split()},
    **{f"linalg.{f}": (lambda f=f: getattr(nx.linalg, f)(X, X)) for f in """cross lstsq matmul outer solve
       tensordot tensorsolve vecdot""".split()},
    "linalg.matrix_power": lambda: nx.linalg.matrix_power(X, 2),
    "linalg.multi_dot": lambda: nx.linalg.multi_dot([X, X]),
    # nx.random
    "random.choice": lambda: nx.random.choice(KEY, X),
    "random.dirichlet": lambda: nx.random.dirichlet(KEY, X),
    "random.multivariate_normal": lambda: nx.random.multivariate_normal(KEY, X, X),
    "random.multinomial": lambda: nx.random.multinomial(KEY, 3.0, X),
    "random.categorical": lambda: nx.random.categorical(KEY, X),
    "random.permutation": lambda: nx.random.permutation(KEY, X),
    # the jax.numpy mirror
    **{f: (lambda f=f: getattr(nx, f)(X)) for f in """trace diagonal matrix_transpose rot90 average cumsum
       cumprod nancumsum nancumprod flip sort argsort diff vander trapezoid sum mean max argmax median
       ptp var std""".split()},
    **{f: (lambda f=f: getattr(nx, f)(X, X)) for f in """cross vecdot convolve correlate kron polyval matvec
       vecmat polyadd polysub polymul polydiv digitize""".split()},
    **{f: (lambda f=f: getattr(nx, f)(X)) for f in "polyder polyint".split()},
    **{f: (lambda f=f: getattr(nx, f)(X, 2)) for f in "hsplit vsplit dsplit".split()},
    # every reduction: axis=None on an all-named value reduces nothing
    **{f: (lambda f=f: getattr(nx, f)(X, *((0.5,) if f in mirror.TAKES_Q else ())))
       for f in mirror.REDUCTIONS},
    "roll": lambda: nx.roll(X, 1),
    "swapaxes": lambda: nx.swapaxes(X, 0, 1),
    "moveaxis": lambda: nx.moveaxis(X, 0, 1),
    "take_along_axis": lambda: nx.take_along_axis(X, I),
    "apply_along_axis": lambda: nx.apply_along_axis(jnp.sum, 0, X),
}
# functions that newer JAX releases have, or give an axis argument
RAISES.update({k: v for k, v in {
    "lax.top_k": lambda: nx.lax.top_k(X, 1),
    "top_k": lambda: nx.top_k(X, 1),
    "minmax": lambda: nx.minmax(X),
}.items() if hasattr(jax.lax if k.startswith("lax.") else jnp, k.rpartition(".")[2])})

# functions that take explicit positions whose number must match the positional rank: on an all-named value,
# the positional spelling for rank 0 is legitimate and means "element by element"
PER_ELEMENT = {
    "lax.slice": (lambda v: nx.lax.slice(v, (), ()), lambda e: jax.lax.slice(e, (), ())),
    "lax.pad": (lambda v: nx.lax.pad(v, 0.0, []), lambda e: jax.lax.pad(e, 0.0, [])),
    "lax.reshape": (lambda v: nx.lax.reshape(v, (1, 1)), lambda e: jax.lax.reshape(e, (1, 1))),
    "lax.transpose": (lambda v: nx.lax.transpose(v, ()), lambda e: jax.lax.transpose(e, ())),
    "lax.expand_dims": (lambda v: nx.lax.expand_dims(v, (0,)), lambda e: jax.lax.expand_dims(e, (0,))),
    "lax.broadcast_in_dim": (lambda v: nx.lax.broadcast_in_dim(v, (2,), ()),
                             lambda e: jax.lax.broadcast_in_dim(e, (2,), ())),
    "lax.dynamic_slice": (lambda v: nx.lax.dynamic_slice(v, (), ()),
                          lambda e: jax.lax.dynamic_slice(e, (), ())),
    "lax.dynamic_update_slice": (lambda v: nx.lax.dynamic_update_slice(v, v * 2, ()),
                                 lambda e: jax.lax.dynamic_update_slice(e, e * 2, ())),
    "lax.tile": (lambda v: nx.lax.tile(v, ()), lambda e: jax.lax.tile(e, ())),
    "lax.stack": (lambda v: nx.lax.stack([v, v]), lambda e: jax.lax.stack([e, e])),
    "lax.dot_general": (lambda v: nx.lax.dot_general(v, v, (((), ()), ((), ()))),
                        lambda e: jax.lax.dot_general(e, e, (((), ()), ((), ())))),
    "linalg.tensordot": (lambda v: nx.linalg.tensordot(v, v, axes=0),
                         lambda e: jnp.linalg.tensordot(e, e, axes=0)),
    "expand_dims": (lambda v: nx.expand_dims(v, 0), lambda e: jnp.expand_dims(e, 0)),
    "squeeze": (lambda v: nx.squeeze(v), lambda e: jnp.squeeze(e)),
    "repeat": (lambda v: nx.repeat(v, 2), lambda e: jnp.repeat(e, 2)),
    "nn.one_hot": (lambda v: nx.nn.one_hot(v.astype(jnp.int32), 3),
                   lambda e: jax.nn.one_hot(e.astype(jnp.int32), 3)),
}

# functions with an axis-like argument that neither list holds, and why
EXEMPT = {
    "lax.broadcasted_iota": "no array argument", "lax.associative_scan": "a pytree function (not lifted)",
    "lax.fft": "fft_lengths: positions whose number must match the rank (jax checks it)",
    "lax.reduce_window": "window dimensions whose number must match the rank (jax checks it)",
    "lax.conv_general_permutations": "no array argument", "lax.conv_dimension_numbers": "no array argument",
    "random.orthogonal": "no array argument", "random.ball": "no array argument",
    "lexsort": "keys is a sequence whose length is the key count", "stack": "axis of the result (nx.stack)",
    "concatenate": "nx.concatenate takes names", "concat": "nx.concatenate takes names",
    "take": "nx.take takes names", "append": "nx.append takes names", "unstack": "nx.unstack takes names",
    "split": "nx.split takes names", "array_split": "along a name or a position (normalize_axis checks it)",
    "partition": "along a name or a position", "argpartition": "along a name or a position",
    "cumulative_sum": "along a name or a position", "cumulative_prod": "along a name or a position",
    "gradient": "along names or positions", "size": "a query of the positional shape",
    "packbits": "axis=None flattens (a positional value per element)",
    "unpackbits": "axis=None flattens (a positional value per element)",
    "insert": "axis=None flattens", "delete": "axis=None flattens", "put_along_axis": "needs an index array",
    "apply_over_axes": "a function of axes given explicitly",
    "transpose": "axes=None reverses the positional axes",
    "tensordot": "nx.tensordot contracts names", "rollaxis": "axis given explicitly (checked like swapaxes)",
    "permute_dims": "axes given explicitly", "linspace": "nx.linspace names its axis",
    **{f: "value-dependent output size: refuses named axes" for f in ("compress", "trim_zeros", "unique")},
    "indices": "no array argument", "inner": "nx.inner contracts names",
    "unwrap": "nx.unwrap is wrap's inverse",
    **{f"lax.{f}": "a collective over names" for f in ("all_gather", "pbroadcast", "pswapaxes")},
    "logspace": "nx.logspace names its axis", "geomspace": "nx.geomspace names its axis",
}


def _assert_raises_nx_error(call):
    with pytest.raises(errors.NamedAxisError) as caught:
        call()
    msg = str(caught.value)
    assert "'a'" in msg and "'b'" in msg, msg  # it names the value's axes


@pytest.mark.parametrize("name", sorted(RAISES))
def test_a_function_acting_along_positions_refuses_an_all_named_value(name):
    _assert_raises_nx_error(RAISES[name])


@pytest.mark.parametrize("name", sorted(PER_ELEMENT))
def test_explicit_rank_zero_arguments_compute_element_by_element(name):
    call, scalar = PER_ELEMENT[name]
    out = call(X)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    d = np.asarray(X.unwrap(["a", "b"]))
    refs = [[scalar(jnp.asarray(d[i, j])) for j in range(4)] for i in range(3)]
    for k, o in enumerate(outs):
        assert o.named_shape == {"a": 3, "b": 4}
        got = np.asarray(o.unwrap({0: "a", 1: "b"}))  # names first, the positional result after
        for i in range(3):
            for j in range(4):
                ref = refs[i][j]
                ref = ref[k] if isinstance(ref, (tuple, list)) else ref
                np.testing.assert_allclose(got[i, j], np.asarray(ref), rtol=1e-6)


def _lifted_functions():
    """(qualified name, function) for every function nx lifts from jax, and the ones it declares by name."""
    out = {}
    for mod, jmod in (("nn", jax.nn), ("lax", jax.lax), ("random", jax.random), ("fft", jnp.fft),
                      ("linalg", jnp.linalg), ("", jnp)):
        for name in dir(jmod):
            obj = getattr(jmod, name)
            if name.startswith("_") or isinstance(obj, (type, types.ModuleType)) or not callable(obj):
                continue
            out[f"{mod}.{name}" if mod else name] = obj
    return out


def test_every_function_with_an_axis_argument_is_audited():
    missing = []
    for qual, fn in _lifted_functions().items():
        try:
            params = set(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            continue
        mod, _, name = qual.rpartition(".")
        has_axes = params & lifted.AXIS_PARAMS or name in lifted.MIN_RANK.get(mod, {})
        if has_axes and qual not in RAISES and qual not in PER_ELEMENT and qual not in EXEMPT:
            missing.append(qual)
    assert not missing, f"functions with axis semantics missing from the audit: {sorted(missing)}"


def test_a_positional_axis_error_names_the_positional_shape_and_the_names():
    x = nx.wrap(jnp.ones((2, 3)), ["b", ...])  # one positional axis
    with pytest.raises(errors.PositionalAxisError,
                       match=r"nx.trace: axis2=1 counts positional axes, and the argument 'a' has 1 "
                             r"\(positional shape \(3,\), named axes 'b'\)") as caught:
        nx.trace(x)
    assert isinstance(caught.value, IndexError) and isinstance(caught.value, TypeError)  # as jax's errors
    # an error jax raises inside a lifted call says what was lifted over which names
    with pytest.raises(TypeError, match=r"nx.lax.slice is lifted over named axes .* positional shape \(3,\), "
                                        r"named axes 'b'"):
        nx.lax.slice(x, (0, 0), (1, 1))
    # enough positional axes: the lifted function runs slice by slice
    m = nx.wrap(jnp.arange(12.0).reshape(3, 2, 2), ["b", ...])
    np.testing.assert_allclose(nx.trace(m).unwrap(["b"]), np.trace(np.arange(12.0).reshape(3, 2, 2), axis1=1,
                                                                     axis2=2))


# --------------------------------------------------------------------------------------------------------
# Reductions with axis=None on all-named values


def test_a_reduction_with_nothing_to_reduce_is_an_error():
    logits = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["batch", "classes"])
    for call in (lambda: logits - nx.nn.logsumexp(logits), lambda: nx.argmax(logits), lambda: logits.sum(),
                 lambda: nx.mean(logits, where=logits > 1), lambda: nx.quantile(logits, 0.5)):
        with pytest.raises(errors.AxisSpecError, match=r"axis=None reduces the positional axes only .* "
                                                       r"\('batch', 'classes'\)\. Name the axes to reduce: "
                                                       r"axis='batch'"):
            call()
    # what works: naming the axes
    np.testing.assert_allclose(nx.argmax(logits, axis="classes").unwrap(["batch"]), [2, 2])
    # with a positional axis, axis=None reduces it (named axes survive), as before
    assert nx.wrap(jnp.ones((2, 3)), ["b", ...]).sum().named_shape == {"b": 2}
    assert float(nx.wrap(jnp.ones(3)).sum()) == 3.0  # no names at all: NumPy's meaning


def test_xmap_bodies_keep_xmaps_rule():
    def body(logits):  # per-example view: every axis is named, axis=None reduces the positional ones
        return logits - nx.nn.logsumexp(logits)

    out = nx.xmap(body, in_axes=["batch", "classes"], out_axes=["batch", "classes"])(jnp.ones((2, 3)))
    np.testing.assert_array_equal(out, np.zeros((2, 3)))
    out = nx.xmap(lambda v: v.sum(), in_axes=["i"], out_axes=["i"])(jnp.arange(3.0))
    np.testing.assert_array_equal(out, np.arange(3.0))


# --------------------------------------------------------------------------------------------------------
# norms by name, unwrap with names as arguments


def test_norms_take_names():
    d = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    x = nx.wrap(d, ["i", "j", "b"])
    np.testing.assert_allclose(nx.linalg.norm(x, axis="b").unwrap(["i", "j"]), np.linalg.norm(d, axis=2),
                               rtol=1e-5)
    np.testing.assert_allclose(nx.linalg.norm(x, "fro", axis=("i", "j")).unwrap(["b"]),
                               np.linalg.norm(d, "fro", axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(nx.linalg.norm(x, 1, axis=("j", "i")).unwrap(["b"]),
                               np.linalg.norm(d.transpose(1, 0, 2), 1, axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(nx.linalg.vector_norm(x, axis=("i", "b"), ord=3).unwrap(["j"]),
                               np.sum(np.abs(d) ** 3, axis=(0, 2)) ** (1 / 3), rtol=1e-5)
    kept = nx.linalg.norm(nx.wrap(d, ["i", ...]), axis=(0, "i"), keepdims=True)
    assert kept.shape == (1, 4) and kept.named_shape == {}
    np.testing.assert_allclose(kept.unwrap(), np.linalg.norm(d, axis=(1, 0))[None], rtol=1e-5)
    with pytest.raises(errors.AxisSpecError, match=r"gives 3 axes; .* nx.linalg.vector_norm\(x, axis="):
        nx.linalg.norm(x, axis=("i", "j", "b"))


def test_concatenate_along_a_position_the_value_lacks_says_to_give_a_name():
    x = nx.wrap(jnp.ones((2, 3)), ["a", "c"])
    with pytest.raises(errors.PositionalAxisError, match=r"axis=0 counts positional axes, and argument 0 has "
                                                         r"none .* give it: axis='a'"):
        nx.concatenate([x, x])  # jax: "Zero-dimensional arrays cannot be concatenated"
    assert nx.concatenate([x, x], axis="c").named_shape == {"a": 2, "c": 6}


def test_unwrap_takes_names_as_arguments():
    x = nx.wrap(jnp.arange(6).reshape(2, 3), ["a", "b"])
    np.testing.assert_array_equal(x.unwrap("b", "a"), x.unwrap(["b", "a"]))
    assert x.unwrap("b", "a", ...).shape == (3, 2)
    with pytest.raises(errors.UnplacedAxisError, match="'a'"):
        x.unwrap("b")
