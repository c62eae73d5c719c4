"""A first tour of namedarray: broadcasting and reducing by name (`make demo`)."""

import jax
import jax.numpy as jnp
import numpy as np

import namedarray as nx


def main() -> None:
    rng = np.random.default_rng(0)
    images = nx.wrap(jnp.asarray(rng.normal(size=(8, 784)), jnp.float32), ["batch", "inputs"])
    w = nx.wrap(jnp.asarray(rng.normal(size=(784, 10)) / 28, jnp.float32), ["inputs", "classes"])

    # Broadcast by name, reduce by name: no transposes, no axis numbers.
    logits = (images * w).sum("inputs")
    probs = nx.exp(logits - logits.max("classes"))
    probs = probs / probs.sum("classes")
    print("logits:", logits.named_shape, "| probabilities sum to", np.asarray(probs.sum("classes").unwrap(["batch"])))

    # The same thing positionally, for comparison.
    ref = jax.nn.softmax(images.unwrap(["batch", "inputs"]) @ w.unwrap(["inputs", "classes"]), axis=1)
    err = float(jnp.max(jnp.abs(probs.unwrap(["batch", "classes"]) - ref)))
    print(f"max difference from the positional softmax: {err:.2e}")


if __name__ == "__main__":
    main()
