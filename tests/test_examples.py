"""The examples run in their fast modes and print what they claim."""

import os
import re
import subprocess
import sys

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
sys.path.insert(0, EXAMPLES)
from conftest import SUITE_FLAGS  # noqa: E402
from multihost import child_env  # noqa: E402


def run_example(name: str, *args: str, timeout: float = 240) -> str:
    # an example compiles more than it runs: at the suite's compile settings (tests/conftest.py); the
    # processes examples/multihost.py starts in turn keep XLA's defaults (its child_env drops them)
    env = child_env()
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {SUITE_FLAGS}".strip()
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_multihost_two_processes_train_as_one():
    out = run_example("multihost.py", "--fast", timeout=420)  # past the example's own 300 s guard
    assert "process 0: 4 of 8 devices, loaded 32 of 64 rows" in out
    assert "process 1: 4 of 8 devices, loaded 32 of 64 rows" in out
    assert "hidden[0:32]" in out and "p1:" in out  # the picture shows blocks on both processes
    rows = [ln.split() for ln in out.splitlines() if ln.strip()[:1].isdigit() and len(ln.split()) == 3]
    assert len(rows) == 3 and all(abs(float(a) - float(b)) < 1e-5 for _, a, b in rows)
    assert float(rows[-1][1]) < float(rows[0][1])  # it learns
    assert "the two processes agree with one process: True" in out


def test_train_mlp_three_strategies_give_one_loss_curve():
    out = run_example("train_mlp.py", "--fast")
    runs = ["single device", "data parallel", "model parallel"]
    # the loss curves, side by side: one column per run, equal in every row, and falling
    header = out.index("loss curves")
    rows = [ln.split() for ln in out[header:].splitlines()[2:] if ln.strip()[:1].isdigit()]
    rows = rows[:next((i for i, r in enumerate(rows) if len(r) != 4), len(rows))]
    assert len(rows) >= 5
    assert all(abs(float(r[k]) - float(r[1])) < 1e-4 for r in rows for k in (2, 3))
    assert float(rows[-1][1]) < 0.5 * float(rows[0][1])
    # every run is well above chance (10 classes) on the held-out images, and its parameters are laid out
    table = re.finditer(r"^(single device|data parallel|model parallel) +\{.*\} +([\d.]+)%", out, re.M)
    accuracy = {m.group(1): float(m.group(2)) for m in table}
    assert list(accuracy) == runs and all(a > 50 for a in accuracy.values()), accuracy
    assert "split hidden over model" in out and "hidden[112:128]  7" in out
    diff = float(re.search(r"largest difference between the three loss curves over \d+ steps: (\S+)", out)[1])
    assert diff < 1e-4
    assert "the three runs give the same loss curve: True" in out


def test_transformer_loss_falls_with_heads_split_and_it_decodes():
    out = run_example("transformer.py", "--fast")
    assert "rules {'batch': 'data', 'heads': 'model', 'qkv': 'model', 'mlp': 'model'}" in out
    assert "split qkv over model" in out and "qkv[144:192]  3,7" in out  # one head's q, k, v per device
    table = out[out.index("  step      loss"):out.index("trained in")]
    losses = [float(ln.split()[1]) for ln in table.splitlines()[1:] if ln.strip()]
    assert len(losses) == 10 and losses[-1] < 0.9 * losses[0], losses
    assert re.search(r"exact match on 64 held-out strings: [\d.]+% \(digits right: [\d.]+%\)", out)
    decoded = re.findall(r"^  (\d{8})=(\d{8})   (right|wrong, expected (\d{8}))$", out, re.M)
    assert len(decoded) == 5
    for prompt, answer, verdict, expected in decoded:  # the verdicts are about the reversed prompt
        assert (verdict == "right") == (answer == prompt[::-1])
        assert expected in ("", prompt[::-1])


def test_plan_sharding_picks_a_strategy_no_worse_than_the_hand_picked_and_it_trains_alike():
    out = run_example("plan_sharding.py", "--fast")
    assert "as good or better: True" in out
    assert re.search(r"^Plan: \d+ candidates on mesh \(data=4, model=2\); best ", out, re.M)
    assert "heads->dataxmodel, qkv->dataxmodel, mlp->dataxmodel  indivisible" in out
    assert re.search(r"^\{\} \(replicated\)\s+over memory_limit", out, re.M)
    assert "every strategy gives the one-device losses: True" in out


def _load_example(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"nx_{name}_example", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_llama_named_loss_and_gradients_equal_the_positional_ones_however_names_are_spelled():
    import jax
    import numpy as np

    llama = _load_example("llama")
    cfg = llama.Config(layers=2, embed=16, heads=4, kv_heads=2, head_dim=8, mlp=24, seq=6, batch=3, vocab=7)
    params, tokens = llama.init_params(0, cfg), llama.make_batch(0, cfg)

    def value_and_grad(loss, *args):
        # the values are what is checked: compiled without backend optimisation, about twice as fast to build
        lowered = jax.jit(jax.value_and_grad(loss)).lower(*args)
        return lowered.compile({"xla_backend_optimization_level": 0})(*args)

    value, grads = value_and_grad(llama.jnp_loss, params, tokens)
    spellings = {"as written": {}, "reverse-alphabetical": llama.respelled(0, "reverse"),
                 "random": llama.respelled(0, "random")}
    for label, names in spellings.items():
        model = llama.make_nx_model(names)
        v, g = value_and_grad(model.loss, model.named_params(params), model.named_tokens(tokens))
        np.testing.assert_allclose(float(v), float(value), rtol=1e-5, atol=1e-5, err_msg=f"loss, {label}")
        assert jax.tree.structure(g) == jax.tree.structure(model.named_params(params))
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(model.positional_params(g)),
                                jax.tree.leaves(grads)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5,
                                       err_msg=f"gradient {jax.tree_util.keystr(path)}, {label}")
