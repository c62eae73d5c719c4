"""Job-wide calls paired by what they compute: how the processes of a job meet in ``nx.plan_sharding``.

Most of nx needs no meeting between processes: a ranking by the cost model is a function of the compiled
programs, the same on every process. Measuring is different. Each measured candidate is a program that
spans the job's devices, so every process must run the same candidates in the same order, and measured
times differ between processes, so one process's order has to become the job's. Pairing such calls by a
per-process call count (the n-th plan here with the n-th plan there) goes wrong as soon as one process plans
one step more: it takes another step's ranking, or waits in a collective nobody else joins.

So a call is paired by a *fingerprint* of what it computes (for a plan: the candidates and what XLA
reported for each, see ``plan._fingerprint``) and by how many times this process met that fingerprint
before. Each process posts, under its own key, what it is doing (``working`` on a call it has not
fingerprinted yet, ``ready`` with a fingerprint, or ``failed`` with the error), and a thread refreshes
that post every few seconds while the call runs. A process waiting for another therefore knows, without
waiting out a long timeout, when the other is

* at the same call: go on;
* at another call (ready with another fingerprint): an error naming both, at once, on both processes;
* failed: an error carrying the other's message, at once;
* not in such a call at all (its post has not changed for :data:`STALE_S` seconds): an error.

A process that is still working keeps the other waiting however long its compiles take, since its post
keeps changing. The service holds one status key per process and a few keys per measured plan.

Outside a job every call is alone, and meeting is immediate:

>>> from namedarray.parallel.agree import Call
>>> with Call("an example") as call:
...     call.meet("fingerprint of what it computes", "an example call")
>>> call.client is None
True
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

import jax

from ..core import caches
from ..core.orders import job_client
from ..errors import NamedAxisError

STALE_S = 30.0  # a process whose post has not changed for this long is not in the call
_BEAT_S = 2.0
_POLL_MS = 500

# fingerprint -> how many calls of it this process has made (bounded: pairing needs the recent ones only).
# Not a cache, so nx.clear_caches() leaves it: forgetting a count would pair this process's next call with
# an old one of another process.
_SEEN: caches.LRU[str, int] = caches.LRU(None, 4096)
_LOCK = threading.Lock()  # a read and the write after it, as one step
_CALLS = itertools.count()  # this process's job-wide calls: only to tell a fresh failure from an old one


def _status_key(pid: int) -> str:
    return f"namedarray/agree/status/{pid}"


class Call:
    """One job-wide call of this process: ``with Call(where) as call:`` posts ``working`` and keeps the
    post fresh; :meth:`meet` pairs it with the other processes by fingerprint; leaving by an exception
    posts ``failed`` with its message. Outside a job every method does nothing."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.client = job_client()
        self.tag: str | None = None
        self._met = False
        self._beat = 0
        self.number = next(_CALLS)
        self._state: dict[str, Any] = {"state": "working", "call": self.number}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Call:
        if self.client is not None:
            self.pid = jax.process_index()
            self.others = [p for p in range(jax.process_count()) if p != self.pid]
            self._post()
            self._thread = threading.Thread(target=self._beating, daemon=True, name="nx-agree-beat")
            self._thread.start()
        return self

    def __exit__(self, kind, value, tb) -> None:
        if self.client is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if value is not None and self.tag is not None and not self._met:
            # this process never got past the meeting: it was not at this call for the others, and its
            # next call with this fingerprint is the same occurrence
            fingerprint, n = self.tag.rsplit("/", 1)
            with _LOCK:
                if _SEEN.get(fingerprint) == int(n) + 1:
                    _SEEN.put(fingerprint, int(n))
            try:
                self.client.key_value_delete(f"namedarray/agree/{self.tag}/ready/{self.pid}")
            except Exception:  # noqa: BLE001 - the service may be gone
                pass
        if value is not None:
            self._state = {"state": "failed", "tag": self.tag, "call": self.number,
                           "message": f"{type(value).__name__}: {value}"[:2000]}
        else:
            self._state = {"state": "done", "tag": self.tag, "call": self.number}
        try:
            self._post()
        except Exception:  # noqa: BLE001 - the service may be gone; the call's own outcome stands
            pass

    def _post(self) -> None:
        self._beat += 1
        self.client.key_value_set(_status_key(self.pid), json.dumps({**self._state, "beat": self._beat}),
                                  allow_overwrite=True)

    def _beating(self) -> None:
        while not self._stop.wait(_BEAT_S):
            try:
                self._post()
            except Exception:  # noqa: BLE001 - the waiting side judges staleness
                return

    def meet(self, fingerprint: str, what: str) -> None:
        """Wait until every process of the job has reached the call with this fingerprint (its same
        occurrence), or raise an :class:`~namedarray.errors.NamedAxisError` saying which process is
        elsewhere. ``what`` describes the call for the message."""
        if self.client is None:
            return
        with _LOCK:
            n = _SEEN.get(fingerprint) or 0
            _SEEN.put(fingerprint, n + 1)
        self.tag = f"{fingerprint}/{n}"
        self._state = {"state": "ready", "tag": self.tag, "what": what, "call": self.number}
        self._post()
        self.client.key_value_set(f"namedarray/agree/{self.tag}/ready/{self.pid}", "1", allow_overwrite=True)
        for other in self.others:
            self._wait_for(other, f"namedarray/agree/{self.tag}/ready/{other}", what)
        self._met = True

    def publish(self, name: str, value: str) -> None:
        """Set a value of this call for the others (after :meth:`meet`)."""
        if self.client is not None:
            self.client.key_value_set(f"namedarray/agree/{self.tag}/{name}", value, allow_overwrite=True)

    def receive(self, name: str, source: int, what: str) -> str | None:
        """The value ``source`` published for this call (after :meth:`meet`), waiting as :meth:`meet`
        does; None outside a job."""
        if self.client is None:
            return None
        return self._wait_for(source, f"namedarray/agree/{self.tag}/{name}", what)

    def _wait_for(self, other: int, key: str, what: str) -> str:
        last, since = None, time.monotonic()
        while True:
            try:
                return self.client.blocking_key_value_get(key, _POLL_MS)
            except Exception:  # noqa: BLE001 - not there yet (the runtime's timeout error)
                pass
            raw = _try_get(self.client, _status_key(other))
            status = json.loads(raw) if raw else {}
            if status.get("tag") not in (None, self.tag) and status.get("state") == "ready":
                raise NamedAxisError(
                    f"{self.where}: process {other} is at another job-wide call ({status.get('what')}) while "
                    f"this process (index {self.pid}) is at {what}: every process must make the same calls "
                    "in the same order (the same step, arguments, mesh and candidates)")
            if raw != last:
                # a failure posted while this process waits, or in the other's call of the same number
                # (it failed before this process began to wait): the job's call cannot complete
                fresh = last is not None or status.get("call") == self.number
                if status.get("state") == "failed" and fresh:
                    raise NamedAxisError(
                        f"{self.where}: process {other} failed in its call while this process (index "
                        f"{self.pid}) waited for it at {what}: {status.get('message')}")
                last, since = raw, time.monotonic()
            elif time.monotonic() - since > STALE_S:
                extra = (f"; its last call failed: {status.get('message')}"
                         if status.get("state") == "failed" else "")
                raise NamedAxisError(
                    f"{self.where}: process {other} has not reached {what} within {STALE_S:.0f} s and is not "
                    f"in a job-wide call (every process must make the same calls in the same order){extra}")


def _try_get(client: Any, key: str) -> str | None:
    try:
        return client.key_value_try_get(key)
    except Exception:  # noqa: BLE001 - not found (the runtime's error type)
        return None
