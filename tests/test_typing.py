"""nx.typing: the xmap tutorial's annotation language and @nx.typing.check.

Annotations are written once as module-level aliases and used by name: linters read string dims inside
an annotation ("n", "batch") as forward references, which they are not. One function below spells the
annotation inline, with the lint exemption that needs.
"""

from __future__ import annotations

import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import namedarray as nx
from namedarray.errors import AnnotationError
from namedarray.typing import Any, Array, bf16, bool_, c64, f16, f32, f64, i8, i32, u8

Batch20 = f32[(5,), {"batch": 20}]
VecN = f32[("n",)]
IntVecN = i32[("n",)]
BatchedVecN = f32[("n",), {"batch": "b"}]
PerBatch = f32[(), {"batch": "b"}]


def named(shape, names, dtype=jnp.float32):
    return nx.wrap(jnp.zeros(shape, dtype), names)


def test_annotation_repr_and_parts():
    t = f32[(5,), {"batch": 20}]
    assert repr(t) == "f32[(5,), {'batch': 20}]"
    assert t.shape == (5,) and t.named == {"batch": 20} and t.dtype == np.float32
    assert repr(i32[...]) == "i32[...]"
    assert f32[(5,)].named == {}  # no named part: no names allowed
    assert f32[(5,), ...].named is None  # any names
    assert f32[{"b": 3}].shape == () and f32[{"b": 3}].named == {"b": 3}
    assert f32[5, 3].shape == (5, 3)
    assert f32[(), {}] == f32[()]
    # equal annotations hash alike (a dtype spelled another way is the same annotation)
    same = nx.typing.DType("float", np.float32)[(5,), {"batch": 20}]
    assert same == t and hash(same) == hash(t) and len({same, t}) == 1
    with pytest.raises(TypeError, match="a dimension is an int"):
        f32[(1.5,)]


def test_isinstance_checks_values():
    x = named((5, 20), [None, "batch"])
    assert isinstance(x, f32[(5,), {"batch": 20}])
    assert not isinstance(x, f32[(5,), {"batch": 21}])
    assert not isinstance(x, f32[(5,)])
    assert isinstance(x, f32[(5,), ...])
    assert isinstance(x, f32[...])
    assert not isinstance(x, i32[...])
    assert isinstance(jnp.ones((2, 3), jnp.int8), i8[(2, 3)])
    assert isinstance(jnp.ones((2, 3, 4), jnp.uint8), u8[(..., 4)])
    assert isinstance(jnp.ones((4,), jnp.uint8), u8[(..., 4)])
    assert not isinstance(jnp.ones((4, 3), jnp.uint8), u8[(..., 4)])
    assert isinstance(jnp.ones(3, jnp.bfloat16), bf16[(Any,)])
    assert isinstance(jnp.ones(3, jnp.float16), f16[(None,)])
    assert isinstance(jnp.ones(3, bool), bool_[(3,)])
    assert isinstance(jnp.ones(3, jnp.complex64), c64[(3,)])
    assert isinstance(np.ones(3, np.float64), f64[(3,)])
    assert isinstance(jnp.ones((2, 2), jnp.int32), Array[("n", "n")])
    assert not isinstance(jnp.ones((2, 3), jnp.int32), Array[("n", "n")])
    assert isinstance(2.0, f32[()])
    assert not isinstance("text", f32[...])


def test_tutorial_types():
    # the tutorial's type examples: f32[(5,), {'batch': 20}] inside my_func, and the partitioning examples
    def my_func(x: f32[(5,), {"batch": 20}]) -> f32[(5,), {"batch": 20}]:  # noqa: F821, UP037
        return x

    f = nx.xmap(nx.typing.check(my_func), in_axes={1: "batch"}, out_axes={1: "batch"})
    x = jnp.arange(100.0).reshape(5, 20)
    np.testing.assert_array_equal(f(x), x)
    with pytest.raises(AnnotationError, match=r"argument 'x' named axis 'batch' has size 21, expected 20"):
        f(jnp.ones((5, 21)))
    # the values of the tutorial's partitioning examples
    assert isinstance(jnp.zeros((5, 5), jnp.float32), f32[(5, 5), {}])
    assert isinstance(named((6, 8), [None, "a"]), f32[(6,), {"a": 8}])
    assert isinstance(named((8, 7), ["a", "c"]), f32[(), {"a": 8, "c": 7}])
    assert isinstance(named((12, 8), ["b", "a"]), f32[(), {"a": 8, "b": 12}])


@nx.typing.check
def scale(x: BatchedVecN, w: VecN) -> PerBatch:
    return nx.sum(x * w)


def test_check_passes_and_binds_dimension_variables():
    x = named((3, 4), [None, "batch"])
    out = scale(x, jnp.ones(3, jnp.float32))
    assert out.named_shape == {"batch": 4}


def test_check_wrong_named_size():
    @nx.typing.check
    def f(x: Batch20):
        return x

    with pytest.raises(
        AnnotationError,
        match=r"check\(f\): argument 'x' named axis 'batch' has size 21, expected 20 "
        r"\(annotation f32\[\(5,\), \{'batch': 20\}\]\)",
    ):
        f(named((5, 21), [None, "batch"]))


def test_check_missing_name():
    @nx.typing.check
    def f(x: Batch20):
        return x

    with pytest.raises(AnnotationError, match=r"argument 'x' lacks named axis 'batch'"):
        f(named((5, 20), [None, "time"]))
    with pytest.raises(AnnotationError, match=r"argument 'x' lacks named axis 'batch'"):
        f(jnp.zeros((5,), jnp.float32))


def test_check_extra_name():
    @nx.typing.check
    def f(x: Batch20):
        return x

    with pytest.raises(
        AnnotationError,
        match=r"argument 'x' has named axis 'heads' \(size 2\) that the annotation "
        r"f32\[\(5,\), \{'batch': 20\}\] does not allow",
    ):
        f(named((5, 20, 2), [None, "batch", "heads"]))


def test_check_dtype_mismatch():
    @nx.typing.check
    def f(x: Batch20):
        return x

    with pytest.raises(AnnotationError, match=r"argument 'x' has dtype int32, expected f32 \(float32\)"):
        f(named((5, 20), [None, "batch"], jnp.int32))


def test_check_positional_rank_and_size():
    with pytest.raises(
        AnnotationError, match=r"argument 'w' has positional shape \(3, 1\) \(rank 2\), expected rank 1"
    ):
        scale(named((3, 4), [None, "batch"]), jnp.ones((3, 1), jnp.float32))
    with pytest.raises(
        AnnotationError,
        match=r"argument 'w' positional axis 0 has size 2, but dimension variable 'n' "
        r"is 3 \(bound by argument 'x' positional axis 0\)",
    ):
        scale(named((3, 4), [None, "batch"]), jnp.ones(2, jnp.float32))


def test_check_result_and_shared_variables():
    @nx.typing.check
    def bad(x: PerBatch) -> PerBatch:
        return nx.concatenate([x, x], axis="batch")

    with pytest.raises(
        AnnotationError,
        match=r"the result named axis 'batch' has size 8, but dimension variable 'b' "
        r"is 4 \(bound by argument 'x' named axis 'batch'\)",
    ):
        bad(named((4,), ["batch"]))


def test_check_under_jit_grad_and_xmap():
    x = jnp.ones((3, 4), jnp.float32)
    w = jnp.ones(3, jnp.float32)
    f = nx.xmap(scale, in_axes=([None, "batch"], [None]), out_axes=["batch"])
    np.testing.assert_allclose(jax.jit(f)(x, w), np.full(4, 3.0))
    g = jax.grad(lambda w: f(x, w).sum())(w)
    np.testing.assert_allclose(g, np.full(3, 4.0))
    with pytest.raises(AnnotationError, match="argument 'w' positional axis 0 has size 2"):
        jax.jit(f)(x, jnp.ones(2, jnp.float32))


def test_check_pytrees_varargs_and_unannotated():
    @nx.typing.check
    def f(pair: tuple[VecN, IntVecN], *rest: f32[...], scale=2.0) -> dict:
        return {"a": pair[0] * scale}

    f((jnp.ones(3), jnp.ones(3, jnp.int32)), jnp.ones(2), jnp.ones(()))
    with pytest.raises(AnnotationError, match=r"argument 'pair'\[1\] has dtype float32, expected i32"):
        f((jnp.ones(3), jnp.ones(3)))
    with pytest.raises(AnnotationError, match=r"argument 'rest'\[1\] has dtype int32"):
        f((jnp.ones(3), jnp.ones(3, jnp.int32)), jnp.ones(2), jnp.ones(2, jnp.int32))
    with pytest.raises(
        AnnotationError,
        match=r"argument 'pair'\[1\] positional axis 0 has size 4, but dimension "
        r"variable 'n' is 3",
    ):
        f((jnp.ones(3), jnp.ones(4, jnp.int32)))


MaybeVec3 = f32[(3,)] | None
VecOrIntVecN = f32[("n",)] | i32[("n",)]
EmbedDict = dict[str, f32[{"e": 4}]]  # noqa: F821  (a dim name, not a forward reference)


def test_unions_optionals_and_dicts_of_annotations_are_checked():
    @nx.typing.check
    def f(x: MaybeVec3, y: typing.Optional[VecN], z: VecOrIntVecN, params: EmbedDict) -> VecN:  # noqa: UP045
        return jnp.ones(z.shape[0])

    params = {"w": named((4,), ["e"]), "v": named((4,), ["e"])}
    f(None, None, jnp.ones(2, jnp.int32), params)
    f(jnp.ones(3), jnp.ones(2), jnp.ones(2), params)  # 'n' bound by y, and z agrees
    with pytest.raises(AnnotationError, match=r"argument 'x' fits none of f32\[\(3,\), \{\}\] \| None: "
                                              r"argument 'x' positional axis 0 has size 4"):
        f(jnp.ones(4), None, jnp.ones(2), params)
    with pytest.raises(AnnotationError, match=r"argument 'z' fits none of .*size 2, but dimension variable "
                                              r"'n' is 3"):
        f(None, jnp.ones(3), jnp.ones(2), params)  # 'n' bound to 3 by y
    with pytest.raises(AnnotationError, match=r"argument 'z' fits none of .*dtype int8"):
        f(None, None, jnp.ones(2, jnp.int8), params)
    with pytest.raises(AnnotationError, match=r"argument 'params'\['v'\] has dtype int32"):
        f(None, None, jnp.ones(2), {"w": named((4,), ["e"]), "v": named((4,), ["e"], jnp.int32)})
    assert MaybeVec3.matches(None) and not MaybeVec3.matches(jnp.ones(2))


def test_string_annotations_are_resolved():
    # this module uses `from __future__ import annotations`: annotations arrive as strings
    assert isinstance(scale.__annotations__["x"], str)
    assert set(scale.__nx_annotations__) == {"x", "w"}


def test_errors_are_nx_errors():
    assert issubclass(AnnotationError, nx.errors.NamedAxisError)
    assert issubclass(AnnotationError, TypeError)
