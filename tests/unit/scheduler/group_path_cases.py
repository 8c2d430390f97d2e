"""Cases for tests/unit/scheduler/test_group_path.py: random clusters and workloads, and a runner.

A `Case` is a cluster (nodes, assigned pods, PDBs), pending pods (groups of identical pods and
singletons) and `Step`s that change the cluster between scheduling cycles. `run(case, reuse)` runs
the real `Scheduler` over a `SimulatedCluster` with `reuse_node_results=reuse` and returns what the
two scheduling paths must agree on (`Outcome`).
"""

from __future__ import annotations

import copy
import functools
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import strategies as st

from policyd.backends.simulated import SimulatedCluster
from policyd.compiler.profiles import compile_paths
from policyd.framework import CompiledPolicySet
from policyd.scheduler.algorithm import schedule
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions
from tests.builders import (
    Obj,
    make_node,
    make_pdb,
    make_pod,
    node_affinity,
    pod_affinity,
    pod_affinity_term,
    spread_constraint,
    taint,
    toleration,
)

DEFAULT_POLICY = Path(__file__).resolve().parents[3] / "policies" / "default.policy"

# Joins `default` in the `policyd` profile for pods with an `app` label. Exercises a pod-only let
# (`tier`), a pod-only let calling a cluster function (`rackCounts`: its value moves as pods land, so
# the group's verdicts must be dropped), a let calling a cluster function with `node` (`spreadHere`:
# such node results are never reused), a filter with a reason expression and a score on node labels.
# `rackCounts` reads `pod.labels` itself: a let that reads another let is compiled as a per-node let
# (codegen `_analyse_lets` counts the let name among its reads), even when both are pod-only.
EXTRA_POLICY = """
policy zz-extra {
  profiles = ["policyd"]
  match = "app" in pod.labels

  let app = pod.labels["app"]
  let tier = "tier" in pod.labels ? pod.labels["tier"] : "none"
  let rackCounts = cluster.domainCounts(pod, "rack", {"app": pod.labels["app"]})
  let spreadHere = cluster.topologySpreadScore(pod, node)
  let rack = "rack" in node.labels ? node.labels["rack"] : ""

  filter RackCap {
    expr = rack == "" || !(rack in rackCounts) || rackCounts[rack] < 2
    reason = "rack " + rack + " already runs " + string(rackCounts[rack]) + " pods of " + app
  }

  filter SpreadHere {
    expr = spreadHere < 16
    reason = "node(s) had spread score " + string(spreadHere) + " for tier " + tier
  }

  score PreferTier {
    expr = "tier" in node.labels && node.labels["tier"] == tier ? 10 : size(rack)
    weight = 2
    normalize = max
  }

  score SpreadLoad {
    expr = spreadHere
    weight = 1
    normalize = reverse-minmax
  }
}
"""

# RackCap alone: node results stay reusable (no cluster call per node) while `rackCounts` moves.
RACK_CAP_POLICY = """
policy zz-rack {
  profiles = ["policyd"]
  match = "app" in pod.labels

  let app = pod.labels["app"]
  let rackCounts = cluster.domainCounts(pod, "rack", {"app": pod.labels["app"]})
  let rack = "rack" in node.labels ? node.labels["rack"] : ""

  filter RackCap {
    expr = rack == "" || !(rack in rackCounts) || rackCounts[rack] < 2
    reason = "rack " + rack + " already runs " + string(rackCounts[rack]) + " pods of " + app
  }
}
"""

# Raw scores beyond int64 arithmetic (CEL ints would overflow, so doubles): allocatable memory in
# bytes times 10^9 (beyond int64 itself) and free memory times 10^8 (fits, but not once weighted).
HUGE_SCORE_POLICY = """
policy zz-huge {
  profiles = ["policyd"]

  score HugeMemory {
    expr = double(node.allocatable["memory"]) * 1000000000.0
    weight = 3
    normalize = minmax
  }

  score HugeFree {
    expr = double(node.free["memory"]) * 100000000.0
    weight = 2
    normalize = none
  }
}
"""

ZONES = ("a", "b", "c")
RACKS = ("r0", "r1", "r2", "r3")
APPS = ("web", "db", "batch")
MAX_ATTEMPTS = 4


@functools.cache
def policies(*extra: str) -> CompiledPolicySet:
    """default.policy plus the given policy texts, compiled from files with `compile_paths`."""
    paths = [str(DEFAULT_POLICY)]
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(extra):
            path = Path(tmp) / f"extra{i}.policy"
            path.write_text(text)
            paths.append(str(path))
        return compile_paths(paths, generation=1)


# ---------------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Step:
    """Run up to `cycles` scheduling cycles, then apply `change` (see `MutableCluster.apply`)."""

    cycles: int
    change: tuple[Any, ...]


@dataclass
class Case:
    """A cluster, its pending pods and the changes made while they are scheduled."""

    nodes: list[Obj]
    assigned: list[Obj] = field(default_factory=list)
    pending: list[Obj] = field(default_factory=list)
    pdbs: list[Obj] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    percentage: int = 0
    extra: tuple[str, ...] = (EXTRA_POLICY,)
    seed: int = 7


@dataclass
class Outcome:
    """What both scheduling paths must agree on."""

    placements: dict[str, str | None]
    events: list[tuple[str, str, str, str]]
    victims: list[str]
    nominated: dict[str, str | None]
    attempts: list[tuple[Any, ...]]
    trace: list[dict[str, str | None]]
    scheduler: Scheduler
    cluster: SimulatedCluster

    def comparable(self) -> dict[str, Any]:
        """Everything but the live objects."""
        return {
            "placements": self.placements,
            "events": self.events,
            "victims": self.victims,
            "nominated": self.nominated,
            "attempts": self.attempts,
            "trace": self.trace,
        }


class MutableCluster(SimulatedCluster):
    """The simulated cluster with node updates and deletions delivered as watch events."""

    def update_node(self, name: str, obj: Obj) -> None:
        """Replace node `name` (an update event)."""
        with self._lock:
            old = self._nodes.get(name)
            if old is None:
                return
            self._nodes[name] = obj
            handler = self._handler
        if handler is not None:
            handler.on_node_update(old, obj)

    def delete_node(self, name: str) -> None:
        """Remove node `name` (a delete event); its pods stay, as in the API until the GC runs."""
        with self._lock:
            old = self._nodes.pop(name, None)
            handler = self._handler
        if old is not None and handler is not None:
            handler.on_node_delete(old)

    def node_object(self, name: str) -> Obj | None:
        """The current object of node `name`."""
        with self._lock:
            return self._nodes.get(name)

    def node_names(self) -> list[str]:
        """Every node name, in order of addition."""
        with self._lock:
            return list(self._nodes)

    def apply(self, change: tuple[Any, ...]) -> None:
        """Apply one change: `("label", node_index, key, value | None)`, `("taint", node_index,
        taint | None)`, `("add-node", obj)`, `("delete-node", node_index)`, `("delete-pod", key)`,
        `("add-pods", objs)`, `("unschedulable", node_index, bool)`; node indexes wrap around."""
        kind = change[0]
        if kind == "add-node":
            self.add_node(copy.deepcopy(change[1]))
            return
        if kind == "add-pods":
            for obj in change[1]:
                self.add_pod(copy.deepcopy(obj))
            return
        if kind == "delete-pod":
            if self.pod(change[1]) is not None:
                self.delete_pod(SimpleNamespace(key=change[1]), None)  # type: ignore[arg-type]
            return
        names = self.node_names()
        if not names:
            return
        name = names[change[1] % len(names)]
        if kind == "delete-node":
            self.delete_node(name)
            return
        old = self.node_object(name)
        assert old is not None
        new = copy.deepcopy(old)
        if kind == "label":
            labels = new["metadata"].setdefault("labels", {})
            if change[3] is None:
                labels.pop(change[2], None)
            else:
                labels[change[2]] = change[3]
        elif kind == "taint":
            new["spec"]["taints"] = [change[2]] if change[2] is not None else []
        elif kind == "unschedulable":
            new["spec"]["unschedulable"] = change[2]
        else:
            raise ValueError(f"unknown change {change!r}")
        self.update_node(name, new)


def run(case: Case, reuse: bool, vectorise: bool = True, explain: bool = True) -> Outcome:
    """Schedule `case` with or without the reuse cache and the vectorised plans (without both:
    every node evaluated per pod by the generated functions), in explain mode or not; the outcome."""
    saved = schedule.BULK_MIN
    if not vectorise:
        schedule.BULK_MIN = 2**62
    try:
        return _run(case, reuse, explain)
    finally:
        schedule.BULK_MIN = saved


def _run(case: Case, reuse: bool, explain: bool) -> Outcome:
    cluster = MutableCluster(
        copy.deepcopy(case.nodes), copy.deepcopy(case.assigned + case.pending), copy.deepcopy(case.pdbs)
    )
    scheduler = Scheduler(
        policies(*case.extra),
        cluster,
        clock=FakeClock(),
        options=SchedulerOptions(
            adopt_unknown_schedulers=True,
            seed=case.seed,
            max_attempts=MAX_ATTEMPTS,
            percentage_of_nodes_to_score=case.percentage,
            reuse_node_results=reuse,
            explain=explain,
            attempt_log_pods=None,
            attempt_log_detailed=None,
        ),
    )
    cluster.start(scheduler)
    trace: list[dict[str, str | None]] = []
    for step in case.steps:
        scheduler.run_until_settled(max_cycles=step.cycles)
        trace.append(_placements(cluster))
        cluster.apply(step.change)
    scheduler.run_until_settled(max_cycles=100_000)
    scheduler.binder.shutdown()
    pods = cluster.pods()
    return Outcome(
        placements=_placements(cluster),
        events=[(e.pod, e.type, e.reason, e.message) for e in cluster.events],
        victims=list(scheduler.victims),
        nominated={
            _key(p): (p.get("status") or {}).get("nominatedNodeName") or None
            for p in pods
            if not p["spec"].get("nodeName")
        },
        attempts=[
            (
                a.pod,
                a.number,
                a.result,
                a.chosen,
                a.nominated_node,
                tuple(a.victims),
                a.message,
                {node: (f.rule, f.reasons) for node, f in a.failures.items()},
                {node: tuple(results) for node, results in a.filter_results.items()},
                [(s.node, s.total, s.rules) for s in a.scores.node_scores()],
            )
            for key in scheduler.attempts.pods()
            for a in scheduler.attempts.for_pod(key)
        ],
        trace=trace,
        scheduler=scheduler,
        cluster=cluster,
    )


def _key(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace') or 'default'}/{obj['metadata']['name']}"


def _placements(cluster: SimulatedCluster) -> dict[str, str | None]:
    return {_key(p): p["spec"].get("nodeName") or None for p in cluster.pods()}


# ----------------------------------------------------------------------------------- strategies

CPUS = ("1", "2", "4", "8")
MEMORIES = ("2Gi", "4Gi", "8Gi", "16Gi")
POD_CPUS = (None, "100m", "250m", "500m", "1", "2")
POD_MEMORIES = (None, "128Mi", "512Mi", "1Gi", "3Gi")
PRIORITIES = (0, 0, 10, 100, 1000)


@st.composite
def node_objects(draw: st.DrawFn, name: str) -> Obj:
    """A node with random labels (zone, rack, tier, disk), taints and allocatable resources."""
    labels: dict[str, str] = {}
    if draw(st.integers(0, 9)) > 0:
        labels["topology.kubernetes.io/zone"] = draw(st.sampled_from(ZONES))
    if draw(st.integers(0, 3)) > 0:
        labels["rack"] = draw(st.sampled_from(RACKS))
    if draw(st.integers(0, 2)) == 0:
        labels["tier"] = draw(st.sampled_from(("gold", "silver")))
    if draw(st.booleans()):
        labels["disk"] = draw(st.sampled_from(("ssd", "hdd")))
    taints = []
    kind = draw(st.integers(0, 5))
    if kind == 0:
        taints.append(taint("dedicated", "gpu", "NoSchedule"))
    elif kind == 1:
        taints.append(taint("spot", "true", "PreferNoSchedule"))
    return make_node(
        name,
        cpu=draw(st.sampled_from(CPUS)),
        memory=draw(st.sampled_from(MEMORIES)),
        pods=draw(st.sampled_from((3, 8, 110))),
        labels=labels,
        taints=taints,
        unschedulable=draw(st.integers(0, 11)) == 0,
    )


@st.composite
def pod_specs(draw: st.DrawFn, small: bool = False) -> dict[str, Any]:
    """Keyword arguments of `make_pod` shared by the pods of one group (`small`: modest requests)."""
    app = draw(st.sampled_from(APPS))
    labels = {"app": app} if draw(st.integers(0, 4)) > 0 else {"role": app}
    if draw(st.integers(0, 3)) == 0:
        labels["tier"] = draw(st.sampled_from(("gold", "silver")))
    spec: dict[str, Any] = {
        "cpu": draw(st.sampled_from(POD_CPUS[:4] if small else POD_CPUS)),
        "memory": draw(st.sampled_from(POD_MEMORIES[:4] if small else POD_MEMORIES)),
        "labels": labels,
        "priority": draw(st.sampled_from(PRIORITIES)),
    }
    if draw(st.integers(0, 2)) == 0:
        spec["owner"] = f"ReplicaSet/{app}"
    if draw(st.integers(0, 7)) == 0:
        spec["node_selector"] = {"topology.kubernetes.io/zone": draw(st.sampled_from(ZONES))}
    affinity: Obj = {}
    choice = draw(st.integers(0, 7))
    if choice == 0:
        zones = draw(st.lists(st.sampled_from(ZONES), min_size=1, max_size=2, unique=True))
        affinity.update(node_affinity(required=[[("topology.kubernetes.io/zone", "In", zones)]]))
    elif choice == 1:
        affinity.update(
            node_affinity(
                preferred=[
                    (draw(st.integers(1, 100)), [("disk", "In", ["ssd"])]),
                    (5, [("rack", "Exists", [])]),
                ]
            )
        )
    choice = draw(st.integers(0, 9))
    if choice == 0:
        affinity.update(pod_affinity(anti_required=[pod_affinity_term({"app": app})]))
    elif choice == 1:
        affinity.update(
            pod_affinity(preferred=[(10, pod_affinity_term({"app": "db"}, "topology.kubernetes.io/zone"))])
        )
    elif choice == 2:
        affinity.update(pod_affinity(anti_preferred=[(20, pod_affinity_term({"app": app}, "rack"))]))
    if affinity:
        spec["affinity"] = affinity
    tolerations = []
    if draw(st.integers(0, 3)) == 0:
        tolerations.append(toleration("dedicated"))
    if draw(st.integers(0, 3)) == 0:
        tolerations.append(toleration("spot", "true", "PreferNoSchedule"))
    if tolerations:
        spec["tolerations"] = tolerations
    if draw(st.integers(0, 7)) == 0:
        spec["ports"] = [8080]
    choice = draw(st.integers(0, 5))
    if choice == 0:
        spec["spread"] = [spread_constraint({"app": app}, max_skew=draw(st.integers(1, 2)))]
    elif choice == 1:
        spec["spread"] = [
            spread_constraint({"app": app}, "kubernetes.io/hostname", 1, "ScheduleAnyway"),
            spread_constraint(
                {"app": app}, "rack", 1, draw(st.sampled_from(("DoNotSchedule", "ScheduleAnyway")))
            ),
        ]
    if draw(st.integers(0, 9)) == 0:
        spec["preemption_policy"] = "Never"
    return spec


@st.composite
def assigned_pods(draw: st.DrawFn, node_names: Sequence[str], count: int) -> list[Obj]:
    """Pods already running on random nodes."""
    out = []
    for i in range(count):
        app = draw(st.sampled_from(APPS))
        out.append(
            make_pod(
                f"run-{i}",
                cpu=draw(st.sampled_from(("100m", "500m", "1", "2"))),
                memory=draw(st.sampled_from(("128Mi", "1Gi", "2Gi"))),
                labels={"app": app},
                priority=draw(st.sampled_from((0, 0, 5, 50, 2000))),
                node_name=draw(st.sampled_from(node_names)),
                owner=f"ReplicaSet/{app}" if draw(st.booleans()) else None,
                ports=[8080] if draw(st.integers(0, 7)) == 0 else (),
            )
        )
    return out


@st.composite
def pending_groups(
    draw: st.DrawFn, prefix: str, max_groups: int, max_size: int, small: bool = False
) -> list[Obj]:
    """Groups of identical pending pods (same spec, different names) and singletons."""
    out = []
    for g in range(draw(st.integers(1, max_groups))):
        spec = draw(pod_specs(small))
        size = draw(st.sampled_from((1, max_size // 2, max_size) if small else (1, 1, 2, 3, max_size)))
        minute = draw(st.integers(0, 3))
        creation = f"2024-01-01T00:0{minute}:00Z"
        out.extend(make_pod(f"{prefix}{g}-{i}", creation=creation, **spec) for i in range(size))
    return out


@st.composite
def changes(draw: st.DrawFn, pod_keys: Sequence[str], serial: int) -> tuple[Any, ...]:
    """One change of the cluster between scheduling cycles."""
    kind = draw(
        st.sampled_from(
            ("label", "label", "taint", "add-node", "delete-node", "delete-pod", "add-pods", "unschedulable")
        )
    )
    index = draw(st.integers(0, 1000))
    if kind == "label":
        key = draw(st.sampled_from(("topology.kubernetes.io/zone", "rack", "tier", "disk")))
        values = {"topology.kubernetes.io/zone": ZONES, "rack": RACKS, "tier": ("gold", "silver")}
        value = draw(st.one_of(st.none(), st.sampled_from(values.get(key, ("ssd", "hdd")))))
        return ("label", index, key, value)
    if kind == "taint":
        effect = draw(st.sampled_from((None, "NoSchedule", "PreferNoSchedule")))
        return ("taint", index, None if effect is None else taint("spot", "true", effect))
    if kind == "add-node":
        return ("add-node", draw(node_objects(f"x{serial}")))
    if kind == "delete-node":
        return ("delete-node", index)
    if kind == "delete-pod" and pod_keys:
        return ("delete-pod", draw(st.sampled_from(pod_keys)))
    if kind == "unschedulable":
        return ("unschedulable", index, draw(st.booleans()))
    return ("add-pods", draw(pending_groups(f"late{serial}-", 2, 5)))


@st.composite
def cases(
    draw: st.DrawFn,
    min_nodes: int = 3,
    max_nodes: int = 40,
    max_groups: int = 5,
    max_group_size: int = 12,
    max_steps: int = 4,
) -> Case:
    """A random small cluster, workload and changes."""
    n = draw(st.integers(min_nodes, max_nodes))
    nodes = [draw(node_objects(f"n{i}")) for i in range(n)]
    names = [str(x["metadata"]["name"]) for x in nodes]
    assigned = draw(assigned_pods(names, draw(st.integers(0, min(30, 3 * n)))))
    pending = draw(pending_groups("g", max_groups, max_group_size))
    pdbs = []
    if draw(st.integers(0, 2)) == 0:
        app = draw(st.sampled_from(APPS))
        if draw(st.booleans()):
            pdbs.append(make_pdb(f"pdb-{app}", {"app": app}, disruptions_allowed=draw(st.integers(0, 1))))
        else:
            pdbs.append(make_pdb(f"pdb-{app}", {"app": app}, min_available=draw(st.integers(1, 3))))
    keys = [_key(p) for p in assigned + pending]
    steps = [
        Step(draw(st.integers(1, 8)), draw(changes(keys, i))) for i in range(draw(st.integers(0, max_steps)))
    ]
    return Case(
        nodes=nodes,
        assigned=assigned,
        pending=pending,
        pdbs=pdbs,
        steps=steps,
        percentage=draw(st.sampled_from((0, 0, 10, 30))),
        extra=draw(st.sampled_from(((EXTRA_POLICY,), (EXTRA_POLICY,), (RACK_CAP_POLICY,), ()))),
        seed=draw(st.integers(0, 3)),
    )


@st.composite
def large_cases(draw: st.DrawFn) -> Case:
    """100-160 nodes (so the round-robin window is smaller than the cluster) and bigger groups."""
    n = draw(st.integers(100, 160))
    templates = [draw(node_objects("t")) for _ in range(draw(st.integers(2, 5)))]
    templates[0]["spec"] = {}  # most clusters have plain nodes
    nodes = []
    for i in range(n):
        obj = copy.deepcopy(templates[draw(st.integers(0, len(templates) - 1))])
        obj["metadata"]["name"] = f"n{i}"
        obj["metadata"]["uid"] = f"uid-node-n{i}"
        obj["metadata"]["labels"]["kubernetes.io/hostname"] = f"n{i}"
        if draw(st.integers(0, 3)) == 0:
            obj["metadata"]["labels"]["rack"] = RACKS[i % len(RACKS)]
        nodes.append(obj)
    names = [f"n{i}" for i in range(n)]
    assigned = draw(assigned_pods(names, draw(st.integers(0, 30))))
    pending = draw(pending_groups("g", 4, 40, small=True))
    keys = [_key(p) for p in assigned + pending]
    steps = [Step(draw(st.integers(1, 30)), draw(changes(keys, i))) for i in range(draw(st.integers(0, 3)))]
    return Case(
        nodes=nodes,
        assigned=assigned,
        pending=pending,
        steps=steps,
        percentage=draw(st.sampled_from((0, 5, 10, 20, 50))),
        extra=draw(st.sampled_from(((EXTRA_POLICY,), ()))),
        seed=draw(st.integers(0, 3)),
    )
