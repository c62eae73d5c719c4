"""``nx.lax``: ``jax.lax`` for NamedArrays.

* The collectives over names (:mod:`namedarray.collectives`): ``psum``, ``pmean``, ``pmax``, ``pmin``,
  ``all_gather``, ``ppermute``, ``pshuffle``, ``psum_scatter``, ``all_to_all``, ``pswapaxes``,
  ``pbroadcast``, ``pcast``, ``axis_index``, ``axis_size``, and ``pdot`` (a contraction over names, from
  :mod:`namedarray.contract`).
* Control flow and other functions of pytrees (``cond``, ``scan``, ``fori_loop``, ``stop_gradient``, ...)
  are ``jax.lax``'s own: a NamedArray is a pytree, so they already carry names through.
* Every other function is ``jax.lax.<f>`` lifted with :func:`namedarray.nmap`: it runs as if vmapped over
  the named axes of its NamedArray arguments, and its integer axis arguments keep their positional meaning.

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.arange(6.0).reshape(2, 3), ["b", ...])
>>> nx.lax.psum(x, "b").tolist(), nx.lax.cumsum(x, axis=0).named_shape
([3.0, 5.0, 7.0], {'b': 2})
"""

from __future__ import annotations

import jax

from .collectives import (
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
from .contract import pdot
from .lifted import rest_of

__all__ = ["psum", "pmean", "pmax", "pmin", "all_gather", "ppermute", "pshuffle", "psum_scatter",
           "all_to_all", "pswapaxes", "pbroadcast", "pcast", "axis_index", "axis_size", "pdot"]

# jax.lax functions of whole pytrees: they must see NamedArrays (which are pytrees) unlifted, so that
# function arguments (branches, loop bodies) receive NamedArrays with their names.
PYTREE_FUNCTIONS = frozenset("""
cond switch scan fori_loop while_loop map associative_scan custom_root custom_linear_solve stop_gradient
optimization_barrier platform_dependent
""".split())

__getattr__, __dir__ = rest_of(jax.lax, globals(), passthrough=PYTREE_FUNCTIONS)
