"""Axis surgery by name against NumPy: flatten/unflatten, rearrange, split, unbind, tag/untag, pad.

Inputs come in random storage orders (where nx.wrap finds the named axes among the positional ones); the
references are np.reshape/np.transpose on the positional data.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import storage_order
from hypothesis import given, settings
from hypothesis import strategies as st

import namedarray as nx
from namedarray import errors
from namedarray.engine import dispatch as engine

POOL = ("a", "bb", "c1", "seq", "head_dim")


@st.composite
def stored(draw, logical_shape, names_at, data=None):
    """``(data, x)``: data of ``logical_shape`` (positional axes first) whose axes ``names_at`` ({axis: name})
    are named, stored in a random order (positional axes keep their relative order)."""
    if data is None:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        data = rng.integers(-50, 50, logical_shape).astype(np.int32)
    p = len(logical_shape) - len(names_at)  # positional axes first, then the named ones
    perm, named_at = storage_order(draw, p, [names_at[a] for a in sorted(names_at)])
    return data, nx.wrap(np.transpose(data, perm), named_at)


def _logical(x, names):
    """x's positional axes, then ``names`` in that order."""
    p = len(x.shape)
    return np.asarray(nx.unwrap(x, {p + i: n for i, n in enumerate(names)}))


# --------------------------------------------------------------------------------------------------------
# flatten / unflatten


@st.composite
def flatten_cases(draw):
    names = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=4, unique=True))
    sizes = {n: draw(st.integers(1, 3)) for n in names}
    p = draw(st.integers(0, 2))
    pshape = tuple(draw(st.integers(1, 3)) for _ in range(p))
    data, x = draw(stored(pshape + tuple(sizes[n] for n in names), {p + i: n for i, n in enumerate(names)}))
    merged = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    new = draw(st.sampled_from([merged[0], "merged"]))
    return data, x, names, merged, new


@settings(max_examples=30, deadline=None)
@given(flatten_cases())
def test_flatten_unflatten_round_trip(case):
    data, x, names, merged, new = case
    sizes = dict(x.named_shape)
    y = nx.flatten(x, merged, new)
    rest = [n for n in names if n not in merged]
    assert y.shape == x.shape and y.named_shape == {**{n: sizes[n] for n in rest},
                                                    new: int(np.prod([sizes[n] for n in merged]))}
    ref = _logical(x, rest + merged)  # row-major over the merged names, in the order given
    ref = ref.reshape(ref.shape[:len(x.shape) + len(rest)] + (-1,))
    np.testing.assert_array_equal(_logical(y, rest + [new]), ref)
    back = nx.unflatten(y, new, [(n, sizes[n]) for n in merged])
    assert back.named_shape == x.named_shape
    np.testing.assert_array_equal(_logical(back, names), _logical(x, names))
    jitted = jax.jit(lambda v: nx.unflatten(nx.flatten(v, merged, new), new, {n: sizes[n] for n in merged}))
    np.testing.assert_array_equal(_logical(jitted(x), names), _logical(x, names))


def test_flatten_of_adjacent_names_moves_no_data():
    x = nx.wrap(jnp.zeros((2, 3, 4)), ["b", "h", "d"])
    prims = [e.primitive.name for e in jax.make_jaxpr(lambda v: nx.flatten(v, ("h", "d"), "e"))(x).jaxpr.eqns]
    assert prims == ["reshape"]
    prims = [e.primitive.name for e in jax.make_jaxpr(lambda v: nx.unflatten(v, "h", {"h1": 1, "h2": 3}))(
        x).jaxpr.eqns]
    assert prims == ["reshape"]


def test_flatten_unflatten_errors():
    x = nx.wrap(jnp.zeros((2, 6)), ["b", "e"])
    with pytest.raises(errors.AxisSpecError, match="nx.flatten: the array has no axis 'z'"):
        nx.flatten(x, ("b", "z"), "bz")
    with pytest.raises(errors.DuplicateAxisError, match="already has an axis 'e'"):
        nx.flatten(x, ("b",), "e")
    with pytest.raises(errors.AxisSizeError,
                       match=r"nx.unflatten: the parts \(h=4, d=2\) have 8 elements, but the axis has size"):
        nx.unflatten(x, "e", {"h": 4, "d": 2})
    with pytest.raises(errors.AxisSizeError, match=r"6 is not a multiple of 4"):
        nx.unflatten(x, "e", {"h": 4, "d": -1})
    with pytest.raises(errors.DuplicateAxisError, match="already has axes 'b'"):
        nx.unflatten(x, "e", {"b": 2, "d": 3})
    assert nx.unflatten(x, "e", {"e": 2, "d": -1}).named_shape == {"b": 2, "e": 2, "d": 3}


# --------------------------------------------------------------------------------------------------------
# rearrange


@st.composite
def rearrange_cases(draw):
    """A spec over random elementary axes, the input it applies to, and the NumPy reference result."""
    elems = draw(st.lists(st.sampled_from(["a", "b", "c", "dd", "e_1", "f"]), min_size=1, max_size=5,
                          unique=True))
    size = {e: draw(st.integers(1, 3)) for e in elems}
    n_ell = draw(st.integers(0, 2))
    use_ell = n_ell > 0 or draw(st.booleans())
    ell = [f"...{i}" for i in range(n_ell)]
    size.update({e: draw(st.integers(1, 3)) for e in ell})
    kept = draw(st.lists(st.sampled_from(["k1", "k2"]), unique=True))
    size.update({k: draw(st.integers(1, 3)) for k in kept})

    def groups(items, named_pool):
        """Split ``items`` into terms: (parts, is_named, container name or None)."""
        out, i = [], 0
        while i < len(items):
            n = draw(st.integers(1, min(3, len(items) - i)))
            parts = items[i:i + n]
            named = draw(st.booleans())
            container = None
            if named and (n > 1 or draw(st.booleans())):
                container = named_pool.pop()
            out.append((parts, named, container))
            i += n
        return out

    lhs_order = draw(st.permutations(elems))
    lhs = groups(list(lhs_order), ["m1", "m2", "m3", "m4", "m5"])
    rhs_order = draw(st.permutations(elems))
    rhs = groups(list(rhs_order), ["r1", "r2", "r3", "r4", "r5"])

    def text(terms, ell_at):
        pos = [p[0] if len(p) == 1 and draw(st.booleans()) else "(" + " ".join(p) + ")"
               for p, named, _ in terms if not named]
        if use_ell:
            pos.insert(min(ell_at, len(pos)), "...")
        braces = [(f"{c}:(" + " ".join(p) + ")") if c else p[0] for p, named, c in terms if named]
        return " ".join(pos) + (" {" + ", ".join(braces) + "}" if braces else "")

    lhs_ell_at, rhs_ell_at = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    spec = text(lhs, lhs_ell_at) + " -> " + text(rhs, rhs_ell_at)

    def axes(terms, ell_at):
        """Logical axes of one side: (list of elementary groups, names of the named ones)."""
        pos = [p for p, named, _ in terms if not named]
        if use_ell:
            at = min(ell_at, len(pos))
            pos = pos[:at] + [[e] for e in ell] + pos[at:]
        named = [(p, c or p[0]) for p, is_named, c in terms if is_named]
        return pos, named

    lpos, lnamed = axes(lhs, lhs_ell_at)
    rpos, rnamed = axes(rhs, rhs_ell_at)
    # the elementary data, in the lhs logical order (positional terms, named terms, kept names)
    lgroups = lpos + [p for p, _ in lnamed] + [[k] for k in kept]
    lelems = [e for g in lgroups for e in g]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    E = rng.integers(-50, 50, [size[e] for e in lelems]).astype(np.int32)
    xshape = tuple(int(np.prod([size[e] for e in g])) for g in lgroups)
    names_at = {len(lpos) + i: n for i, (_, n) in enumerate(lnamed)}
    names_at.update({len(lpos) + len(lnamed) + i: k for i, k in enumerate(kept)})
    _, x = draw(stored(xshape, names_at, E.reshape(xshape)))
    # the reference: elementary axes in the result's order, merged per term
    rgroups = rpos + [p for p, _ in rnamed] + [[k] for k in kept]
    relems = [e for g in rgroups for e in g]
    ref = np.transpose(E, [lelems.index(e) for e in relems])
    ref = ref.reshape([int(np.prod([size[e] for e in g])) for g in rgroups])
    out_names = [n for _, n in rnamed] + kept
    sizes = {e: size[e] for e in elems if draw(st.booleans())}
    for g in lgroups:  # a split needs every size of its parts but (at most) one
        missing = [e for e in g if e not in sizes]
        sizes.update({e: size[e] for e in missing[1:] if e in elems})
    return spec, x, sizes, ref, len(rpos), out_names


@settings(max_examples=60, deadline=None)
@given(rearrange_cases())
def test_rearrange_matches_numpy_reshape_and_transpose(case):
    spec, x, sizes, ref, p, out_names = case
    for out in (nx.rearrange(x, spec, **sizes), jax.jit(lambda v: nx.rearrange(v, spec, **sizes))(x)):
        assert out.shape == ref.shape[:p], (spec, out.shape, ref.shape)
        assert out.named_shape == dict(zip(out_names, ref.shape[p:])), spec
        np.testing.assert_array_equal(_logical(out, out_names), ref, err_msg=spec)


def test_rearrange_examples():
    d = np.arange(2 * 3 * 8).reshape(2, 3, 8)
    x = nx.wrap(d, ["batch", "seq", "embed"])
    y = nx.rearrange(x, "{batch, embed:(heads hd)} -> batch {heads, hd}", heads=2)
    assert y.shape == (2,) and y.named_shape == {"seq": 3, "heads": 2, "hd": 4}
    np.testing.assert_array_equal(y.unwrap([None, "seq", "heads", "hd"]), d.reshape(2, 3, 2, 4))
    z = nx.rearrange(y, "b {heads, hd} -> {batch:(b), embed:(hd heads)}")  # merge in another order
    np.testing.assert_array_equal(z.unwrap(["batch", "seq", "embed"]),
                                  d.reshape(2, 3, 2, 4).transpose(0, 1, 3, 2).reshape(2, 3, 8))
    p = nx.rearrange(x, "{seq, batch} -> seq () batch")  # names to positions, with a new size-1 axis
    np.testing.assert_array_equal(p.unwrap({3: "embed"}), d.transpose(1, 0, 2)[:, None])
    q = nx.rearrange(p, "seq () batch -> {seq, batch}")
    assert q.named_shape == x.named_shape
    r = nx.rearrange(nx.wrap(d), "b s (h e) -> {h} b s e", h=2)
    np.testing.assert_array_equal(r.unwrap({0: "h"}), d.reshape(2, 3, 2, 4).transpose(2, 0, 1, 3))
    assert nx.rearrange(nx.wrap(d), "... e -> e ...").shape == (8, 2, 3)


@pytest.mark.parametrize("spec, sizes, error, match", [
    ("{batch} ->", {}, errors.AxisSpecError, r"axis 'batch' \(term 'batch'\) is missing from the result"),
    ("{batch, seq, embed} -> {batch, seq, embed, new}", {}, errors.AxisSpecError,
     r"axis 'new' \(term 'new'\) is missing from the input side"),
    ("{nope} -> nope", {}, errors.AxisSpecError, r"term 'nope': the array has no axis 'nope'"),
    ("a -> {a}", {}, errors.RankError, r"1 positional terms \(a\), but the array has 0 positional axes"),
    ("{embed:(h d)} -> {h, d}", {}, errors.AxisSizeError, r"'h', 'd' in term 'embed:\(h d\)' are all "),
    ("{embed:(h d)} -> {h, d}", {"h": 3}, errors.AxisSizeError, r"term 'embed:\(h d\)'.*8 is not a multiple"),
    ("{embed:(h d)} -> {h, d}", {"h": 2, "d": 2}, errors.AxisSizeError,
     r"term 'embed:\(h d\)' \(h=2, d=2\) have 4 elements, but the axis has size 8"),
    ("{seq} -> {seq}", {"seq": 4}, errors.AxisSizeError, r"term 'seq' has size 3, but seq=4 was given"),
    ("{seq} -> {seq}", {"zz": 4}, errors.AxisSpecError, r"size given for 'zz'"),
    ("{seq, embed} -> {seq:(embed)}", {}, errors.AxisSpecError, r"axis 'seq' \(term 'seq'\) is missing"),
    ("{seq, embed} -> {batch:(seq embed)}", {}, errors.DuplicateAxisError,
     r"term 'batch': the result would have axis 'batch' twice"),
    ("{seq, seq} -> {seq}", {}, errors.DuplicateAxisError, r"axis 'seq' appears twice"),
    ("{seq} -> seq ... ", {}, errors.AxisSpecError, r"'\.\.\.' on the right"),
    ("{seq -> seq", {}, errors.AxisSpecError, r"a '\{' is never closed"),
    ("(seq -> seq", {}, errors.AxisSpecError, r"a '\(' is never closed"),
    ("{seq} seq", {}, errors.AxisSpecError, r"exactly one '->'"),
    ("{(seq)} -> seq", {}, errors.AxisSpecError, r"'\(' inside braces"),
])
def test_rearrange_errors_name_the_term(spec, sizes, error, match):
    x = nx.wrap(np.zeros((2, 3, 8)), ["batch", "seq", "embed"])
    with pytest.raises(error, match=match):
        nx.rearrange(x, spec, **sizes)


def test_rearrange_keeps_unmentioned_names_and_refuses_clashes():
    x = nx.wrap(np.zeros((2, 3, 4)), [None, "b", "k"])
    assert nx.rearrange(x, "p {b} -> {p} b").named_shape == {"p": 2, "k": 4}
    with pytest.raises(errors.DuplicateAxisError, match="axis 'k' of the spec is also a named axis"):
        nx.rearrange(x, "k {b} -> {k} b")


# --------------------------------------------------------------------------------------------------------
# split, unbind, tag, untag


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_split_and_unbind_by_name(data):
    names = data.draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=3, unique=True))
    sizes = {n: data.draw(st.integers(1, 5)) for n in names}
    d, x = data.draw(stored(tuple(sizes[n] for n in names), dict(enumerate(names))))
    name = data.draw(st.sampled_from(names))
    axis = names.index(name)
    sections = data.draw(st.one_of(st.sampled_from([s for s in (1, 2, 3, 5) if sizes[name] % s == 0]),
                                   st.lists(st.integers(0, sizes[name]), max_size=3).map(sorted)))
    pieces = nx.split(x, name, sections)
    ref = np.split(d, sections, axis=axis)
    assert len(pieces) == len(ref)
    for got, want in zip(pieces, ref):
        assert got.named_shape == {**sizes, name: want.shape[axis]}
        np.testing.assert_array_equal(_logical(got, names), want)
    assert [p.named_shape for p in nx.split(x, sections, axis=name)] == [p.named_shape for p in pieces]
    slices = nx.unbind(x, name)
    assert len(slices) == sizes[name]
    rest = [n for n in names if n != name]
    for i, s in enumerate(slices):
        np.testing.assert_array_equal(_logical(s, rest), np.take(d, i, axis=axis))
    np.testing.assert_array_equal(_logical(nx.stack(slices, name), names), d)


def test_unbind_positional_and_errors():
    x = nx.wrap(np.arange(6).reshape(2, 3), [None, "k"])
    assert [v.unwrap(["k"]).tolist() for v in nx.unbind(x, 0)] == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(errors.AxisSpecError,
                       match=r"positional axis 1 is out of bounds .* \(shape \(2,\), named axes 'k';"):
        nx.unbind(x, 1)
    with pytest.raises(errors.AxisSpecError, match="nx.unbind: the array has no axis 'z'"):
        nx.unbind(x, "z")
    with pytest.raises(TypeError, match="give the number of pieces"):
        nx.split(x, "k")
    with pytest.raises(errors.AxisSizeError, match="axis 'k' has size 3, which does not split into 2 equal"):
        nx.split(x, "k", 2)
    assert [p.named_shape["k"] for p in nx.split(x, "k", np.int64(3))] == [1, 1, 1]  # NumPy ints and arrays
    assert [p.named_shape["k"] for p in nx.split(x, "k", np.array([1, 9]))] == [1, 2, 0]


@pytest.mark.parametrize("cuts", [[5], [2, 1], [-1], [0, 0, 3], [3, 9]])
def test_split_at_cuts_outside_the_axis_or_out_of_order_follows_numpy(cuts):
    d = np.arange(12).reshape(4, 3)
    pieces = nx.split(nx.wrap(d, ["k", None]), "k", cuts)
    want = np.split(d, cuts, axis=0)
    assert len(pieces) == len(want)
    for got, ref in zip(pieces, want):
        np.testing.assert_array_equal(got.unwrap(["k", ...]), ref)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_tag_untag_round_trip(data):
    p = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 3)) for _ in range(p))
    d = np.arange(int(np.prod(shape))).reshape(shape)
    entries = data.draw(st.lists(st.sampled_from([None, "a", "b", "c"]), min_size=p, max_size=p).filter(
        lambda e: len([n for n in e if n]) == len({n for n in e if n})))
    x = nx.wrap(d).tag(*entries)
    tagged = [n for n in entries if n]
    assert x.shape == tuple(s for s, n in zip(shape, entries) if n is None)
    assert x.named_shape == {n: s for s, n in zip(shape, entries) if n}
    if not tagged:
        return
    moved = data.draw(st.permutations(tagged))
    y = x.untag(*moved)  # appended after the positional axes, in the order given
    kept = [i for i, n in enumerate(entries) if n is None]
    ref = np.transpose(d, kept + [entries.index(n) for n in moved])
    np.testing.assert_array_equal(np.asarray(y.data), ref)
    # by position: back where they were
    back = x.untag({i: n for i, n in enumerate(entries) if n})
    np.testing.assert_array_equal(np.asarray(back.data), d)
    assert back.named_shape == {}


def test_tag_untag_errors():
    x = nx.wrap(np.zeros((2, 3)))
    with pytest.raises(errors.RankError, match=r"1 names \['a'\] for 2 positional axes"):
        x.tag("a")
    with pytest.raises(errors.AxisSpecError, match="x.untag: the array has no axis 'z'"):
        x.tag("a", None).untag("z")
    with pytest.raises(errors.AxisSpecError, match="position 5 for axis 'a' is out of range"):
        x.tag("a", None).untag({5: "a"})
    assert x.tag({1: "k"}).named_shape == {"k": 3}


# --------------------------------------------------------------------------------------------------------
# pad


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_pad_by_name_and_position_matches_numpy(data):
    p = data.draw(st.integers(0, 1))
    names = data.draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=3, unique=True))
    sizes = [data.draw(st.integers(1, 4)) for _ in range(p + len(names))]
    d, x = data.draw(stored(tuple(sizes), {p + i: n for i, n in enumerate(names)}))
    axes = data.draw(st.lists(st.sampled_from(list(range(p)) + names), min_size=1, unique=True))
    widths = {a: data.draw(st.one_of(st.integers(0, 3), st.tuples(st.integers(0, 3), st.integers(0, 3))))
              for a in axes}
    mode = data.draw(st.sampled_from(["constant", "edge", "wrap", "symmetric"]))
    got = nx.pad(x, widths, mode)
    ref_widths = [(0, 0)] * d.ndim
    for a, w in widths.items():
        ref_widths[a if isinstance(a, int) else p + names.index(a)] = (w, w) if isinstance(w, int) else w
    want = np.pad(d, ref_widths, mode)
    assert got.named_shape == {n: want.shape[p + i] for i, n in enumerate(names)}
    np.testing.assert_array_equal(_logical(got, names), want)


def test_pad_errors_and_positional_widths():
    x = nx.wrap(jnp.ones((2, 3)), ["a", "c"])
    with pytest.raises(errors.PositionalAxisError, match=r"pad nothing. Pad by name: pad_width=\{'a': 1\}"):
        nx.pad(x, 1)  # it used to return x unchanged: jnp.pad of the per-element scalars
    with pytest.raises(errors.AxisSpecError, match="nx.pad: the array has no axis 'z'"):
        nx.pad(x, {"z": 1})
    with pytest.raises(errors.AxisSpecError, match="the pad width of axis 'c' must be an int or a pair"):
        nx.pad(x, {"c": (1, 2, 3)})
    with pytest.raises(errors.AxisSpecError, match="key 0 is neither a name of the value"):
        nx.pad(x, {0: 1})
    with pytest.raises(errors.AxisSpecError, match="the pad width of axis 'c' must be an int or a pair"):
        nx.pad(x, {"c": True})
    with pytest.raises(errors.AxisSpecError, match="one value or one \\(before, after\\) pair for every"):
        nx.pad(x, {"c": 1}, constant_values=((1, 2), (3, 4)))
    d = np.arange(6.0).reshape(2, 3)  # a (before, after) pair of constants is for every axis, as in np.pad
    np.testing.assert_array_equal(nx.pad(nx.wrap(d, ["a", "c"]), {"c": (1, 2)}, constant_values=(7, 9))
                                  .unwrap(["a", "c"]), np.pad(d, [(0, 0), (1, 2)], constant_values=(7, 9)))
    m = nx.wrap(jnp.arange(6.0).reshape(2, 3), [None, "c"])  # a sequence counts positions, lifted over names
    np.testing.assert_array_equal(nx.pad(m, 1).unwrap([None, "c"]), np.pad(np.arange(6.0).reshape(2, 3),
                                                                            [(1, 1), (0, 0)]))
    assert nx.pad(jnp.ones(2), 1).shape == (4,)  # plain arrays: jnp.pad


def test_surgery_is_one_eager_kernel():
    x = nx.wrap(jnp.zeros((2, 3, 4)), ["b", "h", "d"])
    for f in (lambda: nx.flatten(x, ("d", "h"), "e"), lambda: nx.rearrange(x, "{b, h} -> h {b}"),
              lambda: nx.unflatten(x, "d", {"d1": 2, "d2": 2}), lambda: x.untag("h", "b"),
              lambda: nx.pad(x, {"h": (1, 0)})):
        f()
        before = engine.stats.eager_calls
        f()
        assert engine.stats.eager_calls - before == 1
