"""Events (core/v1) with kube-scheduler's texts, aggregated and rate-limited; the pod status patches' bodies.

Like client-go's EventCorrelator: an event equal to an earlier one (same object, type, reason,
message) updates that Event's `count` and `lastTimestamp` instead of creating another; and a token
bucket per involved object (burst 25, one token per 5 minutes) drops the excess, so a pod that stays
unschedulable for an hour produces one Event object and a few dozen writes, not thousands.
Events are written on a request loop of their own (policyd.backends.kube.multiplex), so recording never
blocks a scheduling cycle, over `EVENT_CONNECTIONS` connection: one write at a time, as client-go's
record broadcaster writes from one goroutine. Events are best effort; what a scheduler owes the API
server first is its binds, victim deletions and status patches, and a burst of Event writes in flight
together competes with them for the API server. End to end against kube-apiserver 1.20 on 2 cores
(2026-11-26, policyd alone, 3 rounds each), one connection instead of 64 took Preemption/500 from
100-103 to 135-143 pods/s from the release and SchedulingBasic/500 (2000 pods) from a median of 957 to
1146 pods/s first to last bind. A burst's Events are written after it, within `MAX_QUEUED`: while the
scheduling thread is busy the writer gets the interpreter seldom (SchedulingBasic/500 end to end with
10000 pods, 2026-11-29: about 500 of 10000 Events written by the last bind, the rest 17-18 s after
it), where kube-scheduler's writer keeps pace with its binds. 8 connections brought the tail to 6 s,
but Preemption/500's binds, which wait for the victims' deletions, then shared the API server with the
Events and came slower (benchmarks/README.md, "how far policyd's Events trail its binds").
`policyd_events_dropped_total{reason}`, `policyd_event_writes_total` and `policyd_events_queued` show
it (`stats`). A write that never reached
the API server (it was down or restarting) is sent again, as client-go's sink does: up to `MAX_TRIES`
tries, `RETRY_SECONDS` apart; an answer, even an error, is final.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from policyd.backends.kube.client import JSON, ApiError, KubeClient, object_path
from policyd.backends.kube.multiplex import Done, RequestLoop

log = logging.getLogger(__name__)

COMPONENT = "policyd"
NORMAL = "Normal"
WARNING = "Warning"

# client-go's defaults (tools/record/events_cache.go)
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
CACHE_SIZE = 4096
MAX_QUEUED = 10000  # events recorded and not written yet; beyond, new ones are dropped
EVENT_CONNECTIONS = 1  # Event writes in flight at once (see the module docstring)
# client-go's record/events sink: a write that could not reach the API server (no answer at all; an
# answer, even an error, is final) is tried again, up to this many tries, the first retry at a random
# point of the interval (so writers do not come back together), the next ones an interval apart
MAX_TRIES = 12
RETRY_SECONDS = 10.0


def scheduled_message(namespace: str, name: str, node: str) -> str:
    """kube-scheduler's `Scheduled` text."""
    return f"Successfully assigned {namespace}/{name} to {node}"


def preempted_message(preemptor_uid: str, node: str) -> str:
    """kube-scheduler's `Preempted` text (on the victim)."""
    return f"Preempted by pod {preemptor_uid} on node {node}"


def _now() -> str:
    return dt.datetime.now(tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ObjectRef:
    """The involved object of an event."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def of(cls, obj: JSON) -> ObjectRef:
        """The reference to a Kubernetes object dict."""
        meta = obj.get("metadata") or {}
        return cls(
            kind=str(obj.get("kind") or "Pod"),
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            api_version=str(obj.get("apiVersion") or "v1"),
        )

    def to_json(self) -> JSON:
        """The `involvedObject` field."""
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "apiVersion": self.api_version,
        }


class _Bucket:
    def __init__(self, burst: int, qps: float) -> None:
        self.tokens = float(burst)
        self.burst = burst
        self.qps = qps
        self.last = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.qps)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class _Seen:
    """One Event as written: its name and count, and whether a write of it is in flight.

    Writes of one Event go one at a time (as client-go's single sink goroutine writes them): the
    create, then each update, so an update never reaches the API server before its create and a
    lower count never lands after a higher one. Events recorded while a write is in flight are
    counted and sent with the next update, which carries the latest count."""

    name: str
    count: int
    first: str
    busy: bool = False
    stale: bool = False  # counted while busy: the next update is owed
    last: str = ""


class EventRecorder:
    """Records Events for objects; dedupes into counts and rate-limits per object; writes asynchronously."""

    def __init__(
        self,
        client: KubeClient,
        *,
        component: str = COMPONENT,
        instance: str = "",
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
        connections: int = EVENT_CONNECTIONS,
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance or component
        self.burst = burst
        self.qps = qps
        self.limited = 0  # events suppressed by the per-object rate limit
        self.overflowed = 0  # events dropped because `MAX_QUEUED` were waiting (or the writer stopped)
        self.written = 0  # API writes (creates + updates)
        self._lock = threading.Lock()  # guards the correlator caches and counters
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._loop = RequestLoop(client, name="event-recorder", max_connections=connections)

    def event(self, obj: JSON | ObjectRef, event_type: str, reason: str, message: str) -> None:
        """Queue one event about `obj` (a Kubernetes dict or an ObjectRef); never blocks for long."""
        ref = obj if isinstance(obj, ObjectRef) else ObjectRef.of(obj)
        if self._loop.pending() >= MAX_QUEUED:
            self._overflow()
            return
        try:
            self._loop.call_soon(lambda: self._write(ref, event_type, reason, message[:1024]))
        except RuntimeError:  # stopped
            self._overflow()

    def _overflow(self) -> None:
        with self._lock:
            self.overflowed += 1

    @property
    def dropped(self) -> int:
        """Events not written: rate-limited or over the queue."""
        with self._lock:
            return self.limited + self.overflowed

    def stats(self) -> tuple[int, int, int, int]:
        """(API writes, events dropped by the per-object rate limit, events dropped because the queue
        was full, events recorded and not written yet): what the `policyd_events_*` metrics show."""
        with self._lock:
            written, limited, overflowed = self.written, self.limited, self.overflowed
        return written, limited, overflowed, self._loop.pending()

    def scheduled(self, pod: JSON | ObjectRef, node: str) -> None:
        """`Scheduled`: Successfully assigned ns/name to node."""
        ref = pod if isinstance(pod, ObjectRef) else ObjectRef.of(pod)
        self.event(ref, NORMAL, "Scheduled", scheduled_message(ref.namespace, ref.name, node))

    def failed_scheduling(self, pod: JSON | ObjectRef, message: str) -> None:
        """`FailedScheduling` with the `0/N nodes are available: ...` message."""
        self.event(pod, WARNING, "FailedScheduling", message)

    def preempted(self, victim: JSON | ObjectRef, preemptor_uid: str, node: str) -> None:
        """`Preempted` on the victim: Preempted by pod <uid> on node <node>."""
        self.event(victim, NORMAL, "Preempted", preempted_message(preemptor_uid, node))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every recorded event has been written (or dropped); returns False on timeout."""
        return self._loop.wait_idle(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is recorded, then stop the writer."""
        self._loop.stop(timeout)

    # ---- writer (the loop's thread) ----------------------------------------------------------------

    def _allow(self, ref: ObjectRef) -> bool:
        key = f"{ref.kind}/{ref.namespace}/{ref.name}/{ref.uid}"
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(self.burst, self.qps)
            if len(self._buckets) > CACHE_SIZE:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take()

    def _write(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> None:
        key = (ref.kind, ref.namespace, ref.name, ref.uid, event_type, reason, message)
        now = _now()
        with self._lock:
            if not self._allow(ref):
                self.limited += 1
                return
            seen = self._seen.get(key)
            if seen is None:
                seen = _Seen(f"{ref.name}.{time.time_ns():x}", 1, now, busy=True, last=now)
                self._remember(key, seen)
                create = True
            else:
                self._seen.move_to_end(key)
                seen.count += 1
                seen.last = now
                if seen.busy:
                    seen.stale = True
                    return
                seen.busy = True
                create = False
        if create:
            self._create(key, seen, ref, event_type, reason, message)
        else:
            self._update(key, seen, ref, event_type, reason, message)

    def _remember(self, key: tuple[str, ...], seen: _Seen) -> None:
        self._seen[key] = seen
        self._seen.move_to_end(key)
        if len(self._seen) > CACHE_SIZE:
            self._seen.popitem(last=False)

    def _done(self, key: tuple[str, ...], seen: _Seen, ref: ObjectRef, *args: str) -> None:
        """A write of `seen` ended: send the update owed, if any, else mark it idle."""
        with self._lock:
            if not seen.stale:
                seen.busy = False
                return
            seen.stale = False
        self._update(key, seen, ref, *args)

    def _send(self, method: str, path: str, done: Done, body: JSON, content_type: str | None = None) -> None:
        """Submit one Event write; one that did not reach the API server is sent again later (client-go's
        sink: `MAX_TRIES` tries, `RETRY_SECONDS` apart, the first retry at a random point of that)."""
        tries = 1

        def answered(result: JSON, err: ApiError | None) -> None:
            nonlocal tries
            if err is not None and err.status == 0 and tries < MAX_TRIES:
                delay = RETRY_SECONDS * (random.random() if tries == 1 else 1.0)
                tries += 1
                try:
                    self._loop.submit(
                        method, path, answered, body=body, content_type=content_type, delay=delay
                    )
                    return
                except RuntimeError:  # stopping: give up as below
                    pass
            done(result, err)

        self._loop.submit(method, path, answered, body=body, content_type=content_type)

    def _update(
        self, key: tuple[str, ...], seen: _Seen, ref: ObjectRef, event_type: str, reason: str, message: str
    ) -> None:
        with self._lock:
            name, count, last = seen.name, seen.count, seen.last

        def patched(_result: JSON, err: ApiError | None) -> None:
            if err is None:
                with self._lock:
                    self.written += 1
            elif err.not_found:  # the Event expired (TTL) or was deleted: create a fresh one
                with self._lock:
                    seen.name, seen.count, seen.first, seen.stale = (
                        f"{ref.name}.{time.time_ns():x}",
                        1,
                        last,
                        False,
                    )
                self._create(key, seen, ref, event_type, reason, message)
                return
            else:
                log.warning("event update failed event=%s err=%s", name, err)
            self._done(key, seen, ref, event_type, reason, message)

        path = object_path("v1", "events", ref.namespace)
        patch = {"count": count, "lastTimestamp": last}
        content_type = "application/strategic-merge-patch+json"
        self._send("PATCH", f"{path}/{name}", patched, patch, content_type)

    def _create(
        self, key: tuple[str, ...], seen: _Seen, ref: ObjectRef, event_type: str, reason: str, message: str
    ) -> None:
        with self._lock:
            name, count, first, last = seen.name, seen.count, seen.first, seen.last
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace},
            "involvedObject": ref.to_json(),
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": first,
            "lastTimestamp": last,
            "count": count,
        }

        def created(_result: JSON, err: ApiError | None) -> None:
            if err is None:
                with self._lock:
                    self.written += 1
                self._done(key, seen, ref, event_type, reason, message)
                return
            with self._lock:  # forget it: the next equal event creates one again
                seen.busy = False
                if self._seen.get(key) is seen:
                    del self._seen[key]
            if not err.not_found:
                log.warning(
                    "event create failed object=%s/%s reason=%s err=%s", ref.namespace, ref.name, reason, err
                )

        self._send("POST", object_path("v1", "events", ref.namespace), created, body)


STATUS_PATCH = "application/strategic-merge-patch+json"


def status_path(namespace: str, name: str) -> str:
    """The status subresource of a pod."""
    return object_path("v1", "pods", namespace, name) + "/status"


def unschedulable_status(message: str, reason: str = "Unschedulable") -> JSON:
    """The status patch of PodScheduled=False, now."""
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": _now(),
    }
    return {"conditions": [cond]}


def nominated_status(node: str | None) -> JSON:
    """The status patch setting `nominatedNodeName` (None or "" clears it)."""
    return {"nominatedNodeName": node or None}
