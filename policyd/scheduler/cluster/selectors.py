"""Label selectors, node selectors and taint tolerations as kube-scheduler evaluates them.

The semantics of k8s.io/apimachinery `labels` (metav1.LabelSelector), component-helpers
`nodeaffinity` (required node affinity) and `v1helper.TolerationsTolerateTaint`, over the CEL-visible
pod and node dicts (policyd.scheduler.cluster.objects).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CelObject = Mapping[str, Any]

_MAX_INT64 = 2**63 - 1


def labels_of(obj: CelObject) -> Mapping[str, str]:
    """The `labels` of a CEL pod or node dict (empty when absent)."""
    return obj.get("labels") or {}


@dataclass(frozen=True)
class Requirement:
    """One label requirement: key, operator (In, NotIn, Exists, DoesNotExist, Gt, Lt), values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when `labels` satisfy the requirement."""
        op = self.operator
        present = self.key in labels
        if op in ("In", "="):
            return present and labels[self.key] in self.values
        if op in ("NotIn", "!="):
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            left, right = _parse_int(labels[self.key]), _parse_int(self.values[0])
            if left is None or right is None:
                return False
            return left > right if op == "Gt" else left < right
        return False


def _parse_int(text: str) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(2**63) <= value <= _MAX_INT64 else None


@dataclass(frozen=True)
class LabelSelector:
    """A parsed metav1.LabelSelector; `nothing` is the nil selector (matches no object)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """True for the selector with no requirements (labels.Everything(); `Empty()` in Go)."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when the label set is selected."""
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def with_requirements(self, extra: Iterable[Requirement]) -> LabelSelector:
        """A selector with more requirements ANDed in (a nil selector stays nil)."""
        if self.nothing:
            return self
        return LabelSelector(self.requirements + tuple(extra))


def parse_label_selector(raw: Mapping[str, Any] | None) -> LabelSelector:
    """metav1.LabelSelectorAsSelector: None -> nothing; {} -> everything."""
    if raw is None:
        return LabelSelector(nothing=True)
    reqs = [Requirement(str(k), "In", (str(v),)) for k, v in (raw.get("matchLabels") or {}).items()]
    for expr in raw.get("matchExpressions") or ():
        values = tuple(str(v) for v in expr.get("values") or ())
        reqs.append(Requirement(str(expr.get("key", "")), str(expr.get("operator", "")), values))
    return LabelSelector(tuple(reqs))


def _term_matches_node(term: Mapping[str, Any], node: CelObject) -> bool:
    """A NodeSelectorTerm: matchExpressions over labels AND matchFields (metadata.name); empty: no."""
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    labels = labels_of(node)
    for e in exprs:
        values = tuple(str(v) for v in e.get("values") or ())
        if not Requirement(str(e.get("key", "")), str(e.get("operator", "")), values).matches(labels):
            return False
    node_fields = {"metadata.name": str(node.get("name", ""))}
    for f in fields:
        values = tuple(str(v) for v in f.get("values") or ())
        if f.get("key") != "metadata.name" or f.get("operator") not in ("In", "NotIn"):
            return False
        if len(values) != 1:
            return False
        if not Requirement("metadata.name", str(f.get("operator")), values).matches(node_fields):
            return False
    return True


def node_selector_terms_match(terms: Iterable[Mapping[str, Any]], node: CelObject) -> bool:
    """corev1 MatchNodeSelectorTerms: some NodeSelectorTerm matches the node (ORed terms)."""
    return any(_term_matches_node(t, node) for t in terms)


def required_node_affinity_matches(pod: CelObject, node: CelObject) -> bool:
    """nodeaffinity.GetRequiredNodeAffinity(pod).Match(node): nodeSelector AND required terms."""
    labels = labels_of(node)
    for key, value in (pod.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    node_affinity = (pod.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(_term_matches_node(t, node) for t in required.get("nodeSelectorTerms") or ())


def tolerates_taint(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """v1helper.TolerationsTolerateTaint."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = t.get("key") or ""
        if key and key != taint.get("key"):
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists" or (op == "Equal" and (t.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def tolerates_node_taints(tolerations: Sequence[Mapping[str, Any]], node: CelObject) -> bool:
    """True when every NoSchedule/NoExecute taint of the node is tolerated."""
    for taint in node.get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates_taint(tolerations, taint):
            return False
    return True
