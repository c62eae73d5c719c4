"""Meshes and layout helpers shared by the sharding tests (8 simulated CPU devices, tests/conftest.py)."""

import contextlib
import re
import warnings
from collections import Counter

import jax
import numpy as np
from jax.sharding import AxisType, Mesh


def auto_mesh(shape, names):
    return jax.make_mesh(
        shape, names, axis_types=(AxisType.Auto,) * len(names), devices=jax.devices()[: int(np.prod(shape))]
    )


def explicit_mesh(shape, names):
    return jax.make_mesh(
        shape,
        names,
        axis_types=(AxisType.Explicit,) * len(names),
        devices=jax.devices()[: int(np.prod(shape))],
    )


def mesh_of(kind, shape, names):
    return explicit_mesh(shape, names) if kind == "explicit" else auto_mesh(shape, names)


@contextlib.contextmanager
def legacy(mesh):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with mesh:
            yield


def in_context(kind, shape, names):
    """The mesh contexts user code meets: set_mesh with Auto or Explicit axes, and legacy `with Mesh`."""
    if kind == "auto":
        return jax.set_mesh(auto_mesh(shape, names))
    if kind == "explicit":
        return jax.set_mesh(explicit_mesh(shape, names))
    n = int(np.prod(shape))
    return legacy(Mesh(np.array(jax.devices()[:n]).reshape(shape), names))


def norm_spec(s):
    """A PartitionSpec as a tuple without trailing Nones (JAX prints P('x') and P('x', None) alike)."""
    s = list(s)
    while s and s[-1] is None:
        s.pop()
    return tuple(s)


def same_spec(a, b):
    """PartitionSpecs equal up to trailing Nones."""
    return norm_spec(a) == norm_spec(b)


# an instruction's type is one array type, or a tuple of them in parentheses (a combined all-reduce)
_COLLECTIVE = re.compile(r"=\s*(?:\([^)]*\)|\S+)\s+(all-reduce|all-gather|reduce-scatter|all-to-all|"
                         r"collective-permute|collective-broadcast|ragged-all-to-all)(-start)?\(")


def collectives(hlo_text: str) -> dict[str, int]:
    """Collective instructions of a compiled module, by kind."""
    return dict(Counter(m.group(1) for m in _COLLECTIVE.finditer(hlo_text)))
