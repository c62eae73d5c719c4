"""Test setup: 8 simulated CPU devices, sync dispatch, and hypothesis profiles."""

import contextlib
import os
import shutil
import tempfile

# XLA:CPU runs a collective of the 8 simulated devices as 8 threads meeting at a rendezvous, and ends the
# whole process (SIGABRT, "Termination timeout ... Exiting to ensure a consistent program state") when one
# of them is late by its warn plus terminate timeouts (20 + 40 s by default). On a busy 2-core machine a
# starved thread can be late with nothing wrong, so the tests allow 60 + 240 s: five minutes, far more than
# any wait measured under two test runs side by side, and a real deadlock still ends the process. Set before
# JAX starts its backend, first in XLA_FLAGS so that a value already there (later, so it wins) is kept, and
# carried into the processes the tests start (examples/multihost.py's child_env keeps these flags).
COLLECTIVE_FLAGS = ("--xla_cpu_collective_call_warn_stuck_timeout_seconds=60 "
                    "--xla_cpu_collective_call_terminate_timeout_seconds=240")
# The suite compiles with XLA's backend optimisation level 0: LLVM does not optimise the machine code it
# emits for each program. Everything the tests read is decided before that step and is unchanged: the
# optimised HLO (instructions, fusions, transposes, copies, collectives) and the compiled memory analysis
# are identical at levels 0 and 3 (tests/test_compile_settings.py checks it on the GPT and Llama steps),
# and values agree to rounding. It halves the cost of a compile, most of the suite's time. The speed of
# the machine code is what `make bench` measures, at XLA's defaults. The processes of a multi-process test
# keep XLA's defaults (examples/multihost.py's child_env drops the flag): they run many steps of a few
# programs, where the unoptimised code costs more than the compiles save (156 s against 40 s for one).
SUITE_FLAGS = "--xla_backend_optimization_level=0"
os.environ["XLA_FLAGS"] = f"{COLLECTIVE_FLAGS} {SUITE_FLAGS} {os.environ.get('XLA_FLAGS', '')}".strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# One compilation cache for the run, on disk, shared by its workers: many tests build the same model or
# the same kernel in a fresh ``jax.jit`` (a fixture per test, a module per worker), and each would compile
# the same program again. JAX keys an entry by the program's text, the compile options (the XLA flags
# above among them), the backend and the devices, so a hit is the executable a compile would have given,
# with the same HLO, memory and cost analyses. What took under a tenth of a second to compile is not kept:
# writing it costs about what it saves. The directory is the run's own: the first process of the run (the
# controller, or pytest alone) names it in the environment its workers inherit, and removes it when the
# run ends, so nothing carries from one run to the next. A hit counts as a compile for the tests that
# count them (``Counts``): the process needed an executable it did not hold.
COMPILE_CACHE = os.environ.setdefault(
    "NX_TESTS_COMPILE_CACHE", os.path.join(tempfile.gettempdir(), f"namedarray-tests-{os.getpid()}"))
jax.config.update("jax_compilation_cache_dir", COMPILE_CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)

import hypothesis  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

hypothesis.settings.register_profile(
    "default", deadline=None, max_examples=100, derandomize=False,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large])
hypothesis.settings.register_profile(
    "ci", deadline=None, max_examples=100, derandomize=True, print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large])
hypothesis.settings.load_profile("ci" if os.environ.get("CI") else "default")


_COMPILES: list[str] = []


COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def _on_event(name, *_, **__):
    if name in (COMPILE_EVENT, CACHE_HIT_EVENT):
        _COMPILES.append(name)


jax.monitoring.register_event_duration_secs_listener(_on_event)
jax.monitoring.register_event_listener(_on_event)


def pytest_sessionfinish(session, exitstatus):
    # the controller (or a run without workers) ends last: the run's cache goes with it
    if not hasattr(session.config, "workerinput"):
        shutil.rmtree(COMPILE_CACHE, ignore_errors=True)


class Counts:
    """Backend compiles and the engine's eager calls and kernels built since the start (or ``reset``)."""

    def __init__(self):
        self.reset()

    def reset(self, fresh_kernels: bool = False) -> None:
        """Count from zero again; ``fresh_kernels`` also empties the kernel table (``nx.clear_caches()``)."""
        from namedarray.core.kernels import stats

        if fresh_kernels:
            import namedarray as nx

            nx.clear_caches()
        _COMPILES.clear()
        self._stats = stats
        self._base = (stats.eager_calls, stats.kernels_built)

    @property
    def compiles(self) -> int:
        return len(_COMPILES)

    @property
    def eager_calls(self) -> int:
        return self._stats.eager_calls - self._base[0]

    @property
    def kernels_built(self) -> int:
        return self._stats.kernels_built - self._base[1]


# The run's schedule. `make test` runs the suite on two pytest-xdist workers with ``--dist loadfile
# --no-loadscope-reorder``: a module is a unit of work, handed whole to whichever worker is free, so that a
# fixture built once per module (a two-process job, a documentation build, a model trained once) is built
# once and not once per worker. The units go out in the order of the collection, which puts SLOWEST first,
# in its order (the longest first, by the CPU seconds each took in a run of the suite on two workers, or by
# its time where its work is in a process the worker does not wait for, as a notebook's kernel), then the
# other modules in their usual order: the run ends on short modules, not with one worker on a long one
# while the other waits. SLOWEST's modules are also marked ``slow``, which `make check` leaves
# out: the quick tier for the edit-test loop.
SLOWEST = (
    "test_pipeline.py", "test_examples.py", "test_notebooks.py", "test_peer_parity_b.py", "test_memory.py",
    "test_types.py", "test_properties.py", "test_docs.py", "test_fsdp.py", "test_attention_gqa.py",
    "test_plan_ranking.py", "test_plan.py", "test_collectives.py", "test_peer_parity_d.py",
    "test_peer_parity_a.py", "test_input_sweep.py", "test_peer_parity_c.py", "test_nn.py",
    "test_sharding_memory.py", "test_sharding.py", "test_xmap_positional.py", "test_surgery.py",
    "test_shard_map.py", "test_nn_layers.py", "test_tutorial.py", "test_compile_settings.py",
    "test_job.py",  # a two-process job: its processes flatten 150,000 name sets
    "test_random.py", "test_contract.py", "test_scan.py", "test_external_llama.py",
    "test_sharding_properties.py", "test_trust.py", "test_layout.py", "test_multiprocess.py", "test_site.py",
)


# Then the quick tier's own modules, the longest first too (by the same measure), so that the run ends on
# the shortest: a module not listed here goes last.
THEN = (
    "test_trace_plans.py", "test_numpy_mirror.py", "test_wrap_index.py", "test_xmap_resources.py",
    "test_einsum.py", "test_xmap.py", "test_creation.py", "test_control.py", "test_transforms.py",
    "test_einsum_forms.py", "test_reuse.py", "test_call_sites.py", "test_updates.py",
    "test_call_fast_path.py", "test_shape_and_type.py", "test_xmap_positional_cases.py", "test_surface.py",
    "test_boundary.py", "test_threads.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOWEST + THEN)}
    slow = len(SLOWEST)

    def module_rank(item) -> int:
        return rank.get(os.path.basename(item.nodeid.split("::")[0]), len(rank))

    for item in items:
        if module_rank(item) < slow:
            item.add_marker(pytest.mark.slow)
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (module_rank(item), order[id(item)]))


@pytest.fixture
def counts():
    """What a test of the dispatch mechanism counts: compiles, eager calls and kernels built."""
    return Counts()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@contextlib.contextmanager
def fresh_canonical_orders():
    """Run as a fresh process would: no name set has a boundary order yet (``nx.reset_canonical_orders``).

    A name set flattens in the order it first flattened in; tests that count compiled layouts must not
    depend on which tests ran before them in the same worker.
    """
    import namedarray as nx

    nx.reset_canonical_orders()
    try:
        yield
    finally:
        nx.reset_canonical_orders()


@pytest.fixture(autouse=True)
def _fresh_canonical_orders_per_test():
    """Every test starts as a fresh process would, whatever ran before it in the same worker: which tests
    share a pytest-xdist worker changes from run to run, and the first flatten of a name set fixes its
    storage order."""
    with fresh_canonical_orders():
        yield


def storage_order(draw, p, names):
    """A random storage order for p positional axes and ``names``, as ``nx.wrap`` takes it.

    Returns (the permutation of the logical axes, positional then ``names`` in order, that gives the
    storage; {storage position: name}). Positional axes keep their relative order; the names sit anywhere
    among them, in any order.
    """

    rank = p + len(names)
    slots = sorted(draw(st.lists(st.integers(0, rank - 1), min_size=len(names), max_size=len(names),
                                 unique=True))) if names else []
    named_at = dict(zip(slots, draw(st.permutations(names))))
    positional = iter(range(p))
    perm = [p + list(names).index(named_at[i]) if i in named_at else next(positional) for i in range(rank)]
    return perm, named_at


def stored_randomly(draw, logical: np.ndarray, names):
    """``logical`` (positional axes first, then ``names`` in order) as a NamedArray, stored in a random
    order."""
    import namedarray as nx

    names = list(names)
    perm, named_at = storage_order(draw, logical.ndim - len(names), names)
    return nx.wrap(np.transpose(logical, perm), named_at)


def logical_order(x, names) -> np.ndarray:
    """``x``'s positional axes, then ``names`` in that order: the positional reference's layout."""
    import namedarray as nx

    p = len(x.shape)
    return np.asarray(nx.unwrap(x, {p + i: n for i, n in enumerate(names)}))
