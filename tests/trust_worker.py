"""Programs for tests/test_trust.py: values that leave a process, read by another whose orders differ.

``python trust_worker.py MODE OUT_DIR [PROCESS_ID NUM_PROCESSES PORT]``. Every mode first flattens some name
sets in an order of its own (a logging call, a data loader), as the issue's programs did, then does its job
and writes OUT_DIR/<mode>[_<process id>].json:

* ``job``: one process of a 2-process ``jax.distributed`` job (4 CPU devices each, one 4x2 mesh). Process 1
  flattens ``{a, b, c}`` as ``(a, c, b)`` first; both then sum, weight and contract a global array split over
  the processes, and build one from process-local blocks stored in different orders.
* ``save``: saves a parameter tree (orbax, safetensors) and pickles a NamedArray, in a program where
  ``{a, b}`` first flattened as ``(a, b)``.
* ``restore``: a program where ``(b, a)`` flattened first restores and unpickles all of that.
"""

import json
import os
import pickle
import sys

import jax

jax.config.update("jax_platforms", "cpu")


def _first_flattens(orders):
    """What the program happened to flatten first (a logging call, a data loader)."""
    import jax.numpy as jnp

    import namedarray as nx

    for order in orders:
        jax.tree.leaves(nx.wrap(jnp.zeros((2,) * len(order)), list(order)))


def job(out_dir: str, pid: int, nproc: int, port: int) -> dict:
    jax.config.update("jax_num_cpu_devices", 4)
    if pid == 1:  # an order given before the job starts (an abstract value flattened at start-up)
        import namedarray as nx

        jax.tree.leaves(nx.wrap(jax.ShapeDtypeStruct((4, 8), "float32"), ["n", "m"]))
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=nproc, process_id=pid,
                               initialization_timeout=40)
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import AxisType

    import namedarray as nx

    if pid == 1:
        _first_flattens([("a", "c", "b"), ("q", "p")])
    else:
        _first_flattens([("p", "q")])
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    def fetch(a):
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))

    out: dict = {}
    with jax.set_mesh(mesh):
        q = nx.jit(lambda: nx.wrap(jnp.arange(128.0).reshape(8, 4, 4), ["a", "b", "c"]),
                   resources={"a": "data"})()
        out["sum"] = fetch(nx.jit(lambda v: nx.sum(v, "a"))(q).unwrap(["b", "c"])).tolist()
        wts = nx.wrap(jnp.arange(8.0), ["a"])
        out["weighted"] = fetch(nx.jit(lambda v, w: nx.sum(v * w, "a"))(q, wts).unwrap(["b", "c"])).tolist()
        out["einsum"] = fetch(nx.jit(lambda v: nx.einsum("{a,b,c},{a,c}->{b}", v, nx.sum(v, "b")))(q)
                              .unwrap(["b"])).tolist()
        # each process's block built in its own order: the global array still means the same by name
        block = np.arange(32.0).reshape(4, 8) + 100 * pid  # (p: 4 rows of this process, q: 8)
        local = (nx.wrap(jnp.asarray(block), ["p", "q"]) if pid == 0
                 else nx.wrap(jnp.asarray(block.T), ["q", "p"]))
        g = nx.from_process_local(local, {"p": "data"})
        out["from_process_local"] = fetch(nx.jit(lambda v: v * 1.0)(g).unwrap(["p", "q"])).tolist()
        mn = nx.from_process_local(nx.wrap(jnp.asarray(block), ["m", "n"]), {"m": "data"})
        out["before_the_job"] = fetch(nx.jit(lambda v: v + 0.0, resources={"n": "data"})(mn)
                                      .unwrap(["m", "n"])).tolist()
    out["orders"] = {"abc": nx.canonical_order(["a", "b", "c"]), "pq": nx.canonical_order(["p", "q"]),
                     "mn": nx.canonical_order(["m", "n"])}
    multihost_utils.sync_global_devices("done")
    jax.distributed.shutdown()
    return out


def _params():
    import jax.numpy as jnp

    import namedarray as nx

    return {"w": nx.wrap(jnp.arange(4.0).reshape(2, 2), ["a", "b"]),
            "u": nx.wrap(jnp.arange(24.0).reshape(2, 3, 4), ["a", "b", "c"]),
            "bias": nx.wrap(jnp.arange(2.0), ["a"])}


def save(out_dir: str) -> dict:
    import optax
    import orbax.checkpoint as ocp

    import namedarray as nx

    _first_flattens([("a", "b"), ("a", "b", "c")])
    params = _params()
    tree = {"params": params, "opt": optax.adam(1e-3).init(params)}
    ckptr = ocp.StandardCheckpointer()
    ckptr.save(os.path.join(out_dir, "orbax"), tree)
    ckptr.wait_until_finished()
    nx.save_safetensors(params, os.path.join(out_dir, "params.safetensors"))
    x = params["u"]
    jax.tree.leaves(x)  # flattened here: a cached copy in this process's order must not travel
    with open(os.path.join(out_dir, "u.pickle"), "wb") as fh:
        pickle.dump(x, fh)
    return {"orders": [nx.canonical_order(["a", "b"]), nx.canonical_order(["a", "b", "c"])]}


def restore(out_dir: str) -> dict:
    jax.config.update("jax_num_cpu_devices", 8)
    import jax.numpy as jnp
    import optax
    import orbax.checkpoint as ocp
    from jax.sharding import AxisType

    import namedarray as nx

    _first_flattens([("b", "a"), ("c", "b", "a")])
    out: dict = {"orders": [nx.canonical_order(["a", "b"]), nx.canonical_order(["a", "b", "c"])]}
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)

    def init():
        params = _params()
        return {"params": params, "opt": optax.adam(1e-3).init(params)}

    with jax.set_mesh(mesh), nx.axis_rules({"a": "x", "c": "y"}):
        target = nx.shard(jax.eval_shape(init))
        ckptr = ocp.StandardCheckpointer()
        try:
            ckptr.restore(os.path.join(out_dir, "orbax"), target)
            out["plain_restore"] = "restored"
        except ValueError as e:
            out["plain_restore"] = str(e)
        got = nx.restore_checkpoint(ckptr, os.path.join(out_dir, "orbax"), target)
        out["restored"] = {k: v.unwrap(sorted(v.names)).tolist() for k, v in got["params"].items()}
        out["restored_mu"] = got["opt"][0].mu["u"].unwrap(["a", "b", "c"]).tolist()
        out["restored_spec"] = str(got["params"]["u"].sharding.spec)
        out["restored_names"] = list(got["params"]["u"].names)
        # a restored tree meets local values: same structure, right values by name
        local = _params()
        total = jax.tree.map(lambda a, b: a + b, got["params"], local)
        out["sum_with_local"] = total["u"].unwrap(["a", "b", "c"]).tolist()

    loaded = nx.load_safetensors(os.path.join(out_dir, "params.safetensors"))
    out["safetensors"] = {k: v.unwrap(sorted(v.names)).tolist() for k, v in loaded.items()}
    out["safetensors_tree_map"] = jax.tree.map(lambda a, b: a - b, loaded, _params())["u"].unwrap(
        ["a", "b", "c"]).tolist()

    with open(os.path.join(out_dir, "u.pickle"), "rb") as fh:
        u = pickle.load(fh)
    local = nx.wrap(jnp.ones((4, 3, 2)), ["c", "b", "a"])
    out["pickle_names"] = list(u.names)
    out["pickle_tree_map"] = jax.tree.map(lambda a, b: a + b, u, local).unwrap(["a", "b", "c"]).tolist()
    out["pickle_cond"] = jax.lax.cond(True, lambda: u, lambda: local).unwrap(["a", "b", "c"]).tolist()
    out["pickle_cond_jit"] = jax.jit(lambda p, a, b: jax.lax.cond(p, lambda: a, lambda: b))(
        False, local, u).unwrap(["a", "b", "c"]).tolist()
    carry, _ = jax.lax.scan(lambda c, _: (c + u, None), local, None, length=2)
    out["pickle_scan"] = carry.unwrap(["a", "b", "c"]).tolist()
    return out


if __name__ == "__main__":
    mode, out_dir = sys.argv[1], sys.argv[2]
    if mode == "job":
        pid = int(sys.argv[3])
        result = job(out_dir, pid, int(sys.argv[4]), int(sys.argv[5]))
        name = f"job_{pid}.json"
    else:
        result = {"save": save, "restore": restore}[mode](out_dir)
        name = f"{mode}.json"
    with open(os.path.join(out_dir, name), "w") as fh:
        json.dump(result, fh)
