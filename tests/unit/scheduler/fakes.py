"""Small hand-written fakes of the object views and compiled profiles for runtime unit tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policyd.framework import (
    ALL_EVENTS,
    EVENT_NODE_LABELS,
    EVENT_POD_ASSIGNED_DELETE,
    CompiledPolicySet,
    FilterFailure,
    FilterResult,
    PermitSpec,
    PreemptionSpec,
    RuleRef,
    ScoreRule,
)
from policyd.scheduler.algorithm.nominated import NominationChanges
from policyd.scheduler.cluster.affinity_terms import has_pod_affinity


@dataclass
class FakePod:
    """A minimal PodInfo."""

    name: str
    namespace: str = "default"
    cpu: int = 0  # millicores
    priority: int = 0
    node_name: str = ""
    deleting: bool = False
    scheduler_name: str = "default-scheduler"
    labels: dict[str, str] = field(default_factory=dict)
    uid: str = ""
    preemption_policy: str = "PreemptLowerPriority"
    start_time: float = 0.0
    nominated_node_name: str = ""
    scheduling_gates: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def cel(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid or f"uid-{self.name}",
            "priority": self.priority,
            "requests": {"cpu": self.cpu, "memory": 0, "ephemeral-storage": 0},
            "labels": self.labels,
            "nodeName": self.node_name,
            "schedulerName": self.scheduler_name,
            "preemptionPolicy": self.preemption_policy,
            "startTime": self.start_time,
            "nominatedNodeName": self.nominated_node_name,
        }

    def with_node(self, node: str) -> FakePod:
        """A copy assumed on `node` (PodInfo.with_node)."""
        return self.on(node)

    def on(self, node: str) -> FakePod:
        """A copy bound to `node`."""
        return FakePod(**{**self.__dict__, "node_name": node})


class FakeNode:
    """A minimal NodeInfo: cpu allocatable, labels, pods."""

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj
        self.pods: dict[str, FakePod] = {}

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def cel(self) -> dict[str, Any]:
        alloc = int(str(self.obj.get("status", {}).get("allocatable", {}).get("cpu", "0m")).rstrip("m"))
        used = sum(p.cpu for p in self.pods.values())
        return {
            "name": self.name,
            "labels": self.obj["metadata"].get("labels", {}),
            "allocatable": {"cpu": alloc},
            "requested": {"cpu": used},
            "free": {"cpu": alloc - used},
            "pods": [p.cel for p in self.pods.values()],
        }

    @property
    def affinity_pods(self) -> int:
        return sum(1 for p in self.pods.values() if has_pod_affinity(p.cel))

    def update_node(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj

    def add_pod(self, pod: Any) -> None:
        self.pods.pop(pod.key, None)
        self.pods[pod.key] = pod

    def replace_pod(self, pod: Any) -> None:
        self.pods[pod.key] = pod

    def remove_pod(self, pod: Any) -> None:
        self.pods.pop(pod.key, None)

    def clone_without(self, pods: Iterable[Any]) -> FakeNode:
        clone = FakeNode(self.obj)
        clone.pods = dict(self.pods)
        for p in pods:
            clone.pods.pop(p.key, None)
        return clone

    def with_pods(self, pods: Iterable[Any]) -> FakeNode:
        clone = self.clone_without(())
        for p in pods:
            clone.pods[p.key] = p
        return clone


def node_obj(name: str, cpu: int = 4000, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A raw node dict (cpu in millicores) for FakeNode and the real views."""
    allocatable = {"cpu": f"{cpu}m", "memory": "64Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {"allocatable": allocatable}}


FIT = RuleRef("fake", "Fit")
LABEL = RuleRef("fake", "Zone")
LEAST = RuleRef("fake", "LeastAllocated")


class FakeEvaluator:
    """Fit filter ("Insufficient cpu"), optional zone-label filter, least-allocated score."""

    def __init__(self, profile: FakeProfile, pod: Mapping[str, Any]) -> None:
        self.profile = profile
        self.pod = pod

    def filter(self, node: Mapping[str, Any]) -> FilterFailure | None:
        for r in self.filter_all(node):
            if not r.passed:
                return FilterFailure(
                    r.rule, r.reasons, unresolvable=r.rule == LABEL and self.profile.label_unresolvable
                )
        return None

    def filter_all(self, node: Mapping[str, Any]) -> list[FilterResult]:
        out = [
            FilterResult(
                FIT,
                node["free"]["cpu"] >= self.pod["requests"]["cpu"],
                ("Insufficient cpu",) if node["free"]["cpu"] < self.pod["requests"]["cpu"] else (),
            )
        ]
        if self.profile.zone is not None:
            ok = node["labels"].get("zone") == self.profile.zone
            out.append(FilterResult(LABEL, ok, () if ok else ("node(s) didn't match zone",)))
        return out

    def score(self, node: Mapping[str, Any]) -> list[float]:
        alloc = node["allocatable"]["cpu"]
        free_after = node["free"]["cpu"] - self.pod["requests"]["cpu"]
        return [free_after * 100 / alloc if alloc else 0.0]

    def score_errors(self, node: Mapping[str, Any]) -> list[str | None]:
        return [None]

    # no vectorised plans and no reuse between pods: every node is evaluated per pod

    def bulk_filter(self, columns: Any, rows: Any, wanted: Any) -> None:
        return None

    def filter_by_classes(self, columns: Any, rules: Any) -> None:
        return None

    def rows_to_renew(self, columns: Any, rule: Any, old: Any, new: Any) -> None:
        return None

    def bulk_scores(self, columns: Any, rows: Any, wanted: Any) -> None:
        return None

    def signature(self) -> None:
        return None

    def prepare(self, phase: str) -> tuple[Any, ...]:
        rules = len(self.profile.filters) if phase == "filter" else 1
        return ((),) * rules  # one (empty) tuple per rule

    def applied(self) -> tuple[int, ...]:
        return (0,)  # the one fake policy

    def track_cluster(self) -> None:
        pass

    @property
    def cluster_called(self) -> bool:
        return True

    def reset_cluster_called(self) -> None:
        pass


@dataclass
class FakeProfile:
    """A CompiledProfile with fixed rules."""

    scheduler_name: str = "policyd"
    zone: str | None = None
    label_unresolvable: bool = True
    normalize: str = "none"
    permits: tuple[PermitSpec, ...] = ()
    may_preempt: Callable[[Mapping[str, Any]], bool] = lambda pod: pod["preemptionPolicy"] != "Never"
    policies: tuple[str, ...] = ("fake",)

    @property
    def filters(self) -> tuple[RuleRef, ...]:
        return (FIT, LABEL) if self.zone is not None else (FIT,)

    @property
    def scores(self) -> tuple[ScoreRule, ...]:
        return (ScoreRule(LEAST, 1, self.normalize),)  # type: ignore[arg-type]

    @property
    def preemption(self) -> PreemptionSpec:
        return PreemptionSpec(
            may_preempt=self.may_preempt,
            eligible_victim=lambda pod, victim: victim["priority"] < pod["priority"],
        )

    def applies(self, pod: Mapping[str, Any]) -> bool:
        return True

    def rule_errors(self) -> dict[int, list[tuple[RuleRef, str, int]]]:
        return {}

    def queue_key(self, pod: Mapping[str, Any]) -> tuple[Any, ...]:
        return (-pod["priority"],)

    def evaluator(self, pod: Mapping[str, Any], cluster: Any) -> FakeEvaluator:
        return FakeEvaluator(self, pod)

    def wake_events(self, rule: RuleRef) -> frozenset[str]:
        if rule == LABEL:
            return frozenset({EVENT_NODE_LABELS})
        if rule == FIT:
            return frozenset({EVENT_POD_ASSIGNED_DELETE, "NodeAdd", "NodeAllocatableChange"})
        return ALL_EVENTS


def policy_set(*profiles: FakeProfile, generation: int = 1) -> CompiledPolicySet:
    """A CompiledPolicySet of fake profiles."""
    return CompiledPolicySet(
        generation=generation,
        content_hash="fake",
        profiles={p.scheduler_name: p for p in profiles},  # type: ignore[misc]
    )


def fake_pod_info(obj: Mapping[str, Any]) -> FakePod:
    """PodInfo factory over raw pod dicts: cpu from the first container's request in millicores."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers = spec.get("containers") or [{}]
    cpu = str(((containers[0].get("resources") or {}).get("requests") or {}).get("cpu", "0"))
    milli = int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
    return FakePod(
        name=meta["name"],
        namespace=meta.get("namespace", "default"),
        cpu=milli,
        priority=int(spec.get("priority", 0)),
        node_name=spec.get("nodeName", ""),
        deleting=bool(meta.get("deletionTimestamp")),
        scheduler_name=spec.get("schedulerName", "default-scheduler"),
        labels=dict(meta.get("labels") or {}),
        uid=meta.get("uid", ""),
        preemption_policy=spec.get("preemptionPolicy", "PreemptLowerPriority"),
        nominated_node_name=status.get("nominatedNodeName", ""),
    )


def pod_obj(
    name: str, cpu: str = "0", priority: int = 0, node: str = "", namespace: str = "default", **spec: Any
) -> dict[str, Any]:
    """A raw pod dict readable by fake_pod_info and the real views."""
    body: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
        "priority": priority,
        **spec,
    }
    if node:
        body["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": body,
    }


class FixedNominations:
    """A `NominationSource` whose nominations never change (node -> pods nominated to it)."""

    def __init__(self, table: Mapping[str, Sequence[Any]]) -> None:
        self.table = table

    def nominations_since(self, version: int) -> NominationChanges:
        """Every nomination, once; nothing after."""
        if version == 0:
            return NominationChanges(0, {}, False)
        return NominationChanges(0, {node: tuple(pods) for node, pods in self.table.items()}, True)
