"""The xmap tutorial's toy network and the xmap docstring's examples, written for
``jax.experimental.maps.xmap`` with ``jax.lax`` collectives and ``jax.numpy`` inside the bodies.

The tutorial wrote ``lax.pdot``, ``logsumexp(x, 'classes')`` and ``one_hot(..., axis='classes')``, which
jax no longer has; here they are spelled with the collectives they stood for (``psum`` of a product,
``pmax``/``psum`` of exponentials, a comparison with ``axis_index``), so the same text runs on jax 0.4.30's
xmap and, with the import line changed, on ``nx.xmap``. Nothing here may use nx.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.maps import xmap  # the one line a port changes
from jax.sharding import Mesh


def named_predict(w1, w2, image):
    hidden = jax.nn.relu(lax.psum(image * w1, "inputs"))
    logits = lax.psum(hidden * w2, "hidden")
    top = lax.pmax(lax.stop_gradient(logits), "classes")
    return logits - (top + jnp.log(lax.psum(jnp.exp(logits - top), "classes")))


def named_loss(w1, w2, images, labels):
    predictions = named_predict(w1, w2, images)
    num_classes = lax.psum(1, "classes")
    targets = (labels % num_classes == lax.axis_index("classes")).astype(jnp.float32)
    losses = lax.psum(targets * predictions, "classes")
    return -lax.pmean(losses, "batch")


IN_AXES = [["inputs", "hidden", ...], ["hidden", "classes", ...], ["batch", "inputs", ...], ["batch", ...]]


def per_example_grad(w2, hidden, label):
    """Autodiff inside the body: the gradient of one example's loss with respect to its own w2 slice."""
    def loss(w2):
        logits = lax.psum(hidden * w2, "hidden")
        top = lax.pmax(lax.stop_gradient(logits), "classes")
        logp = logits - (top + jnp.log(lax.psum(jnp.exp(logits - top), "classes")))
        return -lax.psum(jnp.where(label == lax.axis_index("classes"), logp, 0.0), "classes")

    return jax.value_and_grad(loss)(w2)


def data():
    rng = np.random.RandomState(0)
    w1 = (rng.normal(size=(12, 8)) / 4).astype(np.float32)
    w2 = (rng.normal(size=(8, 4)) / 3).astype(np.float32)
    images = rng.normal(size=(16, 12)).astype(np.float32)
    labels = rng.randint(0, 4, size=16).astype(np.int32)
    return w1, w2, images, labels


def run_all():
    w1, w2, images, labels = data()
    out = {}
    loss = xmap(named_loss, in_axes=IN_AXES, out_axes=[...])
    out["loss"] = float(loss(w1, w2, images, labels))
    try:  # around the map (jax 0.4.30's xmap fails here: its vmap-based transpose of the mapped output)
        g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2, images, labels)
        out["grad_w1"] = np.asarray(g1).ravel().tolist()
        out["grad_w2"] = np.asarray(g2).ravel().tolist()
    except ValueError as e:
        out["grad_error"] = str(e).splitlines()[0]
    hidden = np.maximum(images @ w1, 0)
    inside = xmap(per_example_grad, in_axes=(["hidden", "classes", ...], ["batch", "hidden", ...],
                                             ["batch", ...]),
                  out_axes=(["batch", ...], ["batch", "hidden", "classes", ...]))
    v, g = inside(w2, hidden, labels)
    out["inside_value"] = np.asarray(v).ravel().tolist()
    out["inside_grad"] = np.asarray(g).ravel().tolist()
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
    for name, resources in (("batch", {"batch": "x"}), ("hidden", {"hidden": "x"}),
                            ("batch_hidden", {"batch": "x", "hidden": "y"})):
        with mesh:
            f = xmap(named_loss, in_axes=IN_AXES, out_axes=[...], axis_resources=resources)
            out[f"loss_{name}"] = float(f(w1, w2, images, labels))
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    gram = xmap(jnp.vdot, in_axes=({0: "left"}, {1: "right"}), out_axes=["left", "right", ...])
    out["vdot"] = np.asarray(gram(x, x.T)).tolist()
    my_func = xmap(lambda v: v, in_axes={0: "batch"}, out_axes={1: "batch"})
    out["transpose"] = np.asarray(my_func(x)).tolist()
    shuffle = xmap(lambda v: lax.pshuffle(v, "i", list(reversed(range(8)))), in_axes=["i", ...],
                   out_axes=["i", ...])
    out["pshuffle"] = np.asarray(shuffle(np.arange(8, dtype=np.float32))).tolist()
    return out
