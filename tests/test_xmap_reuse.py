"""nx.xmap reused: its compile cache under threads, buffer donation on a mesh, and dict keys JAX cannot sort.

Values are compared with NumPy; the cache tests run many threads against the shared compile cache while
it evicts, which must never raise.
"""

import random
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import namedarray as nx
from namedarray import errors
from namedarray.core import caches

SHARED = "nx.xmap compilations"
OWN = "nx.xmap compilations of configurations that are not keys"


def mesh8(names=("x",)):
    shape = (8,) if len(names) == 1 else (2, 4)
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names), devices=jax.devices()[:8])


def run_threads(work, n=8):
    """Run ``work(k)`` in ``n`` threads started together; returns the exceptions they raised."""
    failures = []
    barrier = threading.Barrier(n)

    def target(k):
        try:
            barrier.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            failures.append(e)

    threads = [threading.Thread(target=target, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


class Scale:
    """A callable whose hash hands the interpreter to another thread (as any slow ``__hash__`` may), which
    widens the window between a cache lookup and its bookkeeping."""

    def __init__(self, c):
        self.c = c

    def __call__(self, v):
        return v * self.c

    def __hash__(self):
        time.sleep(0)
        return hash(("Scale", self.c))

    def __eq__(self, other):
        return isinstance(other, Scale) and other.c == self.c


# ------------------------------------------------------------------------------------------------------
# 1. The compile cache under threads


@pytest.fixture
def two_shared_compilations():
    nx.xmap  # noqa: B018  (nx.xmap's module, and the caches it owns, load on first use)
    old = caches.resize(SHARED, 2)
    yield
    caches.resize(SHARED, old)


def test_compile_cache_survives_concurrent_eviction(two_shared_compilations):
    # A small cache so that nearly every call evicts an entry another thread has just looked up.
    fs = [nx.xmap(Scale(c), ["i", ...], ["i", ...]) for c in range(1, 4)]
    x = np.arange(6.0).reshape(3, 2)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for r in range(4):

            def work(k, r=r):
                rnd = random.Random(r * 8 + k)
                picks = [rnd.randrange(len(fs)) for _ in range(16)]
                # traced inside one jit per thread: each xmap call goes through the cache, without
                # paying for a compilation per eviction
                traced = jax.jit(lambda v: [fs[p](v) for p in picks]).trace(x)
                assert len(traced.out_info) == len(picks)
                # and one call of each, compiled, for the values
                p = picks[0]
                np.testing.assert_allclose(fs[p](x), x * (p + 1))

            failures = run_threads(work)
            assert not failures, failures
    finally:
        sys.setswitchinterval(old)
    assert caches.sizes()[SHARED] <= 2


def test_more_than_256_distinct_xmaps_in_concurrent_use():
    n_threads, per_thread = 8, 36  # 288 distinct xmaps > the cache's 256 entries
    x = np.arange(6.0).reshape(3, 2)
    y = np.arange(2.0) + 1
    made = {}
    lock = threading.Lock()

    def make(c):
        return nx.xmap(lambda v, w, c=c: v * w + c, (["i", ...], [...]), ["i", ...])

    def work(k):
        rnd = random.Random(k)
        ids = [k * per_thread + j for j in range(per_thread)]
        fs = [make(c) for c in ids]
        with lock:
            made.update(zip(ids, fs))
        # every one goes through the cache (tracing them is enough; compiling 288 programs is not needed)
        traced = jax.jit(lambda v, w: [f(v, w) for f in fs]).trace(x, y)
        assert [o.shape for o in traced.out_info] == [(3, 2)] * per_thread
        # values: some of this thread's and some of the others' (evicted by now, while the other threads
        # keep inserting), compiled together, and two called on their own
        with lock:
            others = rnd.sample(sorted(made), 3)
        picks = rnd.sample(ids, 3) + others
        got = jax.jit(lambda v, w: [made[c](v, w) for c in picks])(x, y)
        for c, g in zip(picks, got):
            np.testing.assert_allclose(g, x * y + c)
        for c in (ids[0], others[0]):
            np.testing.assert_allclose(made[c](x, y), x * y + c)

    failures = run_threads(work, n_threads)
    assert not failures, failures
    assert len(made) == n_threads * per_thread > 256
    assert caches.sizes()[SHARED] <= 256


def test_uncacheable_xmap_shared_by_threads():
    # an unhashable spec leaves the shared cache out: each XMapped keeps its own, also under threads
    class Unhashable:
        __hash__ = None

        def __call__(self, v):
            return v + 1

    nx.clear_caches()
    f = nx.xmap(Unhashable(), ["i", ...], ["i", ...])
    x = np.arange(4.0)

    def work(k):
        for _ in range(5):
            np.testing.assert_allclose(f(x + k), x + k + 1)

    assert not run_threads(work)
    # one compilation, in f's own cache, however many threads asked for it at once
    assert caches.sizes()[OWN] == 1 and caches.sizes()[SHARED] == 0


# ------------------------------------------------------------------------------------------------------
# 2. Donation on a mesh: the caller's buffer, not a copy


@pytest.fixture
def device_puts(monkeypatch):
    """Every jax.device_put call: (id of the value, keyword arguments)."""
    calls = []
    real = jax.device_put

    def spy(x, *args, **kwargs):
        calls.append((id(x), kwargs))
        return real(x, *args, **kwargs)

    monkeypatch.setattr(jax, "device_put", spy)
    return calls


def _add(a, b):
    return a + b * 4


@pytest.mark.parametrize(
    "placement",
    [
        "same spec",  # P("x"): the xmap asks for P("x", None), equal in effect but not ==
        "other mesh names",  # the same devices, axis named "data"
        "flattened 2x4 mesh",  # P(("a", "b")) on a 2x4 mesh of the same devices in the same order
    ],
)
def test_donated_argument_already_placed_is_donated_not_copied(placement, device_puts):
    mesh = mesh8()
    if placement == "same spec":
        sharding = NamedSharding(mesh, P("x"))
    elif placement == "other mesh names":
        sharding = NamedSharding(mesh8(("data",)), P("data"))
    else:
        sharding = NamedSharding(mesh8(("a", "b")), P(("a", "b")))
    f = nx.xmap(_add, (["i", ...], ["i", ...]), ["i", ...], axis_resources={"i": "x"}, donate_argnums=0)
    x = jax.device_put(np.arange(16.0).reshape(8, 2), sharding)
    y = jax.device_put(np.ones((8, 2)), NamedSharding(mesh, P("x")))
    device_puts.clear()
    with jax.set_mesh(mesh):
        out = f(x, y)
    np.testing.assert_array_equal(out, np.arange(16.0).reshape(8, 2) + 4)
    assert id(x) not in [i for i, _ in device_puts], "an already placed argument was copied"
    assert x.is_deleted(), "the caller's buffer was not donated"
    assert not y.is_deleted()
    # the output has the layout the next call wants: donating it reuses it again
    device_puts.clear()
    with jax.set_mesh(mesh):
        out2 = f(out, y)
    np.testing.assert_array_equal(out2, np.arange(16.0).reshape(8, 2) + 8)
    assert out.is_deleted() and not device_puts


def test_donated_argument_that_must_move_is_moved_with_donation(device_puts):
    mesh = mesh8()
    f = nx.xmap(_add, (["i", ...], ["i", ...]), ["i", ...], axis_resources={"i": "x"}, donate_argnums=0)
    x = jnp.arange(16.0).reshape(8, 2)  # on one device: must be split before the call
    y = jnp.ones((8, 2))
    with jax.set_mesh(mesh):
        out = f(x, y)
    np.testing.assert_array_equal(out, np.arange(16.0).reshape(8, 2) + 4)
    donate = {i: kw.get("donate", False) for i, kw in device_puts}
    assert donate[id(x)] is True and donate[id(y)] is False
    if jax.default_backend() != "cpu":  # CPU transfers do not donate (jax.device_put: best effort)
        assert x.is_deleted()
    assert not y.is_deleted()


def test_donation_skipped_where_it_would_break_the_call(device_puts):
    mesh = mesh8()
    f = nx.xmap(_add, (["i", ...], ["i", ...]), ["i", ...], axis_resources={"i": "x"}, donate_argnums=0)
    with jax.set_mesh(mesh):
        # the same array also passed as a kept argument: moving it with donation would delete it first
        x = jnp.arange(16.0).reshape(8, 2)
        out = f(x, x)
        np.testing.assert_array_equal(out, np.arange(16.0).reshape(8, 2) * 5)
        assert not any(kw.get("donate") for _, kw in device_puts)
        # lowering runs nothing, so it donates nothing
        device_puts.clear()
        z = jnp.arange(16.0).reshape(8, 2)
        f.lower(z, jnp.ones((8, 2)))
        assert device_puts and not any(kw.get("donate") for _, kw in device_puts)
        assert not z.is_deleted()
        np.testing.assert_array_equal(z, np.arange(16.0).reshape(8, 2))


# ------------------------------------------------------------------------------------------------------
# 3. Dicts whose keys mix types


def _identity(a):
    return a


@pytest.mark.parametrize(
    "in_axes, where, keys",
    [
        ({0: "i", "a": "j"}, "in_axes:", "0, 'a'"),
        (({0: "i", "a": "j"},), "in_axes at [0] (argument 0)", "0, 'a'"),
        (({1: ["i", ...], "a": ["j", ...]},), "in_axes at [0] (argument 0)", "1, 'a'"),
        (
            (["k", ...], {"w": {2: ["i", ...], "b": [...]}}),
            "in_axes at [1]['w'] (argument 1 at ['w'])",
            "2, 'b'",
        ),
    ],
)
def test_mixed_key_types_in_in_axes(in_axes, where, keys):
    with pytest.raises(errors.AxisSpecError) as info:
        nx.xmap(_identity, in_axes=in_axes, out_axes=["i", ...])
    msg = str(info.value)
    assert where in msg and f"keys of mixed types (int, str): {keys}" in msg
    assert "Comparator" not in msg


def test_mixed_key_types_in_out_axes():
    with pytest.raises(errors.AxisSpecError, match=r"out_axes: .*mixed types \(int, str\): 1, 'a'"):
        nx.xmap(_identity, in_axes=(["i", ...],), out_axes={1: ["i", ...], "a": [...]})


def test_same_key_types_still_work():
    x = np.arange(6.0).reshape(3, 2)
    f = nx.xmap(lambda d: d["a"] + d["b"], in_axes=({"a": ["i", ...], "b": ["i", ...]},), out_axes=["i", ...])
    np.testing.assert_allclose(f({"a": x, "b": 2 * x}), 3 * x)
    g = nx.xmap(lambda d: d[0] * d[1], in_axes=(["i", ...],), out_axes=["i", ...])
    np.testing.assert_allclose(g({0: x, 1: x}), x * x)


@pytest.mark.parametrize("with_mesh", [False, True])
def test_mixed_key_types_in_arguments(with_mesh):
    x = np.ones((8, 2))
    resources = {"i": "x"} if with_mesh else None
    f = nx.xmap(lambda d: d[0], in_axes=(["i", ...],), out_axes=["i", ...], axis_resources=resources)
    ctx = jax.set_mesh(mesh8()) if with_mesh else _null()
    with ctx:
        with pytest.raises(errors.AxisSpecError, match=r"argument 0: a dict has keys of mixed .*0, 'a'"):
            f({0: x, "a": x})
        with pytest.raises(errors.AxisSpecError, match=r"argument 0 at \['w'\]: a dict .*1, 'z'"):
            f({"w": {1: x, "z": x}})
        with pytest.raises(errors.AxisSpecError, match=r"argument 0: a dict .*0, 'a'"):
            f.lower({0: x, "a": x})


def test_mixed_key_types_in_outputs():
    f = nx.xmap(lambda a: {0: a, "b": a}, in_axes=(["i", ...],), out_axes=["i", ...])
    with pytest.raises(errors.AxisSpecError, match=r"the output: a dict has keys of mixed types .*0, 'b'"):
        f(np.ones((3, 2)))


def test_value_errors_of_the_function_pass_through():
    def body(a):
        raise ValueError("from the body")

    with pytest.raises(ValueError, match="from the body"):
        nx.xmap(body, in_axes=(["i", ...],), out_axes=["i", ...])(np.ones(3))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
