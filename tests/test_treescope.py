"""Rich display in treescope: the axis names and sizes of a NamedArray in its tree summary, its array view
and its sharding view (parsed from the rendered HTML and text)."""

import html
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from meshes import auto_mesh

import namedarray as nx

treescope = pytest.importorskip("treescope")


def value():
    return nx.wrap(jnp.arange(2 * 3 * 4, dtype=jnp.float32).reshape(2, 3, 4), [None, "batch", "embed"])


def plain_html(obj) -> str:
    return html.unescape(treescope.render_to_html(obj, compressed=False))


def test_tree_summary_names_every_axis():
    x = value()
    text = treescope.render_to_text({"w": x})
    assert "NamedArray float32 (2,) {batch: 3, embed: 4}" in text
    assert "≈1.2e+01" in text  # the statistics of the values
    assert "[[[ 0.  1.  2.  3.]" in text  # unfolds to the values as repr prints them
    page = plain_html({"w": x})
    for name, size in x.named_shape.items():
        assert f"{name}: {size}" in page


def test_array_view_labels_named_and_positional_axes():
    figure = treescope.render_array(value())
    page = plain_html(figure)
    labels = set(re.findall(r'"label": "([^"]+)"', page))
    assert {"axis 0: 2", "batch: 3", "embed: 4"} <= labels


def test_array_view_with_a_mask_by_name():
    x = value()
    mask = nx.wrap(jnp.array([True, False, True]), ["batch"]) & (x > 3)
    page = plain_html(treescope.render_array(x, valid_mask=mask))
    assert "batch: 3" in page


def test_sharding_view_of_a_split_value():
    x = nx.wrap(jnp.zeros((8, 4)), ["batch", "embed"]).shard({"batch": "data"},
                                                              mesh=auto_mesh((4,), ("data",)))
    page = plain_html(treescope.render_array_sharding(x))
    assert "batch" in page and "embed" in page
    assert np.asarray(x.unwrap(["batch", "embed"])).shape == (8, 4)


def test_abstract_values_render_their_names():
    abstract = jax.eval_shape(value)
    text = treescope.render_to_text(abstract)
    assert "{batch: 3, embed: 4}" in text


def test_traced_values_render_their_names_under_jit_vmap_and_grad():
    seen = []

    def f(x):
        seen.append(treescope.render_to_text(x))
        return (x * x).sum(("batch", "embed")).sum().unwrap()

    x = value()
    jax.jit(f)(x)
    jax.grad(f)(x)
    jax.vmap(f)(x)  # over the positional axis
    assert len(seen) == 3 and all("{batch: 3, embed: 4}" in text for text in seen)
