"""Memory under reuse: the eager kernel table stays bounded and what it drops is freed.

Resident memory is read from /proc/self/statm (``resource``'s peak where that is missing). No timings: the
limits are in megabytes and in kernels. On the CPU backend each compiled kernel costs about 1.4 MB, so a
table that kept what it should drop would overshoot these limits by far.
"""

import gc
import itertools
import os
import resource

import jax.numpy as jnp
import numpy as np
import pytest

import namedarray as nx
from namedarray.core import kernels

MB = 2**20
SMALL_TABLE = 16


def resident_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except OSError:  # no procfs: the peak (kB on Linux), which also catches growth
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture
def small_table():
    """The kernel table shrunk to SMALL_TABLE kernels, so that a few dozen new keys go past its size."""
    old = kernels.resize(SMALL_TABLE)
    nx.clear_caches()
    try:
        yield SMALL_TABLE
    finally:
        kernels.resize(old)
        nx.clear_caches()


def test_fresh_lambdas_do_not_accumulate():
    raw = jnp.arange(32.0).reshape(4, 8)
    x = nx.wrap(raw, {1: "k"})
    for _ in range(30):  # warm-up: jax's and nx's one-time allocations
        nx.nmap(lambda v: v * 2)(x)
    gc.collect()
    before = resident_mb()
    size_before = kernels.size()
    built = kernels.stats.kernels_built
    for i in range(200):  # kept, 200 kernels would hold about 280 MB: far past the bound below
        y = nx.nmap(lambda v: v * 2)(x)
        if i % 50 == 0:
            assert kernels.size() <= size_before + 4
    gc.collect()
    growth = resident_mb() - before
    np.testing.assert_array_equal(np.asarray(y.unwrap({1: "k"})), np.asarray(raw) * 2)
    assert kernels.stats.kernels_built - built >= 200  # each new lambda is a new kernel ...
    assert kernels.size() <= size_before + 4  # ... which goes away with its lambda
    assert growth < 100, f"resident memory grew by {growth:.0f} MB over 200 calls"


def test_a_kept_function_keeps_its_kernel():
    x = nx.wrap(jnp.arange(6.0), ["k"])

    def triple(v):
        return v * 3

    f = nx.nmap(triple)
    f(x)
    built = kernels.stats.kernels_built
    for _ in range(20):
        np.testing.assert_array_equal(np.asarray(f(x).unwrap(["k"])), np.arange(6.0) * 3)
    assert kernels.stats.kernels_built == built


def test_distinct_axis_names_stay_within_the_table(small_table):
    built = kernels.stats.kernels_built
    for k in range(2 * small_table):
        y = nx.wrap(jnp.arange(3.0) + k, [f"name{k}"]) + 1
        np.testing.assert_array_equal(np.asarray(y.unwrap([f"name{k}"])), np.arange(3.0) + k + 1)
        assert kernels.size() <= kernels.MAX_KERNELS
    assert kernels.stats.kernels_built - built >= 2 * small_table
    assert kernels.size() == small_table
    # an evicted kernel is built again, with the right result
    again = kernels.stats.kernels_built
    y = nx.wrap(jnp.arange(3.0), ["name0"]) + 1
    np.testing.assert_array_equal(np.asarray(y.unwrap(["name0"])), np.arange(3.0) + 1)
    assert kernels.stats.kernels_built > again


def test_distinct_einsum_specs_stay_within_the_table(small_table):
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    b = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    expected = a @ b
    letters = itertools.permutations("abcdefgh", 3)
    built = kernels.stats.kernels_built
    for _ in range(2 * small_table):
        i, j, k = next(letters)
        got = nx.einsum(f"{i}{j},{j}{k}->{i}{k}", jnp.asarray(a), jnp.asarray(b))
        np.testing.assert_allclose(np.asarray(got), expected)
        assert kernels.size() <= kernels.MAX_KERNELS
    assert kernels.stats.kernels_built - built >= 2 * small_table  # one kernel per spec


def test_evicted_kernels_free_their_memory(small_table):
    # Kept, 150 kernels would take about 200 MB on CPU; the table keeps SMALL_TABLE of them
    for k in range(10):
        nx.wrap(jnp.ones(3), [f"warm{k}"]) + 1
    gc.collect()
    before = resident_mb()
    for k in range(150):
        y = nx.wrap(jnp.ones(3), [f"evicted{k}"]) * 2
        assert kernels.size() <= small_table
    gc.collect()
    growth = resident_mb() - before
    np.testing.assert_array_equal(np.asarray(y.unwrap(["evicted149"])), np.full(3, 2.0))
    assert growth < 60, f"resident memory grew by {growth:.0f} MB over 150 evicted kernels"


def test_clear_caches_empties_the_table():
    for k in range(5):
        nx.wrap(jnp.ones(2), [f"cleared{k}"]) + 1
    assert kernels.size() >= 5
    nx.clear_caches()
    assert kernels.size() == 0
    y = nx.wrap(jnp.ones(2), ["cleared0"]) + 1
    np.testing.assert_array_equal(np.asarray(y.unwrap(["cleared0"])), np.full(2, 2.0))


# Every cache the library owns, by the name it is registered under (namedarray.core.caches).
CACHES = {"boundary permutations", "eager kernels", "einsum forms", "einsum plans", "einsum specs",
          "functions built around user functions", "jax function index", "lifted functions of jax.lax",
          "lifted functions of jax.nn", "lifted functions of jax.random", "nx.xmap compilations",
          "nx.xmap compilations with argument layouts", "nx.jit compilations with argument layouts",
          "last calls of nx.jit and nx.xmap", "plan cost calibrations",
          "nx.xmap compilations of configurations that are not keys",
          "rearrange specs", "sharding targets", "traced contractions", "trace-time plans"}


def test_clear_caches_empties_every_cache_the_library_owns():
    import jax
    from meshes import auto_mesh

    from namedarray.core import caches

    nx.clear_caches()  # whatever earlier tests left: each cache below is filled by this test
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["b", "a"])
    nx.fix_canonical_order(["a", "b"])
    jax.make_jaxpr(lambda v: nx.dot(v, v, "a"))(x)  # a traced contraction
    jax.tree.leaves(x)  # a boundary permutation
    nx.einsum("{a,b},{b}->{a}", x, nx.wrap(jnp.ones(2), ["b"]))  # a spec, a plan, an eager kernel
    nx.einsum("->{a}", x, nx.wrap(jnp.ones(2), ["b"]))  # a short form, written out in the full grammar
    nx.rearrange(x, "{a, b} -> a b")
    body = lambda i, v: v + 1  # noqa: E731  (kept alive: what is built around it lives as long)
    nx.lax.fori_loop(0, 2, body, x)  # a loop body built around the user's
    nx.lax.abs(x), nx.nn.scaled_matmul, nx.random.bits  # lifted on demand
    nx.xmap(jax.nn.relu, in_axes=[{0: "l"}], out_axes=["l", ...])(jnp.ones(3))  # found through the index

    class Unhashable:  # an xmap whose configuration cannot be a key keeps its own compilations
        __hash__ = None

        def __call__(self, v):
            return v + 1

    own = nx.xmap(Unhashable(), in_axes=["l", ...], out_axes=["l", ...])
    own(jnp.ones(3))
    with jax.set_mesh(auto_mesh((8,), ("d",))), nx.axis_rules({"b": "d"}):
        # a sharding target, and the compilations of this nx.jit (kept alive: they live as long as it)
        step = nx.jit(lambda v: v * 2)
        step(nx.wrap(jnp.ones((8, 3)), ["b", "a"]))
        # a compiled call with its arguments' layouts
        nx.xmap(jnp.negative, in_axes=["r", ...], out_axes=["r", ...], axis_resources={"r": "d"})(jnp.ones(8))
    from namedarray.parallel.plan import CostModel

    CostModel.calibrated(auto_mesh((8,), ("d",)))  # the rates nx.plan_sharding measures on a mesh
    # the caches the docstrings' examples make (named "doc ...") stay registered once their doctests ran in
    # this process; they are the examples', not the library's
    before = {n: size for n, size in caches.sizes().items() if not n.startswith("doc ")}
    assert set(before) == CACHES
    filled = {n for n, size in before.items() if size}
    assert filled == CACHES, CACHES - filled
    nx.clear_caches()
    assert all(size == 0 for size in caches.sizes().values()), caches.sizes()


def test_memory_returns_after_many_name_sets_and_configurations():
    """10,000 distinct name sets crossing the pytree boundary and 10,000 distinct specs and layouts, then
    ``nx.clear_caches()``: resident memory ends within 50 MB of where it started.

    The specs are traced in programs of 500 each, as a user's many functions are: one program of 10,000
    steps raises the allocator's high-water mark by itself (70 MB for the same program in plain jnp).
    """
    import jax

    base = jnp.arange(4.0).reshape(2, 2)

    def specs(x, start, stop):
        out = 0.0
        for i in range(start, stop):
            y = nx.rename(x, {"p": f"p{i}", "q": f"q{i}"})
            flat = nx.rearrange(y, f"{{p{i}, q{i}}} -> p{i} q{i}").sum()
            out = out + nx.einsum(f"{{p{i},q{i}}}->", y) + flat
        return out.unwrap()

    x = nx.wrap(base, ["p", "q"])
    for i in range(50):  # warm-up: one-time allocations
        jax.tree.leaves(nx.wrap(base, [f"w{i}", f"v{i}"]))
    jax.make_jaxpr(lambda v: specs(v, -500, 0))(x)
    nx.clear_caches()
    gc.collect()
    before = resident_mb()
    for i in range(10_000):
        jax.tree.leaves(nx.wrap(base, [f"q{i}", f"p{i}"]))
    for start in range(0, 10_000, 500):
        jax.make_jaxpr(lambda v, start=start: specs(v, start, start + 500))(x)
    nx.clear_caches()
    gc.collect()
    assert resident_mb() - before < 50
