"""Process-wide caches: every cache the library owns, each bounded, locked, named and cleared in one place.

Named code keeps a few things from one call to the next so that the second call costs less than the first:
compiled eager kernels (:mod:`namedarray.core.kernels`), parsed einsum and rearrange specs, checked
shardings, the permutations that put a value in its boundary order, cached ``nx.xmap`` compilations. Each
is registered here under a name with its bound, so that

* ``nx.clear_caches()`` empties all of them (results never depend on a cache: it only frees memory);
* :func:`sizes` lists them with how much each holds (what a test of memory use reads);
* none grows without bound: a full cache drops its least recently used entry.

Five shapes of cache cover every use: :class:`LRU` (a bounded, locked dict), :func:`cache` (a bounded
``functools.lru_cache``), :class:`LRUFamily` (one small LRU per object that cannot share a key, counted and
resized as one), :class:`WeakTable` (what is built around a live user function, gone with it) and
:class:`SlotFamily` (one slot per entry point object: what served its last call). Each is
registered with its name, its size and, where it has one, its bound, which :func:`resize` changes (for a
memory budget, or a test that needs a small cache).

What is *not* here, on purpose: the boundary orders of :mod:`namedarray.core.orders` (an order is part of
the meaning of flattened leaves and treedefs made since, so clearing it is not a cache's business; it has
its own bound and reset), the registry of named implementations (kept by the layer that fills it, once at
import), and the context of a call, the axis environment and what a trace in progress notes (context
variables, each in the ``context`` module of the layer that gives it its meaning, core's in
:mod:`namedarray.core.context`).

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
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = ["LRU", "LRUFamily", "WeakTable", "SlotFamily", "Slot", "cache", "register", "clear_caches",
           "sizes", "resize"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Entry(NamedTuple):
    clear: Callable[[], None]
    size: Callable[[], int]
    resize: Callable[[int], int] | None


# name -> how to clear, measure and bound every cache the library owns
_CACHES: dict[str, _Entry] = {}


def register(name: str, clear: Callable[[], None], size: Callable[[], int],
             resize: Callable[[int], int] | None = None) -> None:
    """Own a cache kept elsewhere: ``nx.clear_caches()`` calls ``clear``, :func:`sizes` reports ``size()``,
    and :func:`resize` calls ``resize(maxsize)`` (which returns the bound it replaces), if given."""
    _CACHES[name] = _Entry(clear, size, resize)


class LRU(Generic[K, V]):
    """A dict of at most ``maxsize`` entries, least recently used dropped first, safe across threads.

    >>> c = LRU("doc lru", 2)
    >>> c.put("a", 1); c.put("b", 2); c.get("a"); c.put("c", 3)
    1
    >>> c.get("b") is None, len(c)
    (True, 2)
    """

    def __init__(self, name: str | None, maxsize: int):
        self.maxsize = maxsize
        self._data: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        if name is not None:  # a member of an LRUFamily is registered through its family
            register(name, self.clear, self.__len__, self.resize)

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

    def setdefault(self, key: K, value: V) -> V:
        """The value stored for ``key``, else ``value``, stored now (one step, so that two threads that
        built a value for the same key at once end up sharing the first one stored)."""
        with self._lock:
            value = self._data.setdefault(key, value)
            self._data.move_to_end(key)
            self._trim()
            return value

    def resize(self, maxsize: int) -> int:
        """Hold at most ``maxsize`` entries from now on; returns the bound it replaces."""
        with self._lock:
            old, self.maxsize = self.maxsize, maxsize
            self._trim()
            return old

    def _trim(self) -> None:
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class _Members:
    """The members of a family of per-owner caches: each lives as long as its owner (weakly held here)."""

    def __init__(self) -> None:
        self._set: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, member: Any) -> Any:
        with self._lock:
            self._set.add(member)
        return member

    def each(self) -> list:
        with self._lock:
            return list(self._set)


class LRUFamily:
    """One small :class:`LRU` per owner that keeps its own entries (an object whose configuration cannot be
    a shared key), registered as one cache: its size is the sum, its bound is each member's.

    >>> family = LRUFamily("doc family", 2)
    >>> a, b = family.new(), family.new()
    >>> a.put(1, "x"); b.put(1, "y"); b.put(2, "z"); b.put(3, "w")
    >>> sizes()["doc family"], len(b)
    (3, 2)
    """

    def __init__(self, name: str, maxsize: int):
        self.maxsize = maxsize
        self._members = _Members()
        self._lock = threading.Lock()  # guards maxsize
        register(name, self.clear, self.__len__, self.resize)

    def new(self) -> LRU:
        return self._members.add(LRU(None, self.maxsize))

    def _each(self) -> list[LRU]:
        return self._members.each()

    def clear(self) -> None:
        for member in self._each():
            member.clear()

    def resize(self, maxsize: int) -> int:
        with self._lock:
            old, self.maxsize = self.maxsize, maxsize
        for member in self._each():
            member.resize(maxsize)
        return old

    def __len__(self) -> int:
        return sum(len(m) for m in self._each())


class WeakTable:
    """What was built around each live object (a user's function), at most ``per_object`` things each,
    dropped when the object is: the bound is the live objects, which the table never keeps alive.

    ``get`` and ``put`` raise TypeError for an object that cannot be weakly referenced or an unhashable key.

    >>> class F: pass
    >>> table, f = WeakTable("doc weak table", 4), F()
    >>> table.put(f, "twice", 2)
    2
    >>> table.get(f, "twice"), sizes()["doc weak table"]
    (2, 1)
    >>> del f; sizes()["doc weak table"]
    0
    """

    def __init__(self, name: str, per_object: int):
        self.per_object = per_object
        self._data: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        register(name, self.clear, self.__len__, self.resize)

    def get(self, obj: Any, key: Hashable) -> Any:
        with self._lock:
            built = self._data.get(obj)
            return None if built is None else built.get(key)

    def put(self, obj: Any, key: Hashable, value: Any) -> Any:
        """Store ``value`` unless a value for ``(obj, key)`` is there already; returns the one stored."""
        with self._lock:
            built = self._data.get(obj)
            if built is None:
                built = self._data[obj] = {}
            if key not in built and len(built) >= self.per_object:
                built.pop(next(iter(built)))  # the oldest: a function built around with ever new keys
            return built.setdefault(key, value)

    def resize(self, per_object: int) -> int:
        with self._lock:
            old, self.per_object = self.per_object, per_object
            return old

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


class Slot:
    """One value an object keeps from its last call (see :class:`SlotFamily`); reading and replacing it are
    single attribute operations, so threads sharing the object see one value or the other."""

    __slots__ = ("value", "__weakref__")

    def __init__(self) -> None:
        self.value: Any = None


class SlotFamily:
    """One :class:`Slot` per owner (an entry point such as ``nx.jit(f)``), registered as one cache: its size
    is the slots that hold something, and clearing empties them all. Its bound is the live owners.

    >>> family = SlotFamily("doc slots")
    >>> slot = family.new(); slot.value = "compiled"
    >>> sizes()["doc slots"]
    1
    >>> clear_caches(); slot.value is None
    True
    """

    def __init__(self, name: str):
        self._members = _Members()
        register(name, self.clear, self.__len__)

    def new(self) -> Slot:
        return self._members.add(Slot())

    def clear(self) -> None:
        for slot in self._members.each():
            slot.value = None

    def __len__(self) -> int:
        return sum(slot.value is not None for slot in self._members.each())


def cache(name: str, maxsize: int) -> Callable[[Callable[..., V]], Callable[..., V]]:
    """``functools.lru_cache(maxsize)`` (thread-safe, bounded), registered under ``name``.

    Its bound is fixed (``functools.lru_cache`` has no resize): :func:`resize` refuses it.
    """
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
    for entry in list(_CACHES.values()):
        entry.clear()


def sizes() -> dict[str, int]:
    """How many entries each cache holds now, by name."""
    return {name: entry.size() for name, entry in sorted(_CACHES.items())}


def resize(name: str, maxsize: int) -> int:
    """Bound the cache called ``name`` (a key of :func:`sizes`) to ``maxsize`` entries from now on, the
    least recently used dropped first; returns the bound it replaces, so that a caller can put it back.

    >>> kept = LRU("doc lru", 4)
    >>> old = resize("doc lru", 16); resize("doc lru", old)
    16
    """
    entry = _CACHES.get(name)
    if entry is None:
        raise KeyError(f"resize: no cache is called {name!r}; the caches are {sorted(_CACHES)}")
    if entry.resize is None:
        raise ValueError(f"resize: the cache {name!r} has a fixed bound")
    if not isinstance(maxsize, int) or maxsize < 1:
        raise ValueError(f"resize: maxsize must be a positive int, got {maxsize!r}")
    return entry.resize(maxsize)
