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

VOLUME_DISK = ObjectType(
    name="policyd.VolumeDisk",
    doc="a disk of the pod that a node cannot mount twice read-write (VolumeRestrictions)",
    fields={"id": STRING, "readOnly": BOOL},
    field_docs={
        "id": "gce-pd/<pdName>, aws-ebs/<volumeID>, iscsi/<iqn> or rbd/<monitor>/<pool>/<image>",
        "readOnly": "the pod mounts it read-only (always false for AWS EBS)",
    },
)

VOLUME_TOPOLOGY = ObjectType(
    name="policyd.VolumeTopology",
    doc="a zone or region label of a PV bound to the pod (VolumeZone)",
    fields={"key": STRING, "gaKey": STRING, "values": list_of(STRING)},
    field_docs={
        "key": "the PV's label key (topology.kubernetes.io/zone, failure-domain.beta.kubernetes.io/zone, ...)",
        "gaKey": "the GA name of the key (a beta key is also matched against the node's GA label)",
        "values": "the zones of the label value (`a__b` lists several)",
    },
)

POD_VOLUMES = ObjectType(
    name="policyd.PodVolumes",
    doc="the pod's volumes as the volume plugins' PreFilter resolves them",
    fields={
        "error": STRING,
        "claims": list_of(STRING),
        "disks": list_of(VOLUME_DISK),
        "readWriteOncePodConflict": BOOL,
        "zones": list_of(VOLUME_TOPOLOGY),
        "attachable": list_of(STRING),
    },
    field_docs={
        "error": 'why no node can do (a claim not found or being deleted, unbound immediate claims, ...); "" if none',
        "claims": "names of the pod's claims the node must suit (bound ones and ones to bind there)",
        "disks": "the pod's GCE PD, AWS EBS, ISCSI and RBD disks",
        "readWriteOncePodConflict": "a placed pod already uses one of the pod's ReadWriteOncePod claims",
        "zones": "zone and region labels of the PVs bound to the pod's claims",
        "attachable": "drivers (CSI driver or in-tree plugin names) of the pod's attachable volumes",
    },
)

VOLUME_LIMIT = ObjectType(
    name="policyd.VolumeLimit",
    doc="a node's attach limit for one driver, with what is attached and what the pod adds",
    fields={"key": STRING, "limit": INT, "attached": INT, "requested": INT},
    field_docs={
        "key": "the limit's name: a CSI driver, or attachable-volumes-<plugin> for in-tree volumes",
        "limit": "volumes the node can attach for it (-1: no limit known)",
        "attached": "unique volumes of the node's pods counted against it",
        "requested": "the pod's volumes counted against it that are not attached yet",
    },
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
        _member("podVolumes", "pod_volumes", (_POD,), POD_VOLUMES),
        _member("volumeBinding", "volume_binding", (_POD, _NODE), map_of(STRING, STRING)),
        _member("nodeDisks", "node_disks", (_NODE,), map_of(STRING, BOOL)),
        _member("volumeLimit", "volume_limit", (_POD, _NODE, STRING), VOLUME_LIMIT),
    ]
    return {d.name: d for d in decls}
