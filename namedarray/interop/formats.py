"""Interoperability: xarray DataArrays and safetensors files, keeping the axis names.

* ``nx.from_xarray(da)`` / ``x.to_xarray()``: a DataArray's dims are a NamedArray's names (the ``[xarray]``
  extra). Coordinates and attributes are xarray's, not nx's: ``to_xarray(coords=...)`` puts them back.
* ``nx.save_safetensors(tensors, path)`` / ``nx.load_safetensors(path)``: a flat dict of NamedArrays (and
  plain arrays) in a safetensors file, each tensor's names in the file's metadata (the ``[safetensors]``
  extra), so a file read back has the same names, whatever order they were stored in.
* Orbax checkpoints: a pytree of NamedArrays saves as it is. Each leaf's key path names its order
  (``w.data[embed,mlp]``), so the checkpoint says what every leaf means. ``checkpointer.restore(path,
  target)`` restores into a target laid out in the same orders, e.g. ``nx.shard(jax.eval_shape(init, key))``
  in the program that saved it, and refuses (orbax's "Structure mismatch" naming both paths) a target whose
  orders differ, never transposing a leaf. ``nx.restore_checkpoint(checkpointer, path, target)`` restores
  by name whatever the orders of either side (see README, "Checkpoints and interop").

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.zeros((2, 3)), ["batch", "embed"])
>>> nx.from_xarray(x.to_xarray()).named_shape
{'batch': 2, 'embed': 3}
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core.array import NamedArray, _make, is_named
from ..core.orders import canonical, order_key, parse_order_key, sync_with_job
from ..core.shape import check_names
from ..errors import AxisSizeError, AxisSpecError, PositionalMisuseError, fmt_names, wrong_type

__all__ = ["from_xarray", "to_xarray", "save_safetensors", "load_safetensors", "restore_checkpoint"]

_METADATA_KEY = "namedarray.names"


def optional(module: str, extra: str, where: str) -> Any:
    """Import ``module`` of an optional extra; missing, a ``ModuleNotFoundError`` that says which extra
    installs it.

    >>> optional("json", "none", "nx.example").__name__
    'json'
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name is None or e.name.split(".")[0] != top:  # a module it imports is missing: its own error
            raise
        raise ModuleNotFoundError(f'{where} needs {top}, which the "{extra}" extra installs: '
                                  f'pip install "namedarray[{extra}]"', name=e.name) from None


# --------------------------------------------------------------------------------------------------------
# xarray


def from_xarray(da: Any) -> NamedArray:
    """A NamedArray from an ``xarray.DataArray``: every dim becomes a named axis (coordinates are dropped).

    >>> import xarray as xr, numpy as np, namedarray as nx
    >>> nx.from_xarray(xr.DataArray(np.ones((2, 3)), dims=("time", "station"))).named_shape
    {'station': 3, 'time': 2}
    """
    dims = getattr(da, "dims", None)
    if hasattr(da, "data_vars"):
        raise TypeError("nx.from_xarray: expected an xarray.DataArray, got a Dataset; convert its variables "
                        "one by one: {k: nx.from_xarray(ds[k]) for k in ds.data_vars}")
    if dims is None or not hasattr(da, "values") or callable(da.values):
        raise TypeError(f"nx.from_xarray: expected an xarray.DataArray, got {type(da).__name__}")
    names = tuple(str(d) for d in dims)
    check_names(names, "nx.from_xarray")
    values = np.asarray(da.values)
    if values.dtype.kind in "mMOSU":  # datetimes, objects, strings: no JAX dtype holds them
        raise TypeError(f"nx.from_xarray: the DataArray holds {values.dtype} values, which JAX arrays cannot "
                        f"hold; convert them to numbers first (e.g. da.astype('int64') for datetimes)")
    return _make(jnp.asarray(values), names)


def to_xarray(x: NamedArray, coords: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
    """An ``xarray.DataArray`` whose dims are ``x``'s names, in storage order (``coords`` and the other
    keyword arguments go to ``xarray.DataArray``); ``nx.to_xarray(x)`` and ``x.to_xarray()`` are one
    function. Positional axes have no dim name: name them first (``x.tag(...)``). Needs the ``[xarray]``
    extra; without it the error says what to install.

    >>> import namedarray as nx, jax.numpy as jnp
    >>> nx.wrap(jnp.zeros((2, 3)), ["batch", "embed"]).to_xarray().dims
    ('batch', 'embed')
    >>> nx.to_xarray(nx.wrap(jnp.zeros(2), ["batch"])).dims
    ('batch',)
    """
    xarray = optional("xarray", "xarray", "nx.to_xarray")

    if not is_named(x):
        raise TypeError(f"to_xarray: expected a NamedArray, got {type(x).__name__}")
    if x.ndim:
        raise PositionalMisuseError(
            f"to_xarray: the value has positional axes (shape {x.shape}) besides its named axes "
            f"{fmt_names(x.names) or '(none)'}, and xarray names every dim: name them first, e.g. "
            f"x.tag({', '.join(repr(f'dim_{i}') for i in range(x.ndim))})")
    if coords is not None and not isinstance(coords, Mapping):
        # xarray also reads a sequence of coordinates in dim order, but dims here are in storage order,
        # which the caller does not choose: by name only
        raise TypeError(f"to_xarray: coords must be a mapping {{name: values}} (by name, since the dims are "
                        f"in storage order {fmt_names(x.names)}), got {type(coords).__name__}")
    return xarray.DataArray(np.asarray(x.data), dims=x.names, coords=coords, **kwargs)


# --------------------------------------------------------------------------------------------------------
# safetensors


def save_safetensors(tensors: Mapping[str, Any], path: str,
                     metadata: Mapping[str, str] | None = None) -> None:
    """Write a flat dict of NamedArrays (and plain arrays) to a safetensors file, with their names.

    Each NamedArray is stored as its storage array; its names (in storage order, positional axes first
    unnamed) go to the file's metadata under ``"namedarray.names"``, next to your own ``metadata``.

    >>> import namedarray as nx, jax.numpy as jnp, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> nx.save_safetensors({"w": nx.wrap(jnp.ones((2, 3)), ["embed", "mlp"])}, path)
    >>> nx.load_safetensors(path)["w"].named_shape
    {'embed': 2, 'mlp': 3}
    """
    save_file = optional("safetensors.numpy", "safetensors", "nx.save_safetensors").save_file

    if not isinstance(tensors, Mapping):
        raise TypeError(f"nx.save_safetensors: tensors must be a dict name -> array, got "
                        f"{type(tensors).__name__}")
    _path(path, "nx.save_safetensors")
    arrays: dict[str, np.ndarray] = {}
    layout: dict[str, dict] = {}  # per tensor: its names and its shape (safetensors stores a scalar as (1,))
    for key, v in tensors.items():
        if not isinstance(key, str):
            raise TypeError(f"nx.save_safetensors: tensor names must be strings, got {key!r}")
        if isinstance(v, (Mapping, list, tuple)):
            raise TypeError(f"nx.save_safetensors: tensors must be a flat dict name -> array, but {key!r} "
                            f"holds a {type(v).__name__}; flatten it first (e.g. keys joined with '/')")
        data = np.asarray(v.data if is_named(v) else v)
        arrays[key] = np.ascontiguousarray(data)
        layout[key] = {"names": list(v.names) if is_named(v) else None, "shape": list(data.shape)}
    meta = dict(metadata or {})
    if _METADATA_KEY in meta:
        raise AxisSpecError(f"nx.save_safetensors: the metadata key {_METADATA_KEY!r} is nx's own")
    meta[_METADATA_KEY] = json.dumps(layout)
    save_file(arrays, path, metadata=meta)


def _path(path: Any, where: str) -> Any:
    """``path`` if it is a file path (a ``str`` or ``os.PathLike``); else a TypeError naming it."""
    if not isinstance(path, (str, os.PathLike)):
        raise wrong_type(where, "path", path, "a file path (a str or os.PathLike)")
    return path


def load_safetensors(path: str) -> dict[str, Any]:
    """Read a safetensors file written by :func:`save_safetensors`: NamedArrays with their names again
    (tensors stored without names come back as jax arrays).

    >>> import namedarray as nx, jax.numpy as jnp, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "b.safetensors")
    >>> nx.save_safetensors({"b": jnp.arange(3)}, path)
    >>> nx.load_safetensors(path)["b"].tolist()
    [0, 1, 2]
    """
    safe_open = optional("safetensors", "safetensors", "nx.load_safetensors").safe_open

    out: dict[str, Any] = {}
    with safe_open(_path(path, "nx.load_safetensors"), framework="numpy") as f:
        layout = _read_layout(f.metadata() or {})
        for key in f.keys():  # noqa: SIM118  (safe_open is not a mapping)
            try:
                data = f.get_tensor(key)
            except AttributeError:  # a dtype numpy lacks (float8): safetensors' reader asks numpy for it
                data = _raw_tensor(path, key)
            shape, own = _layout_entry(key, layout.get(key), data.size)
            if shape is not None:
                data = data.reshape(shape)
            data = jnp.asarray(data)
            if own is not None:
                if len(own) > data.ndim:
                    raise AxisSpecError(f"nx.load_safetensors: tensor {key!r} has shape {data.shape} but the "
                                        f"file names {len(own)} axes {fmt_names(own)}")
                out[key] = _make(data, check_names(own, "nx.load_safetensors"))
            else:
                out[key] = data
    return out


_CORRUPT = f"nx.load_safetensors: the file's {_METADATA_KEY!r} metadata"


def _read_layout(meta: Mapping[str, str]) -> dict:
    """The names and shapes :func:`save_safetensors` wrote, checked: a file whose metadata was damaged or
    written by something else is an error that says so, never names read wrongly."""
    text = meta.get(_METADATA_KEY)
    if text is None:
        return {}
    try:
        layout = json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise AxisSpecError(f"{_CORRUPT} is not valid JSON ({e}); the file was damaged or not written by "
                            "nx.save_safetensors") from None
    if not isinstance(layout, dict):
        raise AxisSpecError(f"{_CORRUPT} must map tensor names to their layout, got a "
                            f"{type(layout).__name__}")
    return layout


def _layout_entry(key: str, info: Any, size: int) -> tuple[tuple[int, ...] | None, tuple[str, ...] | None]:
    """(shape, names) of tensor ``key`` from the file's layout, each None where the file gives none."""
    if info is None:
        return None, None
    if not isinstance(info, dict):
        raise AxisSpecError(f"{_CORRUPT} for tensor {key!r} must be an object with 'names' and 'shape', got "
                            f"{info!r}")
    shape = info.get("shape")
    if shape is not None:
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise AxisSpecError(f"{_CORRUPT} gives tensor {key!r} the shape {shape!r}, which is not a "
                                "list of sizes")
        if math.prod(shape) != size:
            raise AxisSpecError(f"{_CORRUPT} gives tensor {key!r} the shape {tuple(shape)} "
                                f"({math.prod(shape)} elements), but the tensor holds {size}")
        shape = tuple(shape)
    names = info.get("names")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise AxisSpecError(f"{_CORRUPT} gives tensor {key!r} the names {names!r}, which is not a "
                                "list of axis names")
        names = tuple(names)
    return shape, names


def _raw_tensor(path: str, key: str) -> np.ndarray:
    """Tensor ``key`` read from the file's own layout (an 8-byte header size, a JSON header, the bytes), for
    the float8 dtypes that JAX has (through ml_dtypes) and safetensors' numpy reader does not."""
    import ml_dtypes

    dtypes = {"F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2}
    with open(path, "rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        info = json.loads(fh.read(size))[key]
        if info["dtype"] not in dtypes:
            raise TypeError(f"nx.load_safetensors: tensor {key!r} has dtype {info['dtype']}, which this "
                            "reader does not know")
        start, end = info["data_offsets"]
        fh.seek(8 + size + start)
        raw = fh.read(end - start)
    return np.frombuffer(raw, dtype=dtypes[info["dtype"]]).reshape(info["shape"])


# --------------------------------------------------------------------------------------------------------
# Orbax: restoring by name


def restore_checkpoint(checkpointer: Any, path: Any, target: Any, *, partial_restore: bool = False,
                       **restore_kwargs: Any) -> Any:
    """Restore a checkpoint into ``target``'s structure, names and shardings, matching axes by name.

    ``checkpointer`` is an orbax ``StandardCheckpointer`` (anything with ``metadata(path)`` and
    ``restore(path, target)``); ``target`` the abstract tree to restore into, e.g.
    ``nx.shard(jax.eval_shape(init, key))``.
    Each NamedArray is read in the order the checkpoint recorded for it (its key path, ``data[a,b]``) and
    comes back with its names, so a program whose boundary orders differ from the saving program's gets the
    right values, where ``checkpointer.restore(path, target)`` refuses the mismatched paths. Saved names that
    differ from the target's (a renamed axis) are an :class:`~namedarray.errors.AxisSpecError` naming both.
    A leaf saved under the key ``data`` (before key paths named orders) is restored by its sizes when they
    tell its axes apart, and is an error saying how to read it otherwise.

    ``partial_restore=True`` restores only the leaves ``target`` has, a part of the saved tree (the
    parameters without the optimiser state), as orbax's ``partial_restore`` does; with an orbax
    checkpointer, nx reads them through orbax's ``PyTreeCheckpointer`` (``StandardCheckpointer.restore``
    has no such option), so ``restore_kwargs`` may only be ``strict``. A path of ``target`` the checkpoint
    lacks is an error naming it. Other ``restore_kwargs`` go to ``checkpointer.restore`` (e.g. orbax's
    ``strict=False``).

    >>> import namedarray as nx, jax.numpy as jnp, orbax.checkpoint as ocp, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> ckptr = ocp.StandardCheckpointer()
    >>> ckptr.save(path, {"w": nx.wrap(jnp.arange(6.0).reshape(2, 3), ["embed", "mlp"]), "step": 7})
    >>> ckptr.wait_until_finished()
    >>> target = {"w": nx.wrap(jnp.zeros((3, 2)), ["mlp", "embed"]), "step": 0}
    >>> nx.restore_checkpoint(ckptr, path, target)["w"].unwrap(["embed", "mlp"]).tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    >>> part = nx.restore_checkpoint(ckptr, path, {"w": target["w"]}, partial_restore=True)
    >>> list(part), part["w"].unwrap(["embed", "mlp"]).tolist()
    (['w'], [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    """
    where = "nx.restore_checkpoint"
    if not all(callable(getattr(checkpointer, m, None)) for m in ("metadata", "restore")):
        raise wrong_type(where, "checkpointer", checkpointer,
                         "a checkpointer with metadata(path) and restore(path, target), such as orbax's "
                         "StandardCheckpointer")
    if target is None:
        raise TypeError(f"{where}: target is the tree to restore into, with its names, shapes and "
                        "shardings (e.g. nx.jit(init).eval_shape(key), or the values being replaced), got "
                        "None")
    sync_with_job()
    meta = checkpointer.metadata(path)
    meta = getattr(meta, "item_metadata", meta)
    meta = getattr(meta, "tree", meta)
    saved: dict[tuple[str, ...], dict[str, Any]] = {}  # a node's path -> {its child keys: metadata}
    for p, m in jax.tree_util.tree_flatten_with_path(meta)[0]:
        keys = _path_strings(p)
        saved.setdefault(keys[:-1], {})[keys[-1]] = m

    leaves, tree = jax.tree_util.tree_flatten_with_path(target, is_leaf=is_named)
    request: list[Any] = []
    plans: list[tuple[str, tuple[str, ...]] | None] = []  # per leaf: its key in the checkpoint, its order
    for p, v in leaves:
        at = _path_strings(p)
        label = jax.tree_util.keystr(p) or "the target"
        if partial_restore and not _holds(saved, at):
            # orbax's partial restore hands the target's own (abstract) value back for a path it lacks
            raise ValueError(f"{where}: the checkpoint holds nothing at {label}, which the target asks for "
                             "(partial_restore=True restores the target's leaves, each from the checkpoint); "
                             f"{_nearest(saved, at, p)}")
        if not is_named(v):
            request.append(v)
            plans.append(None)
            continue
        found: dict[tuple[str, ...], str] = {}  # the orders the checkpoint holds here, and their keys
        for k in saved.get(at, {}):
            held_order = parse_order_key(k)
            if held_order is not None:
                found[held_order] = k
        names = v.names
        key = next((k for held_order, k in found.items() if set(held_order) == set(names)), None)
        if key is None and names and found == {(): "data"}:
            key = "data"  # saved before key paths named orders (or without names): see below
        if key is None:
            if not found:  # not in the checkpoint at all: orbax's own message says which paths it holds
                request.append({order_key(canonical(names)): _abstract(v, canonical(names))})
                plans.append((order_key(canonical(names)), canonical(names)))
                continue
            held = " or ".join(str(sorted(o)) for o in found)
            raise AxisSpecError(f"{where}: the checkpoint holds {label} with the names {held}, the target "
                                f"has {sorted(names)}")
        order = next(o for o, k in found.items() if k == key)
        if key == "data":
            order = _legacy_order(v, saved[at]["data"], label, where)
        request.append({key: _abstract(v, order)})
        plans.append((key, order))
    request = jax.tree_util.tree_unflatten(tree, request)
    if partial_restore:
        restored = _restore_part(checkpointer, path, request, saved, restore_kwargs, where)
    else:
        restored = checkpointer.restore(path, request, **restore_kwargs)
    restored = tree.flatten_up_to(restored)
    out = [r if plan is None else _make(r[plan[0]], plan[1]) for r, plan in zip(restored, plans)]
    return jax.tree_util.tree_unflatten(tree, out)


def _legacy_order(v: NamedArray, meta: Any, label: str, where: str) -> tuple[str, ...]:
    """The order of ``v``'s names in a leaf saved under the key ``data``, before key paths named orders.

    Such a key says nothing of the order, so the saved shape must: each named axis is told by its size when
    the sizes of the target's names are all different (positional axes come first in every order). Where two
    names share a size, no reading is sure, and the error says how to restore the leaf as a plain array.
    """
    names = v.names
    if len(names) < 2:
        return names
    p = v.data.ndim - len(names)
    sizes = dict(zip(names, v.data.shape[p:]))
    shape = getattr(meta, "shape", None)
    shape = tuple(shape) if shape is not None else None
    named_shape = "{" + ", ".join(f"{n!r}: {sizes[n]}" for n in sorted(names)) + "}"
    what = (f"{where}: the checkpoint holds {label} under the key 'data', saved before key paths named the "
            f"axis order")
    if shape is not None and (len(shape) != v.data.ndim or shape[:p] != tuple(v.data.shape[:p])
                              or sorted(shape[p:]) != sorted(sizes.values())):
        raise AxisSizeError(f"{what}, with the shape {shape}, which no order of the target's named shape "
                            f"{named_shape}" + (f" after its positional shape {tuple(v.data.shape[:p])}"
                                                if p else "") + " gives")
    if shape is not None and len(set(sizes.values())) == len(names):
        by_size = {size: n for n, size in sizes.items()}
        return tuple(by_size[size] for size in shape[p:])
    shared = sorted(n for n in names if list(sizes.values()).count(sizes[n]) > 1)
    dtype = getattr(meta, "dtype", v.data.dtype)
    why = (f"the names {fmt_names(shared)} share a size ({named_shape})" if shape is not None
           else "the checkpoint gives no shape for it")
    example = [None] * p + list(names)
    raise AxisSpecError(
        f"{what}, and its shape {shape} does not tell its axes apart: {why}. Restore it as a plain array and "
        f"name its axes in the order the program that saved it stored them: put {{'data': "
        f"jax.ShapeDtypeStruct({shape}, jnp.{np.dtype(dtype).name})}} at {label} in the target, then "
        f"nx.wrap(restored{label if label != 'the target' else ''}['data'], {example}) if it stored them "
        f"{tuple(names)}")


def _holds(saved: dict[tuple[str, ...], dict[str, Any]], at: tuple[str, ...]) -> bool:
    """Whether the checkpoint has a leaf or a subtree at ``at``."""
    if at[:-1] in saved and at and at[-1] in saved[at[:-1]]:
        return True
    return any(node[:len(at)] == at for node in saved)


def _nearest(saved: dict[tuple[str, ...], dict[str, Any]], at: tuple[str, ...], path: Any) -> str:
    """What the checkpoint holds where ``at`` leaves it: the keys under the longest part of ``at`` it has."""
    for n in range(len(at) - 1, -1, -1):
        prefix = at[:n]
        keys = {node[n] for node in saved if node[:n] == prefix and len(node) > n}
        keys |= set(saved.get(prefix, {}))
        if keys:
            there = f"at {jax.tree_util.keystr(tuple(path[:n]))}" if n else "at its top level"
            return f"{there} it holds {', '.join(repr(k) for k in sorted(keys))}"
    return "it holds nothing"


def _restore_part(checkpointer: Any, path: Any, request: Any, saved: dict[tuple[str, ...], dict[str, Any]],
                  restore_kwargs: dict[str, Any], where: str) -> Any:
    """``checkpointer``'s checkpoint at ``path``, only the leaves of ``request``."""
    ocp = sys.modules.get("orbax.checkpoint")  # an orbax checkpointer means orbax is imported
    if ocp is None or not isinstance(checkpointer, ocp.Checkpointer):
        return checkpointer.restore(path, request, partial_restore=True, **restore_kwargs)
    unknown = sorted(set(restore_kwargs) - {"strict"})
    if unknown:
        raise TypeError(f"{where}: with partial_restore=True and an orbax checkpointer, nx reads through "
                        f"orbax's PyTreeCheckpointer, and takes strict, not {', '.join(unknown)}")
    # StandardCheckpointer's handler cannot leave leaves out; the PyTree handler reads the same files. Its
    # restore arguments are the StandardCheckpointer's: the target's sharding, else the saved one.
    reader = checkpointer if isinstance(checkpointer, ocp.PyTreeCheckpointer) else ocp.PyTreeCheckpointer()

    def sharding(p: Any, leaf: Any) -> Any:
        own = getattr(leaf, "sharding", None)
        if own is not None or not isinstance(leaf, jax.ShapeDtypeStruct):
            return own
        keys = _path_strings(p)
        held = getattr(saved.get(keys[:-1], {}).get(keys[-1]), "sharding", None)
        return held.to_jax_sharding() if held is not None else None

    shardings = jax.tree_util.tree_map_with_path(sharding, request)
    args = ocp.checkpoint_utils.construct_restore_args(request, shardings,
                                                       strict=restore_kwargs.get("strict", True))
    return reader.restore(path, args=ocp.args.PyTreeRestore(item=request, restore_args=args,
                                                            partial_restore=True))


def _path_strings(path) -> tuple[str, ...]:
    """A key path as the strings a path-keyed checkpoint uses for it."""
    out = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                out.append(str(getattr(k, attr)))
                break
        else:
            out.append(str(k))
    return tuple(out)


def _abstract(v: NamedArray, order: tuple[str, ...]) -> Any:
    """The abstract storage of ``v`` with its names in ``order``: shape, dtype and sharding permuted."""
    d = v.data
    p = d.ndim - len(v.names)
    perm = tuple(range(p)) + tuple(p + v.names.index(n) for n in order)
    shape = tuple(d.shape[i] for i in perm)
    sharding = getattr(d, "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding):
        spec = tuple(sharding.spec) + (None,) * (d.ndim - len(sharding.spec))
        sharding = jax.sharding.NamedSharding(sharding.mesh,
                                              jax.sharding.PartitionSpec(*(spec[i] for i in perm)))
    return jax.ShapeDtypeStruct(shape, d.dtype, sharding=sharding)
