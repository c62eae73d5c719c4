"""The programs of the 2-process test, shared by the worker processes and the single-process reference."""

import jax
import jax.numpy as jnp
import numpy as np

import namedarray as nx

BATCH, INPUTS, HIDDEN, CLASSES = 16, 8, 8, 4
IN_AXES = [["inputs", "classes", ...], ["batch", "inputs", ...], ["batch", ...]]
RULES = {"batch": "data", "hidden": "model"}


def data():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(INPUTS, CLASSES)).astype(np.float32) / np.sqrt(INPUTS)
    images = rng.normal(size=(BATCH, INPUTS)).astype(np.float32)
    labels = rng.integers(0, CLASSES, size=BATCH).astype(np.int32)
    return w, images, labels


def per_example(w, images, labels):
    logits = nx.dot(images, w, axis="inputs")
    logits = logits - nx.nn.logsumexp(logits, "classes")
    return -nx.sum(nx.nn.one_hot(labels, CLASSES, axis="classes") * logits, "classes")


def named_loss(w, images, labels):
    return nx.pmean(per_example(w, images, labels), "batch")


def init(key):
    k1, k2 = jax.random.split(key)
    return {"w1": nx.random.normal(k1, named_shape={"inputs": INPUTS, "hidden": HIDDEN}) / np.sqrt(INPUTS),
            "w2": nx.random.normal(k2, named_shape={"hidden": HIDDEN, "classes": CLASSES}) / np.sqrt(HIDDEN)}


def mlp_loss(params, images, labels):
    h = nx.nn.relu(nx.dot(images.shard(), params["w1"].shard(), axis="inputs")).shard()
    logits = nx.dot(h, params["w2"].shard(), axis="hidden")
    logits = logits - nx.nn.logsumexp(logits, "classes")
    targets = nx.nn.one_hot(labels, CLASSES, axis="classes")
    return -nx.mean(nx.sum(targets * logits, "classes"), "batch").unwrap()


def sgd_step(params, images, labels):
    loss, grads = jax.value_and_grad(mlp_loss)(params, images, labels)
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads), jnp.asarray(loss)
