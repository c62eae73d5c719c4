"""namedarray: named-axis arrays for JAX.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((4, 3)), ["batch", "feature"])
>>> w = nx.wrap(jnp.ones(3), ["feature"])
>>> (x * w).sum("feature").named_shape
{'batch': 4}

This module only re-exports. Everything in ``jax.numpy`` has an ``nx.<f>``, declared in
:mod:`namedarray.ops.mirror` (the generated mirror, listed there); the named implementations imported after
it replace the declarations whose axis arguments mean more than a position (contractions, joins by name),
as each declares with ``@implements(jnp.<f>)``. ``nx.nmap`` lifts any other positional function over named
axes. "How the code is organised" in the README maps the layers.

So that ``import namedarray`` costs little more than ``import jax``, what a program may never touch is
imported when first asked for (:func:`__getattr__`): the mirror's functions (each made on first use), the
xarray/safetensors/orbax formats, sharding plans and pipelines, ``nx.xmap`` and ``namedarray.maps``,
``nx.typing``, the sharding visualisation, and the modules of ``nx.shard_map``, ``nx.scan``/``nx.map``,
``nx.along`` and ``nx.grad``. Modules that declare named implementations (``@implements``) or lift a jax
module on demand (``nx.nn``, ``nx.lax``) are imported here: the registry must know them before anything
asks it. ``dir(nx)`` and ``nx.__all__`` list everything either way.
"""

from importlib import import_module as _import_module

# The numpy mirror's names: each nx.<f> not imported below is the mirror's (read on first use, __getattr__)
from .ops.mirror import __all__ as _MIRROR

# isort: split
from . import errors, lax, nn, random  # noqa: E402
from .core import env  # noqa: E402
from .core.array import NamedArray, is_named, tree_leaves, tree_map  # noqa: E402
from .core.caches import clear_caches  # noqa: E402
from .core.env import axis_rules  # noqa: E402
from .core.orders import canonical_order, fix_canonical_order, reset_canonical_orders  # noqa: E402
from .core.placement import current_mesh  # noqa: E402
from .core.shape import NamedShape  # noqa: E402
from .core.wrapping import rename, unwrap, wrap  # noqa: E402
from .engine.nmap import nmap  # noqa: E402
from .ops.contract import dot, inner, matmul, outer, pdot, tensordot, vdot  # noqa: E402
from .ops.creation import (  # noqa: E402
    arange,
    broadcast_to,
    empty,
    full,
    geomspace,
    linspace,
    logspace,
    ones,
    zeros,
)
from .ops.einsum import einsum  # noqa: E402
from .ops.indexing import argwhere, ds, dynamic_slice, dynamic_update_slice, nonzero, where  # noqa: E402
from .ops.structural import append, concat, concatenate, pad, stack, take, tile  # noqa: E402
from .ops.surgery import flatten, rearrange, split, tag, unbind, unflatten, untag  # noqa: E402
from .parallel.collectives import (  # noqa: E402
    all_gather,
    all_to_all,
    axis_index,
    axis_size,
    pmax,
    pmean,
    pmin,
    ppermute,
    pshuffle,
    psum,
    psum_scatter,
)
from .parallel.distribute import from_process_local, jit, shard, sharding  # noqa: E402
from .surface import methods as _methods  # noqa: E402, F401  (importing it installs the operators)

__version__ = "0.1.0"

# The public surface: the mirror's functions, the named implementations and the public submodules above.
__all__ = sorted({*_MIRROR, "errors", "lax", "maps", "current_mesh", "mesh_shape", "nn", "random", "typing",
                  "env", "SerialLoop", "serial_loop",
                  "xmap", "NamedArray", "axis_rules", "clear_caches", "canonical_order",
                  "fix_canonical_order", "reset_canonical_orders", "NamedShape", "rename", "unwrap", "wrap",
                  "nmap", "from_xarray", "to_xarray", "load_safetensors", "restore_checkpoint",
                  "save_safetensors",
                  "dot", "inner", "matmul", "outer", "pdot", "tensordot", "vdot", "arange", "empty", "full",
                  "geomspace", "linspace", "logspace", "ones", "zeros", "broadcast_to", "einsum", "argwhere",
                  "ds", "dynamic_slice", "dynamic_update_slice", "nonzero", "where", "append", "concat",
                  "concatenate", "pad", "stack", "take", "tile", "flatten", "rearrange", "split", "tag",
                  "unbind", "unflatten", "untag", "all_gather", "all_to_all", "axis_index", "axis_size",
                  "pmax", "pmean", "pmin", "ppermute", "pshuffle", "psum", "psum_scatter",
                  "from_process_local", "jit", "shard", "sharding", "visualize_sharding", "shard_map",
                  "grad", "value_and_grad", "map", "scan", "along", "is_named", "tree_map",
                  "tree_leaves", "plan_sharding", "Plan", "PlanRow", "pipeline", "visualize_pipeline"})


def __dir__():
    return list(__all__)


def __getattr__(name: str):
    """``nx.<name>`` for the names imported on first use (see above), bound here once found."""
    home = {"from_xarray": "interop.formats", "load_safetensors": "interop.formats",
            "restore_checkpoint": "interop.formats", "save_safetensors": "interop.formats",
            "to_xarray": "interop.formats", "Plan": "parallel.plan", "PlanRow": "parallel.plan",
            "plan_sharding": "parallel.plan", "pipeline": "parallel.pipeline",
            "visualize_pipeline": "parallel.pipeline", "visualize_sharding": "parallel.visualize",
            "xmap": "adapter.xmap", "SerialLoop": "adapter.xmap", "serial_loop": "adapter.xmap",
            "mesh_shape": "maps", "shard_map": "parallel.shard_map", "along": "transforms.along",
            "grad": "transforms.autodiff", "value_and_grad": "transforms.autodiff", "map": "transforms.scan",
            "scan": "transforms.scan", "maps": None, "typing": None}.get(name, "ops.mirror")
    if home is None:  # a public submodule
        value = _import_module(f"{__name__}.{name}")
    elif home != "ops.mirror" or name in _MIRROR:
        value = getattr(_import_module(f"{__name__}.{home}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later reads find it here, without this call
    return value
