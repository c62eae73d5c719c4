"""nx.einsum: letters for positional axes, braces for names; checked against np.einsum on aligned arrays."""

import importlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray.errors import AxisSizeError, EinsumSpecError

einsum_mod = importlib.import_module("namedarray.ops.einsum")  # the module (nx.einsum is the function)

LETTERS = "abcdef"
NAMES = ["batch", "k", "m", "x1", "Heads"]


def _rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------------------------------------
# Property test: random brace specs over random names, sizes and storage orders


@st.composite
def einsum_cases(draw, nops):
    letters = draw(st.lists(st.sampled_from(LETTERS), unique=True, min_size=1, max_size=4))
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, min_size=1, max_size=4))
    size = {lab: draw(st.integers(1, 3)) for lab in letters + names}
    written = {n: draw(st.booleans()) for n in names}  # a name is written in every carrier's term, or in none
    ops = []
    for _ in range(nops):
        ls = draw(st.lists(st.sampled_from(letters), unique=True)) if letters else []
        ns = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
        # storage order of the raw array: an interleaving of letters (in term order) and names
        order = draw(st.permutations(["L"] * len(ls) + ns))
        it = iter(ls)
        raw = [next(it) if a == "L" else a for a in order]
        brace_at = draw(st.integers(0, len(ls)))
        shown = draw(st.permutations([n for n in ns if written[n]]))
        plain = not ns and draw(st.booleans())
        ops.append((ls, ns, raw, brace_at, shown, plain))
    implicit = draw(st.booleans())
    used_letters = sorted({c for ls, *_ in ops for c in ls})
    used_written = sorted({n for _, ns, *_ in ops for n in ns if written[n]})
    if implicit:
        counts = {c: sum(ls.count(c) for ls, *_ in ops) for c in used_letters}
        out_letters = [c for c in used_letters if counts[c] == 1]
        nterms = {n: sum(n in ns for _, ns, *_ in ops) for n in used_written}
        out_written = [n for n in used_written if nterms[n] == 1]
    else:
        out_letters = draw(st.permutations(used_letters))
        out_letters = out_letters[:draw(st.integers(0, len(out_letters)))]
        out_written = [n for n in used_written if draw(st.booleans())]
    return letters, names, size, written, ops, implicit, list(out_letters), out_written


def _term(ls, brace_at, shown):
    group = "{" + ",".join(shown) + "}" if shown else ""
    return "".join(ls[:brace_at]) + group + "".join(ls[brace_at:])


def _check_case(case, seed):
    letters, names, size, written, ops, implicit, out_letters, out_written = case
    rng = np.random.default_rng(seed)
    symbol = {c: c for c in letters} | {n: "ABCDEFGHIJ"[i] for i, n in enumerate(names)}
    terms, operands, raws, ref_subs = [], [], [], []
    for ls, _, raw, brace_at, shown, plain in ops:
        terms.append(_term(ls, brace_at, shown))
        arr = _rand(rng, tuple(size[a] for a in raw))
        raws.append(arr.astype(np.float64))
        ref_subs.append("".join(symbol[a] for a in raw))
        if plain:
            operands.append(arr)
        else:
            operands.append(nx.wrap(jnp.asarray(arr), {i: a for i, a in enumerate(raw) if a in names}))
    spec = ",".join(terms)
    if not implicit:
        spec += "->" + "".join(out_letters) + ("{" + ",".join(out_written[::-1]) + "}" if out_written else "")
    broadcast = sorted({n for _, ns, *_ in ops for n in ns if not written[n]})
    out_names = sorted(set(out_written) | set(broadcast))
    ref = np.einsum(",".join(ref_subs) + "->" + "".join(symbol[a] for a in out_letters + out_names), *raws)
    got = nx.einsum(spec, *operands)
    if all(isinstance(o, np.ndarray) for o in operands):
        assert isinstance(got, jax.Array)
        got_pos = np.asarray(got)
    else:
        assert isinstance(got, nx.NamedArray)
        assert got.named_shape == {n: size[n] for n in out_names}, spec
        assert got.shape == tuple(size[c] for c in out_letters), spec
        p = len(out_letters)
        got_pos = np.asarray(nx.unwrap(got, {p + i: n for i, n in enumerate(out_names)}))
    np.testing.assert_allclose(got_pos, ref, rtol=2e-4, atol=2e-4, err_msg=spec)


@settings(max_examples=40, deadline=None)
@given(case=einsum_cases(2), seed=st.integers(0, 2**16))
def test_two_operand_specs_match_numpy(case, seed):
    _check_case(case, seed)


@settings(max_examples=25, deadline=None)
@given(case=einsum_cases(3), seed=st.integers(0, 2**16))
def test_three_operand_specs_match_numpy(case, seed):
    _check_case(case, seed)


# --------------------------------------------------------------------------------------------------------
# Positional subscripts follow numpy.einsum (output order honoured, implicit output, ellipsis, diagonals)


@pytest.mark.parametrize("spec, shapes", [
    ("ij,jk->ki", [(2, 3), (3, 4)]),
    ("ij->ji", [(2, 3)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ji", [(2, 3)]),
    ("ii", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("i,->", [(3,), ()]),
    ("ij,ij->i", [(2, 3), (2, 3)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,cjk->ik", [(2, 3, 4), (5, 4, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("i...,i...", [(3, 2), (3, 1)]),
    ("...j->...", [(2, 3)]),
    ("i...j->j", [(2, 4, 3)]),  # ellipsis dims dropped from the output are summed (as jnp.einsum)
    ("i,i->i", [(1,), (3,)]),  # a size-1 letter broadcasts, as in NumPy
    ("ab,bc,cd,de->ea", [(2, 3), (3, 4), (4, 2), (2, 5)]),
])
def test_positional_specs_match_numpy(spec, shapes, rng):
    arrays = [_rand(rng, s) for s in shapes]
    if spec == "i...j->j":  # numpy refuses to drop '...' from the output; jnp.einsum sums those axes
        ref = np.einsum("i...j->...j", *arrays).sum(axis=0)
    else:
        ref = np.einsum(spec, *(a.astype(np.float64) for a in arrays))
    got = nx.einsum(spec, *arrays)
    assert got.shape == ref.shape
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
    # the same spec with the operands carrying an extra broadcast name
    named = [nx.wrap(jnp.asarray(np.stack([a, 2 * a])), ["z", ...]) for a in arrays]
    got = nx.einsum(spec, *named)
    assert got.shape == ref.shape and got.named_shape == {"z": 2}
    want = np.stack([ref, ref * 2 ** len(arrays)])
    np.testing.assert_allclose(np.asarray(nx.unwrap(got, ["z", ...])), want, rtol=1e-5, atol=1e-4)


def test_more_labels_than_the_alphabet(rng):
    # 60 named axes (three operands of rank 21) need symbols beyond a-zA-Z: still one einsum
    groups = [[f"n{g}_{i}" for i in range(20)] for g in range(3)]
    arrays = [_rand(rng, (1,) * 20 + (2,)) for _ in groups]
    ops = [nx.wrap(a, names + [...]) for a, names in zip(arrays, groups)]
    spec = ",".join("i{" + ",".join(names) + "}" for names in groups) + "->i"
    got = nx.einsum(spec, *ops)
    ref = np.prod([a.reshape(2) for a in arrays], axis=0)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5)


# --------------------------------------------------------------------------------------------------------
# Named examples: the xmap tutorial, xmap's docstring and xmap's xeinsum tests (xmap.md §3.12)


def test_tutorial_einsum(rng):
    xb = _rand(rng, (2, 5, 3))  # b, n, k
    yb = _rand(rng, (3, 4))  # k, m
    x = nx.wrap(jnp.asarray(xb), {0: "b", 2: "k"})
    y = nx.wrap(jnp.asarray(yb), ["k", "m", ...])
    z = nx.einsum("n{b,k},{k,m}->n{b,m}", x, y)
    assert z.shape == (5,) and z.named_shape == {"b": 2, "m": 4}
    ref = jnp.einsum("bnk,km->bnm", xb, yb)
    np.testing.assert_allclose(np.asarray(nx.unwrap(z, {0: "b", 2: "m"})), ref, rtol=1e-5, atol=1e-5)
    # order inside braces and the position of the brace group do not matter
    for spec in ["n{k,b},{m,k}->n{m,b}", "{b,k}n,{k,m}->{b,m}n", "{b}n{k},{k}{m}->n{m}{b}",
                 " n { b , k } , { k , m } -> n { b , m } "]:
        w = nx.einsum(spec, x, y)
        np.testing.assert_allclose(np.asarray(nx.unwrap(w, {0: "b", 2: "m"})), ref, rtol=1e-5, atol=1e-5)


def test_xmap_docstring_regression_loss(rng):
    xb, yb = _rand(rng, (6, 3)), _rand(rng, (6, 2))  # batch x in_features, batch x out_features
    wb, bb = _rand(rng, (3, 2)), _rand(rng, (2,))

    def regression_loss(x, y, w, b):
        # contract in_features; batch and out_features are in no term, so they broadcast by name
        y_pred = nx.einsum("{in_features},{in_features}->{}", x, w) + b
        error = nx.sum((y - y_pred) ** 2, axis="out_features")
        return nx.mean(error, axis="batch")

    loss = regression_loss(nx.wrap(xb, ["batch", "in_features"]), nx.wrap(yb, ["batch", "out_features"]),
                           nx.wrap(wb, ["in_features", "out_features"]), nx.wrap(bb, ["out_features"]))
    ref = jnp.mean(jnp.sum((yb - (xb @ wb + bb)) ** 2, axis=1))
    assert loss.named_shape == {} and loss.shape == ()
    np.testing.assert_allclose(float(loss), float(ref), rtol=1e-5)


def test_xmap_docstring_regression_loss_through_xmap(rng):
    xb, yb, wb, bb = (_rand(rng, s) for s in [(6, 3), (6, 2), (3, 2), (2,)])

    def regression_loss(x, y, w, b):
        y_pred = nx.einsum("{in_features},{in_features}->{}", x, w) + b
        error = nx.sum((y - y_pred) ** 2, axis="out_features")
        return nx.mean(error, axis="batch")

    loss = nx.xmap(regression_loss,
                   in_axes=(["batch", "in_features", ...], ["batch", "out_features", ...],
                            ["in_features", "out_features", ...], ["out_features", ...]),
                   out_axes={})
    ref = jnp.mean(jnp.sum((yb - (xb @ wb + bb)) ** 2, axis=1))
    np.testing.assert_allclose(float(loss(xb, yb, wb, bb)), float(ref), rtol=1e-5)


X34 = np.arange(12.0, dtype=np.float32).reshape(3, 4) / 7
Y45 = np.arange(20.0, dtype=np.float32).reshape(4, 5) / 9


@pytest.mark.parametrize("spec", ["{i,j},{j,k}->{i,k}", "{i,j},{k,j}->{k,i}", "{j},{k,j}->{k}",
                                  "{i,j},{j}->{i}", "{j},{j}->{}", "{j},{j}"])
def test_xeinsum_matmul(spec):
    x = nx.wrap(X34, ["i", "j"])
    y = nx.wrap(Y45, ["j", "k"])
    out = nx.einsum(spec, x, y)
    assert out.named_shape == {"i": 3, "k": 5}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["i", "k"])), X34 @ Y45, rtol=1e-5)


def test_xeinsum_vector_dot_and_outer_product():
    v, w = np.arange(4.0, dtype=np.float32), np.arange(3.0, dtype=np.float32) + 1
    vi = nx.wrap(v, ["i"])
    assert float(nx.einsum("{i},{i}->", vi, vi)) == pytest.approx(np.einsum("i,i->", v, v))
    out = nx.einsum("{i},{j}->{i,j}", vi, nx.wrap(w, ["j"]))
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["i", "j"])), np.outer(v, w))
    # a name written for only one operand and not in the output is summed in that operand
    out = nx.einsum("{i,j},{k}->{i,k}", nx.wrap(X34, ["i", "j"]), nx.wrap(w, ["k"]))
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["i", "k"])), np.einsum("ij,k->ik", X34, w),
                               rtol=1e-5)


def test_xeinsum_batch_matmul_and_unary_reduce(rng):
    a, b = _rand(rng, (2, 3, 4)), _rand(rng, (2, 4, 5))
    x, y = nx.wrap(a, ["b", "i", "j"]), nx.wrap(b, ["b", "j", "k"])
    ref = np.einsum("bij,bjk->bik", a, b)
    for spec in ["{b,i,j},{b,j,k}->{b,i,k}", "{j,i,b},{j,b,k}->{i,b,k}", "{i,j},{j,k}->{i,k}"]:
        out = nx.einsum(spec, x, y)  # the last one: b written nowhere, a batch axis by name
        np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["b", "i", "k"])), ref, rtol=1e-5, atol=1e-5)
    for spec in ["{b,i,j}->{b}", "{j,b,i}->{b}", "{i,j}->"]:
        out = nx.einsum(spec, x)
        assert out.named_shape == {"b": 2}
        np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["b"])), a.sum((1, 2)), rtol=1e-5)
    # mixed: 'jk{i,b}->k{b}' on x (8,6,4,5) with in ['b','i',...] == einsum('bijk->bk')
    xb = _rand(rng, (8, 6, 4, 5))
    out = nx.einsum("jk{i,b}->k{b}", nx.wrap(xb, ["b", "i", ...]))
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["b", ...])), np.einsum("bijk->bk", xb),
                               rtol=1e-5, atol=1e-5)


def test_implicit_output_keeps_names_written_once(rng):
    a, b = _rand(rng, (2, 3)), _rand(rng, (3, 4))
    x, y = nx.wrap(a, ["i", "j"]), nx.wrap(b, ["j", "k"])
    out = nx.einsum("{i,j},{j,k}", x, y)  # j in two terms: contracted; i and k once: kept
    assert out.named_shape == {"i": 2, "k": 4}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, ["i", "k"])), a @ b, rtol=1e-5, atol=1e-5)


def test_precision_and_preferred_element_type():
    x = nx.wrap(jnp.ones((3, 4), jnp.bfloat16), ["i", "j"])
    out = nx.einsum("{i,j},{i,j}->", x, x, preferred_element_type=jnp.float32)
    assert out.dtype == jnp.float32 and float(out) == 12.0
    out = nx.einsum("{i,j}->{i}", x, precision=jax.lax.Precision.HIGHEST)
    assert out.dtype == jnp.bfloat16


# --------------------------------------------------------------------------------------------------------
# Transformations


def test_grad_through_einsum_equals_positional_gradient(rng):
    a, b = _rand(rng, (2, 5, 3)), _rand(rng, (3, 4))

    def named(x, y):
        z = nx.einsum("n{b,k},{k,m}->n{b,m}", x, y)
        return (nx.sin(z) ** 2).sum(axis=(0, "b", "m")).data

    def positional(x, y):
        return jnp.sum(jnp.sin(jnp.einsum("bnk,km->bnm", x, y)) ** 2)

    gx, gy = jax.grad(named, argnums=(0, 1))(nx.wrap(a, {0: "b", 2: "k"}), nx.wrap(b, ["k", "m"]))
    rx, ry = jax.grad(positional, argnums=(0, 1))(a, b)
    assert isinstance(gx, nx.NamedArray) and gx.named_shape == {"b": 2, "k": 3}
    np.testing.assert_allclose(np.asarray(nx.unwrap(gx, {0: "b", 2: "k"})), rx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(nx.unwrap(gy, ["k", "m"])), ry, rtol=1e-5, atol=1e-6)


def test_einsum_under_jit_and_vmap(rng):
    a, b = _rand(rng, (4, 2, 3)), _rand(rng, (3, 5))
    f = jax.jit(lambda x, y: nx.einsum("{i,j},{j,k}->{k,i}", x, y))
    # vmap maps the leading positional axis of x; inside, x is (2, 3) named i, j
    out = jax.vmap(f, in_axes=(0, None))(nx.wrap(a, [None, "i", "j"]), nx.wrap(b, ["j", "k"]))
    assert out.shape == (4,) and out.named_shape == {"i": 2, "k": 5}
    np.testing.assert_allclose(np.asarray(nx.unwrap(out, [None, "i", "k"])), a @ b, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------------------
# Errors: type and key words


def _xy():
    return nx.wrap(X34, ["i", "j"]), nx.wrap(Y45, ["j", "k"])


@pytest.mark.parametrize("spec, words", [
    ("{i,j,{j,k}->{i,k}", "unterminated brace"),
    ("{i,j},{j,k->{i,k}", "unterminated brace"),
    ("{i,j},{j,k}->{i,k", "unterminated brace"),
    ("{i,j},{j,k}}->{i,k}", "unmatched '}'"),
    ("I{i,j},{j,k}->{i,k}", "term 0 'I{i,j}' has 1 positional subscript but operand 0 has 0"),
    ("{i,j},{j,k}->{i,k}K", "output subscript 'K' appears in no input term"),
    ("{i,j},{j,k}->{i,k}2", "invalid character '2'"),
    ("{i,,j},{j,k}->{i,k}", "empty axis name"),
    ("{i,j,i},{j,k}->{i,k}", "axis name 'i' appears twice"),
    ("{i,j},{j,k}->{i,k,i}", "axis name 'i' appears twice"),
    ("{i,j},{j,k},{k}->{i}", "3 input terms but 2 operands"),
    ("i{i,j}->{i}", "one input term 'i{i,j}' for 2 operands is ambiguous"),
    ("{i,j},{j,k}->{i,q}", "output axis name 'q' appears in no input term"),
    ("{i,j},{j,k}->a{i,k}", "output subscript 'a' appears in no input term"),
    ("{i,j},{k}->{i,k}", "axis 'j' is written in term 0"),
    ("{i,j},{j,k,z}->{i,k}", "operand 1 does not carry it"),
    ("a{i,j},{j,k}->{i,k}", "term 0 'a{i,j}' has 1 positional subscript but operand 0 has 0"),
    ("{i,j}.,{j,k}", "not part of an ellipsis"),
    ("{i,j}->->{i}", "'->' appears more than once"),
    ("{i,j}-{i}", "stray '-'"),
    ("{i,j},{j,k}->{i},{k}", "single term"),
    ("{i,j}3,{j,k}", "invalid character '3'"),
])
def test_bad_specs_raise_einsum_spec_error(spec, words):
    with pytest.raises(EinsumSpecError, match=re.escape(words)):
        nx.einsum(spec, *_xy())


def test_skipping_a_carried_name_is_an_error_that_says_how_to_fix_it():
    x, y = _xy()
    with pytest.raises(EinsumSpecError, match=r"operand 1 also carries it .* does not mention it.*in "
                                              r"none \(to broadcast it by name\)"):
        nx.einsum("{j},{k}->{k}", x, y)  # y carries j but its term skips it
    with pytest.raises(EinsumSpecError, match="operands carry 'j' without writing it"):
        nx.einsum("{i},{k}->{i,j,k}", x, y)


def test_plain_array_operand_cannot_have_names():
    with pytest.raises(EinsumSpecError, match=r"operand 1 does not carry it .*plain array"):
        nx.einsum("{i,j},a{j}->{i}", nx.wrap(X34, ["i", "j"]), np.ones(4))


def test_contracting_two_different_sizes_names_axis_and_sizes():
    x = nx.wrap(np.ones((3, 4)), ["i", "j"])
    y = nx.wrap(np.ones((5, 2)), ["j", "k"])
    with pytest.raises(AxisSizeError, match=r"axis 'j' has size 4 in operand 0 but size 5 in operand 1"):
        nx.einsum("{i,j},{j,k}->{i,k}", x, y)
    with pytest.raises(AxisSizeError, match=r"subscript 'j' has size 4 in operand 0 but size 5 in operand 1"):
        nx.einsum("ij,jk->ik", np.ones((3, 4)), np.ones((5, 2)))
    with pytest.raises(AxisSizeError, match=r"subscript 'i' is repeated .* sizes 2 and 3"):
        nx.einsum("ii->i", np.ones((2, 3)))
    with pytest.raises(AxisSizeError, match=r"'\.\.\.' do not broadcast"):
        nx.einsum("...i,...i", np.ones((2, 3)), np.ones((4, 3)))
    with pytest.raises(EinsumSpecError, match="subscripts string first"):
        nx.einsum(np.ones(3), [0])


# --------------------------------------------------------------------------------------------------------
# Mechanism: one kernel per layout, reused (counted, not timed)



def test_eager_einsum_is_one_cached_kernel_per_layout(counts):
    spec = "n{b,k},{k,m}->n{b,m}"
    x = nx.wrap(jnp.ones((2, 5, 3)), {0: "b", 2: "k"})
    y = nx.wrap(jnp.ones((3, 4)), ["k", "m"])
    y_other = nx.wrap(jnp.ones((4, 3)), ["m", "k"])  # stored in another order: a layout of its own
    y_wide = nx.wrap(jnp.ones((3, 6)), ["k", "m"])  # a new layout (sizes)
    counts.reset(fresh_kernels=True)  # a fresh kernel table: this test counts kernels from zero
    nx.einsum(spec, x, y).block_until_ready()
    assert counts.kernels_built == 1 and counts.eager_calls == 1
    assert counts.compiles == 1  # alignment and the contraction: one executable
    nx.einsum(spec, x, y_other).block_until_ready()
    assert counts.compiles == 2 and counts.kernels_built == 2
    for _ in range(3):
        nx.einsum(spec, x, y).block_until_ready()
        nx.einsum(spec, x, y_other).block_until_ready()
    assert counts.compiles == 2  # reused: no new compile for a layout seen before
    assert counts.kernels_built == 2 and counts.eager_calls == 8
    nx.einsum(spec, x, y_wide).block_until_ready()
    assert counts.compiles == 3 and counts.kernels_built == 2
    np.testing.assert_allclose(np.asarray(nx.einsum(spec, x, y_other).unwrap({0: "b", 2: "m"})),
                               np.full((2, 5, 4), 3.0))
    misses = einsum_mod.plan.cache_info().misses
    nx.einsum(spec, x, y)
    assert einsum_mod.plan.cache_info().misses == misses  # and no planning at all on a cached call


def test_plan_uses_a_fixed_path():
    # the contraction path is computed once per layout in the cached plan, never searched per call
    pl = einsum_mod.plan("ij,jk,kl->il", (((2, 3), None), ((3, 4), None), ((4, 5), None)))
    assert isinstance(pl.path, tuple) and len(pl.path) == 2
    assert einsum_mod.plan("ij,jk->ik", (((2, 3), None), ((3, 4), None))).path is False


def test_upper_case_letters_are_positional_subscripts_as_in_numpy():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(5, 2, 3)), rng.normal(size=(4, 2, 3))
    got = nx.einsum("thd,Thd->htT", q, k)
    np.testing.assert_allclose(got, np.einsum("thd,Thd->htT", q, k), rtol=1e-5)
    named = nx.einsum("tD{h},TD{h}->{h}tT", nx.wrap(q, {1: "h"}), nx.wrap(k, {1: "h"}))
    np.testing.assert_allclose(named.unwrap(["h", ...]), np.einsum("thd,Thd->htT", q, k), rtol=1e-5)
