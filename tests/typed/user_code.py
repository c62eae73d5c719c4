"""Code as a user of nx writes it, with the types a checker must give it: ``assert_type`` fails a static
type check where a stub's type is wrong, and the ``isinstance`` asserts fail at run time where
the stubs disagree with what the package returns. tests/test_types.py checks it and runs it.
"""

from __future__ import annotations

from typing import Annotated, Any, assert_type

import jax
import jax.numpy as jnp

import namedarray as nx
from namedarray.typing import f32, i32

Batch = Annotated[nx.NamedArray, f32[("d",), {"batch": "b"}]]
Labels = Annotated[nx.NamedArray, i32[{"batch": "b"}]]

x = nx.wrap(jnp.ones((4, 3)), ["batch", "feature"])
w = nx.wrap(jnp.ones((3, 5)), ["feature", "hidden"])
plain = jnp.ones((3, 3))

# the result of a NamedArray operand is a NamedArray, of plain operands a jax.Array, as at run time
h = nx.dot(x, w, axis="feature")
assert_type(h, nx.NamedArray)
assert_type(nx.dot(plain, plain), jax.Array)
assert_type(nx.einsum("{batch,feature},{feature,hidden}->{batch,hidden}", x, w), nx.NamedArray)
assert_type(nx.einsum("ij,jk->ik", plain, plain), jax.Array)
assert_type(nx.einsum("{batch,feature},fk->{batch}k", x, jnp.ones((3, 2))), nx.NamedArray)
assert_type(nx.sum(x, "batch"), nx.NamedArray)
assert_type(nx.sum(plain, 0), jax.Array)
assert_type(nx.exp(x), nx.NamedArray)
assert_type(nx.exp(plain), jax.Array)
assert_type(nx.maximum(plain, x), nx.NamedArray)
assert_type(x.sum("feature"), nx.NamedArray)
assert_type(x + 1.0, nx.NamedArray)
assert_type(plain + x, nx.NamedArray)
assert_type(nx.tensordot(x, w, (("feature",), ("feature",))), nx.NamedArray)
assert isinstance(nx.dot(plain, plain), jax.Array) and not isinstance(nx.dot(plain, plain), nx.NamedArray)
assert isinstance(nx.exp(plain), jax.Array) and isinstance(nx.sum(x, "batch"), nx.NamedArray)

# creation: named when a name is asked for
z = nx.zeros((), named_shape={"batch": 2, "seq": 8})
assert_type(z, nx.NamedArray)
assert_type(nx.zeros({"batch": 2}), nx.NamedArray)
assert_type(nx.zeros((2, 3)), jax.Array)
assert_type(nx.ones(3, named_shape={"k": 2}), nx.NamedArray)
assert_type(nx.full({"k": 2}, 1.0), nx.NamedArray)
assert_type(nx.arange(8, name="seq"), nx.NamedArray)
assert_type(nx.arange(8), jax.Array)
assert_type(nx.linspace(0.0, 1.0, 5, name="t"), nx.NamedArray)
assert isinstance(nx.zeros((2, 3)), jax.Array) and isinstance(nx.arange(8, name="seq"), nx.NamedArray)
mask = nx.arange(8, name="seq") >= nx.arange(8, name="kv")
assert_type(mask, nx.NamedArray)

# joins
assert_type(nx.concatenate([x, x], axis="batch"), nx.NamedArray)
assert_type(nx.concatenate([plain, plain]), jax.Array)
assert_type(nx.stack([x, x], axis="layer"), nx.NamedArray)
assert_type(nx.stack([plain, plain]), jax.Array)
assert_type(nx.stack([plain, plain], axis="pair"), nx.NamedArray)
assert isinstance(nx.stack([plain, plain], axis="pair"), nx.NamedArray)
first, rest = nx.split(x, "batch", [1])
assert first.named_shape["batch"] == 1

# nn and random
logits = nx.wrap(jnp.zeros((2, 10)), ["batch", "classes"])
p = nx.nn.softmax(logits, axis="classes")
assert_type(p, nx.NamedArray)
assert_type(nx.nn.relu(x), nx.NamedArray)
assert_type(nx.nn.relu(plain), jax.Array)
assert_type(nx.nn.one_hot(jnp.array([3, 7]), 10, axis="classes"), nx.NamedArray)
assert_type(nx.nn.one_hot(jnp.array([3, 7]), 10), jax.Array)
assert_type(nx.nn.layer_norm(x, "feature"), nx.NamedArray)
assert isinstance(nx.nn.one_hot(jnp.array([3, 7]), 10, axis="classes"), nx.NamedArray)
key = jax.random.key(0)
noise = nx.random.normal(key, named_shape={"batch": 2, "classes": 10})
assert_type(noise, nx.NamedArray)
assert_type(nx.random.normal(key, (3,)), jax.Array)
assert_type(nx.random.uniform(key, named_shape={"batch": 2}), nx.NamedArray)
keys = nx.random.split(key, named_shape={"batch": 2})
assert_type(keys, nx.NamedArray)
assert isinstance(nx.random.normal(key, (3,)), jax.Array) and isinstance(noise, nx.NamedArray)

# collectives keep what they are given: a NamedArray, or a tree of them
total = nx.psum(p, "classes")
assert_type(total, nx.NamedArray)
assert_type(nx.pmean({"p": p}, "batch"), dict[str, nx.NamedArray])

# jit keeps the function's signature
def loss(params: dict[str, nx.NamedArray], batch: nx.NamedArray) -> jax.Array:
    out = nx.dot(batch, params["w"], axis="feature")
    return nx.mean(out * out, axis=("batch", "hidden")).unwrap()


step = nx.jit(loss)
assert_type(step({"w": w}, x), jax.Array)
value, grads = nx.jit(jax.value_and_grad(loss))({"w": w}, x)
assert_type(nx.jit(lambda a: a * 2)(x), Any)
sharded = nx.shard({"w": w})
assert_type(sharded, dict[str, nx.NamedArray])


def plan_for(mesh: jax.sharding.Mesh) -> nx.Plan:   # typed as what it returns; compiling is not run here
    plan = nx.plan_sharding(loss, {"w": w}, x, mesh=mesh, candidates=[{}, {"batch": "data"}])
    assert_type(plan, nx.Plan)
    return plan


# checked annotations: type checkers read the NamedArray, nx.typing.check the dtype and shape
@nx.typing.check
def center(v: Batch) -> Batch:
    return v - v.mean("batch")


@nx.typing.check
def count(labels: Labels, v: Batch) -> nx.NamedArray:
    return nx.sum(nx.nn.one_hot(labels, 3, axis="k"), "k") + v.sum(0)


c = center(nx.wrap(jnp.ones((4, 3)), ["batch", ...]))
assert_type(c, nx.NamedArray)
assert c.named_shape == {"batch": 4}
assert count(nx.wrap(jnp.array([0, 1, 2, 0], jnp.int32), ["batch"]),
             nx.wrap(jnp.ones((4, 3)), ["batch", ...])).named_shape == {"batch": 4}
