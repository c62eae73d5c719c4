"""``nx.lax``: ``jax.lax`` for NamedArrays.

* The collectives over names (:mod:`namedarray.parallel.collectives`): ``psum``, ``pmean``, ``pmax``,
  ``pmin``,
  ``all_gather``, ``ppermute``, ``pshuffle``, ``psum_scatter``, ``all_to_all``, ``pswapaxes``,
  ``pbroadcast``, ``pcast``, ``axis_index``, ``axis_size``, and ``pdot`` (a contraction over names, from
  :mod:`namedarray.ops.contract`).
* Control flow (:mod:`namedarray.transforms.control`): ``cond``, ``switch``, ``fori_loop``, ``while_loop``,
  ``scan``
  and ``map`` are ``jax.lax``'s, with carries and branch outputs broadcast by name as xmap did (a carry that
  loses a name through a ``psum`` in the body is broadcast back along it).
* Other functions of pytrees (``stop_gradient``, ``associative_scan``, ...) are ``jax.lax``'s own: a
  NamedArray is a pytree, so they carry names through.
* Every other function is ``jax.lax.<f>`` lifted with :func:`namedarray.nmap`: it runs as if vmapped over
  the named axes of its NamedArray arguments, and its integer axis arguments keep their positional meaning.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["b", ...])
>>> nx.lax.psum(x, "b").tolist(), nx.lax.cumsum(x, axis=0).named_shape
([3.0, 5.0, 7.0], {'b': 2})
"""

from __future__ import annotations

import functools
import sys

import jax

from .engine import registry
from .engine.lifting import rest_of
from .ops.contract import pdot
from .parallel.collectives import (
    all_gather,
    all_to_all,
    axis_index,
    axis_size,
    pbroadcast,
    pcast,
    pmax,
    pmean,
    pmin,
    ppermute,
    pshuffle,
    psum,
    psum_scatter,
    pswapaxes,
)
from .transforms.control import cond, fori_loop, map, scan, switch, while_loop

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "ppermute", "pshuffle", "psum_scatter",
           "all_to_all", "pswapaxes", "pbroadcast", "pcast", "axis_index", "axis_size", "pdot",
           "cond", "switch", "fori_loop", "while_loop", "scan", "map"]

# jax.lax functions of whole pytrees: they must see NamedArrays (which are pytrees) unlifted, so that
# function arguments (branches, loop bodies) receive NamedArrays with their names.
PYTREE_FUNCTIONS = frozenset("""
associative_scan custom_root custom_linear_solve stop_gradient optimization_barrier platform_dependent
""".split())

__getattr__, __dir__ = rest_of(jax.lax, globals(), passthrough=PYTREE_FUNCTIONS)
# nx.lax is where jax.lax's functions have their named versions (nx.xmap asks it for them)
registry.declare_fallback("jax.lax", functools.partial(getattr, sys.modules[__name__]))
