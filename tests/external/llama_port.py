"""A Llama the project did not write, and its port to named axes by docs/library_authors.md.

The original is Penzai's Llama (the ``penzai`` package, 0.2.5, from the package registry; installed by the
``external`` extra): ``penzai.models.transformer.variants.llamalike_common.build_llamalike_transformer`` with
the Llama settings (SwiGLU, untied embedding and head, RMSNorm with eps 1e-6, rotary embeddings of wavelength
10000 on the two halves of each head, grouped-query attention, the decoder blocks stacked in a
``LayerStack`` that ``jax.lax.scan`` runs). Nothing of its code is here: ``reference_*`` call the installed
package, and its parameters are read through its own API (``pz.unbind_params``).

The port was written from the package's documented architecture, as a user porting a model would write it,
following the guide without looking at where this library's placement code makes a layout free:

- every axis is named by what it means, with the guide's vocabulary: ``batch``, ``seq`` (``kseq`` for the
  keys' positions), ``embed``, ``kv_heads`` (Penzai's ``head_groups``), ``q_per_kv`` (its ``query_heads``),
  ``head_dim`` (its ``projection``), ``mlp`` (its ``neurons``), ``vocab`` (its ``vocabulary``) and ``layer``
  (its ``blocks``), stacked first as the guide asks;
- ``.shard()`` goes where the guide says: each layer's parameters at the top of the block
  (``nx.shard(p)``), the residual stream at the top of the block, the output of every contraction (before
  the nonlinearity, never after it), and the embedding tables where they are used;
- the layers run under ``nx.scan(..., axis="layer")``, and a step is jitted with ``nx.jit`` under the
  user's ``nx.axis_rules``; the model names no mesh axis.

Weights are loaded from the original, not drawn again: ``port_params`` renames each of Penzai's parameters
to the port's names, so both compute from the same numbers. The loss (mean next-token cross-entropy) is not
part of Penzai's model; both sides compute it alike from their logits.

For ``nx.plan_sharding`` and other callers: ``train_step(params, opt_state, tokens)`` is one unjitted adamw
step of the port, and ``example_args(seed)`` gives its arguments; ``make_step(rules)`` returns the step
jitted with ``nx.jit`` under ``rules`` (``None``: the rules in force at the call).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import namedarray as nx

PENZAI_VERSION = "0.2.5"  # the release the port was written against (pyproject's external extra)

# Penzai's axis names -> the port's
NAMES = {"blocks": "layer", "embedding": "embed", "head_groups": "kv_heads", "query_heads": "q_per_kv",
         "projection": "head_dim", "neurons": "mlp", "vocabulary": "vocab", "batch": "batch", "seq": "seq"}

# Penzai's parameter labels -> the port's parameter names
LABELS = {
    "transformer/embedder.embeddings": "tok",
    "transformer/blocks/pre_attention_norm/scale.weights": "attn_norm",
    "transformer/blocks/attention/query.weights": "wq",
    "transformer/blocks/attention/key.weights": "wk",
    "transformer/blocks/attention/value.weights": "wv",
    "transformer/blocks/attention/output.weights": "wo",
    "transformer/blocks/pre_ffw_norm/scale.weights": "mlp_norm",
    "transformer/blocks/mlp/gating_linear.weights": "w_gate",
    "transformer/blocks/mlp/value_linear.weights": "w_up",
    "transformer/blocks/mlp/out_linear.weights": "w_down",
    "transformer/final_norm/scale.weights": "final_norm",
    "transformer/lm_head.weights": "lm_head",
}
BLOCK_PARAMS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")

# the data x model strategy by the port's names, and the same by hand in Penzai's
RULES = {"batch": "data", "kv_heads": "model", "mlp": "model", "vocab": "model"}
PENZAI_RULES = {"batch": "data", "head_groups": "model", "neurons": "model", "vocabulary": "model"}


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 4
    embed: int = 256
    heads: int = 8        # query heads
    kv_heads: int = 4     # key/value heads
    mlp: int = 688
    seq: int = 128
    batch: int = 8
    vocab: int = 1024
    eps: float = 1e-6
    rope_wavelength: float = 10_000.0

    @property
    def head_dim(self) -> int:
        return self.embed // self.heads


CONFIG = Config()
MASKED = -2.3819763e38  # the masked attention logit, the original's value


# ---- the original -----------------------------------------------------------------------------------------


def reference_model(seed: int = 0, cfg: Config = CONFIG):
    """Penzai's Llama at ``cfg``'s sizes, initialized by Penzai from ``jax.random.key(seed)``."""
    from penzai.models.transformer.variants import llamalike_common

    pz_cfg = llamalike_common.LlamalikeTransformerConfig(
        num_kv_heads=cfg.kv_heads, query_head_multiplier=cfg.heads // cfg.kv_heads,
        embedding_dim=cfg.embed, projection_dim=cfg.head_dim, mlp_hidden_dim=cfg.mlp,
        num_decoder_blocks=cfg.layers, vocab_size=cfg.vocab, mlp_variant="swiglu",
        tie_embedder_and_logits=False, rope_wavelength=cfg.rope_wavelength, rms_norm_eps=cfg.eps,
        use_layer_stack=True)
    return llamalike_common.build_llamalike_transformer(pz_cfg, init_base_rng=jax.random.key(seed))


def reference_split(model) -> tuple[Any, dict[str, Any]]:
    """The model without its parameters, and their values by Penzai label (Penzai NamedArrays: a pytree
    for ``jax.grad`` and optax)."""
    from penzai import pz

    unbound, params = pz.unbind_params(model)
    return unbound, {p.label: p.value for p in params}


def reference_logits(unbound, values: Mapping[str, Any], inputs) -> jax.Array:
    """The original's logits ``(batch, seq, vocab)`` for ``inputs`` ``(batch, seq)``."""
    from penzai import pz

    model = pz.bind_variables(unbound, [pz.ParameterValue(value=v, label=k) for k, v in values.items()])
    out = model(pz.nx.wrap(jnp.asarray(inputs)).tag("batch", "seq"))
    return out.unwrap("batch", "seq", "vocabulary")


def _cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def reference_loss(unbound, values: Mapping[str, Any], tokens) -> jax.Array:
    """Mean next-token cross-entropy of the original; ``tokens`` is ``(batch, seq + 1)``."""
    tokens = jnp.asarray(tokens)
    return _cross_entropy(reference_logits(unbound, values, tokens[:, :-1]), tokens[:, 1:])


def reference_specs(values: Mapping[str, Any], rules: Mapping[str, Any]) -> dict[str, Any]:
    """The ``PartitionSpec`` of each of the original's parameters under a mapping of Penzai's axis names,
    as a user writes them by hand for ``jax.jit``."""
    return {k: jax.sharding.PartitionSpec(*[rules.get(n) for n in v.named_axes]) for k, v in values.items()}


# ---- the port ---------------------------------------------------------------------------------------------


def port_params(values: Mapping[str, Any]) -> dict[str, Any]:
    """The original's parameters as the port's: NamedArrays with the port's names, the blocks' under
    ``"blocks"`` with ``layer`` first (loading weights, as a port does)."""
    out: dict[str, Any] = {"blocks": {}}
    for label, v in values.items():
        names = list(v.named_shape)
        if "blocks" in names:
            names.remove("blocks")
            names.insert(0, "blocks")
        a = nx.wrap(v.unwrap(*names), [NAMES[n] for n in names])
        name = LABELS[label]
        (out["blocks"] if name in BLOCK_PARAMS else out)[name] = a
    return out


def rope(x: nx.NamedArray, cos: nx.NamedArray, sin: nx.NamedArray) -> nx.NamedArray:
    """Rotary embedding of ``head_dim``'s two halves: ``(x1 cos - x2 sin, x2 cos + x1 sin)``."""
    halves = nx.unflatten(x, "head_dim", {"half": 2, "freq": x.named_shape["head_dim"] // 2})
    turned = nx.flip(halves, "half") * nx.wrap(np.array([-1.0, 1.0], np.float32), ["half"])
    return nx.flatten(halves * cos + turned * sin, ("half", "freq"), "head_dim")


def block(x: nx.NamedArray, p: Mapping[str, nx.NamedArray], cos, sin, causal, eps: float) -> nx.NamedArray:
    """One decoder layer; ``p`` holds its parameters without ``layer``."""
    p = nx.shard(p)
    x = x.shard()
    h = nx.nn.rms_norm(x, "embed", p["attn_norm"], eps=eps)
    q = nx.einsum("{batch,seq,embed},{embed,kv_heads,q_per_kv,head_dim}"
                  "->{batch,seq,kv_heads,q_per_kv,head_dim}", h, p["wq"]).shard()
    k = nx.einsum("{batch,seq,embed},{embed,kv_heads,head_dim}->{batch,seq,kv_heads,head_dim}",
                  h, p["wk"]).shard()
    v = nx.einsum("{batch,seq,embed},{embed,kv_heads,head_dim}->{batch,seq,kv_heads,head_dim}",
                  h, p["wv"]).shard()
    q = rope(q, cos, sin) * jnp.float32(q.named_shape["head_dim"] ** -0.5)
    k = rope(k, cos, sin).rename({"seq": "kseq"})
    v = v.rename({"seq": "kseq"})
    logits = nx.einsum("{batch,seq,kv_heads,q_per_kv,head_dim},{batch,kseq,kv_heads,head_dim}"
                       "->{batch,seq,kv_heads,q_per_kv,kseq}", q, k).shard()
    att = nx.nn.softmax(nx.where(causal, logits, MASKED), axis="kseq")
    o = nx.einsum("{batch,seq,kv_heads,q_per_kv,kseq},{batch,kseq,kv_heads,head_dim}"
                  "->{batch,seq,kv_heads,q_per_kv,head_dim}", att, v).shard()
    x = x + nx.einsum("{batch,seq,kv_heads,q_per_kv,head_dim},{kv_heads,q_per_kv,head_dim,embed}"
                      "->{batch,seq,embed}", o, p["wo"]).shard()
    h = nx.nn.rms_norm(x, "embed", p["mlp_norm"], eps=eps)
    gate = nx.einsum("{batch,seq,embed},{embed,mlp}->{batch,seq,mlp}", h, p["w_gate"]).shard()
    up = nx.einsum("{batch,seq,embed},{embed,mlp}->{batch,seq,mlp}", h, p["w_up"]).shard()
    return x + nx.einsum("{batch,seq,mlp},{mlp,embed}->{batch,seq,embed}", nx.nn.silu(gate) * up,
                         p["w_down"]).shard()


def logits(params: Mapping[str, Any], inputs: nx.NamedArray, eps: float = CONFIG.eps,
           wavelength: float = CONFIG.rope_wavelength) -> nx.NamedArray:
    """The port's logits ``{batch, seq, vocab}`` for ``inputs`` ``{batch, seq}``."""
    seq = inputs.named_shape["seq"]
    head_dim = params["blocks"]["wq"].named_shape["head_dim"]
    timescale = wavelength ** (2 * jnp.arange(head_dim // 2) / head_dim)
    angles = nx.arange(seq, name="seq") / nx.wrap(timescale, ["freq"])          # {seq, freq}
    cos, sin = nx.cos(angles), nx.sin(angles)
    causal = nx.arange(seq, name="seq") >= nx.arange(seq, name="kseq")
    x = nx.take(params["tok"].shard(), inputs, axis="vocab").shard()              # {batch, seq, embed}
    x, _ = nx.scan(lambda x, p: (block(x, p, cos, sin, causal, eps), None), x, params["blocks"],
                   axis="layer")
    x = nx.nn.rms_norm(x, "embed", params["final_norm"], eps=eps)
    return nx.einsum("{batch,seq,embed},{embed,vocab}->{batch,seq,vocab}", x,
                     params["lm_head"].shard()).shard()


def loss(params: Mapping[str, Any], tokens: nx.NamedArray) -> jax.Array:
    """Mean next-token cross-entropy (a plain scalar); ``tokens`` is ``{batch, seq}`` of ``seq + 1``."""
    n = tokens.named_shape["seq"] - 1
    out = logits(params, tokens[{"seq": slice(0, n)}])
    targets = tokens[{"seq": slice(1, n + 1)}]
    logp = nx.nn.log_softmax(out, axis="vocab")
    nll = -(nx.nn.one_hot(targets, out.named_shape["vocab"], axis="vocab") * logp).sum("vocab")
    return nx.unwrap(nll.mean(("batch", "seq")))


def named_tokens(tokens) -> nx.NamedArray:
    return nx.wrap(jnp.asarray(tokens), ["batch", "seq"])


def make_tokens(seed: int = 0, cfg: Config = CONFIG) -> np.ndarray:
    """``(batch, seq + 1)`` random int32 tokens."""
    return np.random.default_rng(seed).integers(0, cfg.vocab, (cfg.batch, cfg.seq + 1)).astype(np.int32)


OPTIMIZER = optax.adamw(1e-3)


def train_step(params, opt_state, tokens):
    """One adamw step of the port: ``(loss, params, opt_state)``."""
    value, grads = jax.value_and_grad(loss)(params, tokens)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return value, optax.apply_updates(params, updates), opt_state


def example_args(seed: int = 0, cfg: Config = CONFIG) -> tuple[Any, Any, nx.NamedArray]:
    """``(params, opt_state, tokens)`` for ``train_step``: the original's initial weights, loaded."""
    params = port_params(reference_split(reference_model(seed, cfg))[1])
    return params, OPTIMIZER.init(params), named_tokens(make_tokens(seed, cfg))


def make_step(rules: Mapping[str, Any] | None = None):
    """``train_step`` under ``nx.jit``, under ``rules`` (``None``: the rules in force where it is called)."""
    return nx.jit(train_step) if rules is None else nx.jit(train_step, resources=dict(rules))
