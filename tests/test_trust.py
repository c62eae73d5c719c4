"""Values that leave the process mean the same wherever they are read (README, "Speed";
namedarray.core.orders).

A name set's boundary order is the order it first flattened in, in this job: processes of one job agree on
it through the coordination service, and checkpoints, pickles and safetensors files carry their orders. Each
test runs the reading side in a process whose orders differ from the writing side's: a 2-process job where
one process flattened the names in another order first, and a program that restores what another saved.
Processes are started with a time limit and ended by their PIDs.
"""

import json
import os
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from conftest import fresh_canonical_orders

import namedarray as nx
from namedarray.core import orders
from namedarray.errors import AxisSpecError

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "trust_worker.py")
LIMIT_S = 300  # a guard against a hang, not a timing: a busy 2-core machine can take minutes
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import multihost  # noqa: E402  (its launcher: start processes, time limit, end them by PID)


def _run(commands, out_dir, names):
    try:
        multihost.run_processes(commands, LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the processes did not finish within {LIMIT_S} s")
    out = []
    for name in names:
        with open(os.path.join(out_dir, name)) as fh:
            out.append(json.load(fh))
    return out


def test_a_job_agrees_on_orders_whatever_each_process_flattened_first(tmp_path):
    port = multihost.free_port()
    results = _run([[sys.executable, WORKER, "job", str(tmp_path), str(i), "2", str(port)] for i in range(2)],
                   tmp_path, ["job_0.json", "job_1.json"])
    q = np.arange(128.0).reshape(8, 4, 4)  # (a, b, c)
    blocks = [np.arange(32.0).reshape(4, 8) + 100 * pid for pid in range(2)]
    for pid, got in enumerate(results):
        assert got["orders"] == results[0]["orders"], pid  # one order per set in the whole job
        np.testing.assert_allclose(got["sum"], q.sum(0))
        np.testing.assert_allclose(got["weighted"], np.einsum("abc,a->bc", q, np.arange(8.0)))
        np.testing.assert_allclose(got["einsum"], np.einsum("abc,ac->b", q, q.sum(1)))
        np.testing.assert_allclose(got["from_process_local"], np.concatenate(blocks))
        np.testing.assert_allclose(got["before_the_job"], np.concatenate(blocks))  # an order given pre-job


@pytest.fixture(scope="module")
def restored(tmp_path_factory):
    """A program saves (orbax, safetensors, pickle) where {a, b} flattened as (a, b); another program, where
    (b, a) flattened first, restores it."""
    out = tmp_path_factory.mktemp("trust")
    saved, got = [], []
    for mode in ("save", "restore"):
        [r] = _run([[sys.executable, WORKER, mode, str(out)]], out, [f"{mode}.json"])
        (saved if mode == "save" else got).append(r)
    return saved[0], got[0]


def test_the_two_programs_differ_in_their_orders(restored):
    saved, got = restored
    assert saved["orders"] == [["a", "b"], ["a", "b", "c"]]
    assert got["orders"] == [["b", "a"], ["c", "b", "a"]]


def test_orbax_refuses_a_target_in_other_orders_instead_of_transposing(restored):
    _, got = restored
    message = got["plain_restore"]
    assert message != "restored"
    assert "data[a,b]" in message and "data[b,a]" in message  # the names and both orders


def test_restore_checkpoint_restores_by_name_across_programs(restored):
    _, got = restored
    np.testing.assert_array_equal(got["restored"]["w"], np.arange(4.0).reshape(2, 2))
    np.testing.assert_array_equal(got["restored"]["u"], np.arange(24.0).reshape(2, 3, 4))
    np.testing.assert_array_equal(got["restored"]["bias"], np.arange(2.0))
    np.testing.assert_array_equal(got["restored_mu"], np.zeros((2, 3, 4)))
    # laid out by the restoring program's rules ({a: x, c: y}), in the order the checkpoint holds
    assert got["restored_names"] == ["a", "b", "c"] and got["restored_spec"] == "P('x', None, 'y')"
    np.testing.assert_array_equal(got["sum_with_local"], 2 * np.arange(24.0).reshape(2, 3, 4))


def test_safetensors_restore_by_name_across_programs(restored):
    _, got = restored
    np.testing.assert_array_equal(got["safetensors"]["w"], np.arange(4.0).reshape(2, 2))
    np.testing.assert_array_equal(got["safetensors"]["u"], np.arange(24.0).reshape(2, 3, 4))
    np.testing.assert_array_equal(got["safetensors_tree_map"], np.zeros((2, 3, 4)))


def test_a_pickle_means_the_same_in_a_process_with_other_orders(restored):
    _, got = restored
    u = np.arange(24.0).reshape(2, 3, 4)
    assert got["pickle_names"] == ["a", "b", "c"]
    np.testing.assert_array_equal(got["pickle_tree_map"], u + 1)
    np.testing.assert_array_equal(got["pickle_cond"], u)
    np.testing.assert_array_equal(got["pickle_cond_jit"], u)
    np.testing.assert_array_equal(got["pickle_scan"], 1 + 2 * u)


# --------------------------------------------------------------------------------------------------------
# In this process


def test_a_pickle_holds_the_data_once():
    x = nx.wrap(jnp.zeros((512, 512)), ["b", "a"])
    with fresh_canonical_orders():
        nx.fix_canonical_order(["a", "b"])
        jax.tree.leaves(x)  # keeps a transposed copy for later flattens; a pickle must not carry it
        size = len(pickle.dumps(x))
    assert size <= 1.05 * x.data.nbytes
    y = pickle.loads(pickle.dumps(x))
    assert y.names == ("b", "a") and bool((y == x).all(("a", "b")))


def test_key_paths_name_the_order():
    x = nx.wrap(jnp.zeros((2, 3)), ["a", "b"])
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(
        {"w": x, "b": nx.wrap(jnp.zeros(2), ["a"]), "s": nx.wrap(jnp.zeros(()))})[0]]
    assert paths == ["['b'].data[a]", "['s'].data", "['w'].data[a,b]"]
    odd = ("x,y", "z]", "w\\v")
    assert orders.parse_order_key(orders.order_key(odd)) == odd


def _save(path, tree):
    ckptr = ocp.StandardCheckpointer()
    ckptr.save(path, tree)
    ckptr.wait_until_finished()
    return ckptr


def test_orbax_restores_into_its_own_orders_and_refuses_others(tmp_path):
    w = nx.wrap(jnp.arange(4.0).reshape(2, 2), ["a", "b"])
    tree = {"w": w, "opt": optax.adam(1e-3).init({"w": w})}
    with fresh_canonical_orders():
        ckptr = _save(str(tmp_path / "c"), tree)
        back = ckptr.restore(str(tmp_path / "c"), jax.eval_shape(lambda: tree))
        np.testing.assert_array_equal(back["w"].unwrap(["a", "b"]), np.arange(4.0).reshape(2, 2))
    with fresh_canonical_orders():  # another program: (b, a) first
        nx.fix_canonical_order(["b", "a"])
        with pytest.raises(ValueError, match=r"data\[b,a\]"):
            ckptr.restore(str(tmp_path / "c"), jax.eval_shape(lambda: tree))
        back = nx.restore_checkpoint(ckptr, str(tmp_path / "c"), jax.eval_shape(lambda: tree))
        np.testing.assert_array_equal(back["w"].unwrap(["a", "b"]), np.arange(4.0).reshape(2, 2))
        assert jax.tree.structure(back) == jax.tree.structure(tree)


def test_restore_checkpoint_names_a_renamed_axis(tmp_path):
    ckptr = _save(str(tmp_path / "c"), {"w": nx.wrap(jnp.zeros((2, 2)), ["a", "b"])})
    with pytest.raises(AxisSpecError, match=r"\['w'\].*\['a', 'b'\].*\['a', 'c'\]"):
        nx.restore_checkpoint(ckptr, str(tmp_path / "c"), {"w": nx.wrap(jnp.zeros((2, 2)), ["a", "c"])})


def test_restore_checkpoint_restores_part_of_a_checkpoint_by_name(tmp_path):
    # orbax's StandardCheckpointer.restore has no partial_restore; nx.restore_checkpoint takes it for any
    # orbax checkpointer, and restores the target's leaves only, by name, in the target's shardings
    from meshes import auto_mesh

    w = nx.wrap(jnp.arange(8.0).reshape(4, 2), ["embed", "mlp"])
    tree = {"w": w, "b": nx.wrap(jnp.arange(2.0), ["mlp"]), "step": jnp.asarray(3),
            "opt": optax.adam(1e-3).init({"w": w})}
    ckptr = _save(str(tmp_path / "c"), tree)
    mesh = auto_mesh((4, 2), ("data", "model"))
    with fresh_canonical_orders(), jax.set_mesh(mesh), nx.axis_rules({"embed": "data", "mlp": "model"}):
        nx.fix_canonical_order(["mlp", "embed"])  # another program's order
        target = nx.shard({"w": jax.eval_shape(lambda: nx.wrap(jnp.zeros((2, 4)), ["mlp", "embed"])),
                           "step": jax.ShapeDtypeStruct((), jnp.int32)})
        got = nx.restore_checkpoint(ckptr, str(tmp_path / "c"), target, partial_restore=True)
        assert sorted(got) == ["step", "w"] and int(got["step"]) == 3
        np.testing.assert_array_equal(got["w"].unwrap(["embed", "mlp"]), np.arange(8.0).reshape(4, 2))
        # in the checkpoint's order, laid out by name as the target is
        assert dict(zip(got["w"].names, got["w"].sharding.spec)) == {"embed": "data", "mlp": "model"}
        # without it, orbax's refusal of a part (it says to pass partial_restore=True, which now works)
        with pytest.raises(ValueError, match="partial_restore=True"):
            nx.restore_checkpoint(ckptr, str(tmp_path / "c"), target)
        # a path the checkpoint lacks is an error naming it, never the target's abstract value handed back
        for missing in ({"w2": target["w"]}, {"steps": target["step"]}):
            with pytest.raises(ValueError, match=rf"^nx.restore_checkpoint: the checkpoint holds nothing at "
                                                 rf"\['{list(missing)[0]}'\].*at its top level it holds "
                                                 r"'b', 'opt', 'step', 'w'$"):
                nx.restore_checkpoint(ckptr, str(tmp_path / "c"), missing, partial_restore=True)
    # plain values in, plain values restored; a target without shardings restores as orbax would
    part = nx.restore_checkpoint(ckptr, str(tmp_path / "c"),
                                 {"b": nx.wrap(jnp.zeros(2), ["mlp"]), "opt": (
                                     optax.ScaleByAdamState(jnp.zeros((), jnp.int32), {"w": w}, {"w": w}),
                                     optax.EmptyState())}, partial_restore=True)
    np.testing.assert_array_equal(part["b"].unwrap(["mlp"]), np.arange(2.0))
    np.testing.assert_array_equal(part["opt"][0].mu["w"].unwrap(["embed", "mlp"]), np.zeros((4, 2)))
    assert isinstance(part["opt"][0], optax.ScaleByAdamState)


def test_restore_checkpoint_partial_restore_with_other_checkpointers(tmp_path):
    w = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
    _save(str(tmp_path / "c"), {"w": w, "v": jnp.ones(4)})
    target = {"w": nx.wrap(jnp.zeros((3, 2)), ["b", "a"])}
    got = nx.restore_checkpoint(ocp.PyTreeCheckpointer(), str(tmp_path / "c"), target, partial_restore=True)
    np.testing.assert_array_equal(got["w"].unwrap(["a", "b"]), np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match=r"^nx.restore_checkpoint: with partial_restore=True .* takes "
                                        r"strict, not save_args"):
        nx.restore_checkpoint(ocp.StandardCheckpointer(), str(tmp_path / "c"), target, partial_restore=True,
                              save_args=None)

    class Reader:  # not orbax's: it gets partial_restore=True itself, its own spelling
        def metadata(self, path):
            return ocp.StandardCheckpointer().metadata(path)

        def restore(self, path, target, **kwargs):
            self.kwargs = kwargs
            args = ocp.checkpoint_utils.construct_restore_args(target)
            return ocp.PyTreeCheckpointer().restore(path, args=ocp.args.PyTreeRestore(
                item=target, restore_args=args, **kwargs))

    reader = Reader()
    got = nx.restore_checkpoint(reader, str(tmp_path / "c"), target, partial_restore=True)
    assert reader.kwargs == {"partial_restore": True}
    np.testing.assert_array_equal(got["w"].unwrap(["a", "b"]), np.arange(6.0).reshape(2, 3))


def test_restore_checkpoint_reads_a_checkpoint_without_orders_by_its_sizes(tmp_path):
    # saved before key paths named orders: each NamedArray's leaf is 'data', its order not written down; the
    # sizes tell the axes apart when the target's names all have different sizes
    u = np.arange(24.0).reshape(3, 4, 2)  # (positional, b, a)
    ckptr = _save(str(tmp_path / "c"), {"w": {"data": jnp.arange(6.0).reshape(3, 2)},  # (c, a)
                                        "u": {"data": jnp.asarray(u)}, "v": {"data": jnp.arange(2.0)}})
    mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh), nx.axis_rules({"a": "x", "b": "y"}):
        target = nx.shard({"w": nx.wrap(jnp.zeros((2, 3)), ["a", "c"]), "v": nx.wrap(jnp.zeros(2), ["a"]),
                           "u": nx.wrap(jnp.zeros((3, 2, 4)), [None, "a", "b"])})
        got = nx.restore_checkpoint(ckptr, str(tmp_path / "c"), target)
    np.testing.assert_array_equal(got["w"].unwrap(["c", "a"]), np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(got["u"].unwrap([None, "b", "a"]), u)
    np.testing.assert_array_equal(got["v"].unwrap(["a"]), np.arange(2.0))
    assert dict(zip(got["u"].names, got["u"].sharding.spec[1:])) == {"a": "x", "b": "y"}


def test_restore_checkpoint_without_orders_refuses_a_guess_and_its_advice_works(tmp_path):
    square = np.arange(4.0).reshape(2, 2)  # stored (b, a) by the program that saved it
    ckptr = _save(str(tmp_path / "c"), {"w": {"data": jnp.asarray(square)}, "v": {"data": jnp.arange(3.0)}})
    target = {"w": nx.wrap(jnp.zeros((2, 2)), ["a", "b"]), "v": nx.wrap(jnp.zeros(3), ["a"])}
    with pytest.raises(AxisSpecError) as e:
        nx.restore_checkpoint(ckptr, str(tmp_path / "c"), target)
    message = str(e.value)
    assert message.startswith("nx.restore_checkpoint: the checkpoint holds ['w'] under the key 'data'")
    assert "the names 'a', 'b' share a size ({'a': 2, 'b': 2})" in message
    advice = ("put {'data': jax.ShapeDtypeStruct((2, 2), jnp.float32)} at ['w'] in the target, then "
              "nx.wrap(restored['w']['data'], ['a', 'b']) if it stored them ('a', 'b')")
    assert message.endswith(advice)
    # the advice, followed as it reads (with the order the saving program used)
    restored = nx.restore_checkpoint(ckptr, str(tmp_path / "c"), {
        "v": target["v"], "w": {"data": jax.ShapeDtypeStruct((2, 2), jnp.float32)}})
    w = nx.wrap(restored["w"]["data"], ["b", "a"])
    np.testing.assert_array_equal(w.unwrap(["b", "a"]), square)
    np.testing.assert_array_equal(restored["v"].unwrap(["a"]), np.arange(3.0))  # one name: nothing to misread
    # sizes that no order of the target's gives: the sizes, not a shape error from deep inside the reader
    with pytest.raises(nx.errors.AxisSizeError, match=r"\['w'\] under the key 'data'.*the shape \(2, 2\), "
                                                      r"which no order of the target's named shape "
                                                      r"\{'a': 2, 'b': 3\}"):
        nx.restore_checkpoint(ckptr, str(tmp_path / "c"), {"w": nx.wrap(jnp.zeros((2, 3)), ["a", "b"])})


def test_the_order_table_is_bounded_and_never_changes_an_order(monkeypatch):
    with fresh_canonical_orders():
        monkeypatch.setattr(orders, "MAX_ORDERS", 2)
        jax.tree.leaves([nx.wrap(jnp.zeros((2, 2)), ["b1", "a1"]), nx.wrap(jnp.zeros((2, 2)), ["b2", "a2"])])
        assert orders.size() == 2
        late = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["b3", "a3"])
        [leaf] = jax.tree.leaves(late)  # past the bound: sorted, the same every time, nothing recorded
        assert leaf.shape == (3, 2) and orders.size() == 2 and nx.canonical_order(["a3", "b3"]) is None
        assert jax.tree.structure(late) == jax.tree.structure(nx.wrap(jnp.zeros((3, 2)), ["a3", "b3"]))
        assert nx.canonical_order(["a1", "b1"]) == ("b1", "a1")


def test_storage_assigned_after_a_flatten_is_what_flattens_next():
    x = nx.wrap(jnp.arange(6.0).reshape(3, 2), ["b", "a"])
    with fresh_canonical_orders():
        nx.fix_canonical_order(["a", "b"])
        jax.tree.leaves(x)  # keeps a transposed copy of this storage
        x.data = x.data * 0
        assert float(jax.jit(lambda v: v.unwrap(["a", "b"]).sum())(x)) == 0.0


def test_a_fixed_order_is_kept_past_the_bound(monkeypatch):
    with fresh_canonical_orders():
        monkeypatch.setattr(orders, "MAX_ORDERS", 0)
        nx.fix_canonical_order(["fb", "fa"])
        assert nx.canonical_order(["fa", "fb"]) == ("fb", "fa")
        with pytest.raises(AxisSpecError, match=r"\('fb', 'fa'\), not \('fa', 'fb'\)"):
            nx.fix_canonical_order(["fa", "fb"])
        [leaf] = jax.tree.leaves(nx.wrap(jnp.zeros((2, 3)), ["fa", "fb"]))
        assert leaf.shape == (3, 2)


def test_reset_canonical_orders_starts_afresh_and_values_keep_their_meaning():
    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
    with fresh_canonical_orders():
        [first] = jax.tree.leaves(x)
        nx.reset_canonical_orders()
        nx.fix_canonical_order(["b", "a"])
        [again] = jax.tree.leaves(x)  # the copy kept from the first flatten is not reused
        np.testing.assert_array_equal(np.asarray(again), np.asarray(first).T)
        assert orders.size() == 1
