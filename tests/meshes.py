"""Meshes and layout helpers shared by the sharding tests (8 simulated CPU devices, tests/conftest.py)."""

import contextlib
import math
import re
import warnings
from collections import Counter

import hypothesis.strategies as st
import jax
import numpy as np
from jax.sharding import AxisType, Mesh

import namedarray as nx


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


# The meshes the sharding property tests draw from: (8,), (4, 2) and (2, 2, 2) over the 8 simulated devices.
MESHES = {(8,): ("a",), (4, 2): ("a", "b"), (2, 2, 2): ("a", "b", "c")}
NAMES = ("i", "j", "k", "l")


@st.composite
def named_operands(draw):
    """(sizes of NAMES, the names of two operands in storage order): sizes divisible by any mesh axis."""
    sizes = {n: draw(st.sampled_from([2, 4, 8])) for n in NAMES}
    x_names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    y_names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    return sizes, x_names, y_names


@st.composite
def legal_mapping(draw, names, sizes, mesh_shape, with_none=False):
    """A random mapping of ``names`` to mesh axes that any value may use: each mesh axis goes to one name at
    most (so no value has two names on one axis), and each size divides by its mesh axes (one or two, major
    to minor). ``with_none``: some unmapped names get an explicit ``None``."""
    axes = MESHES[mesh_shape]
    msize = dict(zip(axes, mesh_shape))
    free = list(axes)
    mapping = {}
    for n in draw(st.permutations(sorted(names))):
        k = draw(st.integers(0, min(2, len(free))))
        chosen = tuple(draw(st.permutations(free))[:k])
        if chosen and sizes[n] % math.prod(msize[a] for a in chosen):
            chosen = ()
        if chosen:
            mapping[n] = chosen[0] if len(chosen) == 1 else chosen
            free = [a for a in free if a not in chosen]
        elif with_none and draw(st.booleans()):
            mapping[n] = None
    return mapping


def sharded_program(op, x, y):
    """One of five named ops on ``x`` and ``y`` with a ``.shard()`` on each operand and the result: the
    programs whose values must not depend on the rules or the mesh in force."""
    shared = [n for n in x.names if n in y.names]
    if op == "elementwise":
        out = nx.tanh(x.shard()) * y.shard() + 1.0
    elif op == "reduce":
        z = x.shard() * y.shard()
        first = sorted(z.names)[0]  # by name: storage orders differ inside jit and out
        out = nx.sum(z, first) if len(z.names) > 1 else nx.max(z, first)[None]
    elif op == "einsum":
        keep = sorted(set(x.names) ^ set(y.names))
        spec = "{" + ",".join(x.names) + "},{" + ",".join(y.names) + "}->{" + ",".join(keep) + "}"
        out = nx.einsum(spec, x.shard(), y.shard())
    elif op == "dot":
        out = nx.dot(x.shard(), y.shard(), axis=tuple(shared))
    else:
        out = nx.nn.softmax(x.shard() + y.shard(), axis=sorted(x.names)[0])
    return out.shard()
