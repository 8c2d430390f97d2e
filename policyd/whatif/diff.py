"""The difference between two scheduling runs of one cluster under two policy sets (A and B).

For every pending pod: its node under A and under B. For a pod that moves, the rules whose verdict or
weighted score differs on the two nodes (A's node and B's node) between A's and B's deciding attempts
(the last attempt with per-node detail, as `simulate --explain` shows). A summary: pods that become
unschedulable, pods that become schedulable, pods that move, and the nodes whose load (pods, requested
cpu and memory) changes most.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policyd.quantity import format_quantity
from policyd.scheduler.attempts import Attempt, NodeRecord, filter_verdict, not_applying_policies

__all__ = ["NodeLoad", "PodOutcome", "PolicyDiff", "RuleChange", "RunOutcome", "compare", "render_text"]

# a score rule of the set on a node that was not scored (infeasible, or outside the node window)
NOT_SCORED = "not scored"

# load of one node: (pods, requested cpu in millicores, requested memory in bytes)
Load = tuple[int, int, int]


@dataclass(frozen=True)
class RunOutcome:
    """What one run produced: each pending pod's node (None: not placed) and status, its attempts, node loads."""

    nodes: Mapping[str, str | None]  # pod -> node, in the order pods were first attempted
    statuses: Mapping[str, str]  # pod -> scheduled | unschedulable | gated | preempted
    attempts: Callable[[str], Sequence[Attempt]]
    loads: Mapping[str, Load]  # node -> load when the run settled


@dataclass(frozen=True)
class RuleChange:
    """One rule on one node whose verdict (filters) or weighted score (scores) differs between A and B.

    None: the rule is not in that policy set; NOT_SCORED: the node was not scored."""

    node: str
    rule: str  # policy/rule
    kind: str  # filter | score
    under_a: str | int | None
    under_b: str | int | None

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of a change."""
        return {"node": self.node, "rule": self.rule, "kind": self.kind, "a": self.under_a, "b": self.under_b}


@dataclass(frozen=True)
class PodOutcome:
    """One pending pod under A and under B."""

    pod: str
    node_a: str | None
    node_b: str | None
    status_a: str
    status_b: str
    changes: tuple[RuleChange, ...] = ()

    @property
    def moved(self) -> bool:
        """Placed on different nodes (or placed under one side only)."""
        return self.node_a != self.node_b

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of a pod's outcome."""
        return {
            "pod": self.pod,
            "a": {"node": self.node_a, "status": self.status_a},
            "b": {"node": self.node_b, "status": self.status_b},
            "moved": self.moved,
            "changes": [c.to_json() for c in self.changes],
        }


@dataclass(frozen=True)
class NodeLoad:
    """A node's load under A and under B."""

    node: str
    a: Load
    b: Load

    @property
    def delta(self) -> Load:
        """B minus A: pods, cpu (millicores), memory (bytes)."""
        return (self.b[0] - self.a[0], self.b[1] - self.a[1], self.b[2] - self.a[2])

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of a node's load change."""
        d = self.delta
        return {
            "node": self.node,
            "pods": {"a": self.a[0], "b": self.b[0], "delta": d[0]},
            "cpuMillis": {"a": self.a[1], "b": self.b[1], "delta": d[1]},
            "memoryBytes": {"a": self.a[2], "b": self.b[2], "delta": d[2]},
        }


@dataclass(frozen=True)
class PolicyDiff:
    """Every pending pod's outcome under A and B, and the nodes whose load changes (most first)."""

    pods: tuple[PodOutcome, ...]
    loads: tuple[NodeLoad, ...]

    def moved(self) -> list[PodOutcome]:
        """Pods placed on a different node (both placed)."""
        return [p for p in self.pods if p.moved and p.node_a and p.node_b]

    def became_unschedulable(self) -> list[PodOutcome]:
        """Pods placed under A, not under B."""
        return [p for p in self.pods if p.node_a and not p.node_b]

    def became_schedulable(self) -> list[PodOutcome]:
        """Pods placed under B, not under A."""
        return [p for p in self.pods if p.node_b and not p.node_a]

    def to_json(self) -> dict[str, Any]:
        """The `-o json` document."""
        return {
            "pods": [p.to_json() for p in self.pods],
            "summary": {
                "pending": len(self.pods),
                "moved": [p.pod for p in self.moved()],
                "becameUnschedulable": [p.pod for p in self.became_unschedulable()],
                "becameSchedulable": [p.pod for p in self.became_schedulable()],
                "nodes": [n.to_json() for n in self.loads],
            },
        }


def _deciding(attempts: Sequence[Attempt]) -> Attempt | None:
    """The attempt that decided the pod's outcome: the last one with per-node detail."""
    detailed = [a for a in attempts if a.node_names]
    return detailed[-1] if detailed else (attempts[-1] if attempts else None)


def _rule_values(attempt: Attempt | None, node: str) -> dict[tuple[str, str], str | int | None]:
    """(kind, policy/rule) -> the rule's verdict (filters) or weighted score (scores) on `node`."""
    if attempt is None:
        return {}
    rec: NodeRecord | None = next((r for r in attempt.nodes if r.node == node), None)
    if rec is None:
        return {}
    not_applying = not_applying_policies(attempt)
    values: dict[tuple[str, str], str | int | None] = {}
    for ref in attempt.filter_rules:
        values[("filter", f"{ref.policy}/{ref.name}")] = filter_verdict(rec, ref, not_applying)[0]
    weighted = {s.rule: s.weighted for s in rec.score.rules} if rec.score is not None else {}
    for ref in attempt.score_rules:
        values[("score", f"{ref.policy}/{ref.name}")] = weighted.get(ref, NOT_SCORED)
    return values


def rule_changes(
    attempt_a: Attempt | None, attempt_b: Attempt | None, nodes: Sequence[str]
) -> tuple[RuleChange, ...]:
    """The rules whose verdict or weighted score on each of `nodes` differs between the two attempts."""
    out: list[RuleChange] = []
    for node in nodes:
        under_a, under_b = _rule_values(attempt_a, node), _rule_values(attempt_b, node)
        for key in [*under_a, *(k for k in under_b if k not in under_a)]:
            if under_a.get(key) != under_b.get(key):
                out.append(RuleChange(node, key[1], key[0], under_a.get(key), under_b.get(key)))
    return tuple(out)


def compare(a: RunOutcome, b: RunOutcome, top: int = 5) -> PolicyDiff:
    """The pods of both runs (A's order, then B's others) and the `top` nodes whose load changes most."""
    pods = [*a.nodes, *(p for p in b.nodes if p not in a.nodes)]
    outcomes = []
    for pod in pods:
        node_a, node_b = a.nodes.get(pod), b.nodes.get(pod)
        changes: tuple[RuleChange, ...] = ()
        if node_a != node_b:
            on = [n for n in dict.fromkeys((node_a, node_b)) if n is not None]
            changes = rule_changes(_deciding(a.attempts(pod)), _deciding(b.attempts(pod)), on)
        outcomes.append(
            PodOutcome(
                pod, node_a, node_b, a.statuses.get(pod, "absent"), b.statuses.get(pod, "absent"), changes
            )
        )
    loads = [
        NodeLoad(n, a.loads.get(n, (0, 0, 0)), b.loads.get(n, (0, 0, 0)))
        for n in sorted({*a.loads, *b.loads})
    ]
    changed = [n for n in loads if n.delta != (0, 0, 0)]
    changed.sort(key=lambda n: (-abs(n.delta[0]), -abs(n.delta[1]), -abs(n.delta[2]), n.node))
    return PolicyDiff(tuple(outcomes), tuple(changed[:top]))


def _signed(value: int, unit: Callable[[int], str]) -> str:
    return ("+" if value > 0 else "-" if value < 0 else "") + unit(abs(value))


def _cpu(milli: int) -> str:
    return f"{milli}m" if milli % 1000 else str(milli // 1000)


def _memory(value: int) -> str:
    return format_quantity(value, binary=True)


def _shown(value: str | int | None) -> str:
    return "(absent)" if value is None else str(value) if value != "" else "(not recorded)"


def render_text(diff: PolicyDiff) -> str:
    """The text report: a table of pods, the rules behind each move, and the summary."""
    rows = [("POD", "UNDER A", "UNDER B", "")]
    for p in diff.pods:
        rows.append(
            (p.pod, p.node_a or f"<{p.status_a}>", p.node_b or f"<{p.status_b}>", "moves" if p.moved else "")
        )
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)), r[3]]).rstrip() for r in rows
    ]
    for p in diff.pods:
        if not p.moved:
            continue
        lines.append("")
        lines.append(f"{p.pod}: {p.node_a or '<' + p.status_a + '>'} -> {p.node_b or '<' + p.status_b + '>'}")
        if not p.changes:
            lines.append(
                "  no rule changed its verdict or weighted score on these nodes (the cluster state differed)"
            )
        for c in p.changes:
            what = "verdict" if c.kind == "filter" else "weighted score"
            lines.append(f"  {c.node}: {c.kind} {c.rule}: {what} {_shown(c.under_a)} -> {_shown(c.under_b)}")
    lines.append("")
    unsched, sched, moved = diff.became_unschedulable(), diff.became_schedulable(), diff.moved()
    lines.append(
        f"{len(diff.pods)} pending pods: {len(moved)} move, {len(unsched)} become unschedulable, "
        f"{len(sched)} become schedulable"
    )
    for label, group in (("become unschedulable", unsched), ("become schedulable", sched)):
        if group:
            lines.append(f"{label}: {', '.join(p.pod for p in group)}")
    if diff.loads:
        lines.append("nodes whose load changes most (B - A):")
        table = [("NODE", "PODS", "CPU", "MEMORY")]
        for n in diff.loads:
            d = n.delta
            table.append((n.node, f"{d[0]:+d}", _signed(d[1], _cpu), _signed(d[2], _memory)))
        w = [max(len(r[i]) for r in table) for i in range(4)]
        lines.extend("  " + "  ".join(c.ljust(x) for c, x in zip(r, w, strict=True)).rstrip() for r in table)
    return "\n".join(lines)
