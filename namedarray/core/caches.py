"""Process-wide caches: every cache the library owns, each bounded, locked, named and cleared in one place.

Named code keeps a few things from one call to the next so that the second call costs less than the first:
compiled eager kernels (:mod:`namedarray.core.kernels`), parsed einsum and rearrange specs, checked
shardings, the permutations that put a value in its boundary order, cached ``nx.xmap`` compilations. Each
is registered here under a name with its bound, so that

* ``nx.clear_caches()`` empties all of them (results never depend on a cache: it only frees memory);
* :func:`sizes` lists them with how much each holds (what a test of memory use reads);
* none grows without bound: a full cache drops its least recently used entry.

What is *not* here, on purpose: the boundary orders of :mod:`namedarray.core.orders` (an order is part of
the meaning of flattened leaves and treedefs made since, so clearing it is not a cache's business; it has
its own bound and reset), the registry of named implementations (filled once at import), and the axis
environment (a context variable, :mod:`namedarray.core.env`).

>>> square = cache("doc squares", 8)(lambda n: n * n)
>>> square(3), sizes()["doc squares"]
(9, 1)
>>> clear_caches(); sizes()["doc squares"]
0
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LRU", "cache", "register", "clear_caches", "sizes"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# name -> (clear, size) of every cache the library owns
_CACHES: dict[str, tuple[Callable[[], None], Callable[[], int]]] = {}


def register(name: str, clear: Callable[[], None], size: Callable[[], int]) -> None:
    """Own a cache kept elsewhere: ``nx.clear_caches()`` calls ``clear``, :func:`sizes` reports ``size()``."""
    _CACHES[name] = (clear, size)


class LRU(Generic[K, V]):
    """A dict of at most ``maxsize`` entries, least recently used dropped first, safe across threads.

    >>> c = LRU("doc lru", 2)
    >>> c.put("a", 1); c.put("b", 2); c.get("a"); c.put("c", 3)
    1
    >>> c.get("b") is None, len(c)
    (True, 2)
    """

    def __init__(self, name: str, maxsize: int):
        self.maxsize = maxsize
        self._data: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        register(name, self.clear, self.__len__)

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


def cache(name: str, maxsize: int) -> Callable[[Callable[..., V]], Callable[..., V]]:
    """``functools.lru_cache(maxsize)`` (thread-safe, bounded), registered under ``name``."""
    def wrap(f: Callable[..., V]) -> Callable[..., V]:
        cached = functools.lru_cache(maxsize=maxsize)(f)
        register(name, cached.cache_clear, lambda: cached.cache_info().currsize)
        return cached

    return wrap


def clear_caches() -> None:
    """Forget every compiled kernel, cached ``nx.xmap`` compilation and parsed spec (``nx.clear_caches()``).

    Results never depend on the caches; this only frees memory (jax's own caches of functions that are
    gone go with them).

    >>> import namedarray as nx
    >>> nx.clear_caches()
    """
    for clear, _ in list(_CACHES.values()):
        clear()


def sizes() -> dict[str, int]:
    """How many entries each cache holds now, by name."""
    return {name: size() for name, (_, size) in sorted(_CACHES.items())}
