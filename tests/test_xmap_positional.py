"""xmap-era programs run on nx.xmap by changing their import: positional bodies, jax.lax collectives over
the map's names, haiku modules and custom_vjp pairs inside, autodiff per element.

The programs in tests/xmap_programs/ are written for ``jax.experimental.maps.xmap`` and use no nx;
``tests/xmap_programs/record.py`` ran them on jax 0.4.30 (the last jax with xmap) and stored the numbers in
``answers.json``. Here the same source runs with its ``from jax.experimental.maps import ...`` line
replaced by ``from namedarray.maps import ...``, and nothing else changed.
"""

import json
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

import namedarray as nx
from namedarray import errors

PROGRAMS = pathlib.Path(__file__).resolve().parent / "xmap_programs"
sys.path.insert(0, str(PROGRAMS))
import ported  # noqa: E402

ANSWERS = json.loads((PROGRAMS / "answers.json").read_text())


def port(name: str) -> types.ModuleType:
    """The program's module, with its jax.experimental.maps import line changed to namedarray.maps."""
    return ported.load(name, "namedarray.maps")


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------------------------------
# A model-parallel haiku language model (Megatron-style custom_vjp pairs, thread_resources, mesh 4 x 2)


@pytest.fixture(scope="module")
def lm_run():
    lm = port("sharded_lm")
    with Mesh(np.array(jax.devices()).reshape(4, 2), ("dp", "mp")):
        model = lm.ShardedLM(lm.CONFIG)
        out, params = model.run(steps=5)
    return lm, model, out, params


def test_sharded_lm_gives_xmaps_losses_over_five_training_steps(lm_run):
    _, _, out, _ = lm_run
    want = ANSWERS["sharded_lm"]
    close(out["eval_before"], want["eval_before"])
    close(out["train"], want["train"])
    close(out["eval_after"], want["eval_after"])
    close(out["param_sum"], want["param_sum"])


def test_sharded_lm_parameters_stay_split_over_the_model_axis(lm_run):
    _, _, _, params = lm_run
    q = [v["w"] for k, v in params.items() if k == "attn_0/q"]
    assert len(q) == 1 and q[0].shape[0] == 2 and q[0].sharding.spec[0] == "mp"


def test_sharded_lm_gradient_around_the_map_is_the_per_element_one(lm_run):
    # jax.grad around the evaluation xmap equals the same body under jax.vmap (the per-element semantics:
    # each shard's parameters get the gradient of the one loss)
    lm, model, _, params = lm_run
    with Mesh(np.array(jax.devices()).reshape(4, 2), ("dp", "mp")):
        tokens, targets = model.data(0)
        g = jax.grad(lambda p: model.eval_xmap(p, tokens, targets))(params)

        import haiku as hk
        net = hk.without_apply_rng(hk.transform(
            lambda t, y: hk.vmap(lambda a, b: lm.transformer_loss(lm.CONFIG, a, b), split_rng=False)(t, y)
            .mean()))

        def reference(p):
            per = jax.vmap(lambda p1: jax.vmap(lambda t, y: net.apply(p1, t, y), axis_name="batch")(
                tokens, targets), axis_name="shard")(p)
            return per[0].mean()  # every shard computes the same loss; the batch mean is pmean's

        want = jax.grad(reference)(jax.device_get(params))
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(want)):
        close(a, b, rtol=2e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------------
# The xmap tutorial's network and the docstring examples, bodies in jax.lax and jnp


@pytest.fixture(scope="module")
def tutorial():
    return port("tutorial_mlp")


def test_tutorial_network_and_docstring_examples_give_xmaps_numbers(tutorial):
    out = tutorial.run_all()
    want = ANSWERS["tutorial_mlp"]
    for key in ("loss", "loss_batch", "loss_hidden", "loss_batch_hidden", "inside_value", "inside_grad",
                "vdot", "transpose", "pshuffle"):
        close(out[key], want[key])


def test_tutorial_gradient_around_the_map_equals_the_positional_one(tutorial):
    # xmap 0.4.30 failed here ("vmap has mapped output ... but out_axes is None"); nx gives the gradient
    # of the positional network
    assert "grad_error" in ANSWERS["tutorial_mlp"]
    w1, w2, images, labels = tutorial.data()
    loss = nx.xmap(tutorial.named_loss, in_axes=tutorial.IN_AXES, out_axes=[...])

    def positional(w1, w2):
        logits = jax.nn.relu(images @ w1) @ w2
        logp = jax.nn.log_softmax(logits, axis=1)
        return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, 4) * logp, axis=1))

    got = jax.grad(loss, argnums=(0, 1))(w1, w2, images, labels)
    want = jax.grad(positional, argnums=(0, 1))(w1, w2)
    for a, b in zip(got, want):
        close(a, b)


# ------------------------------------------------------------------------------------------------------
# The contract at the boundary


def test_outputs_keep_exactly_the_names_they_vary_along():
    x = jnp.arange(12.0).reshape(3, 4)
    # reduced by a collective: the name may be left out of out_axes
    f = nx.xmap(lambda v: (jax.lax.psum(v, "b"), v), in_axes=["b", ...], out_axes=([...], ["b", ...]))
    total, same = f(x)
    close(total, x.sum(0))
    close(same, x)
    # never depended on: left out too
    g = nx.xmap(lambda v, w: w * 2, in_axes=(["b", ...], [...]), out_axes=[...])
    close(g(x, jnp.ones(4)), 2 * np.ones(4))
    # placed but not varied along: broadcast, as in xmap
    h = nx.xmap(lambda v: jax.lax.pmean(v, "b"), in_axes=["b", ...], out_axes=["b", ...])
    close(h(x), np.broadcast_to(x.mean(0), (3, 4)))


def test_an_output_varying_along_an_unplaced_name_is_an_error_naming_it():
    f = nx.xmap(lambda v, w: v * w, in_axes=(["b", ...], ["c", ...]), out_axes=["b", ...])
    with pytest.raises(errors.UnplacedAxisError, match=r"more axes defined by this xmap call: c\. "
                       r"An output of <lambda> varies along 'c' \(size 5\)"):
        f(jnp.ones((3, 2)), jnp.ones((5, 2)))


def test_a_hint_never_sums_a_value_that_is_the_same_along_the_name():
    # the old hint said "nx.sum(y, 'batch')", which multiplies such a value by the size. A body on
    # NamedArrays: nx.nmap's result carries every name of its inputs, the same along 'batch' after psum
    def body(v):
        assert isinstance(v, nx.NamedArray)
        return nx.nmap(lambda a: jax.lax.psum(a, "batch"))(v)

    f = nx.xmap(body, in_axes=["batch", ...], out_axes=[...])
    with pytest.raises(errors.UnplacedAxisError) as caught:
        f(jnp.array([[1.0, 10.0], [4.0, 90.0]]))
    text = str(caught.value)
    assert "[{'batch': 0}]" in text and "psum" in text and "nx.sum(" not in text


def test_autodiff_inside_the_body_is_per_element():
    def body(w, x):
        return jax.value_and_grad(lambda w: jnp.sum(jnp.tanh(w * x)))(w)

    w, x = jnp.linspace(0.1, 1.0, 3), jnp.arange(6.0).reshape(2, 3)
    v, g = nx.xmap(body, in_axes=({}, ["b", ...]), out_axes=(["b"], ["b", ...]))(w, x)
    wv, wg = jax.vmap(lambda xi: jax.value_and_grad(lambda w: jnp.sum(jnp.tanh(w * xi)))(w))(x)
    close(v, wv)
    close(g, wg)


@jax.custom_vjp
def _f(x):
    return x


_f.defvjp(lambda x: (x, None), lambda _, g: (jax.lax.psum(g, "shard"),))


@jax.custom_vjp
def _g(x):
    return jax.lax.psum(x, "shard")


_g.defvjp(lambda x: (jax.lax.psum(x, "shard"), None), lambda _, g: (g,))


def _megatron(w1, w2, x):
    """A column-parallel then a row-parallel layer through the f/g pair over 'shard': replicated output."""
    h = jnp.tanh(_f(x) @ w1)
    return jnp.sum(jnp.tanh(_g(h @ w2)))


@pytest.mark.parametrize("kind", ["inside", "around"])
def test_custom_vjp_pairs_around_psum_give_the_per_element_gradient(kind):
    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(size=(2, 4, 3)).astype(np.float32), rng.normal(size=(2, 3, 4)).astype(np.float32)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    in_axes = (["shard", ...], ["shard", ...], [...])
    if kind == "inside":
        got = nx.xmap(jax.grad(_megatron, (0, 1)), in_axes=in_axes, out_axes=["shard", ...])(w1, w2, x)
        want = jax.vmap(jax.grad(_megatron, (0, 1)), in_axes=(0, 0, None), axis_name="shard")(w1, w2, x)
    else:
        f = nx.xmap(_megatron, in_axes=in_axes, out_axes=[...])
        reference = jax.vmap(_megatron, in_axes=(0, 0, None), axis_name="shard")
        close(f(w1, w2, x), reference(w1, w2, x)[0])  # the replicated loss, the same on every shard
        got = jax.grad(f, (0, 1))(w1, w2, x)
        want = jax.grad(lambda a, b: reference(a, b, x)[0], (0, 1))(w1, w2)
        # and the layer written without shards: the gradient of the whole weights, split
        whole = jax.grad(lambda a, b: jnp.sum(jnp.tanh(jnp.tanh(x @ a) @ b)), (0, 1))(
            jnp.concatenate(list(w1), 1), jnp.concatenate(list(w2), 0))
        close(np.concatenate(list(got[0]), 1), whole[0])
        close(np.concatenate(list(got[1]), 0), whole[1])
    for a, b in zip(got, want):
        close(a, b)


def test_nx_collectives_and_named_reductions_act_per_element_in_a_positional_body():
    x = jnp.arange(12.0).reshape(3, 4)

    def body(v):
        # a positional body (jnp inside) calling nx's collectives and reductions over the map's name
        s = nx.psum(v, "b")
        m = nx.max(v, "b")
        i = nx.axis_index("b")
        p = nx.nn.softmax(v, "b")
        return jnp.tanh(v) + s + m + i, p, nx.nn.one_hot(jnp.int32(1), 3, axis="b")

    y, p, h = nx.xmap(body, in_axes=["b", ...], out_axes=(["b", ...], ["b", ...], ["b", ...]))(x)
    close(y, np.tanh(x) + x.sum(0) + x.max(0) + np.arange(3)[:, None])
    close(p, jax.nn.softmax(x, axis=0))
    close(h, np.eye(3)[1])


def test_bodies_on_namedarrays_keep_working():
    x = jnp.arange(6.0).reshape(3, 2)
    f = nx.xmap(lambda v: v.sum("i") + v.named_shape["i"], in_axes=["i", ...], out_axes=[...])
    close(f(x), x.sum(0) + 3)


def test_positional_and_named_errors_say_which_style_failed():
    # a body that fails both ways: the positional call's own error, the other attached as a note
    def broken(v):
        return jnp.dot(v, jnp.ones(7))

    with pytest.raises(TypeError) as caught:
        nx.xmap(broken, in_axes=["i", ...], out_axes=["i", ...])(jnp.ones((3, 2)))
    assert any("on NamedArrays" in n for n in getattr(caught.value, "__notes__", []))


def test_thread_resources_reads_either_mesh_context():
    from namedarray.maps import thread_resources
    assert thread_resources.env.shape == {}
    with Mesh(np.array(jax.devices()).reshape(4, 2), ("dp", "mp")):
        assert thread_resources.env.shape == {"dp": 4, "mp": 2} == nx.mesh_shape()
    with jax.set_mesh(jax.make_mesh((2, 4), ("a", "b"))):
        assert thread_resources.env.shape == {"a": 2, "b": 4}
        assert nx.current_mesh().axis_names == ("a", "b")


def test_haiku_module_inside_a_positional_body():
    import haiku as hk

    net = hk.without_apply_rng(hk.transform(lambda x: hk.Linear(3)(x)))
    params = net.init(jax.random.key(0), jnp.ones(4))
    x = jnp.arange(8.0).reshape(2, 4)
    f = nx.xmap(lambda p, v: jax.lax.pmean(net.apply(p, v), "batch"), in_axes=({}, ["batch", ...]),
                out_axes=[...])
    close(f(params, x), net.apply(params, x).mean(0))
