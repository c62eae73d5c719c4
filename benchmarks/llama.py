"""Llama training step rows: the small Llama-style decoder of examples/llama.py, one adam step under jit.

The model has grouped-query attention (queries named ``{kv_heads, q_per_kv}``, keys and values
``kv_heads``), rotary embeddings, RMSNorm, a SwiGLU MLP and its layers run by a scan over ``layer``; see
training_step.py for what is measured.
"""

from __future__ import annotations

import jax

jax.config.update("jax_cpu_enable_async_dispatch", False)

import sys  # noqa: E402

from common import table  # noqa: E402
from training_step import NOTE, load_example, rows  # noqa: E402

llama = load_example("llama")


def main(quick: bool = False) -> str:
    body, cfg = rows(llama, "Llama training step (adam)", quick)
    return (f"## Llama training step under jit (1 device)\n\n"
            f"{cfg.layers} layers (scanned), embed {cfg.embed}, {cfg.heads} query heads x {cfg.head_dim} "
            f"sharing {cfg.kv_heads} kv heads, SwiGLU MLP {cfg.mlp}, rotary embeddings, RMSNorm, "
            f"seq {cfg.seq}, batch {cfg.batch}, vocab {cfg.vocab} (examples/llama.py); one step = "
            "jit(value_and_grad(loss)) + optax adam update, named vs positional from the same init.\n\n"
            + table(["model", "measure", "nx", "jnp", "nx vs jnp"], body) + "\n\n" + NOTE)


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
