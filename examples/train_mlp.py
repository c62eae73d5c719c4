"""A named MLP trained with optax on scikit-learn's digits, on one device and on 8 devices two ways.

The digits data set (1797 images of 8x8 pixels, bundled with scikit-learn, no download) is split into
training and test images by a fixed seed. The model names its axes by what they mean, ``batch``, ``pixels``,
``hidden`` and ``classes``, and calls ``.shard()`` where a layout matters; it never mentions a device. The
same training then runs three times, changed only by the mesh and the ``nx.axis_rules`` in force:

1. single device: no mesh and no rules, so ``.shard()`` does nothing and ``nx.jit`` is ``jax.jit``;
2. data parallel on 8 (simulated CPU) devices: ``{"batch": "data"}``, each device trains on 1/8 of each batch;
3. model parallel on 8 devices: ``{"hidden": "model"}``, each device holds 1/8 of the hidden units.

Parameters are created already split (``nx.jit(init)(key)``) and each adam step is one ``nx.jit``ed call.
Since no layout changes a value, the three loss curves agree to float tolerance: the script prints their
largest difference and the test accuracy of each run (about 98% in the full run, 1500 steps, well under a
minute on two cores). ``--fast`` trains 100 steps, for the tests.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import cast

import jax

# Simulate 8 CPU devices. This must come before any JAX computation.
jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
import optax  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from tqdm import tqdm  # noqa: E402

import namedarray as nx  # noqa: E402

HIDDEN, BATCH, SEED = 128, 128, 0


# ---------------------------------------------------------------------------------------------------------
# The data: named from the start


def digits(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training and test images ``(n, 64)`` scaled to [0, 1], and their labels ``(n,)``."""
    pixels, digit = load_digits(return_X_y=True)
    images, labels = np.asarray(pixels, np.float32) / 16.0, np.asarray(digit, np.int32)
    train_x, test_x, train_y, test_y = train_test_split(images, labels, test_size=0.2, random_state=seed,
                                                        stratify=labels)
    return np.asarray(train_x), np.asarray(train_y), np.asarray(test_x), np.asarray(test_y)


def named(images: np.ndarray, labels: np.ndarray) -> tuple[nx.NamedArray, nx.NamedArray]:
    """A batch as the model reads it: images ``{batch, pixels}``, labels ``{batch}``."""
    return nx.wrap(images, ["batch", "pixels"]), nx.wrap(labels, ["batch"])


def batches(n_train: int, steps: int, seed: int = SEED) -> np.ndarray:
    """``(steps, BATCH)`` indices of the training images: shuffled epochs, the same for every run."""
    rng = np.random.default_rng(seed)
    per_epoch = n_train // BATCH
    epochs = [rng.permutation(n_train)[:per_epoch * BATCH].reshape(per_epoch, BATCH)
              for _ in range(-(-steps // per_epoch))]
    return np.concatenate(epochs)[:steps]


# ---------------------------------------------------------------------------------------------------------
# The model: logical names only


def init(key, pixels: int = 64, hidden: int = HIDDEN, classes: int = 10) -> dict[str, nx.NamedArray]:
    k1, k2 = jax.random.split(key)
    he = nx.nn.initializers.he_normal(in_axis="pixels", out_axis="hidden")
    lecun = nx.nn.initializers.lecun_normal(in_axis="hidden", out_axis="classes")
    return {"w1": he(k1, (), named_shape={"pixels": pixels, "hidden": hidden}),
            "b1": nx.zeros({"hidden": hidden}),
            "w2": lecun(k2, (), named_shape={"hidden": hidden, "classes": classes}),
            "b2": nx.zeros({"classes": classes})}


def logits(params, images):
    hidden = nx.dot(images.shard(), params["w1"].shard(), axis="pixels") + params["b1"].shard()
    hidden = nx.nn.relu(hidden).shard()
    return nx.dot(hidden, params["w2"].shard(), axis="hidden") + params["b2"]


def loss(params, images, labels):
    """Mean cross-entropy over the batch: a 0-d NamedArray, which ``nx.value_and_grad`` accepts."""
    logp = nx.nn.log_softmax(logits(params, images), axis="classes")
    targets = nx.nn.one_hot(labels, logp.named_shape["classes"], axis="classes")
    return -nx.mean(nx.sum(targets * logp, "classes"), "batch")


def accuracy(params, images, labels):
    return nx.mean(nx.argmax(logits(params, images), axis="classes") == labels, "batch")


def make_step(optimizer):
    def step(params, opt_state, images, labels):
        value, grads = nx.value_and_grad(loss)(params, images, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return nx.jit(step)


# ---------------------------------------------------------------------------------------------------------
# One training run, and the three strategies


def strategies(n_devices: int = 8):
    """(title, mesh, rules): only these change between the runs, never the model."""
    auto = (jax.sharding.AxisType.Auto,)
    return [
        ("single device", None, {}),
        ("data parallel", jax.make_mesh((n_devices,), ("data",), axis_types=auto), {"batch": "data"}),
        ("model parallel", jax.make_mesh((n_devices,), ("model",), axis_types=auto), {"hidden": "model"}),
    ]


def train(data, order: np.ndarray, title: str,
          lr: float = 3e-3) -> tuple[np.ndarray, float, dict[str, nx.NamedArray]]:
    """Train from the same key on the batches ``order`` picks; returns the loss curve, test accuracy and the
    final parameters."""
    train_x, train_y, test_x, test_y = data
    optimizer = optax.adam(lr)
    params = nx.jit(init)(jax.random.key(SEED))  # created already laid out by the rules in force
    opt_state = nx.jit(optimizer.init)(params)
    step = make_step(optimizer)
    curve = []
    with tqdm(order, desc=f"{title:<15}", unit="step", mininterval=0.5, file=sys.stderr) as bar:
        for i, idx in enumerate(bar):
            # batches are cut on the host, like a data loader's; nx.jit lays them out by the rules
            params, opt_state, value = step(params, opt_state, *named(train_x[idx], train_y[idx]))
            # float() waits for the step: on simulated CPU devices, many sharded steps queued ahead can
            # stall XLA's CPU collectives
            curve.append(float(value))
            if i % 50 == 0:
                bar.set_postfix(loss=f"{curve[-1]:.4f}")
    # optax types its updated parameters as any pytree; they keep init's dict of NamedArrays
    trained = cast(dict[str, nx.NamedArray], params)
    return np.array(curve), float(nx.jit(accuracy)(trained, *named(test_x, test_y))), trained


def main(fast: bool = False) -> None:
    steps = 100 if fast else 1500
    data = digits()
    n_train, n_test = len(data[0]), len(data[2])
    print(f"digits: {n_train} training and {n_test} test images of 8x8 pixels, 10 classes; "
          f"{steps} adam steps of {BATCH} images, {HIDDEN} hidden units")
    order = batches(n_train, steps)
    curves, results = {}, []
    for title, mesh, rules in strategies():
        t0 = time.perf_counter()
        with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext(), nx.axis_rules(rules):
            curve, acc, params = train(data, order, title)
            layout = nx.visualize_sharding(params["w1"]) if mesh is not None else None
        curves[title] = curve
        results.append((title, rules, acc, time.perf_counter() - t0, layout))
    titles = list(curves)
    print("\nloss curves\n" + f"{'step':>6}" + "".join(f"{t:>16}" for t in titles))
    for i in sorted({*range(0, steps, max(1, steps // 10)), steps - 1}):
        print(f"{i:>6}" + "".join(f"{curves[t][i]:>16.6f}" for t in titles))
    print(f"\n{'run':<15} {'rules':<22} {'test accuracy':>14} {'time':>7}")
    for title, rules, acc, seconds, _ in results:
        print(f"{title:<15} {str(rules):<22} {acc:>13.2%} {seconds:>6.1f}s")
    for title, _, _, _, layout in results:
        if layout is not None:
            print(f"\nw1 under {title}:\n{layout}")
    reference = curves["single device"]
    diff = max(float(np.max(np.abs(c - reference))) for c in curves.values())
    same = all(np.allclose(c, reference, rtol=1e-4, atol=1e-5) for c in curves.values())
    print(f"\nlargest difference between the three loss curves over {steps} steps: {diff:.1e}")
    print(f"the three runs give the same loss curve: {same}")


if __name__ == "__main__":
    main(fast="--fast" in sys.argv)
