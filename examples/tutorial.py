"""A tour of namedarray (`make demo`).

1. Broadcasting and reducing by name.
2. The xmap tutorial's toy network, written with names and given a positional signature by ``nx.xmap``;
   its loss next to the positional program's.
3. The same network distributed over a (simulated) 8-device mesh by changing only ``axis_resources``.
4. Sharding by name without ``nx.xmap``: the network written once with ``.shard()`` and logical names,
   trained under four ``nx.axis_rules`` strategies; equal losses, and each strategy's layout.
5. Time as a resource: a serial loop, and types checked at call time.
"""

from typing import Annotated

import jax

# Simulate 8 CPU devices for part 3. This must come before any JAX computation.
jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
import named_mlp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from named_mlp import hidden_activations, sgd_step  # noqa: E402

import namedarray as nx  # noqa: E402
from namedarray.typing import f32  # noqa: E402


def section(title: str) -> None:
    print(f"\n== {title} ==")


# ---------------------------------------------------------------------------------------------------------
# 1. Names instead of positions


def broadcasting_tour() -> None:
    section("1. Names instead of positions")
    rng = np.random.default_rng(0)
    images = nx.wrap(jnp.asarray(rng.normal(size=(8, 784)), jnp.float32), ["batch", "inputs"])
    w = nx.wrap(jnp.asarray(rng.normal(size=(784, 10)) / 28, jnp.float32), ["inputs", "classes"])

    # Broadcast by name, reduce by name: no transposes, no axis numbers.
    logits = (images * w).sum("inputs")
    probs = nx.exp(logits - logits.max("classes"))
    probs = probs / probs.sum("classes")
    total = probs.sum("classes").unwrap(["batch"])
    print("logits have named shape", logits.named_shape)
    print(f"probabilities sum to 1 over 'classes' in every row (largest deviation "
          f"{float(jnp.max(jnp.abs(total - 1))):.1e})")

    # The same thing positionally, for comparison.
    ref = jax.nn.softmax(images.unwrap(["batch", "inputs"]) @ w.unwrap(["inputs", "classes"]), axis=1)
    err = float(jnp.max(jnp.abs(probs.unwrap(["batch", "classes"]) - ref)))
    print(f"max difference from the positional softmax: {err:.2e}")


# ---------------------------------------------------------------------------------------------------------
# 2. The xmap tutorial's toy network


def predict(w1, w2, images):
    hidden = jax.nn.relu(jnp.dot(images, w1))
    logits = jnp.dot(hidden, w2)
    return logits - jax.scipy.special.logsumexp(logits, axis=1, keepdims=True)


def loss(w1, w2, images, labels):
    predictions = predict(w1, w2, images)
    targets = jax.nn.one_hot(labels, predictions.shape[-1])
    losses = jnp.sum(targets * predictions, axis=1)
    return -jnp.mean(losses, axis=0)


def named_predict(w1, w2, image):
    hidden = nx.nn.relu(nx.pdot(image, w1, "inputs"))
    logits = nx.pdot(hidden, w2, "hidden")
    return logits - nx.nn.logsumexp(logits, "classes")


def named_loss(w1, w2, images, labels):
    predictions = named_predict(w1, w2, images)
    num_classes = nx.psum(1, "classes")
    targets = nx.nn.one_hot(labels, num_classes, axis="classes")
    losses = nx.psum(targets * predictions, "classes")
    return -nx.pmean(losses, "batch")


IN_AXES = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...], ["batch", ...]]


def make_data(seed: int = 0, batch: int = 128, inputs: int = 784, hidden: int = 512, classes: int = 10):
    rng = np.random.default_rng(seed)
    w1 = jnp.asarray(rng.normal(size=(inputs, hidden)) / np.sqrt(inputs), jnp.float32)
    w2 = jnp.asarray(rng.normal(size=(hidden, classes)) / np.sqrt(hidden), jnp.float32)
    images = jnp.asarray(rng.normal(size=(batch, inputs)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, classes, size=batch), jnp.int32)
    return w1, w2, images, labels


def xmap_tour(data) -> tuple[float, float]:
    section("2. The toy network, positional and named (nx.xmap gives the named one a positional signature)")
    xmapped_loss = nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...])
    positional, named = float(loss(*data)), float(xmapped_loss(*data))
    print(f"positional loss: {positional:.7f} | nx.xmap loss: {named:.7f}")
    g_pos = jax.grad(loss)(*data)
    g_named = jax.grad(xmapped_loss)(*data)
    print(f"max difference of d loss / d w1: {float(jnp.max(jnp.abs(g_pos - g_named))):.2e}")
    return positional, named


# ---------------------------------------------------------------------------------------------------------
# 3. Parallelism: only axis_resources changes


def strategies(n_devices: int = 8):
    """The tutorial's three ways of spreading the network over 8 devices."""
    devices = np.array(jax.devices()[:n_devices])
    return [
        ("data parallel", {"batch": "x"}, Mesh(devices, ("x",))),
        ("model parallel", {"hidden": "x"}, Mesh(devices, ("x",))),
        ("data x model", {"batch": "x", "hidden": "y"}, Mesh(devices.reshape(n_devices // 2, 2), ("x", "y"))),
    ]


def parallel_tour(data) -> dict[str, float]:
    section(f"3. The same nx.xmap on {len(jax.devices())} devices: only axis_resources changes")
    print(f"Every strategy gives the positional loss ({float(loss(*data)):.7f}) and lays the (batch, hidden) "
          "activations out over the mesh axes their names map to.")
    results = {}
    print(f"{'strategy':<15} {'axis_resources':<32} {'loss':>10}  hidden activations split as")
    for title, resources, mesh in strategies():
        with jax.set_mesh(mesh):
            xmapped_loss = nx.xmap(named_loss, in_axes=IN_AXES, out_axes=[...], axis_resources=resources)
            value = float(xmapped_loss(*data))
            hidden = nx.xmap(lambda w1, im: nx.nn.relu(nx.pdot(im, w1, "inputs")),
                             in_axes=[IN_AXES[0], IN_AXES[2]], out_axes=["batch", "hidden", ...],
                             axis_resources=resources)(data[0], data[2])
        results[title] = value
        print(f"{title:<15} {str(resources):<32} {value:>10.7f}  {hidden.sharding.spec}")
    return results


# ---------------------------------------------------------------------------------------------------------
# 4. Sharding by name: .shard() with logical names, the strategy picked by nx.axis_rules


# The network with logical names only lives in named_mlp.py (shared with the other examples): init_params,
# loss (called sharded_loss here), sgd_step and hidden_activations.
sharded_loss = named_mlp.loss


def rule_strategies(n_devices: int = 8):
    """(title, mesh shape, mesh axes, rules): only the rules and the mesh change, never the model."""
    return [
        ("replicated", (n_devices,), ("data",), {}),
        ("data parallel", (n_devices,), ("data",), {"batch": "data"}),
        ("model parallel", (n_devices,), ("model",), {"hidden": "model"}),
        ("data x model", (n_devices // 2, 2), ("data", "model"), {"batch": "data", "hidden": "model"}),
    ]


def sharding_tour(data, steps: int = 3) -> dict[str, list[float]]:
    section("4. Sharding by name: one model, four strategies, chosen by nx.axis_rules")
    w1, w2, images, labels = data
    params = {"w1": nx.wrap(w1, ["inputs", "hidden"]), "w2": nx.wrap(w2, ["hidden", "classes"])}
    images, labels = nx.wrap(images, ["batch", "inputs"]), nx.wrap(labels, ["batch"])
    step, hidden = nx.jit(sgd_step), nx.jit(hidden_activations)
    losses = {}
    for title, shape, axes, rules in rule_strategies():
        mesh = jax.make_mesh(shape, axes, axis_types=(jax.sharding.AxisType.Auto,) * len(axes))
        with jax.set_mesh(mesh), nx.axis_rules(rules):
            p, curve = params, []
            for _ in range(steps):
                p, loss = step(p, images, labels)
                curve.append(float(loss))
            picture = nx.visualize_sharding(hidden(p, images))
        losses[title] = curve
        print(f"\n{title:<15} rules {str(rules):<38} losses {' '.join(f'{v:.6f}' for v in curve)}")
        print("hidden activations:", picture)
    first = next(iter(losses.values()))
    same = all(np.allclose(c, first, rtol=1e-5) for c in losses.values())
    print(f"\nevery strategy gives the same losses: {same}")
    return losses


# ---------------------------------------------------------------------------------------------------------
# 5. Time as a resource, and types


# Dims may be variables ("d", "n"): one size per call, shared by every annotation of the call. Inside
# Annotated, a static checker reads the type (NamedArray) and nx.typing.check the shape.
Rows = Annotated[nx.NamedArray, f32[("d",), {"rows": "n"}]]
RowNorms = Annotated[nx.NamedArray, f32[(), {"rows": "n"}]]


@nx.typing.check
def row_norms(x: Rows) -> RowNorms:
    return nx.sqrt(nx.sum(x * x))


def loop_and_types_tour() -> None:
    section("5. Time as a resource, and types checked at call time")
    x = jnp.arange(32.0, dtype=jnp.float32).reshape(8, 4)
    at_once = nx.xmap(row_norms, in_axes=["rows", ...], out_axes=["rows"])(x)
    in_chunks = nx.xmap(row_norms, in_axes=["rows", ...], out_axes=["rows"],
                        axis_resources={"rows": nx.SerialLoop(4)})(x)
    print("row norms, at once and in 4 chunks, equal:", bool(jnp.allclose(at_once, in_chunks)))
    try:
        nx.xmap(row_norms, in_axes=["rows", ...], out_axes=["rows"])(x.astype(jnp.int32))
    except nx.errors.AnnotationError as e:
        print("a wrong dtype is caught:", e)


def main(**sizes: int) -> None:
    """Run the tour; ``sizes`` (batch, inputs, hidden, classes) shrink the network for quick runs."""
    broadcasting_tour()
    data = make_data(**sizes)
    xmap_tour(data)
    parallel_tour(data)
    sharding_tour(data)
    loop_and_types_tour()


if __name__ == "__main__":
    main()
