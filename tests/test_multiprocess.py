"""Two processes on JAX's own multi-process runtime (jax.distributed, gloo collectives on 127.0.0.1).

Each process has 4 CPU devices; one 4x2 mesh spans both. `nx.xmap` takes each process's slice of its
arguments and returns global arrays (as xmap did), `nx.from_process_local` builds a global NamedArray from
each process's block, and `.shard()` and `nx.jit` work on global arrays. Everything is compared with the
same programs run here, in one process on 8 devices. Both processes are started with a time limit and
ended by their PIDs whatever happens.
"""

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import multiprocess_programs as programs
import numpy as np
import pytest
from meshes import auto_mesh

import namedarray as nx
from namedarray.parallel.plan import CostModel

HERE = os.path.dirname(os.path.abspath(__file__))
LIMIT_S = 300  # a guard against a hang, not a timing: a busy 2-core machine can take minutes
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import multihost  # noqa: E402  (its launcher: start processes, time limit, end them by PID)


def run_two_processes(out_dir) -> list[dict]:
    port = multihost.free_port()
    try:
        multihost.run_processes([[sys.executable, os.path.join(HERE, "multiprocess_worker.py"), str(i), "2",
                                  str(port), str(out_dir)] for i in range(2)], LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the two processes did not finish within {LIMIT_S} s")
    results = []
    for i in range(2):
        with open(os.path.join(out_dir, f"process_{i}.json")) as fh:
            results.append(json.load(fh))
    return results


def reference() -> dict:
    """The same programs in this process, on 8 devices."""
    w, images, labels = programs.data()
    mesh = auto_mesh((4, 2), ("data", "model"))
    with jax.set_mesh(mesh):
        f = nx.xmap(programs.named_loss, in_axes=programs.IN_AXES, out_axes=[...],
                    axis_resources={"batch": "data"})
        per_example = nx.xmap(programs.per_example, in_axes=programs.IN_AXES, out_axes=["batch", ...],
                              axis_resources={"batch": "data"})(w, images, labels)
        x = nx.wrap(jnp.asarray(images), ["batch", "inputs"]).shard({"batch": "data"})
        lab = nx.wrap(jnp.asarray(labels), ["batch"]).shard({"batch": "data"})
        with nx.axis_rules(programs.RULES):
            params = nx.jit(programs.init)(jax.random.key(0))
            step = nx.jit(programs.sgd_step)
            losses = []
            for _ in range(3):
                params, loss = step(params, x, lab)
                losses.append(float(loss))
            plan = nx.plan_sharding(programs.sgd_step, params, x, lab, cost_model=CostModel(),
                                    candidates=[{}, programs.RULES, {"batch": "data"}])
        return {"plan": [[json.dumps(r.rules, sort_keys=True), r.ok, r.argument_bytes] for r in plan.rows],
                "xmap_loss": float(f(w, images, labels)), "xmap_per_example": np.asarray(per_example),
                "reshard_sum": float(images.sum()), "losses": losses,
                "param_layout": [list(params["w1"].names), str(params["w1"].sharding.spec)]}


def test_two_processes_give_the_single_process_results(tmp_path):
    results = run_two_processes(tmp_path)
    ref = reference()
    for pid, got in enumerate(results):
        assert got["devices"] == 8 and got["local_devices"] == 4, pid
        np.testing.assert_allclose(got["xmap_loss"], ref["xmap_loss"], rtol=1e-5)
        assert got["xmap_global_shape"] == [programs.BATCH]  # global, from each process's slice
        np.testing.assert_allclose(got["xmap_per_example"], ref["xmap_per_example"], rtol=1e-5)
        assert got["global_named_shape"] == {"batch": programs.BATCH, "inputs": programs.INPUTS}
        assert got["global_spec"] == "P('data',)"
        assert got["reshard_spec"] == "P('data', 'model')"
        np.testing.assert_allclose(got["reshard_sum"], ref["reshard_sum"], rtol=1e-5)
        assert got["param_layout"] == ref["param_layout"]
        np.testing.assert_allclose(got["losses"], ref["losses"], rtol=1e-5)
        assert got["plan"] == ref["plan"], pid  # the same ranking and per-device bytes as one process
    # ranked by the rates measured on this machine, the processes still agree: they share one measurement
    assert results[0]["plan_calibrated"] == results[1]["plan_calibrated"]
