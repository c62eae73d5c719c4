"""The transforms layer: control flow, loops over a name and autodiff, by name.

* :mod:`~namedarray.transforms.control`: ``nx.lax`` loops and conditionals whose carries and branches
  broadcast by name;
* :mod:`~namedarray.transforms.scan`: ``nx.scan`` and ``nx.map`` over a named axis;
* :mod:`~namedarray.transforms.along`: ``nx.along``, a positional function run along named axes;
* :mod:`~namedarray.transforms.autodiff`: ``nx.grad`` and ``nx.value_and_grad`` of a 0-d NamedArray loss.
"""
