"""One process of a 2-process job for tests/test_job.py: the paths on which history could change a value.

``python job_worker.py OUT_DIR PROCESS_ID PORT SETS SEED``. Each phase records its values, or the nx error
it raised (class and message), in OUT_DIR/job_<process id>.json; the test compares them with one process's
values and between the processes. The phases:

* ``fixed`` / ``abstract`` (W1): before ``jax.distributed.initialize`` each process fixes ``{w1, w2}`` in
  an order of its own and flattens an abstract ``{u, v}`` in an order of its own; after it, only plain
  ``jax.jit`` lays out a global ``{u, v}`` array and sums over ``u``.
* ``bound`` (M1, W2): with the job's bound lowered to 64 orders, each process makes SETS sets of its own
  and SETS shared ones (first flattened in opposite orders); the job's keys are counted; then a new set
  past the bound flattens sorted, fixing it otherwise is refused, and ``nx.shard_map`` sums it by name.
* ``plan_fail`` (I7): process 1 calls a measured ``nx.plan_sharding`` with a bad option, process 0 a good one.
* ``plan_extra`` (W3): process 0 plans a step process 1 never plans, then both plan the same step,
  unmeasured and measured.
* ``fuzz``: random name sets, random first orders before and after joining, values in random storage
  orders through plain ``jax.jit`` and ``nx.jit``, pickles passed from process 0 to process 1, and a
  checkpoint both write and restore by name into targets each lays out in its own order.
"""

import json
import os
import pickle
import sys
import time
import traceback

import jax

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_num_cpu_devices", 4)


def _error(e: BaseException) -> dict:
    return {"error": type(e).__name__, "module": type(e).__module__, "message": str(e)[:1500]}


def _fuzz_values(nx, jnp, fetch, names, base, stored, stored_names, over) -> dict:
    """One fuzz value through nx.jit, plain jax.jit and a tree.map across storage orders (one process's)."""
    keep = [n for n in names if n != over]
    # a global value built in this process's own storage order, split over the first name
    glob = nx.jit(lambda: nx.wrap(jnp.asarray(stored), stored_names), resources={names[0]: "data"})()
    return glob, {"nx_jit": fetch(nx.jit(lambda v: nx.sum(v, over))(glob).unwrap(keep)),
            "plain_jit": fetch(jax.jit(lambda v: nx.sum(v, over).unwrap(keep))(glob)),
            # the same value in the set's written order, met in plain jax.jit by tree.map
            "tree_map": fetch(jax.jit(lambda a: jax.tree.map(
                lambda p, q: p - q, a, nx.wrap(jnp.asarray(base), list(names))).unwrap(list(names)))(glob))}


def main(out_dir: str, pid: int, port: int, sets: int, seed: int) -> dict:
    import numpy as np

    import namedarray as nx

    rng = np.random.default_rng(seed + 1000 * pid)  # each process its own history
    fuzz_sets = [tuple(f"f{i}_{k}" for k in range(2 + i % 2)) for i in range(10)]
    for names in fuzz_sets:  # orders given before the job: abstract values flattened at start-up
        if rng.random() < 0.5:
            order = [names[j] for j in rng.permutation(len(names))]
            jax.tree.leaves(nx.wrap(jax.ShapeDtypeStruct((2,) * len(order), "float32"), order))
    nx.fix_canonical_order(["w1", "w2"] if pid == 0 else ["w2", "w1"])
    jax.tree.leaves(nx.wrap(jax.ShapeDtypeStruct((8, 8), "float32"), ["u", "v"] if pid == 0 else ["v", "u"]))

    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=pid,
                               initialization_timeout=60)
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    from namedarray.core import orders

    def fetch(a):
        return np.asarray(multihost_utils.process_allgather(a, tiled=True)).tolist()

    def barrier(name):
        multihost_utils.sync_global_devices(name)

    out: dict = {}
    # W1 (fixed): the first flatten in the job agrees on the orders given before it; a fixed one the job
    # holds otherwise is refused on the process that fixed it second
    try:
        jax.tree.leaves(nx.wrap(jnp.zeros((2, 2)), ["s", "t"]))
        out["fixed"] = list(nx.canonical_order(["w1", "w2"]))
    except Exception as e:  # noqa: BLE001 - recorded for the test
        out["fixed"] = _error(e)
        nx.reset_canonical_orders()  # what the user does after fixing the program: start afresh
    mesh8 = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    # W1 (abstract): plain jax.jit only
    make = jax.jit(lambda: nx.wrap(jnp.arange(64.0).reshape(8, 8), ["u", "v"]),
                   out_shardings=NamedSharding(mesh8, PartitionSpec("data")))
    g = make()
    out["abstract_sum_u"] = fetch(jax.jit(lambda x: nx.sum(x, "u"))(g).data)
    out["abstract_order"] = list(nx.canonical_order(["u", "v"]))
    barrier("w1")

    # M1 and W2: the job's bound, lowered
    orders.MAX_ORDERS = 64
    t0 = time.perf_counter()
    for i in range(sets):
        own = [f"own{pid}_{i}_a", f"own{pid}_{i}_b"]
        jax.tree.leaves(nx.wrap(jax.ShapeDtypeStruct((2, 3), "float32"), own))
        shared = [f"sh{i}_a", f"sh{i}_b"] if pid == 0 else [f"sh{i}_b", f"sh{i}_a"]
        jax.tree.leaves(nx.wrap(jax.ShapeDtypeStruct((2, 3), "float32"), shared))
    out["sets_s"] = time.perf_counter() - t0
    print("sets made in", out["sets_s"], "s", flush=True)
    barrier("sets")
    print("phase", 'out["job_keys"] = orders.job_k', flush=True)
    out["job_keys"] = orders.job_keys()
    out["table"] = orders.size()
    out["shared_orders"] = [list(orders.canonical([f"sh{i}_a", f"sh{i}_b"])) for i in range(sets)]
    print("phase", 'late = nx.wrap(', flush=True)
    late = nx.wrap(jax.ShapeDtypeStruct((4, 4), "float32"), ["q2", "p2"])
    out["late_order"] = [list(jax.tree.leaves(late)[0].shape), list(orders.canonical(["q2", "p2"]))]
    try:
        nx.fix_canonical_order(["q2", "p2"])
        out["late_fix"] = "accepted"
    except Exception as e:  # noqa: BLE001
        out["late_fix"] = _error(e)
    print("phase", 'mesh42 = jax.make_mesh', flush=True)
    mesh42 = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    with jax.set_mesh(mesh42):
        q = nx.jit(lambda: nx.wrap(jnp.arange(16.0).reshape(4, 4), ["p2", "q2"]), resources={"p2": "data"})()
        total = nx.jit(nx.shard_map(lambda v: nx.psum(v, "p2"), resources={"p2": "data"}))(q)
        out["late_shard_map"] = [dict(total.named_shape), fetch(total.unwrap(["q2"]))]
    barrier("bound")
    orders.MAX_ORDERS = 65_536  # later phases make new sets: the job's count is past 64 for good

    print("phase", '# I7: one process', flush=True)
    # I7: one process fails early in a measured plan
    local = jax.sharding.Mesh(np.array(jax.local_devices()), ("data",), axis_types=(AxisType.Auto,))
    x = nx.wrap(jnp.ones((8, 4)), ["batch", "embed"])
    t0 = time.perf_counter()
    try:
        nx.plan_sharding(lambda v: (v * 2).sum("embed"), x, mesh=local, measure=True,
                         candidates=[{}, {"batch": "data"}], max_candidates=0 if pid == 1 else 12)
        out["plan_fail"] = "planned"
    except Exception as e:  # noqa: BLE001
        out["plan_fail"] = _error(e)
    out["plan_fail_s"] = time.perf_counter() - t0
    barrier("plan_fail")

    print("phase", '# W3: process 0', flush=True)
    # W3: process 0 plans one step more, first
    def step_a(v):
        return (v * 3).sum("batch")

    def step_b(v):
        return (v * 2).sum("embed")

    cands = [{}, {"batch": "data"}, {"embed": "data"}]
    if pid == 0:
        out["extra_unmeasured"] = nx.plan_sharding(step_a, x, mesh=local, candidates=cands).best
    unmeasured = nx.plan_sharding(step_b, x, mesh=local, candidates=cands)
    out["b_unmeasured"] = [json.dumps(r.rules) for r in unmeasured.rows]
    t0 = time.perf_counter()
    try:
        if pid == 0:
            nx.plan_sharding(step_a, x, mesh=local, candidates=cands, measure=True)
        out["extra_measured"] = [json.dumps(r.rules) for r in nx.plan_sharding(
            step_b, x, mesh=local, candidates=cands, measure=True).rows]
    except Exception as e:  # noqa: BLE001
        out["extra_measured"] = _error(e)
    out["extra_measured_s"] = time.perf_counter() - t0
    barrier("w3")
    print("phase", 'plan = nx.plan_sharding(step_b', flush=True)
    plan = nx.plan_sharding(step_b, x, mesh=local, candidates=cands, measure=True)
    out["b_measured"] = [json.dumps(r.rules) for r in plan.rows]
    barrier("plans")

    print("phase", '# the fuzz:', flush=True)
    # the fuzz: random first orders after joining, values in random storage orders
    fuzz, saved = [], {}
    ref = np.random.default_rng(seed)  # the same values on both processes
    for i, names in enumerate(fuzz_sets):
        if rng.random() < 0.5:  # a first flatten after joining, in this process's own order
            order = [names[j] for j in rng.permutation(len(names))]
            jax.tree.leaves(nx.wrap(jnp.zeros((2,) * len(order)), order))
        sizes = [int(s) for s in ref.choice([2, 4, 8], size=len(names))]
        sizes[0] = 8  # split over the 8 devices
        base = ref.normal(size=sizes).astype(np.float32)
        storage = [int(j) for j in rng.permutation(len(names))]
        stored = base.transpose(storage)  # this process's storage order of the same value
        stored_names = [names[j] for j in storage]
        value = nx.wrap(jnp.asarray(stored), stored_names)
        over = names[int(ref.integers(len(names)))]
        rec = {"names": list(names), "over": over, "expected": base.sum(axis=names.index(over)).tolist()}
        with jax.set_mesh(mesh8):
            glob, got = _fuzz_values(nx, jnp, fetch, names, base, stored, stored_names, over)
        rec.update(got)
        saved[f"v{i}"] = glob
        if pid == 0:
            with open(os.path.join(out_dir, f"fuzz_{i}.pickle"), "wb") as fh:
                pickle.dump(value, fh)
        fuzz.append(rec)
    barrier("pickles")
    if pid == 1:
        for i, (names, rec) in enumerate(zip(fuzz_sets, fuzz)):
            with open(os.path.join(out_dir, f"fuzz_{i}.pickle"), "rb") as fh:
                got = pickle.load(fh)
            here = nx.wrap(jnp.zeros([got.named_shape[n] for n in reversed(names)]), list(reversed(names)))
            rec["pickle"] = jax.tree.map(lambda a, b: a + b, got, here).unwrap(list(names)).sum(
                axis=list(names).index(rec["over"])).tolist()
    # a checkpoint both processes write, restored by name into targets each lays out in its own order
    import orbax.checkpoint as ocp

    ckptr = ocp.StandardCheckpointer()
    path = os.path.join(out_dir, "fuzz_checkpoint")
    ckptr.save(path, saved)
    ckptr.wait_until_finished()
    barrier("saved")
    with jax.set_mesh(mesh8):
        target = {}
        for i, names in enumerate(fuzz_sets):
            v = saved[f"v{i}"]
            order = [names[j] for j in rng.permutation(len(names))]
            relaid = jax.eval_shape(lambda v=v, order=order: nx.wrap(v.unwrap(order), order))
            target[f"v{i}"] = nx.shard(relaid, {names[0]: "data"})
        restored = nx.restore_checkpoint(ckptr, path, target)
        for i, rec in enumerate(fuzz):
            names = fuzz_sets[i]
            keep = [n for n in names if n != rec["over"]]
            rec["checkpoint"] = fetch(nx.jit(lambda v, over=rec["over"]: nx.sum(v, over))(
                restored[f"v{i}"]).unwrap(keep))
    out["fuzz"] = fuzz
    out["job_keys_end"] = orders.job_keys()
    barrier("done")
    print("phase shutdown", flush=True)
    jax.distributed.shutdown()
    print("phase shut down", flush=True)
    return out


if __name__ == "__main__":
    out_dir = sys.argv[1]
    pid, port, sets, seed = (int(a) for a in sys.argv[2:6])
    try:
        result = main(out_dir, pid, port, sets, seed)
    except BaseException:
        traceback.print_exc()
        raise
    with open(os.path.join(out_dir, f"job_{pid}.json"), "w") as fh:
        json.dump(result, fh)
