"""The suite's compile settings change nothing a test reads (tests/conftest.py).

The suite compiles with XLA's backend optimisation level 0 (LLVM leaves the emitted machine code
unoptimised), which halves the cost of a compile. That is only sound while everything the tests read is
decided before that step: here the GPT and Llama training steps of the examples, sharded by name on a
(4, 2) mesh, are compiled at level 0 and at XLA's default level 3 in one process, and must give the same
optimised HLO text (instructions, fusions, layouts, collectives), the same memory analysis and the same
cost analysis, and values equal to rounding.
"""

import os
import sys

import jax
import numpy as np
import optax
import pytest
from meshes import auto_mesh

import namedarray as nx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))
from training_step import _step, load_example  # noqa: E402


def test_the_suite_compiles_at_level_0():
    assert "--xla_backend_optimization_level=0" in os.environ["XLA_FLAGS"].split()


@pytest.mark.parametrize("example", ["gpt", "llama"])
def test_level_0_gives_the_hlo_memory_and_values_of_the_default_level(example):
    ex = load_example(example)
    cfg = ex.Config()
    model = ex.make_nx_model()
    optimizer = optax.adam(1e-3)
    params = model.named_params(ex.init_params(0, cfg))
    step = _step(model.loss, optimizer)
    mesh = auto_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh), nx.axis_rules({"batch": "data", "mlp": "model"}):
        args = (params, optimizer.init(params), model.named_tokens(ex.make_batch(0, cfg)))
        args = jax.device_put(args, nx.sharding(args))
        lowered = nx.jit(step).lower(*args)
        fast, default = (lowered.compile(compiler_options={"xla_backend_optimization_level": level})
                         for level in (0, 3))
        assert fast.as_text() == default.as_text()
        m0, m3 = fast.memory_analysis(), default.memory_analysis()
        for field in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
                      "alias_size_in_bytes"):
            assert getattr(m0, field) == getattr(m3, field), field
        c0, c3 = (c[0] if isinstance(c, (list, tuple)) else c
                  for c in (fast.cost_analysis(), default.cost_analysis()))
        assert c0["flops"] == c3["flops"] and c0["bytes accessed"] == c3["bytes accessed"]
        for a, b in zip(jax.tree.leaves(fast(*args)), jax.tree.leaves(default(*args))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=1e-6)
