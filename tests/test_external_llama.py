"""A Llama the project did not write computes the same values through its named port.

The original is Penzai's Llama (installed from the package registry by the ``external`` extra, which
``make test`` installs); the port, tests/external/llama_port.py, was written by following
docs/library_authors.md. Both load the same weights (the original's initial ones). Checked: the logits and
the loss on one device, the gradients and the parameters after one adamw step, and the port's step under the
data x model rules on a (4, 2) mesh against its own values on one device.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from meshes import auto_mesh

import namedarray as nx

pytest.importorskip("penzai", reason="the original Llama comes from penzai: pip install -e '.[external]'")

from external import llama_port as lp  # noqa: E402

# small enough for the suite, with every feature of the bench's size: 2 layers, 4 kv heads shared by pairs of
# query heads, a SwiGLU MLP narrower than 4x, a vocabulary the model axis splits
CFG = lp.Config(layers=2, embed=64, heads=8, kv_heads=4, mlp=176, seq=16, batch=8, vocab=128)
RTOL = 1e-5


def close(actual, expected, rtol=RTOL):
    """Equal within ``rtol`` of the largest magnitude of ``expected`` (a gradient's tiny entries are sums
    whose rounding is that of its large ones)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = float(np.max(np.abs(expected)))
    assert scale > 0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def close_trees(port_tree, expected_port_tree, grads=None):
    flat_a = jax.tree_util.tree_leaves_with_path(port_tree, is_leaf=lambda a: isinstance(a, nx.NamedArray))
    flat_b = dict(jax.tree_util.tree_leaves_with_path(expected_port_tree,
                                                      is_leaf=lambda a: isinstance(a, nx.NamedArray)))
    assert len(flat_a) == len(flat_b) == 12
    for path, a in flat_a:
        b = flat_b[path]
        assert a.named_shape == b.named_shape, path
        names = list(b.named_shape)
        a, b = a.unwrap(names), b.unwrap(names)
        if grads is not None:
            # adam's first step divides each gradient entry by its own magnitude: where the gradient is
            # near zero its rounding decides the step, so those entries are checked as gradients only
            g = np.abs(np.asarray(dict(jax.tree_util.tree_leaves_with_path(
                grads, is_leaf=lambda x: isinstance(x, nx.NamedArray)))[path].unwrap(names)))
            kept = g >= 1e-2 * g.max()
            assert kept.mean() > 0.5, path
            a, b = np.asarray(a)[kept], np.asarray(b)[kept]
        close(a, b)


@pytest.fixture(scope="module")
def original():
    unbound, values = lp.reference_split(lp.reference_model(0, CFG))
    return unbound, values, lp.make_tokens(1, CFG)


@pytest.fixture(scope="module")
def one_step(original):
    """One adamw step of each, on one device: ``(reference, port)``, each ``(loss, grads, new params)`` with
    the reference's grads and parameters given the port's names."""
    unbound, values, tokens = original
    opt = optax.adamw(1e-3)

    def ref_step(v, t):
        value, grads = jax.value_and_grad(lambda v: lp.reference_loss(unbound, v, t))(v)
        updates, _ = opt.update(grads, opt.init(v), v)
        return value, grads, optax.apply_updates(v, updates)

    def port_step(p, t):
        value, grads = jax.value_and_grad(lp.loss)(p, t)
        updates, _ = opt.update(grads, opt.init(p), p)
        return value, grads, optax.apply_updates(p, updates)

    rv, rg, rp = jax.jit(ref_step)(values, tokens)
    port = jax.jit(port_step)(lp.port_params(values), lp.named_tokens(tokens))
    return (rv, lp.port_params(rg), lp.port_params(rp)), port


def test_the_port_loads_every_parameter_of_the_original_under_its_own_names(original):
    _, values, _ = original
    params = lp.port_params(values)
    assert set(values) == set(lp.LABELS)
    assert params["blocks"]["wq"].named_shape == {"layer": 2, "embed": 64, "kv_heads": 4, "q_per_kv": 2,
                                                  "head_dim": 8}
    assert params["blocks"]["w_down"].named_shape == {"layer": 2, "mlp": 176, "embed": 64}
    assert params["lm_head"].named_shape == {"embed": 64, "vocab": 128}
    assert all(a.names[0] == "layer" for a in params["blocks"].values())   # stacked first, as the guide asks
    np.testing.assert_array_equal(params["tok"].unwrap(["vocab", "embed"]),
                                  values["transformer/embedder.embeddings"].unwrap("vocabulary", "embedding"))


def test_logits_and_loss_equal_the_originals_on_one_device(original):
    unbound, values, tokens = original
    params = lp.port_params(values)
    expected = jax.jit(lambda v, t: lp.reference_logits(unbound, v, t))(values, tokens[:, :-1])
    got = jax.jit(lp.logits)(params, lp.named_tokens(tokens[:, :-1]))
    assert got.named_shape == {"batch": 8, "seq": 16, "vocab": 128}
    close(got.unwrap(["batch", "seq", "vocab"]), expected)
    ref_loss = float(jax.jit(lambda v, t: lp.reference_loss(unbound, v, t))(values, tokens))
    port_loss = float(jax.jit(lp.loss)(params, lp.named_tokens(tokens)))
    assert ref_loss == pytest.approx(port_loss, rel=RTOL)
    assert 3.0 < ref_loss < 8.0      # about log(128) from an untrained model: a real loss, not a constant


def test_one_adamw_step_gives_the_originals_loss_gradients_and_parameters(original, one_step):
    (rv, rg, rp), (pv, pg, pp) = one_step
    assert float(pv) == pytest.approx(float(rv), rel=RTOL)
    close_trees(pg, rg)
    close_trees(pp, rp, grads=rg)
    # the step moved every parameter: adam's first step moves each entry by about the learning rate
    before = lp.port_params(original[1])
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a.unwrap(b.names) - b.data))), pp, before,
                         is_leaf=lambda a: isinstance(a, nx.NamedArray))
    assert all(m > 5e-4 for m in jax.tree.leaves(moved))


def test_the_data_x_model_step_equals_the_step_on_one_device(original, one_step):
    _, values, tokens = original
    (_, _, _), (pv, pg, pp) = one_step
    opt = optax.adamw(1e-3)

    def step(p, t):
        value, grads = jax.value_and_grad(lp.loss)(p, t)
        updates, _ = opt.update(grads, opt.init(p), p)
        return value, grads, optax.apply_updates(p, updates)

    mesh = auto_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh), nx.axis_rules(lp.RULES):
        sv, sg, sp = nx.jit(step)(lp.port_params(values), lp.named_tokens(tokens))
    assert float(sv) == pytest.approx(float(pv), rel=RTOL)
    close_trees(sg, pg)
    close_trees(sp, pp, grads=pg)
    # the entry the planner and the bench use: the step jitted under the rules it is given
    params = lp.port_params(values)
    with jax.set_mesh(mesh):
        mv, mp, _ = lp.make_step(lp.RULES)(params, lp.OPTIMIZER.init(params), lp.named_tokens(tokens))
    assert float(mv) == pytest.approx(float(pv), rel=RTOL)
    close_trees(mp, pp, grads=pg)
    assert mp["blocks"]["w_gate"].sharding.spec == sp["blocks"]["w_gate"].sharding.spec
    # and it ran split as the rules say: the parameters come back split over model by their names
    def spec(a):
        spec = tuple(a.sharding.spec)
        return dict(zip(a.names, spec + (None,) * (len(a.names) - len(spec))))

    assert sp["blocks"]["w_gate"].sharding.mesh == mesh
    assert spec(sp["blocks"]["w_gate"]) == {"layer": None, "embed": None, "mlp": "model"}
    assert spec(sp["blocks"]["wq"])["kv_heads"] == "model"
    assert spec(sp["lm_head"]) == {"embed": None, "vocab": "model"}
