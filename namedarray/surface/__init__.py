"""The surface layer: what the NamedArray type offers as methods and operators.

* :mod:`~namedarray.surface.methods`: operators, reductions as methods, ``unwrap``, ``shard``, displays,
  installed on the type once every layer below exists.
"""
