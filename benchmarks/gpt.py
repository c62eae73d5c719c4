"""GPT training step rows: the small GPT of examples/gpt.py, one adam step under jit, nx vs jnp
(see training_step.py for what is measured)."""

from __future__ import annotations

import jax

jax.config.update("jax_cpu_enable_async_dispatch", False)

import sys  # noqa: E402

from common import table  # noqa: E402
from training_step import NOTE, load_example, rows  # noqa: E402

gpt = load_example("gpt")


def main(quick: bool = False) -> str:
    body, cfg = rows(gpt, "GPT training step (adam)", quick)
    return (f"## GPT training step under jit (1 device)\n\n"
            f"{cfg.layers} layers, embed {cfg.embed}, {cfg.heads} heads x {cfg.head_dim}, MLP {cfg.mlp}, "
            f"seq {cfg.seq}, batch {cfg.batch}, vocab {cfg.vocab} (examples/gpt.py); one step = "
            "jit(value_and_grad(loss)) + optax adam update, named vs positional from the same init.\n\n"
            + table(["model", "measure", "nx", "jnp", "nx vs jnp"], body) + "\n\n" + NOTE)


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
