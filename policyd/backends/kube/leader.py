"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection package does it.

A candidate reads the Lease; it may take it when nobody holds it, or when the holder's record has not
changed for `lease_duration` by the candidate's own clock (clocks of different machines are never
compared). The leader renews every `retry_period`; if no renewal succeeds for `renew_deadline`
(< lease_duration) it calls `on_stopped_leading` — the caller stops scheduling there, before any other
candidate can consider the lease expired. `release()` hands the lease over at once on shutdown.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from policyd import lifecycle
from policyd.backends.kube.client import JSON, ApiError, KubeClient, object_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Timings (seconds) and the Lease's place; kube-scheduler's defaults are 15 / 10 / 2."""

    namespace: str = "kube-system"
    name: str = "policyd"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("leader election needs lease_duration > renew_deadline > retry_period > 0")


def default_identity() -> str:
    """Hostname plus a random suffix, unique per process."""
    return f"{socket.gethostname()}_{secrets.token_hex(4)}"


def _micro_time(t: float | None = None) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    when = dt.datetime.fromtimestamp(time.time() if t is None else t, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for the Lease on a daemon thread; calls back when leadership starts and stops."""

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        *,
        identity: str | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.identity = identity or default_identity()
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._path = object_path("coordination.k8s.io/v1", "leases", config.namespace, config.name)
        self._collection = object_path("coordination.k8s.io/v1", "leases", config.namespace)
        self._lock = threading.Lock()  # guards the observed record and the leading flag
        self._observed: JSON | None = None  # last Lease object read or written
        self._observed_spec: JSON = {}
        self._observed_at = 0.0  # monotonic time the spec was last seen to change
        self._leading = False
        self._last_renew = 0.0
        self._stop = threading.Event()
        self._stopped_leading = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: Exception | None = None

    # ---- public API -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start campaigning on a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="leader-elector", daemon=True)
        self._thread.start()

    def is_leader(self) -> bool:
        """True while this candidate holds the lease (and renewed it within the renew deadline)."""
        with self._lock:
            return self._leading

    def leader(self) -> str:
        """The holder identity last observed ("" when unknown or released)."""
        with self._lock:
            return str(self._observed_spec.get("holderIdentity") or "")

    def wait_for_leadership(self, timeout: float | None = None) -> bool:
        """Block until this candidate leads (or the timeout); returns whether it leads."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._stop.is_set():
            if self.is_leader():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(min(0.05, self.config.retry_period))
        return self.is_leader()

    def lost(self) -> bool:
        """True once leadership was held and then lost (not released)."""
        return self._stopped_leading.is_set()

    def stop(self) -> None:
        """Stop campaigning/renewing (without releasing; see `release`)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.config.retry_period + 5.0)

    def release(self) -> bool:
        """Stop, and if leading, give the lease up at once (empty holder, 1 s duration); True if released."""
        self.stop()
        with self._lock:
            leading, observed = self._leading, self._observed
            self._leading = False
        if not leading or observed is None:
            return False
        now = _micro_time()
        spec = dict(observed.get("spec") or {})
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now})
        body = dict(observed, spec=spec)
        try:
            self.client.request("PUT", self._path, body=body, timeout=5)
        except ApiError as err:
            log.warning("lease release failed lease=%s err=%s", self._path, err)
            return False
        log.info(
            "lease released lease=%s/%s identity=%s", self.config.namespace, self.config.name, self.identity
        )
        return True

    # ---- the loop ---------------------------------------------------------------------------------

    def _run(self) -> None:
        cfg = self.config
        # acquire
        while not self._stop.is_set():
            if self._try_acquire_or_renew():
                break
            self._stop.wait(cfg.retry_period * (1 + 0.2 * (secrets.randbelow(1000) / 1000)))
        if self._stop.is_set():
            return
        lifecycle.leader_elected(f"{cfg.namespace}/{cfg.name}", self.identity)
        if self.on_started_leading is not None:
            threading.Thread(target=self.on_started_leading, name="leader-started", daemon=True).start()
        # renew
        while not self._stop.is_set():
            self._stop.wait(cfg.retry_period)
            if self._stop.is_set():
                return
            renewed = False
            while not self._stop.is_set():
                if self._try_acquire_or_renew():
                    renewed = True
                    break
                if time.monotonic() - self._last_renew >= cfg.renew_deadline:
                    break
                self._stop.wait(min(cfg.retry_period, 0.5))
            if self._stop.is_set():
                return
            if not renewed:
                with self._lock:
                    self._leading = False
                self._stopped_leading.set()
                lifecycle.leader_lost(
                    f"{cfg.namespace}/{cfg.name}",
                    self.identity,
                    f"failed to renew the lease within the renew deadline: {self.last_error}",
                )
                if self.on_stopped_leading is not None:
                    self.on_stopped_leading()
                return

    def _try_acquire_or_renew(self) -> bool:
        cfg = self.config
        now = _micro_time()
        try:
            lease = self.client.request("GET", self._path, timeout=cfg.renew_deadline / 2)
        except ApiError as err:
            if not err.not_found:
                self.last_error = err
                log.warning("lease read failed lease=%s err=%s", self._path, err)
                return False
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": self._spec(now, now, 0),
            }
            try:
                created = self.client.request(
                    "POST", self._collection, body=body, timeout=cfg.renew_deadline / 2
                )
            except ApiError as err2:
                self.last_error = err2
                return False
            self._observe(created, leading=True)
            return True

        spec = lease.get("spec") or {}
        self._observe(lease, leading=None)
        holder = str(spec.get("holderIdentity") or "")
        with self._lock:
            expiry = self._observed_at + float(spec.get("leaseDurationSeconds") or 0)
        # someone else holds an unexpired lease (even if we thought we led: it was taken from us)
        if holder and holder != self.identity and time.monotonic() < expiry:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquire = str(spec.get("acquireTime") or now)
        else:
            acquire = now
            transitions += 1
        body = dict(lease, spec=self._spec(now, acquire, transitions))
        try:
            updated = self.client.request("PUT", self._path, body=body, timeout=cfg.renew_deadline / 2)
        except ApiError as err:
            self.last_error = err
            if not err.conflict:
                log.warning("lease update failed lease=%s err=%s", self._path, err)
            return False
        self._observe(updated, leading=True)
        return True

    def _spec(self, now: str, acquire: str, transitions: int) -> JSON:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "acquireTime": acquire,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: JSON, leading: bool | None) -> None:
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        with self._lock:
            changed = spec != self._observed_spec
            old_holder = self._observed_spec.get("holderIdentity")
            self._observed = lease
            if changed:
                self._observed_spec = spec
                self._observed_at = time.monotonic()
            if leading:
                self._leading = True
                self._last_renew = time.monotonic()
        new_holder = spec.get("holderIdentity")
        if changed and new_holder != old_holder and new_holder and self.on_new_leader is not None:
            self.on_new_leader(str(new_holder))
