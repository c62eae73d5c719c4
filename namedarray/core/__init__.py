"""The core layer: the NamedArray type and everything that knows what its names mean.

Nothing here computes on values by name; it defines what a named value *is* and where its names live:

* :mod:`~namedarray.core.shape`: ``NamedShape``, the unordered name -> size mapping, and size joins;
* :mod:`~namedarray.core.array`: the ``NamedArray`` type, its storage invariant (positional axes first, named
  axes last) and its pytree registration;
* :mod:`~namedarray.core.orders`: the one order in which each set of names crosses the pytree boundary;
* :mod:`~namedarray.core.layout`: how operands are lined up by name (``union``, ``align``): read this to see
  how names are aligned;
* :mod:`~namedarray.core.specs` and :mod:`~namedarray.core.wrapping`: xmap's axis specifications,
  ``nx.wrap`` and ``nx.unwrap``;
* :mod:`~namedarray.core.env`: the one place that knows the axis environment (sizes bound by maps, the
  rules, resources and serial loops in force);
* :mod:`~namedarray.core.context`: core's context variables (the axis environment's, and which values a
  trace already laid out), and the hook through which a layer above hears of every value core makes;
* :mod:`~namedarray.core.placement`: names -> ``PartitionSpec``, the one rule every way of sharding by name
  uses;
* :mod:`~namedarray.core.kernels`: the bounded cache of compiled eager kernels;
* :mod:`~namedarray.core.caches`: every process-wide cache and table of the library, each with its bound and
  its lock, and ``nx.clear_caches()`` and ``sizes()``, which reach them all.

Every layer above imports from this one; this one imports only :mod:`namedarray.errors`.
"""
