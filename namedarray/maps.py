"""``namedarray.maps``: the names of ``jax.experimental.maps`` for xmap-era code.

JAX removed ``jax.experimental.maps`` with ``xmap`` (jax 0.4.31). Code written for it ports by changing its
import: ``from jax.experimental.maps import xmap, thread_resources`` becomes
``from namedarray.maps import xmap, thread_resources`` (and ``import jax.experimental.maps as maps`` becomes
``import namedarray.maps as maps``). What each name is here:

* ``xmap``, ``SerialLoop``, ``serial_loop``: :func:`namedarray.xmap` and its loop resources. A positional
  body receives per-element arrays and sees the map's names as JAX axis names, as in xmap.
* ``Mesh``: ``jax.sharding.Mesh``, a context manager as it was; ``mesh(devices, axis_names)`` is the older
  spelling of ``with Mesh(np.asarray(devices), axis_names):``.
* ``thread_resources.env``: the mesh in context, read the way xmap code read it
  (``thread_resources.env.shape["mp"]``, ``.physical_mesh``), whichever way it was entered: ``jax.set_mesh``
  or ``with Mesh(...)``. Assigning ``thread_resources.env = ResourceEnv(mesh)`` enters that mesh for the
  thread, as it did. New code reads the mesh with :func:`mesh_shape` / :func:`current_mesh` (also
  ``nx.mesh_shape`` and ``nx.current_mesh``).

>>> import jax, numpy as np
>>> from namedarray.maps import Mesh, thread_resources, xmap
>>> with Mesh(np.array(jax.devices()[:1]), ("mp",)):
...     thread_resources.env.shape["mp"]
1
>>> thread_resources.env.shape
{}
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
from jax.sharding import Mesh

from .adapter.xmap import SerialLoop, serial_loop, xmap
from .core.placement import current_mesh, mesh_sizes

__all__ = ["xmap", "SerialLoop", "serial_loop", "Mesh", "mesh", "ResourceEnv", "thread_resources",
           "current_mesh", "mesh_shape"]


def mesh_shape() -> dict[str, int]:
    """The mesh in context as ``{axis name: size}`` (``{}`` when there is none), whether it was entered
    with ``jax.set_mesh`` or the legacy ``with Mesh(...)``: what ``thread_resources.env.shape`` was.

    >>> import jax, namedarray as nx
    >>> with jax.set_mesh(jax.make_mesh((1,), ("data",))):
    ...     nx.mesh_shape()
    {'data': 1}
    """
    m = current_mesh()
    return {} if m is None else mesh_sizes(m)


class ResourceEnv(NamedTuple):
    """xmap's resource environment: the physical mesh (``loops`` is accepted and ignored; serial loops are
    brought into scope with :func:`serial_loop`)."""

    physical_mesh: Any
    loops: Any = ()

    @property
    def shape(self) -> dict[str, int]:
        m = self.physical_mesh
        return {} if m is None or m.empty else mesh_sizes(m)

    @property
    def local_shape(self) -> dict[str, int]:
        m = self.physical_mesh
        return {} if m is None or m.empty else dict(m.local_mesh.shape)


class _ThreadResources:
    """``thread_resources``: ``.env`` is the mesh in context, as a :class:`ResourceEnv`."""

    @property
    def env(self) -> ResourceEnv:
        return ResourceEnv(current_mesh())

    @env.setter
    def env(self, value: Any) -> None:
        mesh_ = getattr(value, "physical_mesh", value)
        if not isinstance(mesh_, Mesh):
            raise TypeError(f"namedarray.maps.thread_resources.env: expected a ResourceEnv(Mesh(...)), got "
                            f"{value!r}")
        from jax._src import mesh as _jax_mesh  # the legacy context xmap code assigned to

        _jax_mesh.thread_resources.env = _jax_mesh.ResourceEnv(mesh_)

    def __repr__(self) -> str:
        return f"thread_resources(env={self.env!r})"


thread_resources = _ThreadResources()


@contextlib.contextmanager
def mesh(devices: Sequence[Any] | np.ndarray, axis_names: Sequence[str]) -> Iterator[Mesh]:
    """``with mesh(devices, ("dp", "mp")):``, the first spelling of ``with Mesh(np.asarray(devices), ...)``.

    >>> import jax, namedarray.maps as maps
    >>> with maps.mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("dp", "mp")):
    ...     maps.thread_resources.env.shape
    {'dp': 1, 'mp': 1}
    """
    with Mesh(np.asarray(devices), tuple(axis_names)) as m:
        yield m
