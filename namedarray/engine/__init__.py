"""The engine layer: one dispatch path for every named operation.

An op is declared once, as the jax function it runs plus what its axis arguments mean; the engine aligns the
operands by name, calls the function, and wraps the result again:

* :mod:`~namedarray.engine.dispatch`: ``run`` / ``elementwise`` / ``reduce`` / ``along``, eagerly one cached
  fused kernel per layout, under a trace the lax ops directly;
* :mod:`~namedarray.engine.lifting`: lifting a positional function over named axes (what ``nx.nmap`` and
  the numpy mirror use);
* :mod:`~namedarray.engine.arguments`: once a call fails, which argument was of a plainly wrong kind (None,
  a string, a set, NaN where an int goes), read from the signature of the function called, so that the
  error names it rather than jax's internals;
* :mod:`~namedarray.engine.nmap`: ``nx.nmap``;
* :mod:`~namedarray.engine.registry`: which jax function each ``nx`` function implements, filled where each
  is declared (``@implements(jnp.dot)``); ``nx.xmap`` reads it to run a jax function by name;
* :mod:`~namedarray.engine.docstrings`: the rule for names that opens every generated docstring.

It imports only :mod:`namedarray.core` and :mod:`namedarray.errors`.
"""
