"""A small GPT with named axes learns to reverse digit strings, with heads and MLP split over 8 devices.

The task: read ``31415926=`` and continue with ``62951413``. Every training string is random; the held-out
strings are drawn once and never trained on, and the model must produce all their digits by itself
(greedy decoding, one token at a time) to count as right.

The model is written with logical names only (``batch``, ``seq``, ``embed``, ``qkv``, ``heads``, ``head_dim``,
``mlp``, ``vocab``, ``layer``):

* attention projects ``embed`` to one fused ``qkv`` axis laid out heads-major, then ``nx.unflatten`` splits it
  into ``{heads, which, head_dim}`` and ``nx.unbind`` into queries, keys and values for
  ``nx.nn.dot_product_attention`` (causal);
* ``nx.nn.layer_norm`` normalizes over ``embed``;
* the layers' parameters are stacked on a ``layer`` axis and run by ``nx.scan(block, x, params, axis="layer",
  remat=True)``: one compiled block, its activations recomputed in the backward pass.

The parallel layout is one mapping, ``RULES``: the batch is split over the mesh axis ``data``, and heads and
MLP units over ``model`` (Megatron-style tensor parallelism; since ``qkv`` is heads-major, a device's block of
it holds whole heads). Parameters are created already split by ``nx.jit(init)``, and each adam step is one
``nx.jit`` call. ``python examples/transformer.py`` trains 1000 steps (under a minute on two cores; every
held-out string comes out right), ``--fast`` 10 steps, for the tests.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import jax

# Simulate 8 CPU devices. This must come before any JAX computation.
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
import optax  # noqa: E402

import namedarray as nx  # noqa: E402

EQUALS = 10  # the token after the digits 0-9
# The parallel layout, by logical name: the batch over the mesh axis "data"; heads and MLP units over "model".
# "qkv" (the fused projection's output) is laid out heads-major, so a device's block of it holds whole heads.
RULES = {"batch": "data", "heads": "model", "qkv": "model", "mlp": "model"}


@dataclasses.dataclass(frozen=True)
class Config:
    digits: int = 8        # the length of the strings to reverse
    layers: int = 2
    embed: int = 64
    heads: int = 4
    head_dim: int = 16
    mlp: int = 256
    vocab: int = 11        # 0-9 and "="
    batch: int = 64
    steps: int = 1000
    lr: float = 3e-3

    @property
    def seq(self) -> int:  # the model reads the digits, "=" and all but the last answer digit
        return 2 * self.digits


# ---------------------------------------------------------------------------------------------------------
# The task


def as_text(tokens) -> str:
    return "".join("=" if t == EQUALS else str(t) for t in np.asarray(tokens).tolist())


def with_answers(digits: np.ndarray) -> np.ndarray:
    """``(n, digits)`` -> ``(n, 2 * digits + 1)`` tokens: the digits, ``=``, the digits reversed."""
    equals = np.full((len(digits), 1), EQUALS, digits.dtype)
    return np.concatenate([digits, equals, digits[:, ::-1]], axis=1)


class Strings:
    """Random digit strings; the held-out ones are drawn first and never given to training."""

    def __init__(self, cfg: Config, held_out: int, seed: int = 0):
        self.cfg, self.rng = cfg, np.random.default_rng(seed)
        self.test = self._draw(held_out)
        self._test_codes = self._codes(self.test)

    def _draw(self, n: int) -> np.ndarray:
        return self.rng.integers(0, 10, size=(n, self.cfg.digits)).astype(np.int32)

    @staticmethod
    def _codes(digits: np.ndarray) -> np.ndarray:
        return digits @ (10 ** np.arange(digits.shape[1], dtype=np.int64))

    def batch(self) -> np.ndarray:
        digits = self._draw(self.cfg.batch)
        while (seen := np.isin(self._codes(digits), self._test_codes)).any():
            digits[seen] = self._draw(int(seen.sum()))
        return with_answers(digits)


def named_tokens(tokens: np.ndarray) -> nx.NamedArray:
    return nx.wrap(tokens, ["batch", "seq"])


# ---------------------------------------------------------------------------------------------------------
# The model: logical names only


def init(key, cfg: Config) -> dict:
    """Parameters by name; the blocks' are stacked on ``layer`` (first among their names, as a positional
    program keeps its layer axis in front)."""
    L, E, H, D, M, V = cfg.layers, cfg.embed, cfg.heads, cfg.head_dim, cfg.mlp, cfg.vocab
    keys = iter(jax.random.split(key, 7))
    inits = nx.nn.initializers

    def weight(in_axis, out_axis, named_shape):
        return inits.lecun_normal(in_axis=in_axis, out_axis=out_axis, batch_axis="layer")(
            next(keys), (), named_shape=named_shape)

    blocks = {
        "ln1_scale": nx.ones({"layer": L, "embed": E}), "ln1_bias": nx.zeros({"layer": L, "embed": E}),
        "wqkv": weight("embed", "qkv", {"layer": L, "embed": E, "qkv": H * 3 * D}),
        "wo": weight(("heads", "head_dim"), "embed", {"layer": L, "heads": H, "head_dim": D, "embed": E}),
        "ln2_scale": nx.ones({"layer": L, "embed": E}), "ln2_bias": nx.zeros({"layer": L, "embed": E}),
        "w1": weight("embed", "mlp", {"layer": L, "embed": E, "mlp": M}),
        "b1": nx.zeros({"layer": L, "mlp": M}),
        "w2": weight("mlp", "embed", {"layer": L, "mlp": M, "embed": E}),
        "b2": nx.zeros({"layer": L, "embed": E}),
    }
    return {"tok": nx.random.normal(next(keys), named_shape={"vocab": V, "embed": E}),
            "pos": nx.random.normal(next(keys), named_shape={"seq": cfg.seq, "embed": E}) * 0.1,
            "blocks": blocks,
            "lnf_scale": nx.ones({"embed": E}), "lnf_bias": nx.zeros({"embed": E}),
            "unembed": inits.lecun_normal(in_axis="embed", out_axis="vocab")(
                next(keys), (), named_shape={"embed": E, "vocab": V})}


def attention(x, p):
    heads, head_dim = p["wo"].named_shape["heads"], p["wo"].named_shape["head_dim"]
    qkv = nx.dot(x, p["wqkv"].shard(), axis="embed")                            # {batch, seq, qkv}
    qkv = nx.unflatten(qkv, "qkv", {"heads": heads, "which": 3, "head_dim": head_dim}).shard()
    q, k, v = nx.unbind(qkv, "which")                                    # each {batch, seq, heads, head_dim}
    out = nx.nn.dot_product_attention(q, k, v, seq_axis="seq", head_axis="head_dim", heads_axis="heads",
                                      is_causal=True)
    return nx.dot(out, p["wo"].shard(), axis=("heads", "head_dim"))             # {batch, seq, embed}


def block(x, p):
    """One layer: ``p`` is the blocks' parameters without their ``layer`` axis."""
    x = x + attention(nx.nn.layer_norm(x, "embed", p["ln1_scale"], p["ln1_bias"]), p)
    h = nx.nn.layer_norm(x, "embed", p["ln2_scale"], p["ln2_bias"])
    h = nx.nn.gelu(nx.dot(h, p["w1"].shard(), axis="embed") + p["b1"]).shard()   # {batch, seq, mlp}
    return (x + nx.dot(h, p["w2"].shard(), axis="mlp") + p["b2"]).shard(), None


def logits(params, tokens):
    """``tokens`` ``{batch, seq}`` -> next-token logits ``{batch, seq, vocab}``."""
    x = nx.take(params["tok"], tokens.shard(), axis="vocab") + params["pos"]   # {batch, seq, embed}
    x, _ = nx.scan(block, x.shard(), params["blocks"], axis="layer", remat=True)
    x = nx.nn.layer_norm(x, "embed", params["lnf_scale"], params["lnf_bias"])
    return nx.dot(x, params["unembed"], axis="embed")


def loss(params, tokens, cfg: Config):
    """Cross-entropy of the answer digits (the prompt's digits are random: nothing to learn there)."""
    inputs, targets = tokens[{"seq": slice(0, cfg.seq)}], tokens[{"seq": slice(1, cfg.seq + 1)}]
    logp = nx.nn.log_softmax(logits(params, inputs), axis="vocab")
    nll = -nx.sum(nx.nn.one_hot(targets, cfg.vocab, axis="vocab") * logp, "vocab")  # {batch, seq}
    answer = nx.arange(cfg.seq, name="seq") >= cfg.digits
    return nx.mean(nx.sum(nx.where(answer, nll, 0.0), "seq"), "batch") / cfg.digits


def make_step(cfg: Config, optimizer):
    def step(params, opt_state, tokens):
        value, grads = nx.value_and_grad(loss)(params, tokens, cfg)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return nx.jit(step)


def make_generate(cfg: Config):
    def generate(params, prompts):
        """Prompts ``{batch, seq}`` (digits and ``=``) -> the answers ``{batch, seq}``, decoded greedily."""
        n = cfg.digits
        blank = nx.zeros({"batch": prompts.named_shape["batch"], "seq": n}, prompts.dtype)
        text = nx.concatenate([prompts, blank], axis="seq")                      # the whole string

        def next_digit(i, text):
            scores = logits(params, text[{"seq": slice(0, cfg.seq)}])[{"seq": n + i}]   # {batch, vocab}
            return text.at[{"seq": n + 1 + i}].set(nx.argmax(scores, axis="vocab"))

        return nx.lax.fori_loop(0, n, next_digit, text)[{"seq": slice(n + 1, None)}]

    return nx.jit(generate)


# ---------------------------------------------------------------------------------------------------------
# Training


def main(fast: bool = False) -> None:
    cfg = Config(steps=10) if fast else Config()
    strings = Strings(cfg, held_out=64 if fast else 512)
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    print(f"reversing {cfg.digits}-digit strings: {cfg.layers} layers, embed {cfg.embed}, {cfg.heads} heads "
          f"x {cfg.head_dim}, mlp {cfg.mlp}; batch {cfg.batch}, {cfg.steps} adam steps")
    print(f"mesh {dict(mesh.shape)}, rules {RULES}")
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(optax.warmup_cosine_decay_schedule(
        0.0, cfg.lr, min(100, cfg.steps // 10 + 1), cfg.steps)))
    t0 = time.perf_counter()
    with jax.set_mesh(mesh), nx.axis_rules(RULES):
        params = nx.jit(init, static_argnums=1)(jax.random.key(0), cfg)   # created already split
        print("\nthe fused qkv projection, split by heads over 'model':")
        print(nx.visualize_sharding(params["blocks"]["wqkv"]))
        opt_state = nx.jit(optimizer.init)(params)
        step = make_step(cfg, optimizer)
        every = max(1, cfg.steps // 10)
        print(f"\n{'step':>6} {'loss':>9}")
        for i in range(cfg.steps):
            params, opt_state, value = step(params, opt_state, named_tokens(strings.batch()))
            value = float(value)  # waits for the step (many queued sharded steps can stall CPU collectives)
            if i % every == 0 or i == cfg.steps - 1:
                print(f"{i:>6} {value:>9.4f}", flush=True)
        train_s = time.perf_counter() - t0
        prompts = with_answers(strings.test)[:, :cfg.digits + 1]
        answers = np.asarray(make_generate(cfg)(params, named_tokens(prompts)).unwrap(["batch", "seq"]))
    expected = strings.test[:, ::-1]
    right = (answers == expected).all(axis=1)
    print(f"\ntrained in {train_s:.1f} s")
    print(f"exact match on {len(right)} held-out strings: {right.mean():.1%} "
          f"(digits right: {(answers == expected).mean():.1%})")
    for prompt, answer, ok in list(zip(prompts, answers, right))[:5]:
        verdict = "right" if ok else f"wrong, expected {as_text(prompt[-2::-1])}"
        print(f"  {as_text(prompt)}{as_text(answer)}   {verdict}")


if __name__ == "__main__":
    main(fast="--fast" in sys.argv)
