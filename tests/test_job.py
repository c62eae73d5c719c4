"""No path where a process's history changes a value in a job (namedarray.core.orders, parallel/agree.py).

One 2-process ``jax.distributed`` job (4 CPU devices each, gloo on 127.0.0.1) runs tests/job_worker.py:
orders given before the job and used by plain ``jax.jit`` only, the job's bound on stored orders (lowered)
and what happens past it, measured plans that one process fails or does not make, and a fuzz of random
first orders, storage orders, ``jax.jit`` / ``nx.jit`` and pickles between the processes. Every value must
equal the one-process value, or the process must raise an nx error that says what differs; no process
may wait more than 30 s for another. The processes are started with a time limit and ended by their PIDs.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "job_worker.py")
LIMIT_S = 400  # a guard against a hang, not a timing: a busy 2-core machine can take minutes
SETS = 50_000  # per process, twice: 100,000 sets flattened by each, 150,000 in the job
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import multihost  # noqa: E402  (its launcher: start processes, time limit, end them by PID)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("job")
    port = multihost.free_port()
    try:
        multihost.run_processes([[sys.executable, WORKER, str(out_dir), str(i), str(port), str(SETS), "7"]
                                 for i in range(2)], LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the two processes did not finish within {LIMIT_S} s")
    results = []
    for i in range(2):
        with open(os.path.join(out_dir, f"job_{i}.json")) as fh:
            results.append(json.load(fh))
    return results


def test_w1_orders_fixed_before_the_job_are_agreed_or_refused(job):
    outcomes = [r["fixed"] for r in job]
    refused = [o for o in outcomes if isinstance(o, dict)]
    kept = [o for o in outcomes if not isinstance(o, dict)]
    # exactly one process fixed the set second: it is told, with both orders; the other keeps its order
    assert len(refused) == 1 and len(kept) == 1, outcomes
    assert refused[0]["error"] == "AxisSpecError" and refused[0]["module"] == "namedarray.errors"
    assert "('w1', 'w2')" in refused[0]["message"] and "('w2', 'w1')" in refused[0]["message"]


def test_w1_an_abstract_order_from_before_the_job_is_agreed_under_plain_jit(job):
    expected = np.arange(64.0).reshape(8, 8).sum(0)
    for pid, r in enumerate(job):
        np.testing.assert_array_equal(r["abstract_sum_u"], expected, err_msg=f"process {pid}")
    assert job[0]["abstract_order"] == job[1]["abstract_order"]


def test_m1_the_job_stores_at_most_its_bound_of_orders(job):
    for pid, r in enumerate(job):
        assert 0 < r["job_keys"] <= 64, (pid, r["job_keys"])  # 3 * SETS sets were made in the job
        assert r["table"] <= 64 + 1, pid  # + the one fixed set


def test_m1_shared_sets_flatten_alike_on_both_processes_past_the_bound(job):
    assert job[0]["shared_orders"] == job[1]["shared_orders"]


def test_w2_a_set_met_past_the_bound_cannot_get_a_second_order(job):
    for pid, r in enumerate(job):
        shape, order = r["late_order"]
        assert order == ["p2", "q2"] and shape == [4, 4], pid  # sorted, on every process
        assert r["late_fix"]["error"] == "AxisSpecError", (pid, r["late_fix"])
        assert "['p2', 'q2']" in r["late_fix"]["message"] and "MAX_ORDERS" in r["late_fix"]["message"]
        assert r["late_shard_map"] == [{"q2": 4}, [24.0, 28.0, 32.0, 36.0]], pid


def test_i7_a_plan_that_fails_on_one_process_is_an_error_on_the_other_at_once(job):
    assert job[1]["plan_fail"]["error"] == "ValueError"  # its own bad option
    assert job[0]["plan_fail"]["error"] == "NamedAxisError", job[0]["plan_fail"]
    assert "process 1 failed" in job[0]["plan_fail"]["message"]
    assert "max_candidates" in job[0]["plan_fail"]["message"]
    assert job[0]["plan_fail_s"] < 30


def test_w3_unmeasured_plans_agree_whatever_else_a_process_planned(job):
    assert job[0]["b_unmeasured"] == job[1]["b_unmeasured"]


def test_w3_a_measured_plan_only_one_process_makes_is_an_error_on_both_not_a_hang(job):
    for pid, r in enumerate(job):
        got = r["extra_measured"]
        assert isinstance(got, dict) and got["error"] == "NamedAxisError", (pid, got)
        assert "another job-wide call" in got["message"] or "failed" in got["message"], got
        assert r["extra_measured_s"] < 30, pid
    assert job[0]["b_measured"] == job[1]["b_measured"]  # and the same call on both is paired


def test_the_job_fuzz_has_no_wrong_value(job):
    assert job[0]["fuzz"] and len(job[0]["fuzz"]) == len(job[1]["fuzz"])
    for pid, r in enumerate(job):
        for rec in r["fuzz"]:
            for what in ("nx_jit", "plain_jit", "checkpoint"):
                where = f"process {pid}, {what}, {rec['names']} over {rec['over']}"
                np.testing.assert_allclose(rec[what], rec["expected"], rtol=1e-5, atol=1e-5, err_msg=where)
            np.testing.assert_array_equal(rec["tree_map"], np.zeros_like(rec["tree_map"]))
    for rec in job[1]["fuzz"]:
        np.testing.assert_allclose(rec["pickle"], rec["expected"], rtol=1e-5, atol=1e-5)


def test_w2_in_one_process_a_set_past_the_bound_keeps_its_one_order(monkeypatch):
    import jax
    import jax.numpy as jnp
    from conftest import fresh_canonical_orders
    from meshes import auto_mesh

    import namedarray as nx
    from namedarray.core import orders
    from namedarray.errors import AxisSpecError

    with fresh_canonical_orders():
        monkeypatch.setattr(orders, "MAX_ORDERS", 1)
        jax.tree.leaves(nx.wrap(jnp.zeros((2, 2)), ["y1", "x1"]))
        late = nx.wrap(jnp.arange(16.0).reshape(4, 4).T, ["q", "p"])  # stored (q, p); p is the rows
        [leaf] = jax.tree.leaves(late)  # past the bound: sorted, (p, q)
        np.testing.assert_array_equal(leaf, np.arange(16.0).reshape(4, 4))
        with pytest.raises(AxisSpecError, match=r"\['p', 'q'\].*MAX_ORDERS = 1"):
            nx.fix_canonical_order(["q", "p"])
        nx.fix_canonical_order(["p", "q"])  # the order it has: kept
        nx.fix_canonical_order(["w2", "v2"])  # a set never met is still free to fix
        assert nx.canonical_order(["v2", "w2"]) == ("w2", "v2")
        total = nx.shard_map(lambda v: nx.psum(v, "p"), resources={"p": "data"},
                             mesh=auto_mesh((4,), ("data",)))(late)
        assert dict(total.named_shape) == {"q": 4}
        np.testing.assert_array_equal(total.unwrap(["q"]), [24.0, 28.0, 32.0, 36.0])
