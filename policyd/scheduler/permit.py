"""Permit: gang scheduling. Pods of a group wait, reserved, until `min_members` of it are reserved.

A pod whose `PermitSpec.group` is empty is approved at once. Otherwise it waits (its node stays
assumed) until the group has `min_members` reserved members, then the whole waiting group is approved
together; when the first waiter's timeout passes, the whole waiting group is rejected (the scheduler
unreserves and requeues them).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from policyd.framework import CompiledProfile, PermitSpec, RuleRef
from policyd.scheduler.clock import Clock

log = logging.getLogger(__name__)


@dataclass
class WaitingPod:
    """A reserved pod held at Permit."""

    key: str
    group: str
    rule: RuleRef
    node: str
    deadline: float
    timeout: float
    payload: Any  # whatever the scheduler needs to resume or undo (queued pod, assumed PodInfo)


@dataclass(frozen=True)
class PermitDecision:
    """`allow` (bind these pods, this one included), `wait`, or nothing to do (`allow` alone)."""

    status: str  # allow | wait
    released: tuple[WaitingPod, ...] = ()


def _group_of(spec: PermitSpec, pod: Any) -> str:
    group = spec.group(pod)
    return str(group) if group else ""


class Permits:
    """The waiting pods of every gang (one lock)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[str, dict[str, WaitingPod]] = {}  # group -> key -> waiting pod
        self._admitted: dict[str, set[str]] = {}  # group -> keys approved earlier

    def permit(
        self, profile: CompiledProfile, pod_cel: Any, key: str, node: str, payload: Any
    ) -> PermitDecision:
        """Run every permit rule of `profile` for a reserved pod."""
        for spec in profile.permits:
            group = _group_of(spec, pod_cel)
            if not group:
                continue
            gkey = f"{spec.rule.policy}/{spec.rule.name}/{group}"
            need = int(spec.min_members(pod_cel))
            with self._lock:
                waiting = self._waiting.setdefault(gkey, {})
                admitted = self._admitted.setdefault(gkey, set())
                if len(waiting) + len(admitted - {key}) + 1 >= need:
                    released = tuple(waiting.values())
                    admitted.update(w.key for w in released)
                    admitted.add(key)
                    self._waiting.pop(gkey, None)
                    log.info("permit group=%s released=%d", gkey, len(released) + 1)
                    return PermitDecision("allow", released)
                now = self._clock.now()
                waiting[key] = WaitingPod(
                    key, gkey, spec.rule, node, now + spec.timeout_seconds, spec.timeout_seconds, payload
                )
                return PermitDecision("wait")
        return PermitDecision("allow")

    def expire(self) -> list[WaitingPod]:
        """Reject every waiting group whose earliest deadline has passed; returns the rejected pods."""
        now = self._clock.now()
        rejected: list[WaitingPod] = []
        with self._lock:
            for gkey in list(self._waiting):
                pods = self._waiting[gkey]
                if pods and min(w.deadline for w in pods.values()) <= now:
                    rejected.extend(pods.values())
                    del self._waiting[gkey]
        return rejected

    def reject_pod(self, key: str) -> list[WaitingPod]:
        """A waiting pod went away: reject its whole waiting group."""
        with self._lock:
            for gkey, pods in list(self._waiting.items()):
                if key in pods:
                    del self._waiting[gkey]
                    return list(pods.values())
            for admitted in self._admitted.values():
                admitted.discard(key)
        return []

    def is_waiting(self, key: str) -> bool:
        """True while `key` waits at Permit."""
        with self._lock:
            return any(key in pods for pods in self._waiting.values())

    def waiting(self) -> Sequence[WaitingPod]:
        """Every waiting pod."""
        with self._lock:
            return [w for pods in self._waiting.values() for w in pods.values()]

    def next_deadline(self) -> float | None:
        """The earliest timeout among waiting pods."""
        with self._lock:
            deadlines = [w.deadline for pods in self._waiting.values() for w in pods.values()]
        return min(deadlines) if deadlines else None
