"""A model-parallel language model written for ``jax.experimental.maps.xmap``, the way xmap-era training
code was: haiku modules inside the mapped body, Megatron-style ``custom_vjp`` pairs around ``psum`` over the
``'shard'`` name, ``jax.lax`` collectives over ``'shard'`` and ``'batch'``, the mesh read through
``thread_resources``, and the optimizer step inside the map.

It is kept as xmap code: ``tests/xmap_programs/record.py`` runs it unchanged on jax 0.4.30 (the last jax with
xmap) and stores its numbers; ``tests/test_xmap_positional.py`` runs the same text with only its
``jax.experimental.maps`` import line replaced by ``namedarray.maps`` and compares. Nothing here may use nx.
"""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.maps import thread_resources, xmap  # the one line a port changes

jax.config.update("jax_threefry_partitionable", True)  # the same random bits on every jax version

CONFIG = dict(vocab=64, d_model=32, heads=4, layers=2, seq=16, batch_per_replica=2, lr=0.3)


@jax.custom_vjp
def f_psum(x):
    """Identity forward; the gradients of the shards are summed backward (a replicated input)."""
    return x


def f_psum_fwd(x):
    return f_psum(x), None


def f_psum_bwd(_, g):
    return (jax.lax.psum(g, "shard"),)


f_psum.defvjp(f_psum_fwd, f_psum_bwd)


@jax.custom_vjp
def g_psum(x):
    """Sum of the shards' partial outputs forward; the replicated gradient passes through backward."""
    return jax.lax.psum(x, "shard")


def g_psum_fwd(x):
    return g_psum(x), None


def g_psum_bwd(_, g):
    return (g,)


g_psum.defvjp(g_psum_fwd, g_psum_bwd)


class EmbeddingShard(hk.Module):
    """Each shard holds vocab / mp rows of the embedding; a token's row lives on one shard."""

    def __init__(self, config, name=None):
        super().__init__(name=name)
        self.mp = thread_resources.env.shape["mp"]
        self.per_shard = config["vocab"] // self.mp
        self.d_model = config["d_model"]

    def __call__(self, tokens):
        shard = jax.lax.axis_index("shard")
        local = tokens - shard * self.per_shard
        hit = (local >= 0) & (local < self.per_shard)
        table = hk.get_parameter("table", [self.per_shard, self.d_model],
                                 init=hk.initializers.RandomNormal(0.5))
        rows = jnp.take(table, jnp.clip(local, 0, self.per_shard - 1), axis=0)
        return g_psum(jnp.where(hit[..., None], rows, 0.0))


class AttentionShard(hk.Module):
    """heads / mp heads per shard: column-parallel q, k, v; row-parallel output projection."""

    def __init__(self, config, name=None):
        super().__init__(name=name)
        self.mp = thread_resources.env.shape["mp"]
        self.heads = config["heads"] // self.mp
        self.d_head = config["d_model"] // config["heads"]
        self.d_model = config["d_model"]

    def __call__(self, x):
        x = f_psum(x)
        seq = x.shape[0]
        q = hk.Linear(self.heads * self.d_head, with_bias=False, name="q")(x).reshape(seq, self.heads, -1)
        k = hk.Linear(self.heads * self.d_head, with_bias=False, name="k")(x).reshape(seq, self.heads, -1)
        v = hk.Linear(self.heads * self.d_head, with_bias=False, name="v")(x).reshape(seq, self.heads, -1)
        logits = jnp.einsum("thd,Thd->htT", q, k) / np.sqrt(self.d_head)
        causal = jnp.tril(jnp.ones((seq, seq), bool))
        logits = jnp.where(causal, logits, -1e10)
        attn = jax.nn.softmax(logits, axis=-1)
        out = jnp.einsum("htT,Thd->thd", attn, v).reshape(seq, -1)
        return g_psum(hk.Linear(self.d_model, with_bias=False, name="o")(out))


class MLPShard(hk.Module):
    def __init__(self, config, name=None):
        super().__init__(name=name)
        self.mp = thread_resources.env.shape["mp"]
        self.hidden = 4 * config["d_model"] // self.mp
        self.d_model = config["d_model"]

    def __call__(self, x):
        h = jax.nn.gelu(hk.Linear(self.hidden, name="up")(f_psum(x)))
        return g_psum(hk.Linear(self.d_model, with_bias=False, name="down")(h))


class ProjectionShard(hk.Module):
    """Logits for this shard's vocab / mp entries; the softmax spans the shards."""

    def __init__(self, config, name=None):
        super().__init__(name=name)
        self.mp = thread_resources.env.shape["mp"]
        self.per_shard = config["vocab"] // self.mp

    def loss(self, x, targets):
        x = hk.LayerNorm(-1, True, True, name="norm")(x)
        logits = hk.Linear(self.per_shard, name="logits")(f_psum(x))
        top = jax.lax.pmax(jax.lax.stop_gradient(logits.max(-1, keepdims=True)), "shard")
        shifted = logits - top
        total = g_psum(jnp.exp(shifted).sum(-1, keepdims=True))
        shard = jax.lax.axis_index("shard")
        local = targets - shard * self.per_shard
        hit = (local >= 0) & (local < self.per_shard)
        picked = jnp.take_along_axis(shifted, jnp.clip(local, 0, self.per_shard - 1)[:, None], -1)[:, 0]
        target_logit = g_psum(jnp.where(hit, picked, 0.0))
        return jnp.mean(jnp.log(total[:, 0]) - target_logit)


def transformer_loss(config, tokens, targets):
    x = EmbeddingShard(config, name="embed")(tokens)
    for i in range(config["layers"]):
        norm = hk.LayerNorm(-1, True, True, name=f"norm_{i}")
        x = x + AttentionShard(config, name=f"attn_{i}")(norm(x)) + MLPShard(config, name=f"mlp_{i}")(norm(x))
    return ProjectionShard(config, name="proj").loss(x, targets)


class ShardedLM:
    """Parameters split over the ``'shard'`` name (mesh axis ``'mp'``), data over ``'batch'`` (``'dp'``)."""

    def __init__(self, config):
        self.config = config
        net = hk.without_apply_rng(hk.transform(
            lambda tokens, targets: hk.vmap(lambda t, y: transformer_loss(config, t, y), split_rng=False)(
                tokens, targets).mean()))
        lr = config["lr"]

        def init(key, tokens, targets):
            return net.init(key, tokens, targets)

        def evaluate(params, tokens, targets):
            return jax.lax.pmean(net.apply(params, tokens, targets), "batch")

        def train(params, tokens, targets):
            loss, grads = jax.value_and_grad(net.apply)(params, tokens, targets)
            grads = jax.lax.pmean(grads, "batch")
            params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
            return jax.lax.pmean(loss, "batch"), params

        resources = {"shard": "mp", "batch": "dp"}
        self.init_xmap = xmap(init, in_axes=(["shard", ...], ["batch", ...], ["batch", ...]),
                              out_axes=["shard", ...], axis_resources=resources)
        self.eval_xmap = xmap(evaluate, in_axes=(["shard", ...], ["batch", ...], ["batch", ...]),
                              out_axes=[...], axis_resources=resources)
        self.train_xmap = xmap(train, in_axes=(["shard", ...], ["batch", ...], ["batch", ...]),
                               out_axes=([...], ["shard", ...]), axis_resources=resources)

    def data(self, seed):
        """(tokens, targets) of shape (dp, batch_per_replica, seq): a learnable shifted-copy task."""
        c = self.config
        dp = thread_resources.env.shape["dp"]
        rng = np.random.RandomState(seed)
        tokens = rng.randint(0, c["vocab"], size=(dp, c["batch_per_replica"], c["seq"] + 1)).astype(np.int32)
        tokens[..., 1:] = (tokens[..., :-1] * 3 + 1) % c["vocab"]
        return tokens[..., :-1], tokens[..., 1:]

    def run(self, steps=5):
        """Initial evaluation loss, then the training loss of each step, then the final evaluation loss."""
        mp = thread_resources.env.shape["mp"]
        tokens, targets = self.data(0)
        keys = jax.random.split(jax.random.PRNGKey(42), mp)
        params = self.init_xmap(keys, tokens, targets)
        out = {"eval_before": float(self.eval_xmap(params, tokens, targets)), "train": []}
        for step in range(steps):
            tokens, targets = self.data(step + 1)
            loss, params = self.train_xmap(params, tokens, targets)
            out["train"].append(float(loss))
        tokens, targets = self.data(0)
        out["eval_after"] = float(self.eval_xmap(params, tokens, targets))
        out["param_sum"] = float(sum(np.abs(np.asarray(p, np.float64)).sum()
                                     for p in jax.tree_util.tree_leaves(params)))
        return out, params
