"""The interop layer: what a NamedArray looks like to people and to other libraries.

* :mod:`~namedarray.interop.formats`: xarray, safetensors and orbax (restoring by name);
* :mod:`~namedarray.interop.render`: the text and HTML displays;
* :mod:`~namedarray.interop.treescope_support`: treescope's rendering.
"""
