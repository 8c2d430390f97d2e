"""Per node and per rule comparison of kube-scheduler's cycle with policyd's attempt on the same state.

Filters: the exact feasible set (per node) and the FitError histogram of every node's first failing
plugin's reasons (per rule; from the probe, see kube_side). Scores: every weighted score of every
plugin on every feasible node (1.20 logs normalised x weight), against the mapped policyd rule's
weighted score. Placement: kube-scheduler's node is one of policyd's top-scored nodes (ties are
drawn at random by both). Victims: the same victims and nominated node.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from policyd.scheduler.attempts import Attempt
from tests.differential.kube_side import PROBE_REASON, KubeCycle
from tests.differential.scenario import Obj
from tests.differential.spread_oracle import expected_scores, round_half_away, truncate

SPREAD_WEIGHT = 2  # PodTopologySpread's weight in 1.20's default profile and in kube-1.20.policy

# kube-scheduler 1.20 score plugin -> policyd rule (None: not compared, and why)
SCORE_RULES: dict[str, str | None] = {
    "TaintToleration": "TaintTolerationScore",
    "NodeAffinity": "NodeAffinityScore",
    "NodeResourcesLeastAllocated": "NodeResourcesLeastAllocated",
    "NodeResourcesBalancedAllocation": "NodeResourcesBalancedAllocation",
    "ImageLocality": "ImageLocality",
    "PodTopologySpread": "PodTopologySpreadScore",
    "InterPodAffinity": "InterPodAffinityScore",
    # deprecated, removed in 1.24; scores 100 x 10000 on every node without the
    # scheduler.alpha.kubernetes.io/preferAvoidPods annotation (never generated): it cannot order nodes
    "NodePreferAvoidPods": None,
}
# kube-scheduler 1.20 filter plugin -> the policyd filter rules standing for it
FILTER_RULES: dict[str, tuple[str, ...]] = {
    "NodeUnschedulable": ("NodeUnschedulable",),
    "NodeName": ("NodeName",),
    "TaintToleration": ("TaintToleration",),
    "NodeAffinity": ("NodeAffinity",),
    "NodePorts": ("NodePorts",),
    "NodeResourcesFit": ("NodeResourcesFit",),
    "VolumeRestrictions": ("VolumeRestrictions",),
    # EBSLimits, GCEPDLimits, NodeVolumeLimits (CSI) and AzureDiskLimits: one rule, one reason
    "NodeVolumeLimits": ("NodeVolumeLimits",),
    "VolumeBinding PreFilter": ("VolumeBindingPreFilter",),  # fails every node, before any filter
    "VolumeBinding": ("VolumeBinding",),
    "VolumeZone": ("VolumeZone",),
    "PodTopologySpread": ("PodTopologySpread",),
    "InterPodAffinity": ("InterPodAffinity", "InterPodAntiAffinity", "InterPodExistingAntiAffinity"),
}
# the 1.20 reason texts -> the plugin giving them (for the table; from the plugins' ErrReason constants)
REASON_PLUGINS: tuple[tuple[str, str], ...] = (
    ("node(s) were unschedulable", "NodeUnschedulable"),
    ("node(s) didn't match the requested node name", "NodeName"),
    ("node(s) had taint", "TaintToleration"),
    ("node(s) didn't match Pod's node affinity", "NodeAffinity"),  # node selector and required affinity
    ("node(s) didn't have free ports", "NodePorts"),
    ("Insufficient ", "NodeResourcesFit"),
    ("Too many pods", "NodeResourcesFit"),
    ("node(s) had no available disk", "VolumeRestrictions"),
    ("node(s) exceed max volume count", "NodeVolumeLimits"),
    ("node(s) had volume node affinity conflict", "VolumeBinding"),
    ("node(s) didn't find available persistent volumes to bind", "VolumeBinding"),
    ("pod has unbound immediate PersistentVolumeClaims", "VolumeBinding"),
    ("node(s) had no available volume zone", "VolumeZone"),
    ("node(s) didn't match pod topology spread constraints", "PodTopologySpread"),
    ("node(s) didn't match pod affinity", "InterPodAffinity"),
    ("node(s) didn't match pod anti-affinity", "InterPodAffinity"),
    ("node(s) didn't satisfy existing pods anti-affinity", "InterPodAffinity"),
    (PROBE_REASON, "(feasible)"),
)
_HISTOGRAM = re.compile(r"(\d+) (.+?)(?=, \d+ |\.$)")


# Documented differences (README "Deliberate differences"): a disagreement they explain is reported
# as explained, never as agreement.
SPREAD_TRUNCATION = "spread-truncation"
DEFAULT_SPREAD_KEYS = "default-spread-keys"
PREEMPTION_TIE = "preemption-tie"
EXPLANATIONS = {
    SPREAD_TRUNCATION: "1.20 truncates PodTopologySpread's raw score (int64(score)); modern kube-scheduler and policyd round it",
    DEFAULT_SPREAD_KEYS: "1.20's system default spreading: the selector of every controller selecting the pod "
    "(since 1.22 and in policyd: its owner's), nodes lacking a key ignored (since 1.23 and in policyd: scored)",
    PREEMPTION_TIE: "equally good preemption candidates: 1.20 takes the first its parallel dry run returned",
}


@dataclass(frozen=True)
class Disagreement:
    """One difference: `kind` is filters, scores, placement or victims; `what` names the rule/node."""

    pod: str
    kind: str
    what: str
    kube: str
    policyd: str
    explained: str = ""  # a key of EXPLANATIONS (several joined by "+")

    def __str__(self) -> str:
        why = f" [explained: {self.explained}]" if self.explained else ""
        return (
            f"{self.pod}: {self.kind} {self.what}: kube-scheduler {self.kube} | policyd {self.policyd}{why}"
        )


@dataclass(frozen=True)
class Comparison:
    """The outcome of one pod: which aspects were compared and every disagreement."""

    pod: str
    compared: frozenset[str]  # of filters, scores, placement, victims
    disagreements: tuple[Disagreement, ...]

    def agrees(self, kind: str) -> bool:
        """True when `kind` was compared and no disagreement of that kind was found."""
        return kind in self.compared and not any(d.kind == kind for d in self.disagreements)

    def explained(self, kind: str) -> bool:
        """True when every disagreement of `kind` is explained by a documented difference."""
        found = [d for d in self.disagreements if d.kind == kind]
        return bool(found) and all(d.explained for d in found)

    @property
    def unexplained(self) -> tuple[Disagreement, ...]:
        """The disagreements no documented difference explains."""
        return tuple(d for d in self.disagreements if not d.explained)


def histogram(message: str) -> Counter[str]:
    """The reason counts of a FitError text `0/N nodes are available: 2 reason, 1 reason.`."""
    _, _, body = message.partition(": ")
    return Counter({reason: int(count) for count, reason in _HISTOGRAM.findall(body)})


def reason_plugin(reason: str) -> str:
    """The 1.20 plugin a reason text comes from ('?' when unknown)."""
    return next((plugin for prefix, plugin in REASON_PLUGINS if reason.startswith(prefix)), "?")


def policyd_histogram(attempt: Attempt) -> Counter[str]:
    """policyd's reasons per node as the probe profile would report them (feasible: NodeLabel's)."""
    counts: Counter[str] = Counter()
    for record in attempt.nodes:
        if record.failure is not None:
            counts.update(record.failure.reasons or (record.failure.error or "<no reason>",))
        else:
            counts[PROBE_REASON] += 1
    return counts


def compare(kube: KubeCycle, attempt: Attempt, pod_obj: Obj, state: Sequence[Obj]) -> Comparison:
    """Compare one pod's first cycle on both sides (`state`: the objects both saw)."""
    priorities = {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": int(o["spec"].get("priority") or 0)
        for o in state
        if o["kind"] == "Pod"
    }
    out: list[Disagreement] = []
    compared = {"filters", "placement"}
    pod = kube.pod
    # filters: per node feasibility, per rule reasons
    feasible = frozenset(r.node for r in attempt.nodes if r.feasible)
    for node in sorted(feasible ^ kube.feasible):
        out.append(
            Disagreement(
                pod,
                "filters",
                f"node {node}",
                "feasible" if node in kube.feasible else "infeasible",
                "feasible" if node in feasible else _failure_text(attempt, node),
            )
        )
    ours, theirs = policyd_histogram(attempt), histogram(kube.probe_message)
    for reason in sorted(set(ours) | set(theirs)):
        if ours[reason] != theirs[reason]:
            out.append(
                Disagreement(
                    pod,
                    "filters",
                    f"{reason_plugin(reason)} reason {reason!r}",
                    str(theirs[reason]),
                    str(ours[reason]),
                )
            )
    # scores: every plugin on every node kube-scheduler scored
    truncated = expected_scores(pod_obj, state, kube.feasible, truncate)
    rounded = expected_scores(pod_obj, state, kube.feasible, round_half_away)
    modern = expected_scores(pod_obj, state, kube.feasible, round_half_away, modern=True)
    used: list[str] = []  # the explanations of this pod's score differences
    adjusted = {r.node: r.score.total for r in attempt.nodes if r.feasible and r.score is not None}
    if kube.scores:
        compared.add("scores")
        by_node = {r.node: {s.rule.name: s for s in r.score.rules} for r in attempt.nodes if r.score}
        for plugin, nodes in sorted(kube.scores.items()):
            rule = SCORE_RULES.get(plugin, "?")
            if rule is None:
                continue
            for node, value in sorted(nodes.items()):
                ours_score = by_node.get(node, {}).get(rule or "")
                got = str(ours_score.weighted) if ours_score is not None else "<none>"
                if got != str(value):
                    raw = f" (raw {ours_score.raw:g})" if ours_score is not None else ""
                    # explained only when the 1.20 oracle gives kube-scheduler's score exactly and the
                    # oracle rounding (and scoring nodes without every default key) gives policyd's
                    why = ""
                    if (
                        plugin == "PodTopologySpread"
                        and ours_score is not None
                        and value == SPREAD_WEIGHT * truncated.get(node, -1)
                    ):
                        if ours_score.weighted == SPREAD_WEIGHT * rounded.get(node, -1):
                            why = SPREAD_TRUNCATION
                        elif modern != rounded and ours_score.weighted == SPREAD_WEIGHT * modern.get(
                            node, -1
                        ):
                            why = DEFAULT_SPREAD_KEYS
                    out.append(Disagreement(pod, "scores", f"{plugin} on {node}", str(value), got + raw, why))
                    if why and ours_score is not None and node in adjusted:
                        adjusted[node] += value - ours_score.weighted
                        used.append(why)
    # placement
    top = _top_nodes(attempt)
    if kube.chosen is not None and kube.chosen not in top:
        # explained when kube-scheduler's node is a top node once the explained score differences are
        # replaced by kube-scheduler's own scores
        best = max(adjusted.values(), default=None)
        why = "+".join(sorted(set(used))) if best is not None and adjusted.get(kube.chosen) == best else ""
        out.append(
            Disagreement(pod, "placement", "node", kube.chosen, ", ".join(sorted(top)) or "<none>", why)
        )
    if kube.chosen is None and attempt.chosen is not None:
        out.append(Disagreement(pod, "placement", "node", "<none>", attempt.chosen))
    # victims
    ours_victims = frozenset(attempt.victims)
    if kube.chosen is None and (kube.victims or ours_victims or kube.nominated or attempt.nominated_node):
        compared.add("victims")
        # a tie: as many victims of the same priorities on another node (1.20 then takes whichever
        # candidate its parallel dry run returned first; pods have no startTime without a kubelet).
        # On one node the choice is deterministic and must agree.
        tie = (
            bool(kube.nominated and attempt.nominated_node)
            and kube.nominated != attempt.nominated_node
            and ours_victims != kube.victims
            and sorted(priorities.get(v, 0) for v in ours_victims)
            == sorted(priorities.get(v, 0) for v in kube.victims)
        )
        why = PREEMPTION_TIE if tie else ""
        if ours_victims != kube.victims:
            out.append(
                Disagreement(
                    pod,
                    "victims",
                    "set",
                    ", ".join(sorted(kube.victims)) or "<none>",
                    ", ".join(sorted(ours_victims)) or "<none>",
                    why,
                )
            )
        if (kube.nominated or None) != (attempt.nominated_node or None):
            out.append(
                Disagreement(
                    pod, "victims", "nominated node", str(kube.nominated), str(attempt.nominated_node), why
                )
            )
    return Comparison(pod, frozenset(compared), tuple(out))


def _failure_text(attempt: Attempt, node: str) -> str:
    for record in attempt.nodes:
        if record.node == node and record.failure is not None:
            return f"fails {record.failure.rule.name}: {'; '.join(record.failure.reasons)}"
    return "infeasible"


def _top_nodes(attempt: Attempt) -> frozenset[str]:
    scored = [(r.node, r.score.total) for r in attempt.nodes if r.feasible and r.score is not None]
    if not scored:
        return frozenset(r.node for r in attempt.nodes if r.feasible)
    best = max(total for _, total in scored)
    return frozenset(node for node, total in scored if total == best)


def failing_kinds(comparisons: Sequence[Comparison]) -> Counter[str]:
    """How many pods disagree, by kind."""
    return Counter(d.kind for c in comparisons for d in {d.kind: d for d in c.disagreements}.values())
