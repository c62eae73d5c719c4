"""namedarray: named-axis arrays for JAX.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((4, 3)), ["batch", "feature"])
>>> w = nx.wrap(jnp.ones(3), ["feature"])
>>> (x * w).sum("feature").named_shape
{'batch': 4}

Everything in ``jax.numpy`` has an ``nx.<f>`` (declared in :mod:`namedarray.ops.mirror`); the modules below
override the declarations whose axis arguments mean more than a position (contractions, joins by name).
``nx.nmap`` lifts any other positional function over named axes.
"""

import sys as _sys

from . import errors
from .core import env
from .core.array import NamedArray
from .core.kernels import clear_caches
from .core.orders import canonical_order, fix_canonical_order, reset_canonical_orders
from .core.shape import NamedShape
from .core.wrapping import rename, unwrap, wrap
from .engine.nmap import nmap
from .ops.mirror import FUNCTIONS as _FUNCTIONS

# The numpy mirror first; the named implementations below replace its lifted defaults.
globals().update(_FUNCTIONS)

from . import lax, nn, random, typing  # noqa: E402
from .adapter.xmap import SerialLoop, serial_loop, xmap  # noqa: E402
from .core.env import axis_rules  # noqa: E402
from .interop.formats import from_xarray, load_safetensors, restore_checkpoint, save_safetensors  # noqa: E402
from .ops import indexing  # noqa: E402
from .ops.contract import dot, inner, matmul, outer, pdot, tensordot, vdot  # noqa: E402
from .ops.creation import arange, empty, full, geomspace, linspace, logspace, ones, zeros  # noqa: E402
from .ops.einsum import einsum  # noqa: E402
from .ops.norms import norm as _norm  # noqa: E402
from .ops.norms import vector_norm as _vector_norm  # noqa: E402
from .ops.structural import append, concat, concatenate, pad, stack, take  # noqa: E402
from .ops.surgery import flatten, rearrange, split, tag, unbind, unflatten, untag  # noqa: E402
from .sharding.collectives import (  # noqa: E402
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
from .sharding.distribute import from_process_local, jit, shard, sharding  # noqa: E402
from .sharding.shard_map import shard_map  # noqa: E402
from .sharding.visualize import visualize_sharding  # noqa: E402
from .surface import methods as _methods  # noqa: E402  (operators route to the final nx.<f> set above)
from .transforms.autodiff import grad, value_and_grad  # noqa: E402
from .transforms.scan import map, scan  # noqa: E402

linalg.norm, linalg.vector_norm = _norm, _vector_norm  # noqa: F821  (nx.linalg: from the mirror above)
_methods.install(_sys.modules[__name__])

__version__ = "0.1.0"

# The public surface: every nx.<f>, the public submodules, and none of the modules the package is built from.
_PUBLIC_MODULES = {"env", "errors", "typing", "lax", "nn", "random", "linalg", "fft"}
__all__ = sorted(n for n, v in globals().items() if not n.startswith("_")
                 and (not isinstance(v, type(_sys)) or n in _PUBLIC_MODULES))


def __dir__():
    return list(__all__)
