"""Boundary orders: the one storage order in which each set of names crosses the pytree boundary.

Named axes are unordered, but a flattened leaf is a positional array: when a NamedArray flattens
(``jax.tree.leaves``, every jit argument and result, ``scan`` carries, ``cond`` branches) its named axes
must be laid out in *one* order per set of names, so that equal named shapes give equal pytree structure.
This module holds that order, and the rule for it is:

    **a set's boundary order is the order it first flattened in, in this job, and that order travels with
    every value that leaves the job.**

* *First flattened* keeps named code as fast as positional code whatever the names are called: parameters,
  batches and optimiser state cross jit in the order the program built them in, which is the order a
  positional programmer would have chosen (a sorted rule was measured at 1.04-1.10x a GPT's step time,
  depending on how the names are spelled; see README, "Speed").
* *In this job*: in a ``jax.distributed`` job every process asks the job's coordination service before it
  gives a set its first order. The first process to flatten a set publishes its order; every other process
  adopts it, whatever it flattened first itself. So a global array assembled from several processes
  (``nx.jit`` results, ``nx.from_process_local``, ``.shard()``) means the same on every process. The
  question costs one round trip the first time this process meets a set, never on later flattens, and no
  process waits for another to reach any point of the program. Orders a process gave before it joined the
  job (``nx.fix_canonical_order`` at import, abstract values flattened at start-up) are agreed the first
  time it asks in the job (:func:`sync_with_job`).
* *Travels*: what leaves the job does not rely on this table. A flattened NamedArray's key path names its
  order (``.data[embed,mlp]``), so a checkpoint keyed by path (orbax) records the order of every leaf and
  refuses a target whose order differs, and ``nx.restore_checkpoint`` restores by name; a pickle holds the
  value's names and its own storage; safetensors files hold the names (``nx.save_safetensors``).

The table only grows while a program runs: an order given out is part of the meaning of every treedef and
flattened leaf list made since, so it never changes under them. It holds at most :data:`MAX_ORDERS` sets
besides the ones the program fixes; a set met after that flattens in sorted order, which every later flatten
of it repeats, and a fixed-size filter remembers that it did, so fixing such a set to another order is an
error, never a second order. In a job the bound is the job's: the service holds at most
:data:`MAX_ORDERS` order keys (plus two counters), whatever the processes create; once they are spent,
a set the job has no key for flattens in sorted order on every process, and fixing one to another order
is an error (another process may already have flattened it sorted). ``nx.reset_canonical_orders()``
forgets the table for a fresh start (test set-up): values keep their meaning (they hold their names), but
a treedef or leaf list kept from before must not be combined with one made after.

Why a table with history rather than an order carried by each value (Penzai's and Haliax's way, where
equal named shapes in two orders are two pytree structures): the table keeps every flatten of a set alike,
so ``jax.tree.map``, ``lax.cond`` and ``scan`` over values built in different orders work as they do on
positional arrays, and the first-flattened order costs nothing against positional code (a sorted rule
costs 4-10% of a GPT step, see README "Speed"). What history costs is agreement, and every path on which
an order meets another process goes through it: a flatten checks, in one attribute read, whether the
process joined a job since it last agreed (so orders given before ``jax.distributed.initialize`` are
agreed even when only plain ``jax.jit`` runs after it); what leaves the job carries its order itself.
``nx.fix_canonical_order`` gives sets an order before anything flattens them.

>>> import namedarray as nx, jax, jax.numpy as jnp
>>> _ = jax.tree.leaves(nx.wrap(jnp.zeros((2, 3)), ["seq_o", "batch_o"]))
>>> nx.canonical_order(["batch_o", "seq_o"])
('seq_o', 'batch_o')
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable

from ..errors import AxisSpecError, NamedAxisError, wrong_type
from .shape import check_names

try:
    from jax._src import distributed as _distributed
except ImportError:  # a jax without it: every process of a job must then fix its orders alike
    _distributed = None

__all__ = ["MAX_ORDERS", "canonical", "canonical_order", "check_job", "fix_canonical_order",
           "reset_canonical_orders", "sync_with_job", "job_client", "order_key", "parse_order_key", "size"]

MAX_ORDERS = 65_536

# name set -> its boundary order; only grows (see the essay), guarded by _LOCK where it is written
_ORDERS: dict[frozenset, tuple[str, ...]] = {}
_LOCK = threading.Lock()
# callbacks run by reset_canonical_orders (modules above keep caches derived from the table)
_ON_RESET: list = []
# the sets nx.fix_canonical_order gave, and the id of the job client the table was last agreed with (an id,
# not the client: a module global holding the client would keep it alive past jax.distributed.shutdown,
# and its destruction at interpreter exit then hangs waiting on a coordination service that is gone)
_FIXED: set[frozenset] = set()
_SYNCED: int | None = None


class _Seen:
    """A fixed-size Bloom filter of name sets: never forgets a set it was given, sometimes claims one it
    was not (then a fix is refused that could have been kept: an error, never a second order). 2**20 bits
    (128 KiB) and 3 probes answer wrongly about 1 set in 30 after a million sets past the bound."""

    BITS = 1 << 20

    def __init__(self) -> None:
        self._bits = bytearray(self.BITS // 8)

    def _probes(self, key: frozenset):
        digest = hashlib.blake2b(json.dumps(sorted(key)).encode(), digest_size=12).digest()
        return [int.from_bytes(digest[i:i + 4], "little") % self.BITS for i in (0, 4, 8)]

    def add(self, key: frozenset) -> None:
        for b in self._probes(key):
            self._bits[b >> 3] |= 1 << (b & 7)

    def __contains__(self, key: frozenset) -> bool:
        return all(self._bits[b >> 3] >> (b & 7) & 1 for b in self._probes(key))

    def clear(self) -> None:
        self._bits = bytearray(self.BITS // 8)


# the sets that flattened sorted past MAX_ORDERS in this process (bounded, see _Seen)
_OVERFLOW = _Seen()


def canonical(names: Iterable[str]) -> tuple[str, ...]:
    """The boundary order of a set of names: what flattening a NamedArray with exactly these names gives.

    >>> canonical(("seq_doc", "batch_doc")), canonical(("batch_doc", "seq_doc"))
    (('seq_doc', 'batch_doc'), ('seq_doc', 'batch_doc'))
    """
    names = tuple(names)
    check_job()
    order = _ORDERS.get(frozenset(names))
    return order if order is not None else _first(names)


def check_job() -> None:
    """Agree with the job if this process joined one since it last did: one attribute read otherwise.

    Every flatten calls this, so an order given before ``jax.distributed.initialize`` is agreed before any
    value of the job is laid out in it, whichever path lays it out (plain ``jax.jit`` included)."""
    if _distributed is not None:
        client = _distributed.global_state.client
        if client is not None and id(client) != _SYNCED:
            sync_with_job()


def _first(names: tuple[str, ...]) -> tuple[str, ...]:
    key = frozenset(names)
    with _LOCK:
        order = _ORDERS.get(key)
        if order is not None:
            return order
        if job_client() is not None:
            order = _job_order(names, fixing=False)
            if order is not _UNKEYED:
                _ORDERS[key] = order
                return order
            return tuple(sorted(names))
        if len(_ORDERS) >= MAX_ORDERS:
            _OVERFLOW.add(key)  # flattens sorted from now on: a later fix to another order must fail
            return tuple(sorted(names))
        _ORDERS[key] = names
        return names


def canonical_order(names: Iterable[str]) -> tuple[str, ...] | None:
    """The order in which NamedArrays with exactly these names flatten (``jax.tree.leaves``, jit arguments),
    or None while none has flattened yet and no order was fixed (asking fixes nothing).

    >>> import namedarray as nx, jax, jax.numpy as jnp
    >>> _ = jax.tree.leaves(nx.wrap(jnp.zeros((2, 3)), ["mlp_doc", "embed_doc"]))
    >>> nx.canonical_order(["embed_doc", "mlp_doc"])
    ('mlp_doc', 'embed_doc')
    """
    names = _name_set(names, "nx.canonical_order")
    return _ORDERS.get(frozenset(names))


def fix_canonical_order(*orders: Iterable[str]) -> None:
    """Give each set of names its boundary order before anything flattens it.

    Not needed for correctness: the processes of a job agree on every order by themselves, and checkpoints,
    pickles and safetensors files carry their orders. Fix an order to choose the layout a set crosses jit
    in (the one its hottest uses want), or to keep one layout across programs so that checkpoints restore
    without a transpose. Fixing a set again to the same order is a no-op; to another order (in this
    process, or in another process of the job), an :class:`~namedarray.errors.AxisSpecError` naming both
    orders: values already flattened would be misread.

    >>> import namedarray as nx
    >>> nx.fix_canonical_order(["batch_doc2", "seq_doc2"])
    >>> nx.canonical_order(["seq_doc2", "batch_doc2"])
    ('batch_doc2', 'seq_doc2')
    """
    where = "nx.fix_canonical_order"
    sync_with_job()
    for i, order in enumerate(orders):
        order = _name_set(order, where, f"argument {i}", ordered=True)
        key = frozenset(order)
        with _LOCK:
            got = _ORDERS.get(key)
            if got is None:
                got = _job_order(order, fixing=True) if job_client() is not None else order
                if got is _UNKEYED or (job_client() is None and key in _OVERFLOW):
                    # past the bound a set without a recorded order flattens sorted, maybe already
                    got = tuple(sorted(order))
                    if got != order:
                        raise AxisSpecError(
                            f"{where}: the names {sorted(order)} may already flatten in the sorted order "
                            f"{got}: more than MAX_ORDERS = {MAX_ORDERS} name sets got an order "
                            + ("in this job" if job_client() is not None else "in this process")
                            + ", and sets met since flatten sorted; fix orders before the program makes "
                            "that many sets (names built per call, e.g. f-strings with a counter, are the "
                            "usual cause)")
                _ORDERS[key] = got  # a set the program names: recorded even past MAX_ORDERS
                _FIXED.add(key)
        if got != order:
            raise AxisSpecError(
                f"{where}: the names {sorted(order)} already flatten in the order {got}, not {order}: fix it "
                "before the first value with these names is flattened (passed to jit, jax.tree.leaves, ...)"
                + (" in any process of this job" if job_client() is not None else ""))


def reset_canonical_orders() -> None:
    """Forget every boundary order, as a fresh process starts: for test set-up and fresh starts.

    Values are unaffected (each holds its names in its own storage order), but a treedef or a list of
    flattened leaves kept from before the reset must not be combined with one made after it: a set may get
    another order. In a ``jax.distributed`` job the orders the job agreed on come back on first use.

    >>> import namedarray as nx
    >>> nx.reset_canonical_orders()
    """
    global _SYNCED, _FULL
    with _LOCK:
        _ORDERS.clear()
        _FIXED.clear()
        _OVERFLOW.clear()
        _SPENT.clear()
        _SYNCED = _FULL = None
    for clear in _ON_RESET:
        clear()


def on_reset(clear) -> None:
    """Have :func:`reset_canonical_orders` also call ``clear`` (a cache derived from the table)."""
    _ON_RESET.append(clear)


def size() -> int:
    """The number of name sets with an order now."""
    return len(_ORDERS)


def _name_set(names: Iterable[str], where: str, what: str = "names",
              ordered: bool = False) -> tuple[str, ...]:
    if isinstance(names, str):
        raise AxisSpecError(f"{where}: expected a sequence of names, got the string {names!r} (write "
                            f"[{names!r}, ...] for a set with more than one name)")
    if ordered and isinstance(names, (set, frozenset)):  # its order would be the hash order of this process
        raise wrong_type(where, what, names, "a sequence of axis names in the order to fix (a set has none)")
    if names is None or isinstance(names, bytes) or not hasattr(names, "__iter__"):
        raise wrong_type(where, what, names, "a sequence of axis names")
    return check_names(tuple(names), where)


# --------------------------------------------------------------------------------------------------------
# Agreement across the processes of a job: the coordination service's key-value store


def job_client():
    """The coordination service client of a ``jax.distributed`` job of several processes, else None (what
    the processes of a job agree through: boundary orders here, ``nx.plan_sharding``'s ranking)."""
    if _distributed is None:
        return None
    state = _distributed.global_state
    if state.client is None or (state.num_processes or 1) < 2:
        return None
    return state.client


# how long a process waits for the service or for another process's publication before it says so
_TIMEOUT_MS = 30_000


def sync_with_job() -> None:
    """Agree with the job on the orders this process gave before it joined one (``jax.distributed``).

    A process can give orders before ``jax.distributed.initialize``: ``nx.fix_canonical_order`` at import
    time, or a flatten of abstract values (``jax.eval_shape``). The first flatten after it joins (any
    flatten: :func:`check_job`), and ``nx.jit``, ``nx.shard``, ``nx.from_process_local``, publish those
    orders and adopt the job's where another process published first; nothing concrete can have flattened
    before the job started, so no value was laid out in the order it gives up. A *fixed* order the job holds
    otherwise is an :class:`~namedarray.errors.AxisSpecError` naming both orders.
    """
    global _SYNCED
    if _distributed is None or _distributed.global_state.client is None:
        return
    client = _distributed.global_state.client
    if id(client) == _SYNCED:
        return
    changed = False
    try:
        with _LOCK:
            if id(client) == _SYNCED:
                return
            if job_client() is not None:
                for key in sorted(_ORDERS, key=sorted):  # every process publishes in the same order
                    order = _ORDERS[key]
                    got = _job_order(order, fixing=key in _FIXED)
                    if got is _UNKEYED:  # the job's keys are spent: the set flattens sorted everywhere
                        got = tuple(sorted(order))
                    if got == order:
                        continue
                    if key in _FIXED:
                        raise AxisSpecError(
                            f"nx.fix_canonical_order: this process fixed the names {sorted(order)} to the "
                            f"order {order} before joining the job, and another process of the job uses "
                            f"{got}")
                    _ORDERS[key] = got
                    changed = True
            _SYNCED = id(client)
    finally:
        if changed:  # also when a fixed order was refused midway: no cache may keep an order given up
            for clear in _ON_RESET:
                clear()


# _job_order's answer for a set the job holds no key for once its MAX_ORDERS keys are spent
_UNKEYED = ("<sorted: no key>",)
_COUNT, _DONE = "namedarray/orders_count", "namedarray/orders_done"
_PREFIX = "namedarray/orders/"  # + the sorted names as JSON: one key per set, its order as the value
# (job client id, bound) once this process saw the job's keys spent and every allowed write landed
_FULL: tuple[int, int] | None = None
# the job's orders as they stand once _FULL is set: no key is written after that, so one read of the
# service's directory (at most MAX_ORDERS entries) answers every later set locally; without it a program
# past the bound paid a round trip to the service on every flatten of every set the job holds no key for
_SPENT: dict[frozenset, tuple[str, ...]] = {}


def _job_order(order: tuple[str, ...], fixing: bool) -> tuple[str, ...]:
    """``order``, published as the job's order of its set, or the order another process published first,
    or :data:`_UNKEYED` when the job's :data:`MAX_ORDERS` keys are spent and none names this set.

    Publishing is a write that fails when the key exists (first writer wins, atomically at the service), so
    no process waits for another to reach any point of the program: each asks only when it meets the set.
    The bound is kept by a counter every writer increments before it writes (and a second one after): a
    process that finds the count past the bound waits until every write the count allowed has landed, then
    reads; after that no process writes a new order, so a set without a key is sorted everywhere.
    """
    client = job_client()
    if client is None:
        return order
    where = "nx.fix_canonical_order" if fixing else "flattening a NamedArray"
    key = _PREFIX + json.dumps(sorted(order))

    def fail(why) -> NamedAxisError:
        return NamedAxisError(
            f"{where}: could not agree on the boundary order of the names {sorted(order)} with the other "
            f"processes of this job through the coordination service ({why})")

    global _FULL
    if _FULL == (id(client), MAX_ORDERS):  # spent, and every allowed write landed: nothing more can come
        return _SPENT.get(frozenset(order), _UNKEYED)
    got = _try_get(client, key)
    if got is not None:
        return tuple(json.loads(got))
    try:
        allowed = client.key_value_increment(_COUNT, 1) <= MAX_ORDERS
    except Exception as e:  # the error types are the runtime's
        raise fail(e) from None
    if allowed:
        try:
            try:
                client.key_value_set(key, json.dumps(list(order)))
                return order
            except Exception as e:  # the key exists: another process was first
                try:
                    return tuple(json.loads(client.blocking_key_value_get(key, _TIMEOUT_MS)))
                except Exception:
                    raise fail(e) from None
        finally:
            client.key_value_increment(_DONE, 1)
    deadline = time.monotonic() + _TIMEOUT_MS / 1000
    while client.key_value_increment(_DONE, 0) < MAX_ORDERS:  # writes the count allowed, still landing
        if time.monotonic() > deadline:
            raise fail(f"a process allowed to publish an order did not finish within {_TIMEOUT_MS // 1000} s")
        time.sleep(0.01)
    try:
        held = client.key_value_dir_get(_PREFIX)
    except Exception as e:  # the error types are the runtime's
        raise fail(e) from None
    _SPENT.clear()
    for _, value in held:
        got_order = tuple(json.loads(value))
        _SPENT[frozenset(got_order)] = got_order
    _FULL = (id(client), MAX_ORDERS)
    return _SPENT.get(frozenset(order), _UNKEYED)


def _try_get(client, key: str) -> str | None:
    try:
        return client.key_value_try_get(key)
    except Exception:  # not found (the runtime's error type)
        return None


def job_keys() -> int:
    """How many boundary orders the job's coordination service holds (0 outside a job): at most
    :data:`MAX_ORDERS`, plus the two counters that keep that bound."""
    client = job_client()
    if client is None:
        return 0
    return len(client.key_value_dir_get(_PREFIX))


# --------------------------------------------------------------------------------------------------------
# The order in a key path: what a path-keyed checkpoint records of each leaf


def order_key(names: tuple[str, ...]) -> str:
    """The key under which a NamedArray's storage flattens: ``data`` and its names in storage order.

    A checkpoint keyed by path records each leaf's order this way, so a restore into a target laid out in
    another order finds no matching path (an error), never a transposed leaf. ``,``, ``]`` and ``\\`` in a
    name are escaped with ``\\``.

    >>> order_key(("embed", "mlp")), order_key(())
    ('data[embed,mlp]', 'data')
    """
    if not names:
        return "data"
    return "data[" + ",".join(_escape(n) for n in names) + "]"


def parse_order_key(key: str) -> tuple[str, ...] | None:
    """The names :func:`order_key` wrote into ``key`` (None when ``key`` is not such a key).

    >>> parse_order_key("data[embed,mlp]"), parse_order_key("data"), parse_order_key("w")
    (('embed', 'mlp'), (), None)
    """
    if key == "data":
        return ()
    if not (key.startswith("data[") and key.endswith("]")):
        return None
    names, cur, i, body = [], [], 0, key[5:-1]
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            cur.append(body[i + 1])
            i += 2
            continue
        if c == ",":
            names.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    names.append("".join(cur))
    return tuple(names)


def _escape(name: str) -> str:
    return name.replace("\\", "\\\\").replace(",", "\\,").replace("]", "\\]")
