"""nx.pipeline: the fold of a layer function over stacked layers, run as a GPipe pipeline where a rule maps
the layer name to mesh axes, on 8 simulated CPU devices. Values and gradients equal the one-device fold
(nx.scan), the compiled program moves activations with collective permutes and never gathers the parameters,
each device holds its stage's layers, and the mistakes are nx errors naming the axis and the sizes."""

import jax
import numpy as np
import optax
import pytest
from meshes import auto_mesh, collectives, explicit_mesh

import namedarray as nx
from namedarray.parallel.pipeline import bubble_fraction

LAYERS, EMBED, HIDDEN, BATCH, MICRO = 8, 16, 32, 32, 8
PIPE = {"layer": "stage", "batch": "data"}


def init(key, layers=LAYERS):
    k1, k2 = jax.random.split(key)
    return {"w_in": nx.random.normal(k1, named_shape={"layer": layers, "embed": EMBED, "mlp": HIDDEN}) * 0.2,
            "w_out": nx.random.normal(k2, named_shape={"layer": layers, "mlp": HIDDEN, "embed": EMBED}) * 0.2,
            "scale": nx.ones(named_shape={"layer": layers, "embed": EMBED})}


def residual_mlp(p, h):
    """One residual MLP layer: RMS-normalised input, a tanh hidden layer, added back."""
    u = nx.nn.rms_norm(h, "embed") * p["scale"]
    u = nx.tanh(nx.dot(u, p["w_in"], axis="embed").shard())
    return h + nx.dot(u, p["w_out"], axis="mlp").shard()


def batch(key, size=BATCH):
    return nx.random.normal(key, named_shape={"batch": size, "embed": EMBED})


def fold(params, x):
    """The reference: nx.scan over the layers, x as the carry."""
    return nx.scan(lambda h, p: (residual_mlp(p, h), None), x, params, axis="layer")[0]


def piped(params, x, **kw):
    return nx.pipeline(residual_mlp, params, x, axis="layer", microbatches=MICRO, **kw)


def loss_of(forward):
    def loss(params, x):
        return nx.mean(forward(params, x) ** 2, axis=("batch", "embed"))
    return loss


def as_np(v):
    """A NamedArray as numpy, its names in sorted order (the layout never matters)."""
    return np.asarray(v.unwrap(sorted(v.names)))


def assert_close(a, b, rtol=1e-5):
    for x, y in zip(jax.tree.leaves(a, is_leaf=nx.is_named), jax.tree.leaves(b, is_leaf=nx.is_named)):
        x, y = as_np(x), as_np(y)
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * np.abs(y).max())


@pytest.fixture(scope="module")
def problem():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1))
    value, grads = nx.value_and_grad(loss_of(fold))(params, x)
    return params, x, fold(params, x), float(value), grads


MESHES = [((4, 2), ("stage", "data"), PIPE), ((8,), ("stage",), {"layer": "stage"})]


@pytest.mark.parametrize("shape,names,rules", MESHES, ids=["stage4_data2", "stage8"])
@pytest.mark.parametrize("remat", [False, True], ids=["keep", "remat"])
def test_values_and_gradients_equal_the_fold(problem, shape, names, rules, remat):
    params, x, y_ref, value_ref, grads_ref = problem
    with jax.set_mesh(auto_mesh(shape, names)), nx.axis_rules(rules):
        y = nx.jit(lambda p, x: piped(p, x, remat=remat))(params, x)
        value, grads = nx.jit(nx.value_and_grad(loss_of(lambda p, x: piped(p, x, remat=remat))))(params, x)
    assert y.named_shape == x.named_shape
    assert_close(y, y_ref)
    assert np.isclose(float(value), value_ref, rtol=1e-5)
    assert_close(grads, grads_ref)
    # each stage's gradients stay where its layers are
    assert grads["w_in"].sharding.spec[0] == "stage"


def test_without_a_rule_it_is_the_fold(problem):
    params, x, y_ref, value_ref, grads_ref = problem
    y = piped(params, x)                                       # no mesh, no rules: one device
    assert_close(y, y_ref, rtol=1e-6)
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules({"batch": "data"}):
        y = nx.jit(piped)(params, x)                           # a mesh, but no rule for 'layer'
        text = nx.jit(piped).lower(params, x).compile().as_text()
    assert_close(y, y_ref)
    assert "collective-permute" not in collectives(text)
    value, grads = jax.value_and_grad(lambda p, x: loss_of(piped)(p, x).unwrap())(params, x)
    assert np.isclose(float(value), value_ref, rtol=1e-6)
    assert_close(grads, grads_ref)


def test_explicit_mesh_axes_give_the_same_values(problem):
    params, x, y_ref, value_ref, grads_ref = problem
    with jax.set_mesh(explicit_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        value, grads = nx.jit(nx.value_and_grad(loss_of(piped)))(params, x)
    assert np.isclose(float(value), value_ref, rtol=1e-5)
    assert_close(grads, grads_ref)


def train(forward, init_fn, batch_fn, steps=5, loss=None):
    """``steps`` adamw steps from ``init_fn(key 0)`` on batches ``batch_fn(key 10 + i)``: (losses, params)."""
    optimizer = optax.adamw(1e-2, weight_decay=1e-2)
    loss = loss or loss_of

    def step(params, state, x):
        value, grads = nx.value_and_grad(loss(forward))(params, x)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    params = nx.jit(init_fn)(jax.random.key(0))
    state = optimizer.init(params)
    losses, jitted = [], nx.jit(step)
    for i in range(steps):
        params, state, value = jitted(params, state, batch_fn(jax.random.key(10 + i)))
        losses.append(float(value))
    return losses, params


def test_training_steps_give_the_same_losses():
    reference, params_ref = train(fold, init, batch)            # one device
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        losses, params = train(piped, init, batch)
        assert params["w_out"].sharding.spec[0] == "stage"    # the parameters never left their stages
    assert len(losses) == 5
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
    assert losses[-1] < losses[0]
    assert_close(params, params_ref, rtol=1e-4)


def test_compiled_program_permutes_activations_and_never_gathers_parameters():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1))
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        forward = nx.jit(piped).lower(params, x).compile()
        train = nx.jit(nx.grad(loss_of(piped))).lower(params, x).compile()
    found = collectives(forward.as_text())
    assert found.get("collective-permute", 0) >= 1
    assert "all-gather" not in found and "all-to-all" not in found
    # the backward pass sends cotangents back a stage: another permute; still nothing gathered
    found = collectives(train.as_text())
    assert found.get("collective-permute", 0) >= 2
    assert "all-gather" not in found and "all-to-all" not in found
    # one permute moves one microbatch's activations: (BATCH / MICRO) rows over 2 data blocks
    assert f"f32[{BATCH // MICRO // 2},{EMBED}]" in "\n".join(
        line for line in forward.as_text().splitlines() if "collective-permute(" in line)


@pytest.mark.parametrize("shape,names,rules,stages,data", [
    ((4, 2), ("stage", "data"), PIPE, 4, 2),
    ((8,), ("stage",), {"layer": "stage"}, 8, 1)], ids=["stage4_data2", "stage8"])
def test_each_device_holds_its_stage_of_the_parameters(shape, names, rules, stages, data):
    params, x = init(jax.random.key(0)), batch(jax.random.key(1))
    param_bytes = sum(p.nbytes for p in nx.tree_leaves(params))
    with jax.set_mesh(auto_mesh(shape, names)), nx.axis_rules(rules):
        memory = nx.jit(piped).lower(params, x).compile().memory_analysis()
    assert memory.argument_size_in_bytes == param_bytes // stages + x.nbytes // data


def test_leaves_without_the_axis_reach_every_layer(problem):
    params, x, *_ = problem
    params = {**params, "shift": nx.full((), 0.01, named_shape={"embed": EMBED})}   # shared by every layer

    def layer(p, h):
        return residual_mlp(p, h) + p["shift"]

    reference = nx.scan(lambda h, p: (layer(p, h), None), x, params, axis="layer")[0]
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        y = nx.jit(lambda p, x: nx.pipeline(layer, p, x, microbatches=4))(params, x)
    assert_close(y, reference)


def test_microbatch_axis_by_name():
    params = init(jax.random.key(0), layers=4)
    x = batch(jax.random.key(1)).rename({"batch": "tokens"})
    reference = nx.scan(lambda h, p: (residual_mlp(p, h), None), x, params, axis="layer")[0]
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules({"layer": "stage",
                                                                             "tokens": "data"}):
        y = nx.jit(lambda p, x: nx.pipeline(residual_mlp, p, x, microbatches=4, microbatch_axis="tokens"))(
            params, x)
    assert_close(y, reference)


def llama_init(key, layers=4, embed=16, heads=2, head_dim=8, mlp=32):
    keys = iter(jax.random.split(key, 8))

    def dense(**shape):
        fan_in = shape[next(iter(shape))]
        return nx.random.normal(next(keys), named_shape={"layer": layers, **shape}) / np.sqrt(fan_in)

    return {"attn_norm": nx.ones(named_shape={"layer": layers, "embed": embed}),
            "wq": dense(embed=embed, heads=heads, head_dim=head_dim),
            "wk": dense(embed=embed, heads=heads, head_dim=head_dim),
            "wv": dense(embed=embed, heads=heads, head_dim=head_dim),
            "wo": dense(heads=heads, head_dim=head_dim, embed_out=embed),
            "mlp_norm": nx.ones(named_shape={"layer": layers, "embed": embed}),
            "w_gate": dense(embed=embed, mlp=mlp), "w_up": dense(embed=embed, mlp=mlp),
            "w_down": dense(mlp=mlp, embed_out=embed)}


def llama_layer(p, h):
    """A Llama-style decoder layer: RMSNorm, causal multi-head attention, RMSNorm, SwiGLU, residuals."""
    u = nx.nn.rms_norm(h, "embed", p["attn_norm"])
    q = nx.dot(u, p["wq"], axis="embed").shard()
    k = nx.dot(u, p["wk"], axis="embed").rename({"seq": "kv_seq"}).shard()
    v = nx.dot(u, p["wv"], axis="embed").rename({"seq": "kv_seq"}).shard()
    causal = nx.arange(h.named_shape["seq"], name="seq") >= nx.arange(h.named_shape["seq"], name="kv_seq")
    a = nx.nn.dot_product_attention(q, k, v, mask=causal, seq_axis="seq", kv_seq_axis="kv_seq",
                                    head_axis="head_dim")
    h = h + nx.dot(a, p["wo"], axis=("heads", "head_dim")).rename({"embed_out": "embed"}).shard()
    u = nx.nn.rms_norm(h, "embed", p["mlp_norm"])
    gated = nx.nn.silu(nx.dot(u, p["w_gate"], axis="embed")) * nx.dot(u, p["w_up"], axis="embed")
    return h + nx.dot(gated.shard(), p["w_down"], axis="mlp").rename({"embed_out": "embed"}).shard()


def test_llama_style_decoder_pipelined():
    params = llama_init(jax.random.key(0))
    x = nx.random.normal(jax.random.key(1), named_shape={"batch": 8, "seq": 4, "embed": 16})

    def loss(forward):
        return lambda p, x: nx.mean(forward(p, x) ** 2, axis=("batch", "seq", "embed"))

    def fold_llama(p, x):
        return nx.scan(lambda h, q: (llama_layer(q, h), None), x, p, axis="layer")[0]

    def pipe_llama(p, x):
        return nx.pipeline(llama_layer, p, x, microbatches=4, remat=True)

    value_ref, grads_ref = nx.jit(nx.value_and_grad(loss(fold_llama)))(params, x)
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        compiled = nx.jit(nx.value_and_grad(loss(pipe_llama))).lower(params, x).compile()
        value, grads = compiled(params, x)
        text = compiled.as_text()
    assert np.isclose(float(value), float(value_ref), rtol=1e-5)
    assert_close(grads, grads_ref)
    found = collectives(text)
    assert found.get("collective-permute", 0) >= 2 and "all-gather" not in found


KV_HEADS, GROUP, HEAD_DIM, SEQ = 4, 2, 4, 4      # 8 query heads, each pair sharing one key/value head


def gqa_init(key, layers=LAYERS, embed=EMBED, mlp=HIDDEN):
    keys = iter(jax.random.split(key, 8))

    def dense(**shape):
        fan_in = shape[next(iter(shape))]
        return nx.random.normal(next(keys), named_shape={"layer": layers, **shape}) / np.sqrt(fan_in)

    heads = dict(kv_heads=KV_HEADS, head_dim=HEAD_DIM)
    return {"attn_norm": nx.ones(named_shape={"layer": layers, "embed": embed}),
            "wq": dense(embed=embed, kv_heads=KV_HEADS, group=GROUP, head_dim=HEAD_DIM),
            "wk": dense(embed=embed, **heads), "wv": dense(embed=embed, **heads),   # no 'group': shared
            "wo": dense(kv_heads=KV_HEADS, group=GROUP, head_dim=HEAD_DIM, embed_out=embed),
            "mlp_norm": nx.ones(named_shape={"layer": layers, "embed": embed}),
            "w_gate": dense(embed=embed, mlp=mlp), "w_up": dense(embed=embed, mlp=mlp),
            "w_down": dense(mlp=mlp, embed_out=embed)}


def gqa_layer(p, h):
    """A Llama-style decoder layer with grouped-query attention: the query carries 'kv_heads' x 'group'
    (8 heads), the keys and values 'kv_heads' alone (4 heads), so each key/value head serves 2 query heads
    and is never copied along 'group'."""
    u = nx.nn.rms_norm(h, "embed", p["attn_norm"])
    q = nx.dot(u, p["wq"], axis="embed").shard()
    k = nx.dot(u, p["wk"], axis="embed").rename({"seq": "kv_seq"}).shard()
    v = nx.dot(u, p["wv"], axis="embed").rename({"seq": "kv_seq"}).shard()
    assert "group" not in k.names and q.named_shape["group"] == GROUP
    causal = nx.arange(h.named_shape["seq"], name="seq") >= nx.arange(h.named_shape["seq"], name="kv_seq")
    a = nx.nn.dot_product_attention(q, k, v, mask=causal, seq_axis="seq", kv_seq_axis="kv_seq",
                                    head_axis="head_dim", heads_axis="kv_heads")
    h = h + nx.dot(a, p["wo"], axis=("kv_heads", "group", "head_dim")).rename({"embed_out": "embed"}).shard()
    u = nx.nn.rms_norm(h, "embed", p["mlp_norm"])
    gated = nx.nn.silu(nx.dot(u, p["w_gate"], axis="embed")) * nx.dot(u, p["w_up"], axis="embed")
    return h + nx.dot(gated.shard(), p["w_down"], axis="mlp").rename({"embed_out": "embed"}).shard()


def gqa_batch(key):
    # 16 rows: 8 microbatches of 2, each split over the 2 devices of 'data'
    return nx.random.normal(key, named_shape={"batch": 16, "seq": SEQ, "embed": EMBED})


def gqa_fold(p, x):
    return nx.scan(lambda h, q: (gqa_layer(q, h), None), x, p, axis="layer")[0]


def gqa_piped(p, x):
    return nx.pipeline(gqa_layer, p, x, microbatches=MICRO)


def gqa_loss(forward):
    return lambda p, x: nx.mean(forward(p, x) ** 2, axis=("batch", "seq", "embed"))


def test_grouped_query_attention_decoder_pipelined():
    """L = 8 grouped-query decoder layers on (4, 2) stage x data, M = 8: the forward values and gradients
    equal the fold on one device."""
    params, x = gqa_init(jax.random.key(0)), gqa_batch(jax.random.key(1))
    y_ref = gqa_fold(params, x)                                 # one device: no mesh, no rules
    value_ref, grads_ref = nx.value_and_grad(gqa_loss(gqa_fold))(params, x)
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        y = nx.jit(gqa_piped)(params, x)
        compiled = nx.jit(nx.value_and_grad(gqa_loss(gqa_piped))).lower(params, x).compile()
        value, grads = compiled(params, x)
    assert y.named_shape == x.named_shape
    assert_close(y, y_ref)
    assert np.isclose(float(value), float(value_ref), rtol=1e-5)
    assert_close(grads, grads_ref)
    assert grads["wk"].named_shape == {"layer": LAYERS, "embed": EMBED, "kv_heads": KV_HEADS,
                                       "head_dim": HEAD_DIM}
    assert grads["wq"].sharding.spec[0] == "stage"
    found = collectives(compiled.as_text())
    assert found.get("collective-permute", 0) >= 2 and "all-gather" not in found


def test_grouped_query_attention_training_steps_give_the_same_losses():
    reference, params_ref = train(gqa_fold, gqa_init, gqa_batch, loss=gqa_loss)
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        losses, params = train(gqa_piped, gqa_init, gqa_batch, loss=gqa_loss)
    assert len(losses) == 5
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
    assert losses[-1] < losses[0]
    assert_close(params, params_ref, rtol=1e-4)


# ------------------------------------------------------------------------------------------------------
# The circular schedule: repeats=R


@pytest.mark.parametrize("shape,names,rules,repeats,micro,remat", [
    ((4, 2), ("stage", "data"), PIPE, 2, 8, False),
    ((4, 2), ("stage", "data"), PIPE, 4, 4, True),
    ((8,), ("stage",), {"layer": "stage"}, 2, 8, False)],
    ids=["stage4_R2", "stage4_R4_M4_remat", "stage8_R2"])
def test_circular_values_and_gradients_equal_the_fold(shape, names, rules, repeats, micro, remat):
    params, x = init(jax.random.key(0), layers=16), batch(jax.random.key(1))
    y_ref = fold(params, x)                                     # one device
    value_ref, grads_ref = nx.value_and_grad(loss_of(fold))(params, x)

    def circular(p, x):
        return nx.pipeline(residual_mlp, p, x, microbatches=micro, repeats=repeats, remat=remat)

    with jax.set_mesh(auto_mesh(shape, names)), nx.axis_rules(rules):
        y = nx.jit(circular)(params, x)
        compiled = nx.jit(nx.value_and_grad(loss_of(circular))).lower(params, x).compile()
        value, grads = compiled(params, x)
    assert_close(y, y_ref)
    assert np.isclose(float(value), float(value_ref), rtol=1e-5)
    assert_close(grads, grads_ref)
    assert grads["w_in"].sharding.spec[0] == "stage"           # back in the layout the parameters came in
    assert collectives(compiled.as_text()).get("collective-permute", 0) >= 2


def test_circular_layer_l_runs_on_stage_l_div_run_mod_s():
    """Each layer writes the stage it ran on into its own column: layer l of L = 16 on S = 4 stages with
    R = 2 runs on stage (l // 2) % 4, so the microbatches go round the ring twice."""
    L, S, R = 16, 4, 2
    params = {"id": nx.arange(L, name="layer")}

    def record(p, h):
        column = nx.arange(L, name="slot") == p["id"]
        return h + nx.where(column, jax.lax.axis_index("stage") + 1.0, 0.0)

    x = nx.zeros(named_shape={"batch": 8, "slot": L})
    with jax.set_mesh(auto_mesh((S, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        y = nx.jit(lambda p, x: nx.pipeline(record, p, x, microbatches=4, repeats=R))(params, x)
    ran_on = np.asarray(y.unwrap(["batch", "slot"])) - 1
    assert (ran_on == [(l // (L // (S * R))) % S for l in range(L)]).all()


def test_circular_errors():
    x = batch(jax.random.key(1))
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        with pytest.raises(nx.errors.DivisibilityError,
                           match=r"axis 'layer' of params has size 12, which 4 stages.*repeats=2 "
                                 r"do not divide.*multiple of 8"):
            nx.pipeline(residual_mlp, init(jax.random.key(0), layers=12), x, microbatches=8, repeats=2)
        with pytest.raises(nx.errors.AxisSizeError,
                           match=r"repeats=2.*microbatches=2 on 4 stages of mesh axes \('stage',\)"):
            nx.pipeline(residual_mlp, init(jax.random.key(0), layers=16), x, microbatches=2, repeats=2)
    with pytest.raises(nx.errors.AxisSpecError, match="repeats must be a positive int"):
        nx.pipeline(residual_mlp, init(jax.random.key(0)), x, microbatches=8, repeats=0)
    with pytest.raises(nx.errors.AxisSpecError, match="repeats must be a positive int"):
        nx.visualize_pipeline(4, 8, repeats=0)


def test_circular_without_a_rule_is_the_fold(problem):
    params, x, y_ref, *_ = problem
    assert_close(nx.pipeline(residual_mlp, params, x, microbatches=2, repeats=4), y_ref, rtol=1e-6)


def test_visualize_the_circular_schedule():
    S, M, R = 4, 8, 2
    rows = str(nx.visualize_pipeline(S, M, repeats=R)).splitlines()
    cells = [row.split("|")[1].split() for row in rows[2:2 + S]]
    assert all(len(row) == R * M + S - 1 for row in cells)
    for s, row in enumerate(cells):                            # microbatch (t - s) % M, pass (t - s) // M
        assert row[s:s + R * M] == [f"{m}{p}" for p in "ab" for m in range(M)]
        assert row.count(".") == S - 1
    assert bubble_fraction(S, M, R) == (S - 1) / (R * M + S - 1)
    assert f"{(S - 1) / (R * M + S - 1):.1%}" in rows[-1] and "2 passes round the ring" in rows[-1]


# ------------------------------------------------------------------------------------------------------
# Planning: a step written with nx.pipeline is planned like any other


def test_plan_sharding_compiles_and_ranks_a_pipeline_rule_beside_data_parallelism():
    """The rule for 'layer' is one more candidate: under it the step pipelines (collective permutes, 1/S of
    the parameters per device); without it the same step is the fold, the batch split over all 8 devices."""
    params, x = init(jax.random.key(0)), batch(jax.random.key(1))
    step = nx.value_and_grad(loss_of(piped))
    pipelined, data_parallel = {"layer": "stage", "batch": "data"}, {"batch": ("stage", "data")}
    plan = nx.plan_sharding(step, params, x, mesh=auto_mesh((4, 2), ("stage", "data")),
                            candidates=[pipelined, data_parallel])
    assert len(plan) == 2 and all(row.ok for row in plan.rows)
    assert plan.best in (pipelined, data_parallel)
    assert [row.cost for row in plan.rows] == sorted(row.cost for row in plan.rows)
    pipe_row, dp_row = plan.row(pipelined), plan.row(data_parallel)
    assert pipe_row.collective_bytes["collective-permute"] > 0
    assert dp_row.collective_bytes["collective-permute"] == 0
    param_bytes = sum(p.nbytes for p in nx.tree_leaves(params))
    assert pipe_row.argument_bytes == param_bytes // 4 + x.nbytes // 2
    assert dp_row.argument_bytes == param_bytes + x.nbytes // 8


# ------------------------------------------------------------------------------------------------------
# Errors


def test_layers_not_divisible_by_stages():
    params, x = init(jax.random.key(0), layers=6), batch(jax.random.key(1))
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        with pytest.raises(nx.errors.DivisibilityError, match=r"axis 'layer' of params has size 6.*4 stages"):
            piped(params, x)


def test_batch_not_divisible_by_microbatches():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1), size=12)
    with pytest.raises(nx.errors.DivisibilityError, match=r"'batch' of x has size 12.*8 microbatches"):
        piped(params, x)                                       # on one device too: the same code fails alike


def test_microbatch_not_divisible_by_its_data_blocks():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1), size=8)
    with jax.set_mesh(auto_mesh((4, 2), ("stage", "data"))), nx.axis_rules(PIPE):
        with pytest.raises(nx.errors.DivisibilityError, match=r"each microbatch holds 1 of axis 'batch'"):
            piped(params, x)


def test_axis_missing_from_params():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1))
    with pytest.raises(nx.errors.AxisSpecError, match=r"no leaf of params carries axis 'layers'"):
        nx.pipeline(residual_mlp, params, x, axis="layers", microbatches=MICRO)


def test_x_missing_the_microbatch_axis():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1)).rename({"batch": "rows"})
    with pytest.raises(nx.errors.AxisSpecError, match=r"x has no axis 'batch'.*'embed', 'rows'"):
        piped(params, x)


def test_a_layer_must_keep_the_shape_of_its_input():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1))
    with jax.set_mesh(auto_mesh((8,), ("stage",))), nx.axis_rules({"layer": "stage"}):
        with pytest.raises(nx.errors.CarryError, match="layer_fn must return a value like the one it takes"):
            nx.pipeline(lambda p, h: nx.dot(h, p["w_in"], axis="embed"), params, x, microbatches=MICRO)


def test_bad_arguments():
    params, x = init(jax.random.key(0)), batch(jax.random.key(1))
    with pytest.raises(nx.errors.AxisSpecError, match="microbatches must be a positive int"):
        nx.pipeline(residual_mlp, params, x, microbatches=0)
    with pytest.raises(TypeError, match="x must be"):
        nx.pipeline(residual_mlp, params, x.unwrap(["batch", "embed"]), microbatches=2)


# ------------------------------------------------------------------------------------------------------
# The picture of the schedule


def test_visualize_pipeline_draws_the_schedule():
    picture = nx.visualize_pipeline(4, 8)
    rows = str(picture).splitlines()
    assert len(rows) == 2 + 4 + 1
    cells = [row.split("|")[1].split() for row in rows[2:6]]
    assert all(len(row) == 8 + 4 - 1 for row in cells)
    for s, row in enumerate(cells):                            # stage s runs microbatch t - s at step t
        assert row[s:s + 8] == [str(m) for m in range(8)]
        assert row.count(".") == 3
    assert "27.3%" in rows[-1]
    assert bubble_fraction(4, 8) == 3 / 11
    assert "<table>" in picture._repr_html_()
    with pytest.raises(nx.errors.AxisSpecError, match="stages must be a positive int"):
        nx.visualize_pipeline(0, 8)


def test_it_composes_with_tensor_parallel_rules_on_a_third_mesh_axis(problem):
    # stages x data x tensor parallel: the hidden layer ('mlp') split over 'model' inside each stage
    params, x, y_ref, value_ref, grads_ref = problem
    rules = {"layer": "stage", "batch": "data", "mlp": "model"}
    with jax.set_mesh(auto_mesh((2, 2, 2), ("stage", "data", "model"))), nx.axis_rules(rules):
        step = nx.jit(nx.value_and_grad(loss_of(piped)))
        value, grads = step(params, x)
        y = nx.jit(piped)(params, x)
        hlo = nx.jit(piped).lower(params, x).compile().as_text()
        w_in = nx.jit(lambda p: p, resources=rules)(params)["w_in"]
    assert_close(y, y_ref)
    np.testing.assert_allclose(float(value), value_ref, rtol=1e-5)
    assert_close(grads, grads_ref)
    assert "collective-permute" in hlo
    # each device holds its stage's layers and its half of the hidden layer
    block = w_in.data.addressable_shards[0].data.shape
    assert int(np.prod(block)) == LAYERS * EMBED * HIDDEN // 4
