"""Record what the real ``jax.experimental.maps.xmap`` computes for the xmap programs of this folder.

Run with jax 0.4.30, the last release that has xmap, in an environment of its own (Python 3.11)::

    python3.11 -m venv /tmp/xmap-oracle
    /tmp/xmap-oracle/bin/pip install "jax[cpu]==0.4.30" "numpy<2" "scipy<1.14" "dm-haiku==0.0.12"
    /tmp/xmap-oracle/bin/python tests/xmap_programs/record.py

It writes ``answers.json`` beside this file, which ``tests/test_xmap_positional.py`` compares nx.xmap
against (the programs run there with only their ``jax.experimental.maps`` import changed).
"""

import json
import os
import pathlib
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sharded_lm  # noqa: E402
import tutorial_mlp  # noqa: E402
from jax.sharding import Mesh  # noqa: E402


def main():
    assert jax.__version__ == "0.4.30", f"record with jax 0.4.30 (the last with xmap), not {jax.__version__}"
    answers = {"jax": jax.__version__}
    with Mesh(np.array(jax.devices()).reshape(4, 2), ("dp", "mp")):
        out, _ = sharded_lm.ShardedLM(sharded_lm.CONFIG).run(steps=5)
    answers["sharded_lm"] = out
    answers["tutorial_mlp"] = tutorial_mlp.run_all()
    (HERE / "answers.json").write_text(json.dumps(answers, indent=1) + "\n")
    print(json.dumps(answers, indent=1))


if __name__ == "__main__":
    main()
