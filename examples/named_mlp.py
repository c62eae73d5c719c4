"""The xmap tutorial's network written with logical names only, shared by the examples and benchmarks.

``.shard()`` lays each value out by the rules in force (``nx.axis_rules``), so the same code runs on one
device, data-parallel, model-parallel, or over several processes. Importing this module configures nothing.

>>> import jax, jax.numpy as jnp, namedarray as nx
>>> params = init_params(jax.random.key(0), inputs=4, hidden=8, classes=3)
>>> images = nx.wrap(jnp.ones((2, 4)), ["batch", "inputs"])
>>> labels = nx.wrap(jnp.array([0, 2]), ["batch"])
>>> params, loss = sgd_step(params, images, labels)
>>> params["w1"].named_shape, loss.shape
({'hidden': 8, 'inputs': 4}, ())
"""

from __future__ import annotations

import jax
import numpy as np

import namedarray as nx


def init_params(key, inputs: int, hidden: int, classes: int) -> dict:
    """The network's parameters, named by what their axes mean."""
    k1, k2 = jax.random.split(key)
    return {"w1": nx.random.normal(k1, named_shape={"inputs": inputs, "hidden": hidden}) / np.sqrt(inputs),
            "w2": nx.random.normal(k2, named_shape={"hidden": hidden, "classes": classes}) / np.sqrt(hidden)}


def hidden_activations(params, images):
    return nx.nn.relu(nx.dot(images.shard(), params["w1"].shard(), axis="inputs").shard())


def loss(params, images, labels):
    """The tutorial's loss: mean cross-entropy over the batch (a plain scalar)."""
    logits = nx.dot(hidden_activations(params, images), params["w2"].shard(), axis="hidden")
    logits = logits - nx.nn.logsumexp(logits, "classes")
    targets = nx.nn.one_hot(labels, logits.named_shape["classes"], axis="classes")
    return -nx.mean(nx.sum(targets * logits, "classes"), "batch").unwrap()


def sgd_step(params, images, labels, lr=0.1):
    """One SGD step: (new parameters, the loss before it)."""
    value, grads = jax.value_and_grad(loss)(params, images, labels)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), value
