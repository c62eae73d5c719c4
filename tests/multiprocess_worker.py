"""One process of the 2-process run of tests/test_multiprocess.py (jax.distributed, gloo on 127.0.0.1).

``python multiprocess_worker.py PROCESS_ID NUM_PROCESSES PORT OUT_DIR``: 4 CPU devices per process, one 4x2
mesh over all 8 (``data`` spans the processes, ``model`` stays inside each). Every program here has a
single-process twin in the test, which compares what each process writes to OUT_DIR/process_<id>.json.
"""

import json
import os
import sys

import jax

jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_platforms", "cpu")


def main(pid: int, nproc: int, port: int, out_dir: str) -> None:
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=nproc, process_id=pid,
                               initialization_timeout=40)
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import AxisType

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import multiprocess_programs as programs

    import namedarray as nx

    def fetch(a):
        """The whole value of a global array, on every process."""
        if a.is_fully_replicated:
            return np.asarray(a.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))

    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    out: dict = {"devices": jax.device_count(), "local_devices": jax.local_device_count()}
    rows = slice(pid * programs.BATCH // nproc, (pid + 1) * programs.BATCH // nproc)
    w, images, labels = programs.data()
    with jax.set_mesh(mesh):
        # nx.xmap takes each process's slice of the arguments its resources split, as xmap did
        f = nx.xmap(programs.named_loss, in_axes=programs.IN_AXES, out_axes=[...],
                    axis_resources={"batch": "data"})
        loss = f(w, images[rows], labels[rows])
        out["xmap_loss"] = float(fetch(loss))
        per_example = nx.xmap(programs.per_example, in_axes=programs.IN_AXES, out_axes=["batch", ...],
                              axis_resources={"batch": "data"})(w, images[rows], labels[rows])
        out["xmap_global_shape"] = list(per_example.shape)
        out["xmap_per_example"] = fetch(per_example).tolist()

        # a global NamedArray from each process's block; .shard() and nx.jit on global arrays
        x = nx.from_process_local(nx.wrap(images[rows], ["batch", "inputs"]), {"batch": "data"})
        out["global_named_shape"] = dict(x.named_shape)
        out["global_spec"] = str(x.sharding.spec)
        y = x.shard({"batch": "data", "inputs": "model"})
        out["reshard_spec"] = str(y.sharding.spec)
        out["reshard_sum"] = float(fetch(jax.jit(lambda v: nx.sum(v, ("batch", "inputs")).unwrap())(y)))
        lab = nx.from_process_local(nx.wrap(labels[rows], ["batch"]), {"batch": "data"})
        with nx.axis_rules(programs.RULES):
            params = nx.jit(programs.init)(jax.random.key(0))
            out["param_layout"] = [list(params["w1"].names), str(params["w1"].sharding.spec)]
            step = nx.jit(programs.sgd_step)
            losses = []
            for _ in range(3):
                params, loss = step(params, x, lab)
                losses.append(float(fetch(loss)))
        out["losses"] = losses
        # nx.plan_sharding over global arguments: every process compiles the same candidates and agrees
        # (with the round-figure rates: the default measures this machine, which one process on 8 devices
        # and two on 4 each see differently; the processes of the job share one measurement)
        from namedarray.parallel.plan import CostModel

        plan = nx.plan_sharding(programs.sgd_step, params, x, lab,
                                candidates=[{}, programs.RULES, {"batch": "data"}], cost_model=CostModel())
        out["plan"] = [[json.dumps(r.rules, sort_keys=True), r.ok, r.argument_bytes] for r in plan.rows]
        measured_rates = nx.plan_sharding(programs.sgd_step, params, x, lab,
                                          candidates=[{}, programs.RULES, {"batch": "data"}])
        out["plan_calibrated"] = [[json.dumps(r.rules, sort_keys=True), r.cost] for r in measured_rates.rows]
    multihost_utils.sync_global_devices("done")
    with open(os.path.join(out_dir, f"process_{pid}.json"), "w") as fh:
        json.dump(out, fh)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
