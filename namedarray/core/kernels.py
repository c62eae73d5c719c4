"""Eager kernels: the cache that makes every eager named operation one jitted dispatch.

A kernel is ``jax.jit`` of an operation's implementation on *storage* arrays, built once per

* implementation and static configuration (the jax function, axis arguments, keyword options),
* operand layout (each operand's axis names in storage order and its rank),
* axis environment (sizes bound by ``nx.xmap``, resources, rules),

and traced by jax once per operand shapes and dtypes inside it. Three properties keep it correct under reuse:

* **Keys are strict.** Static values that compare equal but mean different things get different kernels:
  ``1``, ``1.0`` and ``True``; ``0.0`` and ``-0.0``; ``'float32'`` and ``np.dtype('float32')``. A NaN
  equals itself (one kernel, not one per call). A call finds its kernel by its raw configuration first
  (stored with its numbers made exact, :class:`_Exact`), so the usual call builds no key at all;
  declarations called on every use pass a :class:`Static` built once. The hottest call sites (a reduction
  over a name, a named dot) keep their own index of kernels (:func:`site`), under a key they build from
  their arguments in a few attribute reads, and call a kernel found there without building anything.
* **Nothing a failed call did stays behind.** A kernel whose first trace fails is dropped, and a kernel
  records its result structure per operand signature only after a trace succeeds, so a rejected call
  cannot change what a later valid call gets.
* **Traces decide once.** Under a trace an operation runs its implementation in Python, and what that
  decides from names, abstract values and the environment is kept in :class:`Plans`, keyed on all of them.
* **Memory is bounded.** User functions in a key (``nx.nmap(lambda v: ...)``) are held weakly: their
  kernels go away with them, as ``jax.jit``'s do. Everything else is a least-recently-used table of at
  most :data:`MAX_KERNELS` kernels. ``nx.clear_caches()`` empties it (and every other nx cache).

>>> import namedarray as nx, jax.numpy as jnp
>>> x = nx.wrap(jnp.array([1, 2], jnp.int32), ["k"])
>>> nx.nmap(jnp.add)(x, 1.0).dtype, nx.nmap(jnp.add)(x, 1).dtype
(dtype('float32'), dtype('int32'))
"""

from __future__ import annotations

import collections
import copy
import functools
import itertools
import math
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import caches

__all__ = ["MAX_KERNELS", "Static", "kernel_for", "site", "file", "stats", "size", "resize", "Plans", "plans"]

#: The most eager kernels kept at once (least recently used first out). Each holds a compiled executable
#: per operand signature it has seen (about 1.4 MB on CPU, as a ``jax.jit`` executable does), so this bounds
#: the memory of a session that keeps meeting new axis names, einsum specs or static arguments to about
#: 360 MB; a kernel evicted and needed again is rebuilt.
MAX_KERNELS = 256


class _Stats:
    """Counters the tests read to check the mechanism (one dispatch per eager op), not timings.

    Each is an ``itertools.count`` that ``next`` advances: one atomic C call, so threads running eager ops
    at once lose no count, and the eager path takes no lock (a lock cost it 0.5 us a call).
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.eager = itertools.count()
        self.built = itertools.count()

    @property
    def eager_calls(self) -> int:
        return next(copy.copy(self.eager))  # the count so far, read without advancing it

    @property
    def kernels_built(self) -> int:
        return next(copy.copy(self.built))


stats = _Stats()


# --------------------------------------------------------------------------------------------------------
# Keys


class Static(tuple):
    """A static configuration declared once (``nx.add``'s ``(jnp.add, "nx.add", ())``): its own key.

    It equals only itself and hashes by identity, so a call with it costs no key building at all; it must
    hold only what lives as long as the declaration (jax's own functions, names, options).
    """

    __slots__ = ()
    __hash__ = object.__hash__
    __eq__ = object.__eq__
    __ne__ = object.__ne__


def _typed(v: Any) -> Any:
    """``v`` as a strict, hashable key part: numbers keyed by type and exact value, user functions weakly."""
    t = type(v)
    if t is str or t in _PLAIN:
        return v
    if t is bool:  # flags (keepdims, ...): the commonest numbers in a static configuration
        return _TRUE if v else _FALSE
    if t is tuple:
        return tuple([x if type(x) is str else _typed(x) for x in v]) if v else v
    key = _KEYS.get(t)
    if key is not None:
        return key(v)
    if isinstance(v, np.generic):
        return (t, v.tobytes())
    return v if t.__eq__ is object.__eq__ else (t, v)  # np.dtype('float32') == 'float32', but not as keys


def _tuple_key(v: tuple) -> tuple:
    return tuple([x if type(x) is str else _typed(x) for x in v])


def _function_key(v: Any) -> Any:
    if id(v) in _JAX_FUNCTIONS:  # jax's own module-level functions live as long as jax
        return v
    return weakref.ref(v)  # the same shared ref object each time: cheap, and keeps nothing alive


def _unhashable(v: Any):
    raise TypeError("unhashable static configuration")  # the caller runs op by op


def _plain_types() -> frozenset:
    """Types whose values are keys as they are (equality means sameness, no user function inside)."""
    plain = {str, type(None), type, type(jnp.exp), type(Ellipsis), Static}
    plain.add(type(jax.tree.structure(0)))
    return frozenset(plain)


def _float_key(v: float) -> str:
    # hex tells -0.0 from 0.0 and makes every NaN equal to itself, but drops a NaN's sign (signbit, copysign)
    return v.hex() if v == v else ("-nan" if math.copysign(1.0, v) < 0 else "nan")


_PLAIN = _plain_types()
_UFUNC = type(jnp.add)
_TRUE, _FALSE = (bool, True), (bool, False)
# how each type of static value becomes a key part (types not listed are keys as they are)
_KEYS: dict[type, Callable[[Any], Any]] = {
    tuple: _tuple_key,
    int: lambda v: (int, v),
    bool: lambda v: (bool, v),
    float: lambda v: (float, _float_key(v)),
    complex: lambda v: (complex, _float_key(v.real), _float_key(v.imag)),
    types.FunctionType: _function_key,
    functools.partial: _function_key,
    _UFUNC: weakref.ref,  # jnp.add & co. hash in Python (slow); a shared weak reference caches the hash
    types.MethodType: lambda v: _method_key(v),
    list: _unhashable,
    dict: _unhashable,
}


def _jax_functions() -> frozenset:
    """Ids of the functions of jax's numpy, lax, nn and random modules (and ``jax.scipy.special`` when the
    program imported it first: importing it here would add to every ``import namedarray``): kept alive by
    their modules, so keys hold them as they are (no weak reference to make on every call). A function left
    out is keyed by a weak reference, which is as correct and a little slower."""
    ids = set()
    special = sys.modules.get("jax.scipy.special")
    for module in (jnp, jnp.linalg, jnp.fft, jax.lax, jax.nn, jax.random, *([special] if special else [])):
        ids.update(id(f) for f in vars(module).values() if type(f) is types.FunctionType)
    return frozenset(ids)


_JAX_FUNCTIONS = _jax_functions()


def _method_key(m: types.MethodType) -> Any:
    try:
        return (weakref.ref(m.__self__), m.__func__)
    except TypeError:  # an instance without weakref support: held strongly, bounded by the table's size
        return m


class _Exact:
    """A number in a stored key that equals only a number of its own type and exact value.

    It hashes as the number does, so the raw configuration of a later call (``(..., 0, ...)``) finds the
    stored key by its ordinary hash, and the comparison the dictionary makes then tells ``0`` from
    ``0.0``, ``False`` and ``-0.0`` (a NaN has an identity hash and never matches: that call takes the
    typed key).
    """

    __slots__ = ("value", "type", "hash", "exact")

    def __init__(self, value):
        self.value = value
        self.type = type(value)
        self.hash = hash(value)
        self.exact = self.type is not float and self.type is not complex  # same type: == is exact

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other) -> bool:
        if type(other) is not self.type:
            return False
        if self.exact:
            return other == self.value
        return _KEYS[self.type](other) == _KEYS[self.type](self.value)  # -0.0, NaN sign

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)


_NUMBERS = frozenset({bool, int, float, complex})
# types whose values may equal a value of another type (``np.dtype('float32') == 'float32'``,
# ``jnp.int32 == np.int32``): a raw key compares them with their type
_EXACT_TYPES = frozenset({np.dtype, type(jnp.int32), type(jax.tree.structure(0))})
# types whose values are equal only to themselves (or, for names, to the same name): raw keys as they are
_IDENTICAL = _PLAIN - _EXACT_TYPES
_WEAK_TYPES = frozenset({types.FunctionType, functools.partial, _UFUNC, types.MethodType})


class _NotRaw(Exception):
    pass


def _exact(v: Any) -> Any:
    """``v`` as a stored raw key: numbers and values of other types that may equal a value of another type
    (``np.dtype('float32') == 'float32'``) made :class:`_Exact`; raise _NotRaw for what a raw key cannot
    hold (a user function, held weakly)."""
    t = type(v)
    if t in _IDENTICAL:
        return v
    if t is tuple:
        return tuple(map(_exact, v))
    if t is types.FunctionType:
        if id(v) in _JAX_FUNCTIONS:
            return v
        raise _NotRaw
    if t in _NUMBERS or t in _EXACT_TYPES or isinstance(v, np.dtype):
        return _Exact(v)
    if t.__eq__ is object.__eq__ and t not in _WEAK_TYPES:  # equal only to itself
        return v
    raise _NotRaw


def _raw_key(impl: Callable, static: Any, layout: tuple, env: Any) -> tuple | None:
    """The key under which later calls find a kernel by their raw configuration, or None."""
    try:
        return (impl, _exact(static), layout, env)
    except _NotRaw:
        return None


def _weak_parts(v: Any, out: list) -> None:
    """Collect the objects a key holds weakly (the kernel must not keep them alive either)."""
    t = type(v)
    if t is tuple:
        for x in v:
            _weak_parts(x, out)
    elif (t is types.FunctionType or t is functools.partial or t is _UFUNC) and id(v) not in _JAX_FUNCTIONS:
        out.append(v)
    elif t is types.MethodType:
        try:
            weakref.ref(v.__self__)
            out.append(v.__self__)
        except TypeError:
            pass


class _Weak:
    """A static configuration with its user functions replaced by weak references, restored on use."""

    __slots__ = ("frozen",)

    def __init__(self, static: Any):
        self.frozen = _freeze(static)

    def thaw(self) -> Any:
        return _thaw(self.frozen)


def _freeze(v):
    t = type(v)
    if t is tuple:
        return tuple(map(_freeze, v))
    if t is types.FunctionType or t is functools.partial or t is _UFUNC:
        return _Ref(weakref.ref(v))
    if t is types.MethodType:
        try:
            return _BoundRef(weakref.ref(v.__self__), v.__func__)
        except TypeError:  # held strongly by the key too (see _method_key)
            return v
    return v


class _Ref:
    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref

    def get(self):
        obj = self.ref()
        if obj is None:  # the cache drops a kernel with its functions; a retrace after that is a bug
            raise RuntimeError("an eager kernel outlived the function it was built for")
        return obj


class _BoundRef(_Ref):
    __slots__ = ("func",)

    def __init__(self, ref, func):
        super().__init__(ref)
        self.func = func

    def get(self):
        return types.MethodType(self.func, super().get())


def _thaw(v):
    t = type(v)
    if t is tuple:
        return tuple(_thaw(x) for x in v)
    if t is _Ref or t is _BoundRef:
        return v.get()
    return v


# --------------------------------------------------------------------------------------------------------
# Kernels


_RECORD_LOCK = threading.Lock()


class _Result:
    """The result structure a kernel's traces recorded, per operand signature.

    Almost every kernel gives one structure whatever the sizes (``single``), read without any per-call
    work; a kernel whose structure depends on sizes (``unstack``, an ``nx.nmap`` of such a function) looks
    its structure up by the signature of the call's operands.
    """

    __slots__ = ("single", "by_signature", "varies")

    def __init__(self):
        self.single = None
        self.by_signature: dict = {}
        self.varies = False

    def record(self, signature: tuple, structure: tuple) -> None:
        with _RECORD_LOCK:  # traces of two signatures in two threads must not both take `single`
            self.by_signature[signature] = structure
            if self.single is None:
                self.single = structure
            elif structure != self.single:
                self.varies = True

    def lookup(self, datas: list) -> tuple:
        if not self.varies:
            return self.single
        return self.by_signature[tuple(_signature(d) for d in datas)]


def _signature(d: Any) -> tuple | None:
    """What jax keys a trace on, for one operand: shape, dtype and weak type (as jit would see them)."""
    if d is None:
        return None
    if isinstance(d, (list, tuple)):  # a nested list operand: jit sees a pytree of scalars
        return tuple(map(_signature, d))
    aval = d.aval if hasattr(d, "aval") else jax.typeof(d)
    return (tuple(aval.shape), aval.dtype, bool(getattr(aval, "weak_type", False)))


class Kernel:
    """One jitted implementation on storage arrays, for one layout of its operands."""

    __slots__ = ("jitted", "result", "ok", "key", "raw", "weak_refs", "tick", "aliases")

    def __init__(self, impl: Callable, static: Any, layout: tuple, make: Callable, unpack: Callable):
        result = self.result = _Result()
        self.ok = False
        self.key = None
        self.raw = None
        self.aliases: list = []  # (site index, key) pairs that find this kernel: removed with it
        parts: list = []
        _weak_parts(static, parts)
        self.weak_refs = parts  # what the table turns into weak references with callbacks (put)
        if parts:  # the kernel must not keep alive what its key holds weakly
            weak = _Weak(static)

            def get_static():
                return weak.thaw()
        else:
            def get_static():
                return static

        def on_storage(*datas):
            ops = [d if lay is None or lay[0] is None else make(d, lay[0]) for d, lay in zip(datas, layout)]
            out = impl(get_static(), *ops)
            leaves, structure = unpack(out)
            result.record(tuple(_signature(d) for d in datas), structure)
            return leaves

        self.jitted = jax.jit(on_storage)

    def __call__(self, datas: list, pack: Callable) -> Any:
        out = self.jitted(*datas)
        self.ok = True
        result = self.result
        return pack(out, result.single if not result.varies else result.lookup(datas))


class _Table:
    """The least-recently-used table of kernels, safe under threads.

    A hit only stamps the kernel with a tick (no reordering on the hot path); an insert past the size
    evicts the kernel with the oldest stamp. A kernel whose static configuration holds only names, numbers,
    options and jax's own functions (the usual case) is also in ``raw``, found by the raw configuration
    of a call (:func:`_raw_key`), so a hit builds no typed key.
    """

    def __init__(self, size: int):
        self.size = size
        self.kernels: dict = {}
        self.raw: dict = {}
        self.lock = threading.Lock()
        self.dead: collections.deque = collections.deque()  # keys whose user functions were collected
        self.clock = itertools.count()
        self.sites: list[dict] = []  # the call sites' own indexes (site()), emptied with the table

    def get(self, key) -> Kernel | None:
        kernel = self.kernels.get(key)
        if kernel is not None:
            kernel.tick = next(self.clock)
        return kernel

    def put(self, key, kernel: Kernel, weak_parts: list, raw: tuple | None) -> None:
        dead = self.dead

        def forget(_ref, key=key):
            dead.append(key)  # from the garbage collector: only note it, the table is cleaned below

        # the callbacks live as long as the kernel: evicted first, it takes them along and none fires
        kernel.weak_refs = tuple(weakref.ref(p, forget) for p in weak_parts)
        kernel.tick = next(self.clock)
        kernel.key = key
        with self.lock:
            self._purge()
            self._remove(key)
            self.kernels[key] = kernel
            if raw is not None:
                kernel.raw = raw
                self.raw[raw] = kernel
            while len(self.kernels) > self.size:
                self._remove(min(self.kernels, key=lambda k: self.kernels[k].tick))

    def drop(self, key, kernel: Kernel) -> None:
        with self.lock:
            if self.kernels.get(key) is kernel:
                self._remove(key)

    def _remove(self, key) -> None:
        kernel = self.kernels.pop(key, None)
        if kernel is None:
            return
        if kernel.raw is not None and self.raw.get(kernel.raw) is kernel:
            del self.raw[kernel.raw]
        for index, alias in kernel.aliases:
            if index.get(alias) is kernel:
                del index[alias]
        kernel.aliases = []

    def file(self, index: dict, alias: Any, kernel: Kernel) -> None:
        with self.lock:
            # an evicted kernel is not filed again (nothing would remove it), nor one that holds user
            # functions weakly (its key may die before the table hears of it), nor past MAX_ALIASES keys
            if (self.kernels.get(kernel.key) is not kernel or kernel.weak_refs
                    or len(kernel.aliases) >= MAX_ALIASES or alias in index):
                return
            index[alias] = kernel
            kernel.aliases.append((index, alias))

    def _purge(self) -> None:
        while self.dead:
            self._remove(self.dead.popleft())

    def clear(self) -> None:
        with self.lock:
            self.kernels.clear()
            self.raw.clear()
            self.dead.clear()
            for index in self.sites:
                index.clear()

    def __len__(self) -> int:
        with self.lock:
            self._purge()
            return len(self.kernels)


_table = _Table(MAX_KERNELS)
#: The table's clock: a kernel found outside the table (a call site's index) takes ``next(clock)`` as its
#: stamp of last use, as a lookup in the table gives it.
clock = _table.clock


def kernel_for(impl: Callable, static: Any, layout: tuple, env: Any, make: Callable,
               unpack: Callable) -> Kernel | None:
    """The kernel for this call, built on first use; None when ``static`` cannot be a key (unhashable).

    ``make(data, names)`` builds a NamedArray inside the trace; ``unpack(out)`` splits the implementation's
    result into (storage leaves, structure) and the caller's ``pack`` puts it back together.
    """
    try:
        kernel = _table.raw.get((impl, static, layout, env))
        if kernel is not None:
            kernel.tick = next(_table.clock)
            return kernel
        key = (impl, _typed(static), layout, env)
        kernel = _table.get(key)
    except TypeError:  # a list or dict inside: no key at all
        return None
    if kernel is None:
        kernel = Kernel(impl, static, layout, make, unpack)
        _table.put(key, kernel, kernel.weak_refs, _raw_key(impl, static, layout, env))
        next(stats.built)
    return kernel


# The most keys of call sites one kernel is filed under: a site's key is a function of the kernel's (one per
# spelling of an environment at most), so this bounds what a site holds by the table's size
MAX_ALIASES = 4


def site() -> dict:
    """A new index of kernels for one call site: ``index.get(key)`` finds a kernel that an earlier call at
    the site ran under ``key`` and :func:`file` put there.

    The site builds ``key`` from its arguments (names, flags checked by identity, the axis environment), so
    that it determines the kernel's whole key: the implementation and static configuration the site would
    pass, the operands' layout and the environment. The ranks in the layout may be left out: a kernel reads
    only the names of its layout, and jax traces it once per shape, so a kernel filed for one rank gives
    another rank's result as that rank's own kernel would. Entries go when their kernel leaves the table
    (evicted, ``nx.clear_caches()``), so an index holds at most ``MAX_ALIASES`` keys per kernel in the table.
    """
    index: dict = {}
    _table.sites.append(index)
    return index


def file(index: dict, key: Any, kernel: Kernel) -> None:
    """Let calls at the site of ``index`` find ``kernel`` under ``key`` (after a call of it succeeded)."""
    if key not in index:
        _table.file(index, key, kernel)


def forget_failed(kernel: Kernel) -> None:
    """Drop ``kernel`` if no call of it ever succeeded (its first trace raised): nothing stays behind."""
    if not kernel.ok:
        _table.drop(kernel.key, kernel)




def size() -> int:
    """The number of eager kernels held now."""
    return len(_table)


def resize(max_kernels: int) -> int:
    """Hold at most ``max_kernels`` eager kernels from now on (the least recently used go first); returns
    the bound it replaces. For memory budgets, and for tests that need a small table.

    >>> old = resize(64); resize(old)
    64
    """
    global MAX_KERNELS
    with _table.lock:
        old, MAX_KERNELS = _table.size, max_kernels
        _table.size = max_kernels
    return old


caches.register("eager kernels", _table.clear, _table.__len__, resize)


# --------------------------------------------------------------------------------------------------------
# Trace-time plans


class Plans:
    """What an operation decided at trace time from names, shapes, dtypes and the environment alone, kept
    so that the next trace of the same layout decides nothing: a bounded table, read without a lock.

    Under a trace every named operation runs its implementation in Python (there is no kernel to reuse):
    aligning names, checking sizes, choosing a contraction's dimension numbers. All of that is a function
    of the operands' names and abstract values (shape, dtype, weak type, sharding) and of the axis
    environment, so a call site keys what it decided on exactly those, and a hit skips to the jax calls it
    decided on. A key holds abstract values (interned by jax, compared as values), never a tracer. A call
    that fails stores nothing; a full table drops its oldest entry. ``nx.clear_caches()`` empties it.

    >>> p = Plans("doc plans", 2)
    >>> p.put("a", 1); p.put("b", 2); p.put("c", 3)
    >>> p.get("a"), p.get("c"), len(p)
    (None, 3, 2)
    """

    def __init__(self, name: str, maxsize: int = 4096):
        self.table: dict = {}
        self.maxsize = maxsize
        self.get = self.table.get  # the hot path: one C call, no lock (a dict read is atomic)
        self._lock = threading.Lock()
        caches.register(name, self.table.clear, self.__len__, self.resize)

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            table = self.table
            while len(table) >= self.maxsize and table:
                del table[next(iter(table))]  # the oldest entry first (dicts keep insertion order)
            table[key] = value

    def resize(self, maxsize: int) -> int:
        with self._lock:
            old, self.maxsize = self.maxsize, maxsize
            while len(self.table) > maxsize:
                del self.table[next(iter(self.table))]
            return old

    def __len__(self) -> int:
        return len(self.table)


#: The library's trace-time plans, one table: each call site's keys begin with a tag of its own
plans = Plans("trace-time plans", 8192)
