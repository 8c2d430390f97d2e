"""Topology spread constraints of a pod, resolved (kube-scheduler's PodTopologySpread inputs)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from policyd.scheduler.cluster.selectors import (
    CelObject,
    Requirement,
    labels_of,
    parse_label_selector,
    required_node_affinity_matches,
    tolerates_node_taints,
)
from policyd.scheduler.cluster.workloads import WorkloadIndex

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
# kube-scheduler's system default constraints (PodTopologySpread `defaultingType: System`)
SYSTEM_DEFAULT_CONSTRAINTS = ((LABEL_ZONE, 5), (LABEL_HOSTNAME, 3))
# controllers whose selector kube-scheduler uses for the system default constraints
DEFAULT_SELECTOR_OWNER_KINDS = ("ReplicaSet", "ReplicationController", "StatefulSet")


@dataclass(frozen=True)
class SpreadConstraint:
    """A resolved topology spread constraint (selector incl. matchLabelKeys, inclusion policies)."""

    topology_key: str
    max_skew: int
    min_domains: int
    matches: Callable[[CelObject], bool]
    selector_empty: bool
    honor_node_affinity: bool = True
    honor_node_taints: bool = False
    # what `matches` depends on (with the pod's namespace: which existing pods are counted)
    selector_key: Hashable = None

    def counts(self, pod: CelObject, namespace: str) -> bool:
        """countPodsMatchSelector's test of one existing pod: same namespace, not terminating, selected."""
        return not pod.get("deleting") and pod.get("namespace") == namespace and self.matches(pod)

    def includes(self, pod: CelObject, node: CelObject) -> bool:
        """matchNodeInclusionPolicies: whether `node` counts for `pod` under this constraint."""
        if self.honor_node_affinity and not required_node_affinity_matches(pod, node):
            return False
        return not self.honor_node_taints or tolerates_node_taints(pod.get("tolerations") or (), node)


def spread_constraints(
    pod: CelObject, when: str, workloads: WorkloadIndex | None = None
) -> tuple[list[SpreadConstraint], bool]:
    """The pod's constraints with `whenUnsatisfiable == when`; second: True when system-defaulted.

    The system default constraints select with `workloads.default_selector` (Services and the
    controller selecting the pod); a controller `workloads` does not hold falls back to the pods of
    the same controller (policyd.scheduler.cluster.workloads).
    """
    raw_list = pod.get("topologySpreadConstraints") or ()
    labels = labels_of(pod)
    if raw_list:
        out = []
        for raw in raw_list:
            if (raw.get("whenUnsatisfiable") or DO_NOT_SCHEDULE) != when:
                continue
            selector = parse_label_selector(raw.get("labelSelector"))
            extra = [
                Requirement(k, "In", (labels[k],)) for k in raw.get("matchLabelKeys") or () if k in labels
            ]
            selector = selector.with_requirements(extra)
            out.append(
                SpreadConstraint(
                    topology_key=str(raw.get("topologyKey", "")),
                    max_skew=int(raw.get("maxSkew") or 1),
                    min_domains=int(raw.get("minDomains") or 1),
                    matches=lambda p, s=selector: s.matches(labels_of(p)),  # type: ignore[misc]
                    selector_empty=selector.empty,
                    honor_node_affinity=(raw.get("nodeAffinityPolicy") or "Honor") == "Honor",
                    honor_node_taints=(raw.get("nodeTaintsPolicy") or "Ignore") == "Honor",
                    selector_key=("selector", selector),
                )
            )
        return out, False
    if when != SCHEDULE_ANYWAY:
        return [], True
    default = workloads.default_selector(pod) if workloads is not None else None
    if default is not None:
        return [
            SpreadConstraint(
                topology_key=key,
                max_skew=skew,
                min_domains=1,
                matches=lambda p, s=default: s.matches(labels_of(p)),  # type: ignore[misc]
                selector_empty=False,
                selector_key=("selector", default),
            )
            for key, skew in SYSTEM_DEFAULT_CONSTRAINTS
        ], True
    owner = str(pod.get("ownerKey") or "")
    known = workloads is not None and workloads.controller_known(pod)
    if owner.split("/", 1)[0] not in DEFAULT_SELECTOR_OWNER_KINDS or known:
        return [], True
    return [
        SpreadConstraint(
            topology_key=key,
            max_skew=skew,
            min_domains=1,
            matches=lambda p, o=owner: str(p.get("ownerKey") or "") == o,  # type: ignore[misc]
            selector_empty=False,
            selector_key=("owner", owner),
        )
        for key, skew in SYSTEM_DEFAULT_CONSTRAINTS
    ], True


def spread_constraint_state(
    c: SpreadConstraint, pod: CelObject, domain_counts: dict[Any, int]
) -> dict[str, Any]:
    """The CEL value of one constraint's PreFilter state (`cluster.topologySpread`)."""
    min_match = min(domain_counts.values()) if domain_counts else 0
    if len(domain_counts) < c.min_domains:
        min_match = 0
    return {
        "topologyKey": c.topology_key,
        "maxSkew": c.max_skew,
        "minDomains": c.min_domains,
        "domains": len(domain_counts),
        "minMatch": min_match,
        "selfMatch": 1 if c.matches(pod) else 0,
        "counts": domain_counts,
    }
