"""A small GPT trained with optax adam, written twice: with named axes (nx) and positionally (jnp).

Both versions compute the same function from the same parameters, so their losses agree step by step to
float tolerance. The named version never mentions a position: contractions are ``nx.einsum`` brace specs,
reductions and softmaxes are by name, the causal mask is ``nx.where`` over ``{seq, kseq}``. The positional
version is what one writes by hand in the natural layout: activations ``(batch, seq, embed)``, attention
weights ``(batch, heads, seq, kseq)``.

The named model takes its axis names as data: ``make_nx_model({"batch": "b", "embed": "zz"})`` builds the
same model with the logical names spelled differently. Spelling must not change the values, nor (under jit)
the compiled work.

Run ``python examples/gpt.py [steps]`` to train both side by side and print the two loss curves.

>>> import jax
>>> params = init_params(0, Config(layers=1, embed=8, heads=2, head_dim=4, mlp=16, seq=5, batch=3))
>>> tokens = make_batch(0, Config(seq=5, batch=3))
>>> a = float(nx_loss(named_params(params), named_tokens(tokens)))
>>> b = float(jnp_loss(params, tokens))
>>> abs(a - b) < 1e-5
True
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import namedarray as nx

# The logical axis names of the model. A model built by ``make_nx_model`` maps each to a spelling.
LOGICAL = ("batch", "seq", "kseq", "heads", "head_dim", "embed", "mlp", "vocab")

# Each parameter's axes, in the order ``init_params`` stores them (keyed by the parameter's own name).
PARAM_AXES: dict[str, tuple[str, ...]] = {
    "tok": ("vocab", "embed"),
    "pos": ("seq", "embed"),
    "ln1_g": ("embed",), "ln1_b": ("embed",),
    "wq": ("embed", "heads", "head_dim"), "wk": ("embed", "heads", "head_dim"),
    "wv": ("embed", "heads", "head_dim"), "wo": ("heads", "head_dim", "embed"),
    "ln2_g": ("embed",), "ln2_b": ("embed",),
    "w1": ("embed", "mlp"), "b1": ("mlp",),
    "w2": ("mlp", "embed"), "b2": ("embed",),
    "lnf_g": ("embed",), "lnf_b": ("embed",),
    "unembed": ("embed", "vocab"),
}

NEG_INF = -1e9  # the masked attention logit (finite, so a masked row never produces NaN gradients)
EPS = 1e-5      # layer norm


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 2
    embed: int = 64
    heads: int = 4
    head_dim: int = 16
    mlp: int = 256
    seq: int = 12
    batch: int = 64
    vocab: int = 11


# ---- data -------------------------------------------------------------------------------------------------


def make_batch(seed_or_rng: int | np.random.Generator, cfg: Config = Config(),
               task: str = "sum") -> np.ndarray:
    """``(batch, seq + 1)`` int32 tokens whose next token is a fixed function of the previous ones.

    - ``"sum"``: two random tokens, then each token is the sum of the two before it, mod ``vocab``;
    - ``"copy"``: a random first half, then the first half again;
    - ``"reverse"``: a random first half, then the first half reversed.

    The model reads tokens ``[:seq]`` and predicts tokens ``[1:]``.
    """
    rng = np.random.default_rng(seed_or_rng)  # a Generator is returned as is
    n = cfg.seq + 1
    if task == "sum":
        t: np.ndarray = np.zeros((cfg.batch, n), np.int64)
        t[:, :2] = rng.integers(0, cfg.vocab, size=(cfg.batch, 2))
        for i in range(2, n):
            t[:, i] = (t[:, i - 1] + t[:, i - 2]) % cfg.vocab
    elif task in ("copy", "reverse"):
        half = rng.integers(0, cfg.vocab, size=(cfg.batch, (n + 1) // 2))
        tail = half if task == "copy" else half[:, ::-1]
        t = np.concatenate([half, tail], axis=1)[:, :n]
    else:
        raise ValueError(f"unknown task {task!r}: use 'sum', 'copy' or 'reverse'")
    return t.astype(np.int32)


# ---- parameters -------------------------------------------------------------------------------------------


def init_params(key_or_seed: int | jax.Array = 0, cfg: Config = Config()) -> dict[str, Any]:
    """Parameters as a dict of plain arrays in the natural layout (axes as in ``PARAM_AXES``)."""
    key = jax.random.key(key_or_seed) if isinstance(key_or_seed, int) else key_or_seed
    keys = iter(jax.random.split(key, 3 + 6 * cfg.layers))
    sizes = {"vocab": cfg.vocab, "embed": cfg.embed, "seq": cfg.seq, "heads": cfg.heads,
             "head_dim": cfg.head_dim, "mlp": cfg.mlp}

    def normal(name, fan_in):
        shape = tuple(sizes[a] for a in PARAM_AXES[name])
        return jax.random.normal(next(keys), shape, jnp.float32) * fan_in ** -0.5

    def ones(name):
        return jnp.ones(tuple(sizes[a] for a in PARAM_AXES[name]), jnp.float32)

    def zeros(name):
        return jnp.zeros(tuple(sizes[a] for a in PARAM_AXES[name]), jnp.float32)

    blocks = []
    for _ in range(cfg.layers):
        blocks.append({
            "ln1_g": ones("ln1_g"), "ln1_b": zeros("ln1_b"),
            "wq": normal("wq", cfg.embed), "wk": normal("wk", cfg.embed), "wv": normal("wv", cfg.embed),
            "wo": normal("wo", cfg.heads * cfg.head_dim),
            "ln2_g": ones("ln2_g"), "ln2_b": zeros("ln2_b"),
            "w1": normal("w1", cfg.embed), "b1": zeros("b1"),
            "w2": normal("w2", cfg.mlp), "b2": zeros("b2"),
        })
    return {"tok": normal("tok", 1), "pos": normal("pos", cfg.embed) * 0.1 * cfg.embed ** 0.5,
            "blocks": blocks, "lnf_g": ones("lnf_g"), "lnf_b": zeros("lnf_b"),
            "unembed": normal("unembed", cfg.embed)}


def _leaf_name(path) -> str:
    return path[-1].key


# ---- the positional model ---------------------------------------------------------------------------------


def _jnp_layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + EPS) * g[None, None] + b[None, None]


def jnp_loss(params: dict[str, Any], tokens: jax.Array) -> jax.Array:
    """Mean next-token cross-entropy; ``tokens`` is ``(batch, seq + 1)``."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    seq = inputs.shape[1]
    vocab = params["tok"].shape[0]
    x = jnp.take(params["tok"], inputs, axis=0) + params["pos"][None]              # (b, s, e)
    causal = (jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :])[None, None]     # (1, 1, s, t)
    for p in params["blocks"]:
        h = _jnp_layer_norm(x, p["ln1_g"], p["ln1_b"])
        q = jnp.einsum("bse,ehd->bshd", h, p["wq"])
        k = jnp.einsum("bse,ehd->bshd", h, p["wk"])
        v = jnp.einsum("bse,ehd->bshd", h, p["wv"])
        logits = jnp.einsum("bshd,bthd->bhst", q, k) * q.shape[-1] ** -0.5
        att = jax.nn.softmax(jnp.where(causal, logits, NEG_INF), axis=-1)
        o = jnp.einsum("bhst,bthd->bshd", att, v)
        x = x + jnp.einsum("bshd,hde->bse", o, p["wo"])
        h = _jnp_layer_norm(x, p["ln2_g"], p["ln2_b"])
        m = jax.nn.gelu(jnp.einsum("bse,em->bsm", h, p["w1"]) + p["b1"][None, None])
        x = x + jnp.einsum("bsm,me->bse", m, p["w2"]) + p["b2"][None, None]
    x = _jnp_layer_norm(x, params["lnf_g"], params["lnf_b"])
    logp = jax.nn.log_softmax(jnp.einsum("bse,ev->bsv", x, params["unembed"]), axis=-1)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(targets, vocab) * logp, axis=-1))


# ---- the named model --------------------------------------------------------------------------------------


class NxModel:
    """The named GPT with the logical axis names spelled as ``names`` says (missing names keep their own)."""

    def __init__(self, names: Mapping[str, str] | None = None):
        names = dict(names or {})
        unknown = set(names) - set(LOGICAL)
        if unknown:
            raise ValueError(f"unknown logical axis names {sorted(unknown)}; the model's are {LOGICAL}")
        self.names = {n: names.get(n, n) for n in LOGICAL}
        if len(set(self.names.values())) != len(LOGICAL):
            raise ValueError(f"two logical axes spelled alike: {self.names}")
        self._word = re.compile(r"[A-Za-z_]\w*")

    # spelling
    def spell(self, text: str) -> str:
        """``text`` (an einsum spec or a name) with every logical name replaced by its spelling."""
        return self._word.sub(lambda m: self.names.get(m.group(), m.group()), text)

    def einsum(self, spec: str, *operands):
        return nx.einsum(self.spell(spec), *operands)

    # wrapping
    def named_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` (plain arrays, natural layout) as NamedArrays with this model's spellings."""
        return jax.tree_util.tree_map_with_path(
            lambda path, a: nx.wrap(a, [self.names[n] for n in PARAM_AXES[_leaf_name(path)]]), params)

    def positional_params(self, params_named: dict[str, Any]) -> dict[str, Any]:
        """The inverse of ``named_params``: plain arrays in the natural layout (also for gradients)."""
        return jax.tree_util.tree_map_with_path(
            lambda path, a: nx.unwrap(a, [self.names[n] for n in PARAM_AXES[_leaf_name(path)]]),
            params_named, is_leaf=lambda a: isinstance(a, nx.NamedArray))

    def named_tokens(self, tokens) -> nx.NamedArray:
        return nx.wrap(jnp.asarray(tokens), [self.names["batch"], self.names["seq"]])

    # the model
    def layer_norm(self, x, g, b):
        embed = self.names["embed"]
        mu = x.mean(embed)
        var = ((x - mu) ** 2).mean(embed)
        return (x - mu) / nx.sqrt(var + EPS) * g + b

    def loss(self, params: dict[str, Any], tokens: nx.NamedArray) -> jax.Array:
        """Mean next-token cross-entropy (a plain scalar, for ``jax.value_and_grad``)."""
        N = self.names
        seq = tokens.named_shape[N["seq"]] - 1
        vocab = params["tok"].named_shape[N["vocab"]]
        inputs = tokens[{N["seq"]: slice(0, seq)}]
        targets = tokens[{N["seq"]: slice(1, seq + 1)}]
        x = nx.take(params["tok"], inputs, axis=N["vocab"]) + params["pos"]        # {batch, seq, embed}
        positions = jnp.arange(seq)
        causal = nx.wrap(positions, [N["seq"]]) >= nx.wrap(positions, [N["kseq"]])
        for p in params["blocks"]:
            h = self.layer_norm(x, p["ln1_g"], p["ln1_b"])
            hk = h.rename({N["seq"]: N["kseq"]})
            q = self.einsum("{batch,seq,embed},{embed,heads,head_dim}->{batch,seq,heads,head_dim}",
                            h, p["wq"])
            k = self.einsum("{batch,kseq,embed},{embed,heads,head_dim}->{batch,kseq,heads,head_dim}",
                            hk, p["wk"])
            v = self.einsum("{batch,kseq,embed},{embed,heads,head_dim}->{batch,kseq,heads,head_dim}",
                            hk, p["wv"])
            logits = self.einsum("{batch,seq,heads,head_dim},{batch,kseq,heads,head_dim}"
                                 "->{batch,heads,seq,kseq}", q, k) * q.named_shape[N["head_dim"]] ** -0.5
            att = nx.nn.softmax(nx.where(causal, logits, NEG_INF), axis=N["kseq"])
            o = self.einsum("{batch,heads,seq,kseq},{batch,kseq,heads,head_dim}->{batch,seq,heads,head_dim}",
                            att, v)
            x = x + self.einsum("{batch,seq,heads,head_dim},{heads,head_dim,embed}->{batch,seq,embed}",
                                o, p["wo"])
            h = self.layer_norm(x, p["ln2_g"], p["ln2_b"])
            m = self.einsum("{batch,seq,embed},{embed,mlp}->{batch,seq,mlp}", h, p["w1"])
            m = nx.nn.gelu(m + p["b1"])
            x = x + self.einsum("{batch,seq,mlp},{mlp,embed}->{batch,seq,embed}", m, p["w2"]) + p["b2"]
        x = self.layer_norm(x, params["lnf_g"], params["lnf_b"])
        logits = self.einsum("{batch,seq,embed},{embed,vocab}->{batch,seq,vocab}", x, params["unembed"])
        logp = nx.nn.log_softmax(logits, axis=N["vocab"])
        nll = -(nx.nn.one_hot(targets, vocab, axis=N["vocab"]) * logp).sum(N["vocab"])
        return nx.unwrap(nll.mean((N["batch"], N["seq"])))


def make_nx_model(names: Mapping[str, str] | None = None) -> NxModel:
    """The named GPT with logical axis names (``LOGICAL``) spelled as ``names`` maps them."""
    return NxModel(names)


_MODEL = NxModel()
nx_loss = _MODEL.loss
named_params = _MODEL.named_params
named_tokens = _MODEL.named_tokens
positional_params = _MODEL.positional_params


def respelled(seed: int, kind: str = "permute") -> dict[str, str]:
    """A respelling of the logical names: ``"permute"`` shuffles them among themselves, ``"random"`` draws
    random lowercase words, ``"reverse"`` prefixes letters so that sorted order is the reverse of
    ``LOGICAL``'s sorted order."""
    rng = np.random.default_rng(seed)
    if kind == "permute":
        return dict(zip(LOGICAL, rng.permutation(LOGICAL).tolist()))
    if kind == "random":
        words: set[str] = set()
        while len(words) < len(LOGICAL):
            words.add("".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(1, 6))))
        return dict(zip(LOGICAL, rng.permutation(sorted(words)).tolist()))
    if kind == "reverse":
        order = sorted(LOGICAL, reverse=True)
        return {n: f"{chr(ord('a') + i)}_{n}" for i, n in enumerate(order)}
    raise ValueError(f"unknown respelling kind {kind!r}")


# ---- training ---------------------------------------------------------------------------------------------


def make_step(loss_fn: Callable, optimizer) -> Callable:
    """One jitted training step: ``(params, opt_state, tokens) -> (loss, params, opt_state)``."""
    import optax

    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return loss, optax.apply_updates(params, updates), opt_state

    return jax.jit(step)


def train(steps: int = 200, cfg: Config = Config(), *, lr: float = 1e-3, seed: int = 0, task: str = "sum",
          names: Mapping[str, str] | None = None, log_every: int = 10, verbose: bool = True):
    """Train the named and the positional GPT side by side from the same init on the same batches.

    Returns ``(nx_losses, jnp_losses)`` (lists of floats).
    """
    import optax

    model = make_nx_model(names)
    optimizer = optax.adam(lr)
    params = init_params(seed, cfg)
    p_nx = model.named_params(params)
    s_nx, s_jnp = optimizer.init(p_nx), optimizer.init(params)
    step_nx, step_jnp = make_step(model.loss, optimizer), make_step(jnp_loss, optimizer)
    rng = np.random.default_rng(seed)
    curve_nx, curve_jnp = [], []
    for i in range(steps):
        tokens = make_batch(rng, cfg, task)
        l_nx, p_nx, s_nx = step_nx(p_nx, s_nx, model.named_tokens(tokens))
        l_jnp, params, s_jnp = step_jnp(params, s_jnp, jnp.asarray(tokens))
        curve_nx.append(float(l_nx))
        curve_jnp.append(float(l_jnp))
        if verbose and (i % log_every == 0 or i == steps - 1):
            print(f"step {i:4d}   nx loss {curve_nx[-1]:.6f}   jnp loss {curve_jnp[-1]:.6f}   "
                  f"diff {abs(curve_nx[-1] - curve_jnp[-1]):.1e}")
    if verbose:
        diff = max(abs(a - b) for a, b in zip(curve_nx, curve_jnp))
        pdiff = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                    zip(jax.tree.leaves(model.positional_params(p_nx)), jax.tree.leaves(params)))
        print(f"max |nx loss - jnp loss| over {steps} steps: {diff:.2e}; "
              f"max parameter difference at the end: {pdiff:.2e}")
    return curve_nx, curve_jnp


if __name__ == "__main__":
    train(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
