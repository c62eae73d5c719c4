"""A small Llama-style decoder trained with optax adam, written twice: with named axes (nx) and positionally.

The model is the decoder of the Llama family at toy size: RMSNorm before each sublayer, rotary position
embeddings on queries and keys, grouped-query attention, a SwiGLU MLP, untied embedding and unembedding, and
its layers stacked along one ``layer`` axis and run by a scan.

Grouped-query attention is where names pay off. Four query heads share two key/value heads: keys and values
carry ``kv_heads``, queries carry ``kv_heads`` and ``q_per_kv`` (which query of the group). Nothing is
repeated: the attention logits contract ``head_dim`` between queries and keys that share ``kv_heads``, and
``q_per_kv`` simply rides along, as a name only the queries have. The positional version writes the same
contraction with five-letter einsum specs (``bskgd,btkd->bkgst``), in the layout one writes by hand:
activations ``(batch, seq, embed)``, attention weights ``(batch, kv_heads, q_per_kv, seq, kseq)``.

Rotary embeddings turn each pair ``(x1, x2)`` of ``head_dim``'s two halves by an angle that depends on the
position and the pair: ``(x1 cos - x2 sin, x2 cos + x1 sin)``. The positional version splits the last axis
and concatenates the turned halves. The named version says what the halves are: ``nx.unflatten`` views
``head_dim`` as ``{half: 2, freq: head_dim / 2}`` (a reshape, no data moves), ``nx.flip`` along ``half``
swaps the halves, and the ``{seq, freq}`` tables of cosines and sines broadcast by name over batch and heads;
``nx.flatten`` gives ``head_dim`` back. Every step is elementwise in the layout the projection produced.

The stacked layers run with ``nx.scan(block, x, params["blocks"], axis="layer")`` in the named version and
``jax.lax.scan`` in the positional one; each step sees one layer's parameters, and the gradients come back
stacked along ``layer`` as the parameters are.

The named model marks its layouts as docs/library_authors.md says: ``.shard()`` on each layer's parameters
where they are used, on the activations a contraction makes, and on the residual stream. With no mesh and no
rules every call returns its value as it is; under ``nx.axis_rules`` the same code runs data parallel,
tensor parallel, both, or fully sharded (``benchmarks/sharded_llama.py`` measures each against the
positional model sharded by hand).

Both versions compute the same function from the same parameters, so their losses and gradients agree to
float tolerance. As in ``examples/gpt.py``, the named model takes its axis names as data
(``make_nx_model({"batch": "b", "kv_heads": "g"})``): spelling must change neither the values nor (under jit)
the compiled work.

Run ``python examples/llama.py [steps]`` to train both side by side and print the two loss curves.

>>> cfg = Config(layers=1, embed=8, heads=4, kv_heads=2, head_dim=4, mlp=12, seq=5, batch=3)
>>> params, tokens = init_params(0, cfg), make_batch(0, cfg)
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
LOGICAL = ("batch", "seq", "kseq", "kv_heads", "q_per_kv", "head_dim", "half", "freq", "embed", "mlp",
           "vocab", "layer")

# Each parameter's axes, in the order ``init_params`` stores them (keyed by the parameter's own name). The
# blocks' parameters are stacked with ``layer`` in front, as a positional program keeps it for a scan.
PARAM_AXES: dict[str, tuple[str, ...]] = {
    "tok": ("vocab", "embed"),
    "attn_norm": ("layer", "embed"),
    "wq": ("layer", "embed", "kv_heads", "q_per_kv", "head_dim"),
    "wk": ("layer", "embed", "kv_heads", "head_dim"),
    "wv": ("layer", "embed", "kv_heads", "head_dim"),
    "wo": ("layer", "kv_heads", "q_per_kv", "head_dim", "embed"),
    "mlp_norm": ("layer", "embed"),
    "w_gate": ("layer", "embed", "mlp"),
    "w_up": ("layer", "embed", "mlp"),
    "w_down": ("layer", "mlp", "embed"),
    "final_norm": ("embed",),
    "unembed": ("embed", "vocab"),
}

NEG_INF = -1e9      # the masked attention logit (finite, so a masked row never produces NaN gradients)
EPS = 1e-5          # RMSNorm
ROPE_BASE = 10000.0


@dataclasses.dataclass(frozen=True)
class Config:
    layers: int = 2
    embed: int = 64
    heads: int = 4      # query heads
    kv_heads: int = 2   # key/value heads, each shared by heads // kv_heads query heads
    head_dim: int = 16
    mlp: int = 192
    seq: int = 16
    batch: int = 32
    vocab: int = 32

    @property
    def q_per_kv(self) -> int:
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.heads} query heads do not split into {self.kv_heads} groups")
        return self.heads // self.kv_heads


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


def init_params(seed_or_rng: int | np.random.Generator = 0, cfg: Config = Config()) -> dict[str, Any]:
    """Parameters as a dict of plain arrays in the natural layout (axes as in ``PARAM_AXES``); the blocks'
    are stacked along a leading ``layer`` axis. Drawn with NumPy, so that no sampler is compiled per shape."""
    if cfg.head_dim % 2:
        raise ValueError(f"rotary embeddings rotate pairs: head_dim must be even, got {cfg.head_dim}")
    rng = np.random.default_rng(seed_or_rng)  # a Generator is returned as is
    sizes = {"vocab": cfg.vocab, "embed": cfg.embed, "kv_heads": cfg.kv_heads, "q_per_kv": cfg.q_per_kv,
             "head_dim": cfg.head_dim, "mlp": cfg.mlp, "layer": cfg.layers}

    def shape(name):
        return tuple(sizes[a] for a in PARAM_AXES[name])

    def normal(name, fan_in):
        return jnp.asarray(rng.standard_normal(shape(name), np.float32) * np.float32(fan_in ** -0.5))

    def ones(name):
        return jnp.ones(shape(name), jnp.float32)

    blocks = {
        "attn_norm": ones("attn_norm"),
        "wq": normal("wq", cfg.embed), "wk": normal("wk", cfg.embed), "wv": normal("wv", cfg.embed),
        "wo": normal("wo", cfg.heads * cfg.head_dim),
        "mlp_norm": ones("mlp_norm"),
        "w_gate": normal("w_gate", cfg.embed), "w_up": normal("w_up", cfg.embed),
        "w_down": normal("w_down", cfg.mlp),
    }
    return {"tok": normal("tok", 1), "blocks": blocks, "final_norm": ones("final_norm"),
            "unembed": normal("unembed", cfg.embed)}


def _leaf_name(path) -> str:
    return path[-1].key


def _inverse_frequencies(head_dim: int) -> np.ndarray:
    """The rotary embedding's angular frequencies, one per pair of ``head_dim`` (``head_dim // 2``)."""
    return (1.0 / ROPE_BASE ** (np.arange(0, head_dim, 2) / head_dim)).astype(np.float32)


# ---- the positional model ---------------------------------------------------------------------------------


def _jnp_rms_norm(x, g):
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + EPS) * g


def _jnp_rope(x, cos, sin):
    """Rotate the two halves of ``x``'s last axis; ``cos``, ``sin`` broadcast against each half."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def jnp_loss(params: dict[str, Any], tokens: jax.Array,
             layer_inputs: Callable[[jax.Array, dict[str, Any]], tuple] | None = None) -> jax.Array:
    """Mean next-token cross-entropy; ``tokens`` is ``(batch, seq + 1)``. ``layer_inputs(x, p)``, when
    given, returns what each layer computes with in place of its input ``x`` and its parameters ``p`` (a
    hand-sharded program constrains their layouts there)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    seq = inputs.shape[1]
    vocab = params["tok"].shape[0]
    head_dim = params["blocks"]["wq"].shape[-1]
    x = jnp.take(params["tok"], inputs, axis=0)                                        # (b, s, e)
    angles = jnp.arange(seq, dtype=jnp.float32)[:, None] * _inverse_frequencies(head_dim)  # (s, d/2)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]                       # (s, t)

    def block(x, p):
        if layer_inputs is not None:
            x, p = layer_inputs(x, p)
        h = _jnp_rms_norm(x, p["attn_norm"])
        q = _jnp_rope(jnp.einsum("bse,ekgd->bskgd", h, p["wq"]), cos[:, None, None], sin[:, None, None])
        k = _jnp_rope(jnp.einsum("bse,ekd->bskd", h, p["wk"]), cos[:, None], sin[:, None])
        v = jnp.einsum("bse,ekd->bskd", h, p["wv"])
        logits = jnp.einsum("bskgd,btkd->bkgst", q, k) * head_dim ** -0.5
        att = jax.nn.softmax(jnp.where(causal, logits, NEG_INF), axis=-1)
        o = jnp.einsum("bkgst,btkd->bskgd", att, v)
        x = x + jnp.einsum("bskgd,kgde->bse", o, p["wo"])
        h = _jnp_rms_norm(x, p["mlp_norm"])
        m = jax.nn.silu(jnp.einsum("bse,em->bsm", h, p["w_gate"])) * jnp.einsum("bse,em->bsm", h, p["w_up"])
        return x + jnp.einsum("bsm,me->bse", m, p["w_down"]), None

    x, _ = jax.lax.scan(block, x, params["blocks"])
    x = _jnp_rms_norm(x, params["final_norm"])
    logp = jax.nn.log_softmax(jnp.einsum("bse,ev->bsv", x, params["unembed"]), axis=-1)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(targets, vocab) * logp, axis=-1))


# ---- the named model --------------------------------------------------------------------------------------


class NxModel:
    """The named Llama with its logical axis names spelled as ``names`` says (missing names keep theirs)."""

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
    def rope(self, x, cos, sin):
        """Rotary embedding by name. ``head_dim`` is two halves (``half``) of ``freq`` entries each, and each
        pair ``(x1, x2)`` turns by its angle: ``(x1 cos - x2 sin, x2 cos + x1 sin)``, that is ``x cos`` plus
        ``x`` with its halves swapped and the first negated, times ``sin``; ``cos``, ``sin`` are
        ``{seq, freq}``."""
        N = self.names
        halves = nx.unflatten(x, N["head_dim"], {N["half"]: 2, N["freq"]: x.named_shape[N["head_dim"]] // 2})
        swapped = nx.flip(halves, N["half"]) * nx.wrap(np.array([-1.0, 1.0], np.float32), [N["half"]])
        return nx.flatten(halves * cos + swapped * sin, (N["half"], N["freq"]), N["head_dim"])

    def block(self, x, p, cos, sin, causal):
        """One layer: ``p`` holds the blocks' parameters without their ``layer`` axis."""
        N = self.names
        to_kseq = {N["seq"]: N["kseq"]}
        p = nx.shard(p)  # this layer's parameters as the rules lay them out (free where they already are)
        x = x.shard()
        h = nx.nn.rms_norm(x, N["embed"], p["attn_norm"], eps=EPS)
        q = self.einsum("{batch,seq,embed},{embed,kv_heads,q_per_kv,head_dim}"
                        "->{batch,seq,kv_heads,q_per_kv,head_dim}", h, p["wq"]).shard()
        k = self.einsum("{batch,seq,embed},{embed,kv_heads,head_dim}->{batch,seq,kv_heads,head_dim}",
                        h, p["wk"]).shard()
        v = self.einsum("{batch,seq,embed},{embed,kv_heads,head_dim}->{batch,seq,kv_heads,head_dim}",
                        h, p["wv"]).shard()
        q, k, v = self.rope(q, cos, sin), self.rope(k, cos, sin).rename(to_kseq), v.rename(to_kseq)
        # each query meets the keys of its own kv head: q_per_kv is the queries' name alone
        scale = q.named_shape[N["head_dim"]] ** -0.5
        logits = self.einsum("{batch,seq,kv_heads,q_per_kv,head_dim},{batch,kseq,kv_heads,head_dim}"
                             "->{batch,kv_heads,q_per_kv,seq,kseq}", q, k) * scale
        att = nx.nn.softmax(nx.where(causal, logits, NEG_INF), axis=N["kseq"])
        o = self.einsum("{batch,kv_heads,q_per_kv,seq,kseq},{batch,kseq,kv_heads,head_dim}"
                        "->{batch,seq,kv_heads,q_per_kv,head_dim}", att, v).shard()
        x = x + self.einsum("{batch,seq,kv_heads,q_per_kv,head_dim},{kv_heads,q_per_kv,head_dim,embed}"
                            "->{batch,seq,embed}", o, p["wo"]).shard()
        h = nx.nn.rms_norm(x, N["embed"], p["mlp_norm"], eps=EPS)
        gate = self.einsum("{batch,seq,embed},{embed,mlp}->{batch,seq,mlp}", h, p["w_gate"]).shard()
        up = self.einsum("{batch,seq,embed},{embed,mlp}->{batch,seq,mlp}", h, p["w_up"]).shard()
        return x + self.einsum("{batch,seq,mlp},{mlp,embed}->{batch,seq,embed}", nx.nn.silu(gate) * up,
                               p["w_down"]).shard()

    def loss(self, params: dict[str, Any], tokens: nx.NamedArray) -> jax.Array:
        """Mean next-token cross-entropy (a plain scalar, for ``jax.value_and_grad``)."""
        N = self.names
        seq = tokens.named_shape[N["seq"]] - 1
        vocab = params["tok"].named_shape[N["vocab"]]
        head_dim = params["blocks"]["wq"].named_shape[N["head_dim"]]
        inputs = tokens[{N["seq"]: slice(0, seq)}]
        targets = tokens[{N["seq"]: slice(1, seq + 1)}]
        x = nx.take(params["tok"].shard(), inputs, axis=N["vocab"]).shard()          # {batch, seq, embed}
        angles = (nx.arange(seq, name=N["seq"], dtype=jnp.float32)
                  * nx.wrap(_inverse_frequencies(head_dim), [N["freq"]]))            # {seq, freq}
        cos, sin = nx.cos(angles), nx.sin(angles)
        causal = nx.arange(seq, name=N["seq"]) >= nx.arange(seq, name=N["kseq"])

        def block(x, p):
            return self.block(x, p, cos, sin, causal), None

        x, _ = nx.scan(block, x, params["blocks"], axis=N["layer"])
        x = nx.nn.rms_norm(x, N["embed"], params["final_norm"], eps=EPS)
        logits = self.einsum("{batch,seq,embed},{embed,vocab}->{batch,seq,vocab}", x,
                             params["unembed"].shard()).shard()
        logp = nx.nn.log_softmax(logits, axis=N["vocab"])
        nll = -(nx.nn.one_hot(targets, vocab, axis=N["vocab"]) * logp).sum(N["vocab"])
        return nx.unwrap(nll.mean((N["batch"], N["seq"])))


def make_nx_model(names: Mapping[str, str] | None = None) -> NxModel:
    """The named Llama with logical axis names (``LOGICAL``) spelled as ``names`` maps them."""
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
    """Train the named and the positional Llama side by side from the same init on the same batches.

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


def main(argv: list[str] | None = None) -> None:
    """``python examples/llama.py [steps]``: train both models side by side (200 steps by default)."""
    argv = sys.argv[1:] if argv is None else argv
    train(int(argv[0]) if argv else 200)


if __name__ == "__main__":
    main()
