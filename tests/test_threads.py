"""Eight threads using namedarray at once give the values one thread gets.

Eager named operations (misaligned elementwise, reductions by name, einsum, nx.nmap of a fresh function),
nx.xmap on a mesh of the 8 simulated CPU devices with axis_resources, nested nx.xmap and nx.xmap over a
serial loop all share process-wide caches. Each task is first computed by one thread (the reference, itself
checked against NumPy), then by 8 threads concurrently, each in its own order, several times.
"""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType

import namedarray as nx

B, K, M = 8, 6, 4
RNG = np.random.default_rng(0)
A = RNG.standard_normal((B, K)).astype(np.float32)
W = RNG.standard_normal((K, M)).astype(np.float32)
C = RNG.standard_normal((K, B)).astype(np.float32)  # the same names as A, stored the other way round


def mesh8():
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,), devices=jax.devices()[:8])


def unwrap(x, names):
    return np.asarray(nx.unwrap(x, dict(enumerate(names))))


# ------------------------------------------------------------------------------------------------------
# The tasks: each returns NumPy arrays; `k` varies the inputs per call so threads do not share results


def eager_elementwise(k):
    a = nx.wrap(A + k, ["b", "k"])
    c = nx.wrap(C, ["k", "b"])  # misaligned with a: the engine transposes inside one kernel
    return unwrap(a * 2 + c, ["b", "k"])


def eager_reductions(k):
    a = nx.wrap(A - k, ["b", "k"])
    return (
        unwrap(nx.sum(a, axis="k"), ["b"]),
        unwrap(a.max(axis="b"), ["k"]),
        unwrap(nx.mean(a, axis=("b", "k")), []),
    )


def eager_einsum(k):
    a = nx.wrap(A * (k + 1), ["b", "k"])
    w = nx.wrap(W, ["k", "m"])
    return unwrap(nx.einsum("{b,k},{k,m}->{b,m}", a, w), ["b", "m"])


def eager_nmap_fresh_lambda(k):
    a = nx.wrap(A, ["b", "k"])
    shift = float(k)
    return unwrap(nx.nmap(lambda v: jnp.sin(v) + shift)(a), ["b", "k"])  # a new function every call


def xmap_on_mesh(k):
    f = nx.xmap(
        lambda a, w: nx.tanh(nx.einsum("{b,k},{k,m}->{b,m}", a, w)) + k,
        (["b", "k"], ["k", "m"]),
        ["b", "m"],
        axis_resources={"b": "x"},
    )
    with jax.set_mesh(mesh8()):
        out = f(A, W)
    assert out.sharding.spec[0] == "x"
    return np.asarray(out)


def nested_xmap(k):
    inner = nx.xmap(lambda row: row * 2 + nx.psum(row, "k"), ["k", ...], ["k", ...])
    outer = nx.xmap(lambda x: inner(x) + k, ["b", ...], ["b", ...])
    return np.asarray(outer(A))


def xmap_serial_loop(k):
    f = nx.xmap(
        lambda a, w: nx.sum(a * w, "k") + k,
        (["b", "k"], ["k"]),
        ["b"],
        axis_resources={"b": nx.SerialLoop(4)},
    )
    return np.asarray(f(A, W[:, 0]))


def numpy_reference(task, k):
    if task is eager_elementwise:
        return (A + k) * 2 + C.T
    if task is eager_reductions:
        a = A - k
        return a.sum(1), a.max(0), np.asarray(a.mean())
    if task is eager_einsum:
        return (A * (k + 1)) @ W
    if task is eager_nmap_fresh_lambda:
        return np.sin(A) + k
    if task is xmap_on_mesh:
        return np.tanh(A @ W) + k
    if task is nested_xmap:
        return A * 2 + A.sum(1, keepdims=True) + k
    if task is xmap_serial_loop:
        return A @ W[:, 0] + k
    raise AssertionError(task)


TASKS = [
    eager_elementwise,
    eager_reductions,
    eager_einsum,
    eager_nmap_fresh_lambda,
    xmap_on_mesh,
    nested_xmap,
    xmap_serial_loop,
]
KS = (0, 1)  # the inputs every thread uses (compiled once each, then hit from every thread)
N_THREADS, ROUNDS = 8, 2


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def assert_close(got, want, what):
    for g, w in zip(as_tuple(got), as_tuple(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=what)


@pytest.fixture(scope="module")
def reference():
    ref = {}
    for task in TASKS:
        for k in KS:
            ref[task.__name__, k] = got = task(k)
            assert_close(got, numpy_reference(task, k), f"{task.__name__}({k}), single thread")
    return ref


def test_eight_threads_get_the_single_thread_values(reference):
    results: dict = {}
    failures: list = []
    barrier = threading.Barrier(N_THREADS)

    def work(t):
        try:
            barrier.wait()
            order = TASKS[t % len(TASKS) :] + TASKS[: t % len(TASKS)]  # each thread its own order
            for r in range(ROUNDS):
                for task in order:
                    k = KS[(t + r) % len(KS)]
                    results[t, r, task.__name__] = (k, task(k))
        except BaseException as e:  # noqa: BLE001 - reported below with its traceback
            failures.append((t, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a thread did not finish (deadlock?)"
    if failures:
        t, e = failures[0]
        raise AssertionError(f"{len(failures)} thread(s) failed; thread {t}: {e!r}") from e
    assert len(results) == N_THREADS * ROUNDS * len(TASKS)
    for (t, r, name), (k, got) in sorted(results.items(), key=lambda kv: kv[0]):
        assert_close(got, reference[name, k], f"{name}({k}) in thread {t}, round {r}")


def test_mesh_contexts_stay_with_their_thread():
    # jax.set_mesh in one thread is not seen by another: an xmap that needs mesh axis "x" fails there
    # with nx's error, while the thread holding the mesh computes the value
    f = nx.xmap(lambda a: a * 2, ["b", ...], ["b", ...], axis_resources={"b": "x"})
    inside, outside = threading.Event(), threading.Event()
    out: dict = {}

    def with_mesh():
        try:
            with jax.set_mesh(mesh8()):
                inside.set()
                outside.wait(30)
                out["mesh"] = np.asarray(f(A))
        except BaseException as e:  # noqa: BLE001
            out["mesh"] = e

    def without_mesh():
        inside.wait(30)
        try:
            f(A)
            out["none"] = None
        except BaseException as e:  # noqa: BLE001
            out["none"] = e
        finally:
            outside.set()

    threads = [threading.Thread(target=with_mesh), threading.Thread(target=without_mesh)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    np.testing.assert_allclose(out["mesh"], A * 2)
    assert isinstance(out["none"], nx.errors.MissingResourceError), out["none"]
