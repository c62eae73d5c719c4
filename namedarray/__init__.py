"""namedarray: named-axis arrays for JAX.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.ones((4, 3)), ["batch", "feature"])
>>> w = nx.wrap(jnp.ones(3), ["feature"])
>>> (x * w).sum("feature").named_shape
{'batch': 4}

Everything in ``jax.numpy`` has an ``nx.<f>`` (see :mod:`namedarray.mirror`); ``nx.nmap`` lifts any other
positional function over named axes.
"""

from . import env, errors
from .array import NamedArray
from .env import axis_rules
from .mirror import FUNCTIONS as _FUNCTIONS
from .nmap import nmap
from .shape import NamedShape
from .wrapping import rename, unwrap, wrap

globals().update(_FUNCTIONS)

from . import indexing  # noqa: E402
from .structural import append, concat, concatenate, stack, take  # noqa: E402
from .xmap import SerialLoop, serial_loop, xmap  # noqa: E402
from . import typing  # noqa: E402
from . import lax, nn, random  # noqa: E402
from .collectives import (all_gather, all_to_all, axis_index, axis_size, pmax, pmean, pmin,  # noqa: E402
                          ppermute, pshuffle, psum, psum_scatter)
from .einsum import einsum  # noqa: E402
from .contract import dot, inner, matmul, outer, pdot, tensordot, vdot  # noqa: E402

from . import methods as _methods  # noqa: E402
import sys as _sys  # noqa: E402

_methods.install(_sys.modules[__name__])

__version__ = "0.1.0"


def __dir__():
    return sorted(set(globals()) | set(_FUNCTIONS))
