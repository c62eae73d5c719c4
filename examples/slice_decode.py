"""A per-block function on a sharded array, without gathering it: greedy decoding of sharded logits.

The logits of a batch of sequences, ``{batch, seq, vocab}``, are split over ``batch`` across 8 devices.
Decoding (a softmax over ``vocab``, the most likely token and its probability) needs each sequence whole,
but never another device's sequences, so ``nx.shard_map`` runs it on each device's block where it lies.
The all-gathering version first makes the logits whole on every device (``.shard({})``: replicated), as
code that forgets where its data is does. Both give the same tokens; the compiled programs show what each
device holds and moves. Run: ``python examples/slice_decode.py`` (``--fast`` for a small batch).
"""

from __future__ import annotations

import re
import sys

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402

import namedarray as nx  # noqa: E402


def decode(logits):
    """Greedy decoding of one block: the most likely token per position, and its probability."""
    probs = nx.nn.softmax(logits, "vocab")
    return {"token": nx.argmax(logits, "vocab"), "prob": nx.max(probs, "vocab")}


def report(name: str, compiled) -> dict:
    mem = compiled.memory_analysis()
    hlo = compiled.as_text()
    gathers = len(re.findall(r"=\s*(?:\([^)]*\)|\S+)\s+all-gather(?:-start)?\(", hlo))
    out = {"argument": mem.argument_size_in_bytes, "output": mem.output_size_in_bytes,
           "temp": mem.temp_size_in_bytes, "all-gathers": gathers}
    print(f"{name:<16} per device: arguments {out['argument']:>9} B, temporaries {out['temp']:>9} B, "
          f"outputs {out['output']:>7} B; all-gathers in the program: {gathers}")
    return out


def main(fast: bool = False) -> dict:
    batch, seq, vocab = (16, 8, 64) if fast else (64, 128, 2048)
    logits = nx.random.normal(jax.random.key(0), named_shape={"batch": batch, "seq": seq, "vocab": vocab})
    total = batch * seq * vocab * 4
    print(f"logits {{batch: {batch}, seq: {seq}, vocab: {vocab}}}, {total} bytes, split over 'batch' on 8 "
          "devices")
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data"}):
        logits = logits.shard()
        per_block = jax.jit(nx.shard_map(decode))
        gathering = jax.jit(lambda x: decode(x.shard({})))  # every device makes the logits whole first
        a, b = per_block(logits), gathering(logits)
        mine = report("per block", per_block.lower(logits).compile())
        theirs = report("all-gathering", gathering.lower(logits).compile())
    same = bool(np.array_equal(np.asarray(a["token"].unwrap(["batch", "seq"])),
                               np.asarray(b["token"].unwrap(["batch", "seq"]))))
    close = bool(np.allclose(np.asarray(a["prob"].unwrap(["batch", "seq"])),
                             np.asarray(b["prob"].unwrap(["batch", "seq"])), rtol=1e-6))
    print(f"same tokens: {same}, same probabilities: {close}")
    print(f"per block, each device holds {mine['argument']}/{total} = 1/{total // mine['argument']} of the "
          f"logits; all-gathering, its temporaries hold {theirs['temp']} bytes (the whole is {total})")
    return {"per_block": mine, "gathering": theirs, "same": same and close, "total": total}


if __name__ == "__main__":
    main(fast="--fast" in sys.argv)
