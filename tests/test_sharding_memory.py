"""Sharding by name costs the memory of sharding by hand.

Each test compiles a sharded training program twice, the named way (``.shard()`` calls and ``nx.axis_rules``
under ``nx.jit``) and the positional way a user writes by hand (``jax.jit`` with ``NamedSharding``s), and
compares XLA's per-device byte counts of the two (``memory_analysis``: exact, no timing) and their values.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from meshes import auto_mesh

import namedarray as nx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import llama  # noqa: E402

LAYERS, BATCH, EMBED, MLP = 4, 64, 64, 256
RULES = {"batch": "data", "mlp": "model"}


def stacked(seed=0):
    rng = np.random.default_rng(seed)
    return {"w_in": nx.wrap(rng.standard_normal((LAYERS, EMBED, MLP), np.float32) * 0.1,
                            ["layer", "embed", "mlp"]),
            "w_out": nx.wrap(rng.standard_normal((LAYERS, MLP, EMBED), np.float32) * 0.1,
                             ["layer", "mlp", "embed"])}


def deep_loss(params, x, shard: bool):
    def block(h, p):
        if shard:  # as the guide writes it: the layer's parameters where they are used, the activations
            p, h = nx.shard(p), h.shard()
        pre = nx.dot(h, p["w_in"], axis="embed")
        out = nx.dot(nx.tanh(pre.shard() if shard else pre), p["w_out"], axis="mlp")
        return out.shard() if shard else out, None

    h, _ = nx.scan(block, x, params, axis="layer")
    return nx.unwrap(nx.mean(h ** 2, axis=("batch", "embed")))


def temp_bytes(compiled) -> int:
    return compiled.memory_analysis().temp_size_in_bytes


def test_sharding_the_scanned_parameters_in_the_body_costs_no_memory():
    mesh = auto_mesh((4, 2), ("data", "model"))
    params = stacked()
    x = nx.wrap(np.random.default_rng(1).standard_normal((BATCH, EMBED), np.float32), ["batch", "embed"])
    with jax.set_mesh(mesh), nx.axis_rules(RULES):
        marked = nx.jit(jax.value_and_grad(lambda p, x: deep_loss(p, x, True)))
        bare = nx.jit(jax.value_and_grad(lambda p, x: deep_loss(p, x, False)))
        t_marked = temp_bytes(marked.lower(params, x).compile())
        t_bare = temp_bytes(bare.lower(params, x).compile())
        (v1, g1), (v2, g2) = marked(params, x), bare(params, x)
    assert t_marked == t_bare
    np.testing.assert_allclose(float(v1), float(v2), rtol=1e-6)
    for k in params:
        np.testing.assert_allclose(nx.unwrap(g1[k], ["layer", "embed", "mlp"] if k == "w_in" else
                                             ["layer", "mlp", "embed"]),
                                   nx.unwrap(g2[k], ["layer", "embed", "mlp"] if k == "w_in" else
                                             ["layer", "mlp", "embed"]), rtol=1e-5, atol=1e-6)


def test_a_constraint_on_each_scanned_slice_is_what_costs_a_copy():
    # the control: the positional program constraining each layer's slice inside the scan keeps a stacked
    # copy of the constrained weights for the backward pass, which the named program above does not
    mesh = auto_mesh((4, 2), ("data", "model"))
    w = jax.device_put(jnp.ones((LAYERS, EMBED, MLP)) * 0.01, NamedSharding(mesh, P(None, None, "model")))
    x = jax.device_put(jnp.ones((BATCH, EMBED)), NamedSharding(mesh, P("data")))

    def loss(w, x, constrain):
        def body(h, wl):
            if constrain:
                wl = jax.lax.with_sharding_constraint(wl, NamedSharding(mesh, P(None, "model")))
            return jnp.tanh(h @ wl) @ wl.T, None
        return jnp.mean(jax.lax.scan(body, x, w)[0] ** 2)

    with jax.set_mesh(mesh):
        plain = temp_bytes(jax.jit(jax.grad(lambda w, x: loss(w, x, False))).lower(w, x).compile())
        constrained = temp_bytes(jax.jit(jax.grad(lambda w, x: loss(w, x, True))).lower(w, x).compile())
    per_device_stack = LAYERS * EMBED * MLP // 2 * 4
    assert constrained >= plain + per_device_stack


# -------------------------------------------------------------------------------------------------------
# The Llama-style model of examples/llama.py, written once with .shard(), against its positional twin
# sharded by hand

CFG = llama.Config(layers=2, embed=64, heads=4, kv_heads=2, head_dim=16, mlp=128, seq=16, batch=8, vocab=64)
STRATEGIES = {
    "data x tensor": ((4, 2), ("data", "model"),
                      {"batch": "data", "kv_heads": "model", "mlp": "model", "vocab": "model"}, None),
    "fully sharded": ((8,), ("data",), {"batch": "data", "embed": "data"}, {"embed": None}),
}


def _spec(axes, rules):
    return P(*[rules.get(a) for a in axes])


def _step(loss, opt):
    def step(p, s, t):
        value, grads = jax.value_and_grad(loss)(p, t)
        updates, s = opt.update(grads, s, p)
        return value, optax.apply_updates(p, updates), s
    return step


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_llama_step_sharded_by_name_costs_what_sharding_by_hand_costs(strategy):
    shape, axes, rules, compute = STRATEGIES[strategy]
    mesh = auto_mesh(shape, axes)
    opt = optax.adamw(1e-3)
    params, tokens = llama.init_params(0, CFG), llama.make_batch(0, CFG)
    model = llama.make_nx_model()

    def named_loss(p, t):
        with nx.axis_rules(compute or {}):
            return model.loss(p, t)

    with jax.set_mesh(mesh), nx.axis_rules(rules):
        p, t = nx.shard(model.named_params(params)), nx.shard(model.named_tokens(tokens))
        s = opt.init(p)
        f = nx.jit(_step(named_loss, opt))
        named = f.lower(p, s, t).compile().memory_analysis()
        named_loss_value = float(f(p, s, t)[0])

    inner = {**rules, **(compute or {})}

    def layer_inputs(x, layer):  # what the named model's nx.shard(p) and x.shard() say, by hand
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P(inner.get("batch"))))
        return x, {k: jax.lax.with_sharding_constraint(
            a, NamedSharding(mesh, _spec(llama.PARAM_AXES[k][1:], inner))) for k, a in layer.items()}

    def gathered(p):  # the embedding tables as the named loss lays them out (params["tok"].shard(), ...)
        return {**p, **{k: jax.lax.with_sharding_constraint(
            p[k], NamedSharding(mesh, _spec(llama.PARAM_AXES[k], inner))) for k in ("tok", "unembed")}}

    shardings = jax.tree_util.tree_map_with_path(
        lambda path, a: NamedSharding(mesh, _spec(llama.PARAM_AXES[path[-1].key], rules)), params)
    with jax.set_mesh(mesh):
        ph = jax.device_put(params, shardings)
        sh = opt.init(ph)
        state = jax.tree.map(lambda a: a.sharding, sh)
        th = jax.device_put(jnp.asarray(tokens), NamedSharding(mesh, P(rules.get("batch"))))
        hand_loss = lambda p, t: llama.jnp_loss(gathered(p), t, layer_inputs if compute else None)  # noqa: E731
        g = jax.jit(_step(hand_loss, opt),
                    in_shardings=(shardings, state, th.sharding),
                    out_shardings=(NamedSharding(mesh, P()), shardings, state))
        hand = g.lower(ph, sh, th).compile().memory_analysis()
        hand_loss_value = float(g(ph, sh, th)[0])

    assert named.argument_size_in_bytes == hand.argument_size_in_bytes
    assert named.output_size_in_bytes == hand.output_size_in_bytes
    assert named.temp_size_in_bytes <= 1.05 * hand.temp_size_in_bytes, (named.temp_size_in_bytes,
                                                                          hand.temp_size_in_bytes)
    np.testing.assert_allclose(named_loss_value, hand_loss_value, rtol=1e-5)
