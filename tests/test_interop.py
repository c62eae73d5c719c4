"""Interoperability keeps the names: xarray DataArrays, safetensors files, and orbax checkpoints of sharded
pytrees restored into abstract trees laid out by name."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from meshes import auto_mesh, same_spec

import namedarray as nx
from namedarray import errors

xr = pytest.importorskip("xarray")


def test_xarray_round_trip_keeps_dims_as_names(rng):
    data = rng.normal(size=(3, 4, 5)).astype(np.float32)
    da = xr.DataArray(data, dims=("time", "lat", "lon"), coords={"time": [10, 20, 30]})
    x = nx.from_xarray(da)
    assert x.shape == () and x.named_shape == {"time": 3, "lat": 4, "lon": 5}
    mean = nx.mean(x, "time")  # by name, as xarray's da.mean("time")
    np.testing.assert_allclose(mean.to_xarray().transpose("lat", "lon").values, da.mean("time").values,
                               rtol=1e-6)
    back = x.to_xarray(coords={"time": [10, 20, 30]})
    xr.testing.assert_allclose(back.transpose(*da.dims), da)


def test_to_xarray_asks_for_names_of_positional_axes():
    x = nx.wrap(jnp.zeros((2, 3)), [None, "k"])
    with pytest.raises(errors.PositionalMisuseError,
                       match=r"positional axes \(shape \(2,\)\).*x.tag\('dim_0'\)"):
        x.to_xarray()
    assert x.tag("row").to_xarray().sizes == {"row": 2, "k": 3}


def test_from_xarray_refuses_what_jax_cannot_hold_by_name():
    ds = xr.Dataset({"v": ("t", np.ones(3))})
    with pytest.raises(TypeError, match=r"got a Dataset; .*nx.from_xarray\(ds\[k\]\)"):
        nx.from_xarray(ds)
    assert nx.from_xarray(ds["v"]).named_shape == {"t": 3}
    dates = xr.DataArray(np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[ns]"), dims=("t",))
    with pytest.raises(TypeError, match=r"holds datetime64\[ns\] values"):
        nx.from_xarray(dates)


def test_safetensors_float8_round_trip_and_nested_dicts(tmp_path):
    path = str(tmp_path / "f8.safetensors")
    values = np.array([[0.5, -2.0, 3.0], [0.0, 1.5, -0.25]], np.float32)
    tensors = {"a": nx.wrap(jnp.asarray(values, jnp.float8_e4m3fn), ["b", "c"]),
               "e": nx.wrap(jnp.asarray(values[0], jnp.float8_e5m2), ["c"]), "plain": jnp.ones(2)}
    nx.save_safetensors(tensors, path)
    back = nx.load_safetensors(path)  # safetensors' own numpy reader has no float8
    for k in ("a", "e"):
        assert back[k].dtype == tensors[k].dtype and back[k].names == tensors[k].names
        np.testing.assert_array_equal(np.asarray(back[k].data, np.float32),
                                      np.asarray(tensors[k].data, np.float32))
    with pytest.raises(TypeError, match="flat dict name -> array, but 'p' holds a dict"):
        nx.save_safetensors({"p": {"w": jnp.ones(2)}}, path)


def test_safetensors_round_trip_with_names_in_metadata(tmp_path, rng):
    from safetensors import safe_open

    w = nx.wrap(rng.normal(size=(4, 3)).astype(np.float32), ["mlp", "embed"])
    h = nx.wrap(rng.normal(size=(2, 4, 3)).astype(np.float32), [None, "embed", "heads"])
    path = str(tmp_path / "params.safetensors")
    nx.save_safetensors({"w": w, "h": h, "step": jnp.asarray(7)}, path, metadata={"model": "tiny"})
    back = nx.load_safetensors(path)
    assert back["w"].named_shape == w.named_shape and back["h"].named_shape == h.named_shape
    assert back["h"].shape == (2,) and back["step"].tolist() == 7
    for k, x in (("w", w), ("h", h)):
        order = {i: n for i, n in enumerate(sorted(x.names), start=x.ndim)}
        np.testing.assert_array_equal(np.asarray(back[k].unwrap(order)), np.asarray(x.unwrap(order)))
    with safe_open(path, framework="numpy") as f:
        assert f.metadata()["model"] == "tiny"


def test_orbax_checkpoint_of_a_sharded_pytree_restores_names_and_shardings(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")

    def init(key):
        k1, k2 = jax.random.split(key)
        return {"w": nx.random.normal(k1, named_shape={"embed": 8, "mlp": 16}),
                "b": nx.zeros(named_shape={"mlp": 16}), "step": jnp.asarray(3)}

    mesh = auto_mesh((4, 2), ("data", "model"))
    rules = {"embed": "data", "mlp": "model"}
    path = os.path.join(tmp_path, "ckpt")
    with jax.set_mesh(mesh), nx.axis_rules(rules):
        params = nx.jit(init)(jax.random.key(0))
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(path, params)
        checkpointer.wait_until_finished()
        target = nx.shard(jax.eval_shape(init, jax.random.key(0)))  # abstract, laid out by the rules
        restored = checkpointer.restore(path, target)
        # the same shardings nx.sharding gives the abstract tree (for jit in/out shardings)
        shardings = nx.sharding(jax.eval_shape(init, jax.random.key(0)))
    for k in ("w", "b"):
        assert restored[k].named_shape == params[k].named_shape
        assert restored[k].sharding.is_equivalent_to(shardings[k], restored[k].data.ndim)
        assert same_spec(restored[k].sharding.spec, P_of(restored[k], rules))
        order = {i: n for i, n in enumerate(sorted(params[k].names))}
        np.testing.assert_array_equal(np.asarray(restored[k].unwrap(order)),
                                      np.asarray(params[k].unwrap(order)))
    assert int(restored["step"]) == 3


def P_of(x, rules):
    return jax.sharding.PartitionSpec(*[rules.get(n) for n in x.names])


def test_a_missing_optional_extra_names_the_extra_to_install(monkeypatch):
    import sys

    x = nx.wrap(jnp.zeros((2, 3)), ["a", "b"])
    cases = (("xarray", lambda: x.to_xarray(), "xarray"), ("xarray", lambda: nx.to_xarray(x), "xarray"),
             ("safetensors", lambda: nx.save_safetensors({"x": x}, "unused.safetensors"), "safetensors"),
             ("safetensors", lambda: nx.load_safetensors("unused.safetensors"), "safetensors"))
    for module, call, extra in cases:
        with monkeypatch.context() as m:
            for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
                m.delitem(sys.modules, name)
            m.setitem(sys.modules, module, None)  # import of it now fails as if it were not installed
            with pytest.raises(ModuleNotFoundError, match=rf'pip install "namedarray\[{extra}\]"'):
                call()


@pytest.mark.parametrize("layout, words", [
    ("{not json", "is not valid JSON"),
    ('["w"]', "must map tensor names to their layout, got a list"),
    ('{"w": ["a", "b"]}', "for tensor 'w' must be an object"),
    ('{"w": {"names": "ab", "shape": [2, 3]}}', "the names 'ab', which is not a list of axis names"),
    ('{"w": {"names": [1, 2], "shape": [2, 3]}}', "the names \\[1, 2\\], which is not a list"),
    ('{"w": {"names": ["a", ""], "shape": [2, 3]}}', "which is not a list of axis names"),
    ('{"w": {"names": ["a", "b"], "shape": [3, 3]}}',
     "the shape \\(3, 3\\) \\(9 elements\\), but the tensor holds 6"),
    ('{"w": {"names": ["a", "b"], "shape": "2x3"}}', "the shape '2x3', which is not a list of sizes"),
])
def test_safetensors_with_damaged_names_metadata_is_an_error_not_wrong_names(tmp_path, layout, words):
    import safetensors.numpy as safetensors_numpy

    path = str(tmp_path / "damaged.safetensors")
    safetensors_numpy.save_file({"w": np.ones((2, 3), np.float32)}, path,
                                metadata={"namedarray.names": layout})
    with pytest.raises(errors.AxisSpecError, match=f"^nx.load_safetensors: the file's 'namedarray.names' "
                                                   f"metadata .*{words}"):
        nx.load_safetensors(path)


def test_pickles_written_before_the_modules_moved_still_load(monkeypatch):
    # they name namedarray.array._unpickle and namedarray.shape.NamedShape; a fresh process loads them
    import pickle
    import subprocess
    import sys

    from namedarray.core import array, shape

    x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["a", "b"])
    monkeypatch.setattr(array._unpickle, "__module__", "namedarray.array")
    monkeypatch.setattr(shape.NamedShape, "__module__", "namedarray.shape")
    data = pickle.dumps((x, x.named_shape))
    monkeypatch.undo()
    assert b"namedarray.array" in data and b"namedarray.shape" in data
    code = ("import pickle, sys; x, s = pickle.loads(sys.stdin.buffer.read()); "
            "print(x.named_shape == {'a': 2, 'b': 3}, x.unwrap(['a', 'b']).tolist(), dict(s))")
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode().strip() == "True [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] {'a': 2, 'b': 3}"


def test_restore_checkpoint_without_a_target_says_what_the_target_is(tmp_path):
    import orbax.checkpoint as ocp

    path = str(tmp_path / "ckpt")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path, {"w": nx.wrap(jnp.ones((2, 3)), ["a", "b"])})
    checkpointer.wait_until_finished()
    with pytest.raises(TypeError, match=r"^nx.restore_checkpoint: target is the tree to restore into"):
        nx.restore_checkpoint(checkpointer, path, None)
