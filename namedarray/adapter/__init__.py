"""The xmap adapter: ``nx.xmap``, xmap's signature and contract on ``jax.jit`` and ``NamedSharding``.

* :mod:`~namedarray.adapter.xmap`: in_axes/out_axes, axis sizes, the call, its errors: where xmap's
  contract is implemented;
* :mod:`~namedarray.adapter.resources`: ``axis_resources``: mesh axes and serial loops.
"""
