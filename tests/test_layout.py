"""Layout: named code under jit compiles to the work of positional code, whatever the axis names are.

The model is the small GPT of examples/gpt.py (shrunk, so that compiling stays quick), trained with optax
adam. Counts come from the optimised HLO of the jitted training step: ``transpose`` instructions in every
computation (XLA's CPU backend keeps layout changes inside fusions) and ``fusion`` instructions.
"""

import collections
import functools
import importlib.util
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import fresh_canonical_orders

optax = pytest.importorskip("optax")


def _load_example():
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "gpt.py"
    spec = importlib.util.spec_from_file_location("nx_gpt_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gpt = _load_example()

CFG = gpt.Config(layers=1, embed=16, heads=2, head_dim=8, mlp=32, seq=6, batch=4)
OPTIMIZER = optax.adam(1e-3)
# Respellings of the logical names whose sorted order differs from the natural spelling's.
RESPELLINGS = {
    "reverse": gpt.respelled(0, "reverse"),
    "permute": gpt.respelled(0, "permute"),
    "random": gpt.respelled(2, "random"),
}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*\S+\s+([a-z][\w\-]*)\(", re.M)


def _opcodes(compiled_text: str) -> collections.Counter:
    return collections.Counter(m.group(1) for m in _INSTRUCTION.finditer(compiled_text))


def _params():
    return gpt.init_params(0, CFG)


def _tokens(seed=0):
    return gpt.make_batch(seed, CFG)


@functools.cache
def _nx_counts(spelling: str | None) -> dict[str, int]:
    with fresh_canonical_orders():  # as a fresh process compiles it, whatever ran before
        return _nx_counts_now(spelling)


def _nx_counts_now(spelling: str | None) -> dict[str, int]:
    model = gpt.make_nx_model(RESPELLINGS[spelling] if spelling else {})
    p = model.named_params(_params())
    step = gpt.make_step(model.loss, OPTIMIZER)
    ops = _opcodes(step.lower(p, OPTIMIZER.init(p), model.named_tokens(_tokens())).compile().as_text())
    return {"transpose": ops["transpose"], "fusion": ops["fusion"]}


@functools.cache
def _jnp_counts() -> dict[str, int]:
    p = _params()
    step = gpt.make_step(gpt.jnp_loss, OPTIMIZER)
    ops = _opcodes(step.lower(p, OPTIMIZER.init(p), jnp.asarray(_tokens())).compile().as_text())
    return {"transpose": ops["transpose"], "fusion": ops["fusion"]}


def test_respellings_change_the_sorted_order():
    natural = sorted(gpt.LOGICAL)
    for names in RESPELLINGS.values():
        assert sorted(gpt.LOGICAL, key=names.__getitem__) != natural


@pytest.mark.parametrize("spelling", sorted(RESPELLINGS))
def test_compiled_layout_does_not_depend_on_the_names(spelling):
    natural, respelled = _nx_counts(None), _nx_counts(spelling)
    assert respelled == natural, (
        f"axis names {RESPELLINGS[spelling]} compile the training step to {respelled} against {natural} "
        "with the names as written")


def test_nx_step_transposes_within_ten_percent_of_jnp():
    # Fewer transposes than the positional program is fine; more than 10% more is a layout cost.
    nx_t, jnp_t = _nx_counts(None)["transpose"], _jnp_counts()["transpose"]
    assert nx_t <= 1.10 * jnp_t, f"nx step compiles to {nx_t} transposes, the jnp step to {jnp_t}"


def _step_with_grads(loss_fn):
    def step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
        return loss, grads, optax.apply_updates(params, updates), opt_state

    return jax.jit(step)


def test_nx_and_jnp_losses_and_gradients_agree_over_adam_steps():
    model = gpt.make_nx_model(RESPELLINGS["permute"])
    p_jnp = _params()
    p_nx = model.named_params(p_jnp)
    s_jnp, s_nx = OPTIMIZER.init(p_jnp), OPTIMIZER.init(p_nx)
    step_jnp, step_nx = _step_with_grads(gpt.jnp_loss), _step_with_grads(model.loss)
    for i in range(4):
        tokens = _tokens(i)
        l_jnp, g_jnp, p_jnp, s_jnp = step_jnp(p_jnp, s_jnp, jnp.asarray(tokens))
        l_nx, g_nx, p_nx, s_nx = step_nx(p_nx, s_nx, model.named_tokens(tokens))
        np.testing.assert_allclose(float(l_nx), float(l_jnp), rtol=1e-5, atol=1e-5, err_msg=f"loss, step {i}")
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(model.positional_params(g_nx)),
                                jax.tree.leaves(g_jnp)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5,
                                       err_msg=f"gradient {jax.tree_util.keystr(path)}, step {i}")
    for a, b in zip(jax.tree.leaves(model.positional_params(p_nx)), jax.tree.leaves(p_jnp)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)
