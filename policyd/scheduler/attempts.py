"""Attempt records and explanations, and kube-scheduler's user-facing texts.

Every scheduling cycle leaves one `Attempt`: per node, per rule, what passed and failed and why; raw,
normalised and weighted scores; the choice; the policy generation. The texts of events and of the
PodScheduled condition follow kube-scheduler exactly (FitError.Error in framework/types.go and the
DefaultPreemption PostFilter in framework/preemption/preemption.go).
"""

from __future__ import annotations

import collections
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policyd.framework import FilterFailure, FilterResult, RuleRef
from policyd.scheduler.algorithm.scoring import NO_SCORES, NodeScore, RuleScore, ScoreTable

NO_NODE_AVAILABLE = "0/{n} nodes are available"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
SCHEDULING_GATED = "Scheduling is blocked due to non-empty scheduling gates"
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."


def fit_error_message(
    num_nodes: int,
    reasons: Iterable[tuple[Sequence[str], int]],
    pre_filter: str = "",
    post_filter: str = "",
) -> str:
    """`0/N nodes are available: <count> <reason>, ....` as kube-scheduler's FitError.Error();
    `reasons`: the failing nodes' reasons, each with the number of nodes that gave them.

    Example: `0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint {dedicated:
    gpu}. preemption: 0/5 nodes are available: 5 No preemption victims found for incoming pod.`
    """
    msg = NO_NODE_AVAILABLE.format(n=num_nodes) + ":"
    if pre_filter:
        msg += f" {pre_filter}."
    else:
        histogram: Counter[str] = Counter()
        for node_reasons, nodes in reasons:
            for reason in node_reasons:
                histogram[reason] += nodes
        parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
        if parts:
            msg += f" {', '.join(parts)}."
    if post_filter:
        msg += f" {post_filter}"  # kube-scheduler >= 1.28: the PostFilter message brings its own period
    return msg


def preemption_message(num_nodes: int, statuses: Mapping[str, tuple[str, ...]]) -> str:
    """The PostFilter message of a failed preemption: `preemption: 0/N nodes are available: ...`."""
    return "preemption: " + fit_error_message(num_nodes, Counter(statuses.values()).items())


def scheduled_message(pod_key: str, node: str) -> str:
    """Text of the `Scheduled` event."""
    return f"Successfully assigned {pod_key} to {node}"


def preempted_message(preemptor_uid: str, node: str) -> str:
    """Text of the `Preempted` event on a victim."""
    return f"Preempted by pod {preemptor_uid} on node {node}"


def scheduling_gated_message(gates: Sequence[str]) -> str:
    """The API server's PodScheduled=False/SchedulingGated message, with the gates still set."""
    return f"{SCHEDULING_GATED}: {', '.join(gates)}"


def unschedulable_condition(message: str) -> dict[str, str]:
    """The PodScheduled=False condition kube-scheduler writes for an unschedulable pod."""
    return {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}


def _rule_name(rule: RuleRef) -> str:
    return f"{rule.policy}/{rule.name}"


@dataclass
class NodeRecord:
    """What one attempt saw of one node."""

    node: str
    evaluated: bool
    failure: FilterFailure | None = None
    results: tuple[FilterResult, ...] = ()
    score: NodeScore | None = None

    @property
    def feasible(self) -> bool:
        """True when every filter passed."""
        return self.evaluated and self.failure is None

    def to_json(self) -> dict[str, Any]:
        """JSON shape used by `explain --output json`."""
        out: dict[str, Any] = {"node": self.node, "evaluated": self.evaluated, "feasible": self.feasible}
        if self.failure is not None:
            out["failure"] = {
                "rule": _rule_name(self.failure.rule),
                "reasons": list(self.failure.reasons),
                "error": self.failure.error,
                "unresolvable": self.failure.unresolvable,
            }
        if self.results:
            out["filters"] = [
                {"rule": _rule_name(r.rule), "passed": r.passed, "reasons": list(r.reasons), "error": r.error}
                for r in self.results
            ]
        if self.score is not None:
            out["score"] = {
                "total": self.score.total,
                "rules": [
                    {
                        "rule": _rule_name(s.rule),
                        "raw": s.raw,
                        "normalized": s.normalized,
                        "weighted": s.weighted,
                        "error": s.error,
                    }
                    for s in self.score.rules
                ],
            }
        return out


@dataclass
class Attempt:
    """One scheduling cycle of one pod."""

    pod: str
    number: int
    profile: str
    generation: int
    time: float
    result: str = "unschedulable"  # scheduled | unschedulable | nominated | waiting | rejected | error
    chosen: str | None = None
    message: str = ""
    nominated_node: str | None = None
    victims: list[str] = field(default_factory=list)
    filter_rules: tuple[RuleRef, ...] = ()
    score_rules: tuple[RuleRef, ...] = ()
    # what `nodes` is built from, on first read (an attempt keeps the cycle's results, not a record
    # per node: most attempts are never looked at)
    node_names: Sequence[str] = ()
    failures: Mapping[str, FilterFailure] = field(default_factory=dict)
    filter_results: Mapping[str, Sequence[FilterResult]] = field(default_factory=dict)
    scores: ScoreTable = NO_SCORES
    # the policies of the profile whose `match` held for the pod (recorded in explain mode)
    applied: tuple[str, ...] | None = None
    _records: list[NodeRecord] | None = field(default=None, repr=False)

    @property
    def nodes(self) -> list[NodeRecord]:
        """One record per node of the cycle's snapshot, in snapshot order."""
        if self._records is None:
            self._records = build_node_records(
                self.node_names, self.failures, self.filter_results, self.scores
            )
        return self._records

    def strip(self) -> None:
        """Drop the per-node detail (failures, verdicts, scores); the outcome and message stay."""
        self.node_names = ()
        self.failures = {}
        self.filter_results = {}
        self.scores = NO_SCORES
        self._records = None

    def to_json(self) -> dict[str, Any]:
        """JSON shape used by `explain --output json`."""
        return {
            "pod": self.pod,
            "attempt": self.number,
            "profile": self.profile,
            "policyGeneration": self.generation,
            "result": self.result,
            "node": self.chosen,
            "message": self.message,
            "nominatedNode": self.nominated_node,
            "victims": list(self.victims),
            "appliedPolicies": None if self.applied is None else list(self.applied),
            "nodes": [n.to_json() for n in self.nodes],
        }


def build_node_records(
    node_names: Iterable[str],
    failures: Mapping[str, FilterFailure],
    all_results: Mapping[str, Sequence[FilterResult]],
    scores: ScoreTable,
    evaluated: Iterable[str] | None = None,
) -> list[NodeRecord]:
    """One record per node of the snapshot, in snapshot order."""
    by_node = {s.node: s for s in scores.node_scores()}
    seen = set(evaluated) if evaluated is not None else None
    records = []
    for name in node_names:
        was_evaluated = name in failures or name in by_node or name in all_results
        if seen is not None:
            was_evaluated = was_evaluated or name in seen
        records.append(
            NodeRecord(
                node=name,
                evaluated=was_evaluated,
                failure=failures.get(name),
                results=tuple(all_results.get(name, ())),
                score=by_node.get(name),
            )
        )
    return records


class AttemptLog:
    """Attempts by pod, in the order pods were first attempted (one lock).

    Unbounded by default (`policyd simulate`, `explain`, tests). A long-running scheduler bounds it:
    at most `max_pods` pods (the earliest attempted are dropped first) and node detail only for the
    latest `max_detailed` attempts (older ones keep their outcome and message); a failing attempt's
    detail holds a failure per node, which must not accumulate over days.
    """

    def __init__(self, max_pods: int | None = None, max_detailed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._by_pod: dict[str, list[Attempt]] = {}
        self._max_pods = max_pods
        self._max_detailed = max_detailed
        self._detailed: collections.deque[Attempt] = collections.deque()

    def add(self, attempt: Attempt) -> None:
        """Record an attempt."""
        with self._lock:
            self._by_pod.setdefault(attempt.pod, []).append(attempt)
            if self._max_detailed is not None:
                self._detailed.append(attempt)
                while len(self._detailed) > self._max_detailed:
                    self._detailed.popleft().strip()
            if self._max_pods is not None:
                while len(self._by_pod) > self._max_pods:
                    for old in self._by_pod.pop(next(iter(self._by_pod))):
                        old.strip()

    def for_pod(self, key: str) -> list[Attempt]:
        """Attempts of one pod, oldest first."""
        with self._lock:
            return list(self._by_pod.get(key, ()))

    def pods(self) -> list[str]:
        """Pod keys in the order they were first attempted."""
        with self._lock:
            return list(self._by_pod)


# a filter rule's verdict on one node of an attempt (`filter_verdict`; `RuleCell.verdict`)
PASS = "pass"
FAIL = "fail"
NOT_EVALUATED = "-"  # the node was outside the cycle's node window
NOT_APPLYING = "n/a"  # the rule's policy did not `match` the pod, or an earlier rule failed first
UNKNOWN = ""  # an earlier rule failed and the later ones were not recorded


def filter_verdict(
    rec: NodeRecord, ref: RuleRef, not_applying: frozenset[str] | set[str] = frozenset()
) -> tuple[str, tuple[str, ...]]:
    """The verdict of filter rule `ref` on the node of `rec` (PASS, FAIL, ...) and a failure's reasons;
    `not_applying`: the policies whose `match` was false for the pod."""
    results = {r.rule: r for r in rec.results}
    if ref in results:
        r = results[ref]
        return (PASS, ()) if r.passed else (FAIL, tuple(r.reasons) or (r.error or "",))
    if rec.failure is not None and rec.failure.rule == ref:
        return FAIL, tuple(rec.failure.reasons)
    if not rec.evaluated:
        return NOT_EVALUATED, ()
    if ref.policy in not_applying or rec.results:
        return NOT_APPLYING, ()
    return (PASS if rec.failure is None else UNKNOWN), ()


def not_applying_policies(attempt: Attempt) -> frozenset[str]:
    """The policies of the attempt's rules whose `match` was false for the pod (explain mode)."""
    if attempt.applied is None:
        return frozenset()
    applied = set(attempt.applied)
    return frozenset(
        r.policy for r in (*attempt.filter_rules, *attempt.score_rules) if r.policy not in applied
    )


@dataclass(frozen=True)
class RuleCell:
    """One rule on one node of an attempt: a filter's verdict or a score rule's parts.

    `verdict`: `pass`, `fail` (with `reasons`), `n/a` (the rule's policy does not apply to the pod),
    `-` (the node was not evaluated), `score` (with `score`), or `` (nothing recorded).
    """

    verdict: str
    reasons: tuple[str, ...] = ()
    score: RuleScore | None = None


@dataclass(frozen=True)
class RuleRow:
    """One rule of an attempt across its nodes (in `Attempt.nodes` order)."""

    kind: str  # filter | score
    rule: RuleRef
    cells: tuple[RuleCell, ...]

    @property
    def label(self) -> str:
        """`policy/rule`, as explanations name a rule."""
        return _rule_name(self.rule)


def explain_rows(attempt: Attempt) -> list[RuleRow]:
    """The attempt's filter rules, then its score rules, each with one cell per node.

    With the applied policies recorded (explain mode), the rules of a policy whose `match` is false for
    the pod read `n/a`, its score rules included (they were not evaluated: no raw 0).
    """
    not_applying = not_applying_policies(attempt)
    out: list[RuleRow] = []
    for ref in attempt.filter_rules:
        cells = []
        for rec in attempt.nodes:
            verdict, reasons = filter_verdict(rec, ref, not_applying)
            cells.append(RuleCell(verdict, reasons))
        out.append(RuleRow("filter", ref, tuple(cells)))
    for ref in attempt.score_rules:
        cells = []
        for rec in attempt.nodes:
            parts = {s.rule: s for s in rec.score.rules} if rec.score else {}
            s = parts.get(ref)
            if s is not None and ref.policy in not_applying:
                cells.append(RuleCell(NOT_APPLYING))
            else:
                cells.append(RuleCell("score", score=s) if s else RuleCell(UNKNOWN))
        out.append(RuleRow("score", ref, tuple(cells)))
    return out


def explain_table(attempt: Attempt) -> str:
    """A per-rule (rows), per-node (columns) text table of one attempt (`explain_rows`); failure reasons
    as footnotes."""
    notes: dict[str, int] = {}

    def shown(cell: RuleCell) -> str:
        if cell.verdict == FAIL:
            text = "; ".join(cell.reasons)
            return f"FAIL[{notes.setdefault(text, len(notes) + 1)}]"
        if cell.score is not None:
            values = f"{cell.score.raw:g}/{cell.score.normalized}/{cell.score.weighted}"
            if cell.score.error is None:
                return values
            text = f"{cell.score.rule.name}: {cell.score.error}"
            return f"{values} ERROR[{notes.setdefault(text, len(notes) + 1)}]"
        return cell.verdict

    rows: list[list[str]] = [["RULE", *(rec.node for rec in attempt.nodes)]]
    for rule in explain_rows(attempt):
        suffix = " (raw/norm/weighted)" if rule.kind == "score" else ""
        rows.append([f"{rule.kind} {rule.label}{suffix}", *(shown(c) for c in rule.cells)])
    rows.append(["TOTAL", *(str(rec.score.total) if rec.score else "" for rec in attempt.nodes)])
    if attempt.chosen:
        rows.append(["", *("^ chosen" if rec.node == attempt.chosen else "" for rec in attempt.nodes)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        f"pod {attempt.pod} attempt {attempt.number} (profile {attempt.profile}, policy generation "
        f"{attempt.generation}): {attempt.result}" + (f" on {attempt.chosen}" if attempt.chosen else "")
    ]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    lines.extend(f"[{n}] {text}" for text, n in notes.items())
    if attempt.message:
        lines.append(f"message: {attempt.message}")
    if attempt.nominated_node:
        lines.append(f"nominated node: {attempt.nominated_node}")
    if attempt.victims:
        lines.append("victims: " + ", ".join(attempt.victims))
    return "\n".join(lines)
