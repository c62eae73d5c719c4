"""The programs of the 2-process test, shared by the worker processes and the single-process reference."""

import os
import sys

import jax.numpy as jnp
import numpy as np

import namedarray as nx

# the tutorial network with logical names only (it configures nothing, so workers may import it early)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import named_mlp  # noqa: E402

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
    return named_mlp.init_params(key, INPUTS, HIDDEN, CLASSES)


def sgd_step(params, images, labels):
    new, loss = named_mlp.sgd_step(params, images, labels, lr=0.5)
    return new, jnp.asarray(loss)
