"""The operations layer: every ``nx.<f>`` that computes on values, declared on the engine.

* :mod:`~namedarray.ops.mirror`: the numpy mirror, one declaration per ``jax.numpy`` function (reductions,
  elementwise, ``along`` operations, lifted defaults): look here first for where ``nx.sum`` is declared;
* :mod:`~namedarray.ops.creation`: ``zeros``/``ones``/``full``/``arange``/... with names;
* :mod:`~namedarray.ops.structural`: joins and gathers by name (``concatenate``, ``stack``, ``pad``,
  ``take``);
* :mod:`~namedarray.ops.surgery`: ``flatten``, ``unflatten``, ``split``, ``unbind``, ``rearrange``, ``tag``;
* :mod:`~namedarray.ops.contract` and :mod:`~namedarray.ops.einsum`: contractions by name;
* :mod:`~namedarray.ops.indexing` and :mod:`~namedarray.ops.updates`: ``x[...]`` and ``x.at[...]``;
* :mod:`~namedarray.ops.norms`: ``nx.linalg.norm`` and ``vector_norm`` by name.
"""
