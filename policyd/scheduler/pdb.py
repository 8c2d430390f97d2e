"""PodDisruptionBudgets as preemption sees them: which pods they cover and how many may go.

`status.disruptionsAllowed` is used when the object carries a status (as kube-scheduler does);
otherwise it is computed like the disruption controller from the healthy covered pods.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.snapshot import PodInfoLike


@dataclass(frozen=True)
class DisruptionBudget:
    """One PodDisruptionBudget, converted once."""

    namespace: str
    name: str
    selector: Mapping[str, Any] | None  # None: selects nothing; {}: every pod of the namespace
    min_available: int | str | None
    max_unavailable: int | str | None
    disruptions_allowed: int | None
    disrupted_pods: frozenset[str]

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """True when a pod with `labels` in `namespace` is selected."""
        if namespace != self.namespace or self.selector is None:
            return False
        return selector_matches(self.selector, labels)

    def allowed(self, pods: Iterable[PodInfoLike]) -> int:
        """Disruptions allowed now: the status field, else computed from the covered pods."""
        if self.disruptions_allowed is not None:
            return self.disruptions_allowed
        covered = [p for p in pods if self.covers(p.cel.get("namespace", ""), p.cel.get("labels", {}))]
        expected = len(covered)
        healthy = sum(1 for p in covered if p.node_name and not p.deleting)
        if self.max_unavailable is not None:
            desired = expected - _scaled(self.max_unavailable, expected)
        elif self.min_available is not None:
            desired = _scaled(self.min_available, expected)
        else:
            desired = 1  # neither set: policy/v1beta1's default minAvailable of 1
        return max(0, healthy - desired)


def _scaled(value: int | str, total: int) -> int:
    """An int-or-percent scaled against `total`, rounding up (GetScaledValueFromIntOrPercent)."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        return math.ceil(int(text[:-1]) * total / 100)
    return int(text)


def _requirement_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expr.get("key", "")
    op = expr.get("operator", "")
    values = list(expr.get("values") or [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics (matchLabels AND matchExpressions)."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(_requirement_matches(e, labels) for e in selector.get("matchExpressions") or [])


def budget_from_object(obj: Mapping[str, Any]) -> DisruptionBudget:
    """Convert a policy/v1 (or v1beta1) PodDisruptionBudget dict."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status")
    allowed = None
    if isinstance(status, Mapping) and "disruptionsAllowed" in status:
        allowed = int(status["disruptionsAllowed"])
    return DisruptionBudget(
        namespace=meta.get("namespace", "default"),
        name=meta.get("name", ""),
        selector=spec.get("selector"),
        min_available=spec.get("minAvailable"),
        max_unavailable=spec.get("maxUnavailable"),
        disruptions_allowed=allowed,
        disrupted_pods=frozenset((status or {}).get("disruptedPods") or {}),
    )


class BudgetIndex:
    """The PDBs known to the scheduler (one lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budgets: dict[str, DisruptionBudget] = {}

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Add or replace a PDB."""
        budget = budget_from_object(obj)
        with self._lock:
            self._budgets[budget.key] = budget

    def remove(self, obj: Mapping[str, Any]) -> None:
        """Delete a PDB."""
        budget = budget_from_object(obj)
        with self._lock:
            self._budgets.pop(budget.key, None)

    def all(self) -> list[DisruptionBudget]:
        """Every PDB."""
        with self._lock:
            return list(self._budgets.values())


def disruptions_allowed(
    budgets: Sequence[DisruptionBudget], all_pods: Callable[[], Sequence[PodInfoLike]]
) -> tuple[int, ...]:
    """Each budget's disruptions allowed now (computed once per preemption dry run); `all_pods` is
    asked, once, only when a budget carries no status."""
    pods: Sequence[PodInfoLike] = ()
    if any(b.disruptions_allowed is None for b in budgets):
        pods = all_pods()
    return tuple(b.allowed(pods) for b in budgets)


def split_by_violation(
    victims: Sequence[PodInfoLike], budgets: Sequence[DisruptionBudget], allowed: Sequence[int]
) -> tuple[list[PodInfoLike], list[PodInfoLike]]:
    """(violating, non-violating) victims, in input order (kube-scheduler filterPodsWithPDBViolation);
    `allowed`: the budgets' `disruptions_allowed`."""
    left = list(allowed)
    violating: list[PodInfoLike] = []
    fine: list[PodInfoLike] = []
    for pod in victims:
        ns = pod.cel.get("namespace", "")
        labels = pod.cel.get("labels", {})
        violates = False
        for i, budget in enumerate(budgets):
            if not budget.covers(ns, labels) or pod.cel.get("name", "") in budget.disrupted_pods:
                continue
            left[i] -= 1
            if left[i] < 0:
                violates = True
        (violating if violates else fine).append(pod)
    return violating, fine
