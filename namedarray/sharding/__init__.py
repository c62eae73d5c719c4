"""The sharding layer: laying values out on a mesh by their names, and collectives over names.

* :mod:`~namedarray.sharding.distribute`: ``x.shard()``, ``nx.shard``, ``nx.sharding``, ``nx.jit`` and
  ``nx.from_process_local``: where a sharding constraint is added (the rule itself, names ->
  ``PartitionSpec``, is :mod:`namedarray.core.placement`);
* :mod:`~namedarray.sharding.shard_map`: ``nx.shard_map``, per-device blocks by name;
* :mod:`~namedarray.sharding.collectives`: ``psum``, ``all_gather``, ``ppermute``, ... over names;
* :mod:`~namedarray.sharding.visualize`: which device holds which block, labelled by name.
"""
