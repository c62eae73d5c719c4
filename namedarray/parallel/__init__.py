"""The parallel layer: laying values out on a mesh by their names (sharding), and collectives over names.

* :mod:`~namedarray.parallel.distribute`: ``x.shard()``, ``nx.shard``, ``nx.sharding``, ``nx.jit`` and
  ``nx.from_process_local``: where a sharding constraint is added (the rule itself, names ->
  ``PartitionSpec``, is :mod:`namedarray.core.placement`);
* :mod:`~namedarray.parallel.shard_map`: ``nx.shard_map``, per-device blocks by name;
* :mod:`~namedarray.parallel.collectives`: ``psum``, ``all_gather``, ``ppermute``, ... over names;
* :mod:`~namedarray.parallel.visualize`: which device holds which block, labelled by name;
* :mod:`~namedarray.parallel.context`: what a trace of ``nx.jit`` or ``nx.plan_sharding`` in progress notes
  about its values (context variables, per thread and task).

The folder is not called ``sharding`` because ``nx.sharding`` is a public function.
"""
