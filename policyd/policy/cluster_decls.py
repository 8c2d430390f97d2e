"""Declarations of the `cluster` CEL variable: its type and member functions.

Each function is a member overload whose receiver is `CLUSTER_TYPE`; its `impl` calls the method of
the runtime object (`policyd.scheduler.cluster.functions.ClusterFunctions`) that implements it. The result object
types below are plain dicts at run time. Semantics: docs/DESIGN.md, "The cluster functions".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policyd.cel.env import FunctionDecl, Overload
from policyd.cel.types import (
    BOOL,
    INT,
    STRING,
    CelType,
    ObjectType,
    OpaqueType,
    list_of,
    map_of,
)
from policyd.errors import CelEvalError

CLUSTER_TYPE = OpaqueType("policyd.Cluster")

# the variables' declared types (policyd.policy.k8s_types); ObjectType compares by name
_POD = ObjectType(name="policyd.Pod")
_NODE = ObjectType(name="policyd.Node")
_INT_MAP = map_of(STRING, INT)

SPREAD_CONSTRAINT = ObjectType(
    name="policyd.SpreadConstraint",
    doc="a topology spread constraint of the pod with the per-domain counts of matching pods",
    fields={
        "topologyKey": STRING,
        "maxSkew": INT,
        "minDomains": INT,
        "domains": INT,
        "minMatch": INT,
        "selfMatch": INT,
        "counts": _INT_MAP,
    },
    field_docs={
        "topologyKey": "the constraint's topology key",
        "maxSkew": "the constraint's maxSkew",
        "minDomains": "the constraint's minDomains (1 when unset)",
        "domains": "number of eligible domains (node label values)",
        "minMatch": "global minimum of matching pods over eligible domains (0 when domains < minDomains)",
        "selfMatch": "1 when the pod matches its own selector, else 0",
        "counts": "domain value -> matching pods (eligible domains only)",
    },
)

AFFINITY_TERM_STATE = ObjectType(
    name="policyd.AffinityTermState",
    doc="a required pod (anti-)affinity term of the pod with per-domain counts of matching pods",
    fields={"topologyKey": STRING, "counts": _INT_MAP},
)

POD_AFFINITY_STATE = ObjectType(
    name="policyd.PodAffinityState",
    doc="InterPodAffinity PreFilter state of the pod",
    fields={
        "required": list_of(AFFINITY_TERM_STATE),
        "anyMatch": BOOL,
        "selfMatch": BOOL,
        "anti": list_of(AFFINITY_TERM_STATE),
        "existingAnti": map_of(STRING, _INT_MAP),
    },
    field_docs={
        "required": "required affinity terms; counts only pods matching all of them",
        "anyMatch": "some existing pod matches all required affinity terms",
        "selfMatch": "the pod matches all its own required affinity terms",
        "anti": "required anti-affinity terms",
        "existingAnti": "topology key -> value -> existing pods whose required anti-affinity the pod matches",
    },
)

SCORE_RANGE = ObjectType(
    name="policyd.ScoreRange",
    doc="minimum and maximum raw score over the feasible nodes (for kube-scheduler normalisation)",
    fields={"active": BOOL, "min": INT, "max": INT},
)


def _call(method: str) -> Callable[..., Any]:
    def impl(cluster: Any, *args: Any) -> Any:
        fn = getattr(cluster, method, None)
        if fn is None:
            raise CelEvalError(f"the cluster object does not provide {method}")
        return fn(*args)

    impl.__name__ = f"cluster_{method}"
    return impl


def _member(name: str, method: str, params: tuple[CelType, ...], result: CelType) -> FunctionDecl:
    ov = Overload(
        id=f"cluster_{name}",
        params=(CLUSTER_TYPE, *params),
        result=result,
        member=True,
        impl=_call(method),
    )
    return FunctionDecl(name, (ov,))


def cluster_functions() -> dict[str, FunctionDecl]:
    """Function declarations of the `cluster` variable for the policy environment."""
    decls = [
        _member("nodeCount", "node_count", (), INT),
        _member("imageNodeCount", "image_node_count", (STRING,), INT),
        _member("imageSize", "image_size", (STRING,), INT),
        _member("domainCounts", "domain_counts", (_POD, STRING, map_of(STRING, STRING)), _INT_MAP),
        _member("topologySpread", "topology_spread", (_POD, STRING), list_of(SPREAD_CONSTRAINT)),
        _member("topologySpreadScore", "topology_spread_score", (_POD, _NODE), INT),
        _member("topologySpreadScoreRange", "topology_spread_score_range", (_POD,), SCORE_RANGE),
        _member("interPodAffinity", "inter_pod_affinity", (_POD,), POD_AFFINITY_STATE),
        _member("interPodAffinityScore", "inter_pod_affinity_score", (_POD, _NODE), INT),
        _member("interPodAffinityScoreRange", "inter_pod_affinity_score_range", (_POD,), SCORE_RANGE),
    ]
    return {d.name: d for d in decls}
