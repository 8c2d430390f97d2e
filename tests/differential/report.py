"""The agreement table by feature: for every feature a pod (or its cluster) uses, how many of those pods
agree on filters, scores, placement and victims."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tests.differential.compare import Comparison
from tests.differential.generator import NO_PROVISIONER
from tests.differential.scenario import Obj, Scenario

KINDS = ("filters", "scores", "placement", "victims")
FEATURES = (
    "all pods",
    "requests",
    "best-effort",
    "init containers",
    "overhead",
    "extended resources",
    "host ports",
    "node selector",
    "required node affinity",
    "preferred node affinity",
    "hard topology spread",
    "soft topology spread",
    "required pod affinity",
    "required pod anti-affinity",
    "preferred pod affinity",
    "preferred pod anti-affinity",
    "tolerations",
    "priority",
    "preemption",
    "PDBs",
    "NoSchedule/NoExecute taints",
    "PreferNoSchedule taints",
    "unschedulable nodes",
    "images on nodes",
    "existing pods",
)
# with --objects (listed only when some pod has them)
OBJECT_FEATURES = (
    "default spreading (Services, controllers)",
    "bound claims",
    "claims to bind (WaitForFirstConsumer)",
    "claims to provision (WaitForFirstConsumer)",
    "unbound Immediate claims",
    "CSI attach limits",
    "inline GCE disks",
)


def pod_features(scenario: Scenario, pod: Obj, comparison: Comparison) -> set[str]:
    """The features of one pending pod and of the cluster it meets."""
    spec = pod["spec"]
    containers = spec.get("containers", [])
    found = {"all pods"}
    requests = [c.get("resources", {}).get("requests") for c in containers]
    found.add("requests" if any(requests) else "best-effort")
    if spec.get("initContainers"):
        found.add("init containers")
    if spec.get("runtimeClassName"):
        found.add("overhead")
    if any(k not in ("cpu", "memory") for r in requests if r for k in r):
        found.add("extended resources")
    if any(p.get("hostPort") for c in containers for p in c.get("ports", [])):
        found.add("host ports")
    if spec.get("nodeSelector"):
        found.add("node selector")
    affinity = spec.get("affinity", {})
    node_affinity = affinity.get("nodeAffinity", {})
    if "requiredDuringSchedulingIgnoredDuringExecution" in node_affinity:
        found.add("required node affinity")
    if "preferredDuringSchedulingIgnoredDuringExecution" in node_affinity:
        found.add("preferred node affinity")
    for key, name in (("podAffinity", "pod affinity"), ("podAntiAffinity", "pod anti-affinity")):
        terms = affinity.get(key, {})
        if "requiredDuringSchedulingIgnoredDuringExecution" in terms:
            found.add(f"required {name}")
        if "preferredDuringSchedulingIgnoredDuringExecution" in terms:
            found.add(f"preferred {name}")
    for c in spec.get("topologySpreadConstraints", []):
        found.add(
            "hard topology spread" if c["whenUnsatisfiable"] == "DoNotSchedule" else "soft topology spread"
        )
    if spec.get("tolerations"):
        found.add("tolerations")
    if spec.get("priorityClassName"):
        found.add("priority")
    if "victims" in comparison.compared:
        found.add("preemption")
    if scenario.pdbs:
        found.add("PDBs")
    taints = [t["effect"] for n in scenario.nodes for t in n.get("spec", {}).get("taints", [])]
    if any(e in ("NoSchedule", "NoExecute") for e in taints):
        found.add("NoSchedule/NoExecute taints")
    if "PreferNoSchedule" in taints:
        found.add("PreferNoSchedule taints")
    if any(n.get("spec", {}).get("unschedulable") for n in scenario.nodes):
        found.add("unschedulable nodes")
    if any(n["status"].get("images") for n in scenario.nodes):
        found.add("images on nodes")
    if scenario.existing:
        found.add("existing pods")
    return found | _object_features(scenario, pod)


def _object_features(scenario: Scenario, pod: Obj) -> set[str]:
    found: set[str] = set()
    meta, spec = pod["metadata"], pod["spec"]
    labels = meta.get("labels", {})
    selected = any(
        o["kind"] == "Service"
        and o["spec"].get("selector")
        and all(labels.get(k) == v for k, v in o["spec"]["selector"].items())
        for o in scenario.objects
    )
    if not spec.get("topologySpreadConstraints") and (selected or meta.get("ownerReferences")):
        found.add("default spreading (Services, controllers)")
    claims = {o["metadata"]["name"]: o for o in scenario.objects if o["kind"] == "PersistentVolumeClaim"}
    classes = {o["metadata"]["name"]: o for o in scenario.objects if o["kind"] == "StorageClass"}
    for volume in spec.get("volumes", []):
        if "gcePersistentDisk" in volume:
            found.add("inline GCE disks")
        claim = claims.get((volume.get("persistentVolumeClaim") or {}).get("claimName", ""))
        if claim is None:
            continue
        cls = classes.get(claim["spec"].get("storageClassName") or "", {})
        if claim["spec"].get("volumeName"):
            found.add("bound claims")
        elif cls.get("volumeBindingMode") == "WaitForFirstConsumer" and cls["provisioner"] != NO_PROVISIONER:
            found.add("claims to provision (WaitForFirstConsumer)")
        elif cls.get("volumeBindingMode") == "WaitForFirstConsumer":
            found.add("claims to bind (WaitForFirstConsumer)")
        else:
            found.add("unbound Immediate claims")
        if any(o["kind"] == "CSINode" for o in scenario.objects):
            found.add("CSI attach limits")
    return found


@dataclass
class Row:
    """One feature's counts: pods, and per kind (agreeing, compared)."""

    pods: int = 0
    agree: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    explained: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    compared: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))


@dataclass
class AgreementTable:
    """Counts by feature over every compared pod."""

    rows: dict[str, Row] = field(default_factory=lambda: {f: Row() for f in FEATURES + OBJECT_FEATURES})
    scenarios: int = 0

    def add(self, features: Iterable[str], comparison: Comparison) -> None:
        """Count one pod under each of its features."""
        for feature in features:
            row = self.rows.setdefault(feature, Row())
            row.pods += 1
            for kind in KINDS:
                if kind in comparison.compared:
                    row.compared[kind] += 1
                    row.agree[kind] += comparison.agrees(kind)
                    row.explained[kind] += comparison.explained(kind)

    def render(self) -> str:
        """The table as Markdown: agreeing/compared pods per kind (+ explained by a documented difference)."""
        lines = [
            "| feature | pods | " + " | ".join(KINDS) + " |",
            "|---|---:|" + "---:|" * len(KINDS),
        ]
        for feature, row in self.rows.items():
            if feature in OBJECT_FEATURES and not row.pods:
                continue
            cells = [_cell(row, k) for k in KINDS]
            lines.append(f"| {feature} | {row.pods} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def _cell(row: Row, kind: str) -> str:
    if not row.compared[kind]:
        return "-"
    text = f"{row.agree[kind]}/{row.compared[kind]}"
    return text + (f" (+{row.explained[kind]} explained)" if row.explained[kind] else "")


def summary(comparisons: Sequence[Comparison]) -> str:
    """`N pods, M disagreeing` line."""
    bad = sum(1 for c in comparisons if c.unexplained)
    explained = sum(1 for c in comparisons if c.disagreements and not c.unexplained)
    return (
        f"{len(comparisons)} pods compared, {bad} with unexplained disagreements, "
        f"{explained} with explained differences only"
    )
