"""nx.einsum's short forms and aliases: the output-only form ("->{H,W}"), one input term for every operand
("{D}->{}" with several operands) and keyword aliases of names in braces; each checked against the same
contraction written in the full grammar and against a positional np.einsum."""

import importlib
import re

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import logical_order, stored_randomly
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray.errors import AxisSizeError, EinsumSpecError

einsum_mod = importlib.import_module("namedarray.ops.einsum")  # the module (nx.einsum is the function)

POOL = ["H", "W", "D", "batch", "k", "x1", "Heads", "mlp-hidden"]
SYMBOLS = "ABCDEFGHIJ"  # np.einsum's labels for the names of POOL, in order


def _sym(names):
    return "".join(SYMBOLS[POOL.index(n)] for n in names)


def _braces(names):
    return "{" + ",".join(names) + "}"


# --------------------------------------------------------------------------------------------------------
# Random operands: names from POOL with one size each, positional axes that broadcast as in NumPy


@st.composite
def operands(draw, nops, positional):
    """(logical NumPy arrays, their names, the operands stored in random orders); positional axes first."""
    names = draw(st.lists(st.sampled_from(POOL), unique=True, min_size=1, max_size=4))
    size = {n: draw(st.integers(1, 3)) for n in names}
    pshape = tuple(draw(st.lists(st.integers(1, 3), max_size=2))) if positional else ()
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logicals, carried, ops = [], [], []
    for k in range(nops):
        own = draw(st.lists(st.sampled_from(names), unique=True, min_size=1 if k == 0 else 0))
        # a suffix of the common positional shape, some of its sizes 1 (NumPy broadcasting)
        pos = pshape[len(pshape) - draw(st.integers(0, len(pshape))):]
        pos = tuple(1 if draw(st.booleans()) else s for s in pos)
        logical = rng.standard_normal(pos + tuple(size[n] for n in own)).astype(np.float32)
        plain = k > 0 and not own and draw(st.booleans())  # a plain array among named ones
        logicals.append(logical)
        carried.append(own)
        ops.append(logical if plain else stored_randomly(draw, logical, own))
    return logicals, carried, ops


def _aliased(draw, names):
    """Each name in ``names`` written as itself or through an alias: (written, aliases)."""
    aliases, written = {}, []
    for n in names:
        if draw(st.booleans()):
            key = f"n{len(aliases)}"
            aliases[key] = n
            written.append(key)
        else:
            written.append(n)
    return written, aliases


def _check(got, ref, out_names, pshape_rank):
    assert isinstance(got, nx.NamedArray)
    assert set(got.names) == set(out_names) and len(got.shape) == pshape_rank
    np.testing.assert_allclose(logical_order(got, out_names), ref, rtol=2e-4, atol=2e-4)


# --------------------------------------------------------------------------------------------------------
# Properties: each form equals its full-grammar spelling and a positional np.einsum


@st.composite
def output_only_cases(draw):
    logicals, carried, ops = draw(operands(draw(st.integers(1, 3)), positional=True))
    have = sorted({n for names in carried for n in names})
    listed = draw(st.lists(st.sampled_from(have), unique=True))
    written, aliases = _aliased(draw, listed)
    return logicals, carried, ops, listed, written, aliases


@settings(max_examples=25, deadline=None)
@given(case=output_only_cases())
def test_output_only_form_matches_full_grammar_and_numpy(case):
    logicals, carried, ops, listed, written, aliases = case
    got = nx.einsum("->" + _braces(written), *ops, **aliases)
    full = ",".join("..." + _braces(names) for names in carried) + "->..." + _braces(listed)
    ref = np.einsum(",".join("..." + _sym(names) for names in carried) + "->..." + _sym(listed),
                    *(a.astype(np.float64) for a in logicals))
    _check(got, ref, listed, ref.ndim - len(listed))
    _check(nx.einsum(full, *ops), ref, listed, ref.ndim - len(listed))


@st.composite
def shared_term_cases(draw):
    positional = draw(st.booleans())
    logicals, carried, ops = draw(operands(draw(st.integers(2, 3)), positional=positional))
    have = sorted({n for names in carried for n in names})
    listed = draw(st.permutations(have))
    listed = listed[:draw(st.integers(0, len(listed)))]
    kept = [n for n in listed if draw(st.booleans())]
    written, aliases = _aliased(draw, listed)
    # an alias of a kept name is written the same way in the output
    spelled = dict(zip(listed, written))
    return logicals, carried, ops, positional, listed, kept, [spelled[n] for n in kept], written, aliases


@settings(max_examples=25, deadline=None)
@given(case=shared_term_cases())
def test_one_term_for_every_operand_matches_full_grammar_and_numpy(case):
    logicals, carried, ops, positional, listed, kept, kept_written, written, aliases = case
    ell = "..." if positional else ""
    got = nx.einsum(ell + _braces(written) + "->" + ell + _braces(kept_written), *ops, **aliases)
    full = (",".join(ell + _braces([n for n in listed if n in names]) for names in carried)
            + "->" + ell + _braces(kept))
    broadcast = sorted({n for names in carried for n in names} - set(listed))
    out_names = kept + broadcast
    ref = np.einsum(",".join("..." + _sym(names) for names in carried) + "->..." + _sym(out_names),
                    *(a.astype(np.float64) for a in logicals))
    _check(got, ref, out_names, ref.ndim - len(out_names))
    _check(nx.einsum(full, *ops), ref, out_names, ref.ndim - len(out_names))


@st.composite
def aliased_full_grammar_cases(draw):
    logicals, carried, ops = draw(operands(2, positional=False))
    every = list(dict.fromkeys(carried[0] + carried[1]))
    kept = [n for n in every if draw(st.booleans())]
    written, aliases = _aliased(draw, every)
    spelled = dict(zip(every, written))
    return logicals, carried, ops, kept, spelled, aliases


@settings(max_examples=25, deadline=None)
@given(case=aliased_full_grammar_cases())
def test_aliases_in_the_full_grammar_match_the_names_they_stand_for(case):
    logicals, carried, ops, kept, spelled, aliases = case
    spec = ",".join(_braces(names) for names in carried) + "->" + _braces(kept)
    aliased = ",".join(_braces([spelled[n] for n in names]) for names in carried)
    got = nx.einsum(aliased + "->" + _braces([spelled[n] for n in kept]), *ops, **aliases)
    ref = np.einsum(",".join(_sym(names) for names in carried) + "->" + _sym(kept),
                    *(a.astype(np.float64) for a in logicals))
    _check(got, ref, kept, 0)
    _check(nx.einsum(spec, *ops), ref, kept, 0)


# --------------------------------------------------------------------------------------------------------
# Behaviour


def _hwd(rng=None):
    rng = rng or np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)  # H, W, D
    b = rng.standard_normal((4, 3, 2)).astype(np.float32)  # D, W, H
    return a, b, nx.wrap(a, ["H", "W", "D"]), nx.wrap(b, ["D", "W", "H"])


def test_output_only_form_is_the_full_spec_it_stands_for():
    a, b, x, y = _hwd()
    got = nx.einsum("->{H,W}", x, y)
    want = nx.einsum("{H,W,D},{D,W,H}->{H,W}", x, y)
    assert got.named_shape == want.named_shape == {"H": 2, "W": 3}
    np.testing.assert_allclose(got.unwrap(["H", "W"]), want.unwrap(["H", "W"]), rtol=1e-6)
    np.testing.assert_allclose(got.unwrap(["H", "W"]), np.einsum("hwd,dwh->hw", a, b), rtol=1e-5)
    # '->{}' sums every named axis; the order of the listed names does not matter
    assert float(nx.einsum("->{}", x, y)) == pytest.approx(float(np.einsum("hwd,dwh->", a, b)), rel=1e-5)
    np.testing.assert_allclose(nx.einsum("->{W,H}", x, y).unwrap(["H", "W"]), got.unwrap(["H", "W"]))


def test_output_only_form_broadcasts_and_keeps_positional_axes():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((5, 1, 4)).astype(np.float32)  # positional (5, 1), then D
    b = rng.standard_normal((3, 4, 2)).astype(np.float32)  # positional (3,), then D, H
    got = nx.einsum("->{H}", nx.wrap(a, {2: "D"}), nx.wrap(b, {1: "D", 2: "H"}))
    assert got.shape == (5, 3) and got.named_shape == {"H": 2}
    np.testing.assert_allclose(got.unwrap([None, None, "H"]), np.einsum("...d,...dh->...h", a, b), rtol=1e-5)
    # a plain array operand broadcasts positionally, as in every nx op
    c = rng.standard_normal((5, 3)).astype(np.float32)
    got = nx.einsum("->{}", nx.wrap(b, {1: "D", 2: "H"}), c)
    np.testing.assert_allclose(np.asarray(got.data), np.einsum("...dh,...->...", b, c), rtol=1e-5)


def test_output_only_form_with_one_operand_sums_the_unlisted_names():
    _, _, x, _ = _hwd()
    np.testing.assert_allclose(nx.einsum("->{D}", x).unwrap(["D"]), nx.sum(x, ("H", "W")).unwrap(["D"]),
                               rtol=1e-5)
    assert float(nx.einsum("->{}", x)) == pytest.approx(float(nx.sum(x, ("H", "W", "D"))), rel=1e-5)
    # without braces, '->' stays NumPy's term of a scalar: the names broadcast, nothing is summed
    assert nx.einsum("->", x).named_shape == x.named_shape


def test_one_term_for_every_operand():
    a, b, x, y = _hwd()
    got = nx.einsum("{D}->{}", x, y)  # D contracted, H and W broadcast by name
    np.testing.assert_allclose(got.unwrap(["H", "W"]), np.einsum("hwd,dwh->hw", a, b), rtol=1e-5)
    got = nx.einsum("{H,W,D}->{H,W}", x, y)
    np.testing.assert_allclose(got.unwrap(["H", "W"]), np.einsum("hwd,dwh->hw", a, b), rtol=1e-5)
    # a listed name that only one operand carries is summed in that operand
    v = nx.wrap(np.arange(4.0, dtype=np.float32), ["D"])
    got = nx.einsum("{H,D}->{}", x, v)
    np.testing.assert_allclose(got.unwrap(["W"]), np.einsum("hwd,d->w", a, np.arange(4.0)), rtol=1e-5)
    # '...' in the term covers each operand's positional axes
    p = nx.wrap(np.ones((5, 4), np.float32), {1: "D"})
    got = nx.einsum("...{D}->...{}", x, p)
    assert got.shape == (5,) and got.named_shape == {"H": 2, "W": 3}


def test_one_term_with_one_operand_is_the_ordinary_grammar():
    a, _, x, _ = _hwd()
    np.testing.assert_allclose(nx.einsum("{H,W,D}->{H,W}", x).unwrap(["H", "W"]), a.sum(2), rtol=1e-5)
    np.testing.assert_allclose(nx.einsum("{D}->{}", x).unwrap(["H", "W"]), a.sum(2), rtol=1e-5)
    with pytest.raises(EinsumSpecError, match="operand 0 does not carry it"):
        nx.einsum("{Q}->{}", x)  # as before: one operand, one term


def test_aliases_resolve_in_every_form():
    a, b, x, y = _hwd()
    ref = np.einsum("hwd,dwh->w", a, b)
    for spec, kw in [("{x,y,d},{d,y,x}->{y}", dict(x="H", y="W", d="D")),  # the full grammar
                     ("{x,y,D}->{y}", dict(x="H", y="W")),  # one term for both
                     ("->{y}", dict(y="W"))]:  # output only
        got = nx.einsum(spec, x, y, **kw)
        np.testing.assert_allclose(got.unwrap(["W"]), ref, rtol=1e-5, err_msg=spec)
    # aliases resolve all at once: swapping two names is one substitution, not two
    got = nx.einsum("{H,W}->{W}", x, y, H="W", W="H")
    np.testing.assert_allclose(got.unwrap(["H", "D"]), np.einsum("hwd,dwh->hd", a, b), rtol=1e-5)
    # the keyword options are still options
    got = nx.einsum("{d}->{}", x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), d="D",
                    preferred_element_type=jnp.float32)
    assert got.dtype == jnp.float32


def test_forms_and_aliases_under_jit_match_eager():
    _, _, x, y = _hwd()

    @nx.jit
    def f(u, v):
        return (nx.einsum("->{H,W}", u, v), nx.einsum("{D}->{}", u, v),
                nx.einsum("{x,y}->{y}", u, v, x="H", y="W"))

    for got, want in zip(f(x, y), (nx.einsum("->{H,W}", x, y), nx.einsum("{D}->{}", x, y),
                                   nx.einsum("{H,W}->{W}", x, y))):
        assert got.named_shape == want.named_shape
        names = sorted(want.names)
        np.testing.assert_allclose(got.unwrap(names), want.unwrap(names), rtol=1e-6)


def test_a_form_runs_the_kernel_of_the_spec_it_stands_for(counts):
    _, _, x, y = _hwd()
    counts.reset(fresh_kernels=True)
    nx.einsum("...{H,W,D},...{D,W,H}->...{H,W}", x, y).block_until_ready()
    assert counts.kernels_built == 1
    nx.einsum("->{H,W}", x, y).block_until_ready()
    nx.einsum("->{a,b}", x, y, a="H", b="W").block_until_ready()
    assert counts.kernels_built == 1 and counts.eager_calls == 3  # one kernel: the resolved spec
    misses = einsum_mod.rewrite.cache_info().misses
    nx.einsum("->{H,W}", x, y)
    assert einsum_mod.rewrite.cache_info().misses == misses  # written out once per layout


# --------------------------------------------------------------------------------------------------------
# Errors: each names the spec, the name and what to write instead


@pytest.mark.parametrize("spec, kw, error, words", [
    # output only
    ("->{Q}", {}, EinsumSpecError, "nx.einsum('->{Q}'): the output lists 'Q', which no operand carries (the "
                                   "operands carry 'D', 'H', 'W')"),
    ("->a{H}", {}, EinsumSpecError, "output takes no letters (it has 'a'); write input terms"),
    ("->", {}, EinsumSpecError, "no input terms for 2 operands: list the named axes to keep in braces after "
                                "'->' ('->{}' sums every named axis)"),
    # one term for every operand
    ("{D,Q}->{}", {}, EinsumSpecError, "the input term '{D,Q}' applies to every operand, and no operand "
                                       "carries 'Q'"),
    ("{D}->{H}", {}, EinsumSpecError, "the output keeps 'H', which the input term '{D}' does not list; list "
                                      "it there too ('{D,H}->{H}')"),
    ("i{D}->{}", {}, EinsumSpecError, "one input term 'i{D}' for 2 operands is ambiguous"),
    ("{D}", {}, EinsumSpecError, "one input term '{D}' for 2 operands needs an output: write it after '->' "
                                 "(e.g. '{D}->{}'"),
    # aliases
    ("{x}->{}", dict(x="D", y="W"), EinsumSpecError, "nx.einsum('{x}->{}', x='D', y='W'): alias y='W' is "
                                                     "used nowhere"),
    ("{x,y}->{}", dict(x="D", y="D"), EinsumSpecError, "term 0 '{x,y}' names axis 'D' twice (x='D' and "
                                                       "y='D')"),
    ("{H,W}->{x,H}", dict(x="H"), EinsumSpecError, "the output '{x,H}' names axis 'H' twice"),
    ("{x}->{}", dict(x="a b"), EinsumSpecError, "alias x='a b' is not an axis name braces can hold"),
    ("{x}->{}", dict(x="Q"), EinsumSpecError, "nx.einsum('{x}->{}', x='Q') (read as '{Q}->{}'): the input "
                                              "term '{Q}' applies to every operand, and no operand carries "
                                              "'Q'"),
    ("{x}->{}", dict(x=3), TypeError, "nx.einsum('{x}->{}'): alias x=3 (int) must be a str"),
    ("{x}->{}", dict(x=None), TypeError, "alias x=None (NoneType) must be a str"),
    ("{D}->{}", dict(optimize="greedy"), TypeError, "nx.einsum takes no optimize= (a keyword of jnp.einsum)"),
    ("{D}->{}", dict(out=None), TypeError, "nx.einsum takes no out= (a keyword of jnp.einsum)"),
])
def test_errors_name_the_spec_and_the_fix(spec, kw, error, words):
    _, _, x, y = _hwd()
    with pytest.raises(error, match=re.escape(words)):
        nx.einsum(spec, x, y, **kw)


def test_errors_of_the_written_out_spec_say_how_the_form_was_read():
    _, _, x, _ = _hwd()
    words = ("nx.einsum('->{}') (read as '...{H,W,D},...{D}->...{}'): axis 'D' has size 4 in operand 0 but "
             "size 5")
    with pytest.raises(AxisSizeError, match=re.escape(words)):
        nx.einsum("->{}", x, nx.wrap(np.ones(5), ["D"]))
    words = ("nx.einsum('{D}->{}') (read as '{D},{}->{}'): term 1 '{}' has 0 positional subscripts but "
             "operand 1 has 2 positional axes (shape (2, 3)); cover them with letters, or with '...'")
    with pytest.raises(EinsumSpecError, match=re.escape(words)):
        nx.einsum("{D}->{}", x, np.ones((2, 3)))
    words = ("nx.einsum('{x},{x}->{}', x='Q') (read as '{Q},{Q}->{}'): term 0 '{Q}' names axis 'Q', but "
             "operand 0 does not carry it")
    with pytest.raises(EinsumSpecError, match=re.escape(words)):
        nx.einsum("{x},{x}->{}", x, x, x="Q")


def test_output_only_form_needs_names_braces_can_write():
    x = nx.wrap(np.ones((2, 3)), ["a b", "k"])
    with pytest.raises(EinsumSpecError, match=re.escape("operand 0 carries axis 'a b', which braces cannot "
                                                        "write")):
        nx.einsum("->{k}", x, x)
