"""PodTopologySpread's score as kube-scheduler 1.20 computes it, to check the spread explanations.

A test oracle, not product code: written from v1.20.2 podtopologyspread/scoring.go (initPreScoreState,
Score, NormalizeScore). The raw score of a node sums, over the pod's ScheduleAnyway constraints whose key
the node has, `count * log(size + 2) + (maxSkew - 1)` (count: matching pods in the node's domain,
counted over nodes that match the pod's node selector and required node affinity and have every key;
size: the domains among the feasible nodes, or their number for the hostname key). 1.20 truncates the
sum (`int64(score)`); modern kube-scheduler and policyd round it. A score difference is explained only
when kube-scheduler's score is this oracle truncating and policyd's is the same oracle rounding.

A pod without constraints of its own gets the system defaults (hostname maxSkew 3, zone maxSkew 5) with
the selector of its Services and controllers (helper.DefaultSelector), when that is not empty. 1.20
takes every controller of the namespace selecting the pod and still ignores the feasible nodes lacking
either key (score 0, left out of the sizes and counts); modern kube-scheduler, which policyd follows,
takes the pod's controller by owner reference (1.22, kubernetes#102236) and requires no key (1.23,
kubernetes#105046) (`modern`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tests.differential.scenario import Obj

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
CONTROLLERS = ("Service", "ReplicationController", "ReplicaSet", "StatefulSet")


def default_selector(pod: Obj, state: Sequence[Obj], modern: bool = False) -> Obj:
    """helper.DefaultSelector: the selectors of the pod's Services and controllers, ANDed; {} when there
    are none. 1.20 takes every ReplicationController, ReplicaSet and StatefulSet of the namespace whose
    (non-empty) selector matches the pod's labels (the listers' GetPod*); since 1.22 (kubernetes#102236)
    only the pod's controller by its owner reference (`modern`, as policyd)."""
    meta = pod["metadata"]
    ns, labels = meta.get("namespace", "default"), meta.get("labels", {})
    owner = next((r for r in meta.get("ownerReferences", []) if r.get("controller")), None)
    match: dict[str, str] = {}
    expressions: list[Obj] = []
    for o in state:
        kind = o["kind"]
        if kind not in CONTROLLERS or o["metadata"].get("namespace", "default") != ns:
            continue
        selector = o["spec"].get("selector") or {}
        selects = bool(selector) and (
            all(labels.get(k) == v for k, v in selector.items())
            if kind in ("Service", "ReplicationController")
            else _selector_matches(selector, labels)
        )
        if kind != "Service" and modern:
            selects = owner is not None and (owner["kind"], owner["name"]) == (kind, o["metadata"]["name"])
        if not selects:
            continue
        if kind in ("Service", "ReplicationController"):
            match.update(selector)
        else:
            expressions += [
                {"key": k, "operator": "In", "values": [v]}
                for k, v in selector.get("matchLabels", {}).items()
            ]
            expressions += selector.get("matchExpressions", [])
    if not match and not expressions:
        return {}
    return {"matchLabels": match, "matchExpressions": expressions}


def expected_scores(
    pod: Obj,
    state: Sequence[Obj],
    feasible: Iterable[str],
    rounding: Callable[[float], int],
    modern: bool = False,
) -> dict[str, int]:
    """Normalised (0-100) PodTopologySpread scores of the feasible nodes, raw sums rounded by `rounding`
    (`modern`: system default constraints require no key, their selector follows the owner reference)."""
    constraints = [
        c
        for c in pod["spec"].get("topologySpreadConstraints", [])
        if c["whenUnsatisfiable"] == "ScheduleAnyway"
    ]
    require_all = True
    if not pod["spec"].get("topologySpreadConstraints"):
        selector = default_selector(pod, state, modern)
        if selector:
            constraints = [
                {"topologyKey": HOSTNAME, "maxSkew": 3, "labelSelector": selector},
                {"topologyKey": ZONE, "maxSkew": 5, "labelSelector": selector},
            ]
            require_all = not modern
    nodes = {o["metadata"]["name"]: o for o in state if o["kind"] == "Node"}
    feasible = [n for n in feasible if n in nodes]
    if not constraints:
        return dict.fromkeys(feasible, 100)
    labels = {name: n["metadata"].get("labels", {}) for name, n in nodes.items()}
    keys = {c["topologyKey"] for c in constraints}
    ignored = {n for n in feasible if require_all and not keys <= set(labels[n])}
    ns = pod["metadata"].get("namespace", "default")
    pods_on: dict[str, list[Obj]] = {}
    for o in state:
        if o["kind"] == "Pod" and o["spec"].get("nodeName") and not o["metadata"].get("deletionTimestamp"):
            pods_on.setdefault(o["spec"]["nodeName"], []).append(o)

    def count(node: str, selector: Obj) -> int:
        return sum(
            1
            for p in pods_on.get(node, [])
            if p["metadata"].get("namespace") == ns
            and _selector_matches(selector, p["metadata"].get("labels", {}))
        )

    pair_counts: dict[tuple[str, str], int] = {}
    sizes = []
    for c in constraints:
        key = c["topologyKey"]
        new_pairs = 0
        for n in feasible:
            if n in ignored or key == HOSTNAME:
                continue
            # a node without the key (only under modern system defaults) pairs as "" (a Go map's zero
            # value): one more domain in the size, never scored
            if (key, labels[n].get(key, "")) not in pair_counts:
                pair_counts[key, labels[n].get(key, "")] = 0
                new_pairs += 1
        sizes.append(len(feasible) - len(ignored) if key == HOSTNAME else new_pairs)
    counted = [
        n for n in nodes if (not require_all or keys <= set(labels[n])) and _node_matches(pod, labels[n])
    ]
    for n in counted:
        for c in constraints:
            pair = (c["topologyKey"], labels[n].get(c["topologyKey"], ""))
            if pair in pair_counts:
                pair_counts[pair] += count(n, c.get("labelSelector", {}))
    raw: dict[str, int] = {}
    for n in feasible:
        total = 0.0
        for c, size in zip(constraints, sizes, strict=True):
            key = c["topologyKey"]
            if key not in labels[n]:
                continue
            cnt = (
                count(n, c.get("labelSelector", {})) if key == HOSTNAME else pair_counts[key, labels[n][key]]
            )
            total += cnt * math.log(size + 2) + (c["maxSkew"] - 1)
        raw[n] = rounding(total)
    scored = [raw[n] for n in feasible if n not in ignored]
    low, high = (min(scored), max(scored)) if scored else (0, 0)
    out = {}
    for n in feasible:
        if n in ignored:
            out[n] = 0
        elif high == 0:
            out[n] = 100
        else:
            out[n] = 100 * (high + low - raw[n]) // high
    return out


def truncate(value: float) -> int:
    """Go's int64(x) for a non-negative float."""
    return int(value)


def round_half_away(value: float) -> int:
    """Go's math.Round for a non-negative float."""
    return int(math.floor(value + 0.5))


def _selector_matches(selector: Obj, labels: Mapping[str, str]) -> bool:
    if not selector:
        return False  # a nil selector matches nothing (an empty one everything; never generated)
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all(_requirement(e, labels) for e in selector.get("matchExpressions", []))


def _requirement(e: Obj, labels: Mapping[str, str]) -> bool:
    op, key, values = e["operator"], e["key"], e.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return not (key in labels and labels[key] in values)
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _node_matches(pod: Obj, labels: Mapping[str, str]) -> bool:
    spec: Any = pod["spec"]
    if any(labels.get(k) != v for k, v in spec.get("nodeSelector", {}).items()):
        return False
    required = (
        spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not required:
        return True
    return any(
        t.get("matchExpressions") and all(_requirement(e, labels) for e in t["matchExpressions"])
        for t in required.get("nodeSelectorTerms", [])
    )
