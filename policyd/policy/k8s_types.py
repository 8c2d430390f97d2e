"""Declared CEL types of the `pod`, `node` and `victim` variables (Kubernetes JSON shapes + derived fields).

The runtime values are built by `policyd.scheduler.cluster.objects` (see docs/DESIGN.md, "CEL-visible objects").
Field names are exactly Kubernetes JSON names; quantities in `spec`/`status` stay raw strings
(`map(string, string)`), while the convenience fields (`requests`, `allocatable`, ...) are integers.
"""

from __future__ import annotations

from policyd.cel.types import (
    BOOL,
    DYN,
    INT,
    STRING,
    TIMESTAMP,
    CelType,
    ObjectType,
    list_of,
    map_of,
)

__all__ = [
    "AFFINITY",
    "CONTAINER",
    "HOST_PORT",
    "LABEL_SELECTOR",
    "NODE",
    "OBJECT_META",
    "POD",
    "POD_SPEC",
    "POD_STATUS",
    "SIZE_HINTS",
    "TAINT",
    "TOLERATION",
    "TOPOLOGY_SPREAD_CONSTRAINT",
    "policy_variables",
]

STRINGS = list_of(STRING)
STRING_MAP = map_of(STRING, STRING)
INT_MAP = map_of(STRING, INT)


def _obj(type_name: str, doc: str, /, **fields: CelType) -> ObjectType:
    """A Kubernetes-shaped object type named `k8s.<type_name>`."""
    return ObjectType(name=f"k8s.{type_name}", fields=dict(fields), doc=doc)


OWNER_REFERENCE = _obj(
    "OwnerReference",
    "metadata.ownerReferences[] element",
    apiVersion=STRING,
    kind=STRING,
    name=STRING,
    uid=STRING,
    controller=BOOL,
    blockOwnerDeletion=BOOL,
)

OBJECT_META = _obj(
    "ObjectMeta",
    "object metadata",
    name=STRING,
    generateName=STRING,
    namespace=STRING,
    uid=STRING,
    resourceVersion=STRING,
    generation=INT,
    labels=STRING_MAP,
    annotations=STRING_MAP,
    creationTimestamp=TIMESTAMP,
    deletionTimestamp=TIMESTAMP,
    deletionGracePeriodSeconds=INT,
    ownerReferences=list_of(OWNER_REFERENCE),
    finalizers=STRINGS,
)

HOST_PORT = _obj(
    "HostPort",
    "a host port used by a container (hostIP defaults to 0.0.0.0, protocol to TCP)",
    hostIP=STRING,
    hostPort=INT,
    protocol=STRING,
)

CONTAINER_PORT = _obj(
    "ContainerPort",
    "container port",
    name=STRING,
    containerPort=INT,
    hostPort=INT,
    hostIP=STRING,
    protocol=STRING,
)

RESOURCE_REQUIREMENTS = _obj(
    "ResourceRequirements",
    "container resources; quantities are raw strings (use quantity())",
    requests=STRING_MAP,
    limits=STRING_MAP,
)

CONTAINER = _obj(
    "Container",
    "a container of the pod spec",
    name=STRING,
    image=STRING,
    imagePullPolicy=STRING,
    command=STRINGS,
    args=STRINGS,
    ports=list_of(CONTAINER_PORT),
    resources=RESOURCE_REQUIREMENTS,
    restartPolicy=STRING,
)

TOLERATION = _obj(
    "Toleration",
    "a pod toleration",
    key=STRING,
    operator=STRING,
    value=STRING,
    effect=STRING,
    tolerationSeconds=INT,
)

TAINT = _obj(
    "Taint",
    "a node taint",
    key=STRING,
    value=STRING,
    effect=STRING,
    timeAdded=TIMESTAMP,
)

NODE_SELECTOR_REQUIREMENT = _obj(
    "NodeSelectorRequirement",
    "node selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt)",
    key=STRING,
    operator=STRING,
    values=STRINGS,
)

NODE_SELECTOR_TERM = _obj(
    "NodeSelectorTerm",
    "requirements ANDed together",
    matchExpressions=list_of(NODE_SELECTOR_REQUIREMENT),
    matchFields=list_of(NODE_SELECTOR_REQUIREMENT),
)

NODE_SELECTOR = _obj(
    "NodeSelector",
    "terms ORed together",
    nodeSelectorTerms=list_of(NODE_SELECTOR_TERM),
)

PREFERRED_SCHEDULING_TERM = _obj(
    "PreferredSchedulingTerm",
    "weighted node selector term",
    weight=INT,
    preference=NODE_SELECTOR_TERM,
)

NODE_AFFINITY = _obj(
    "NodeAffinity",
    "node affinity",
    requiredDuringSchedulingIgnoredDuringExecution=NODE_SELECTOR,
    preferredDuringSchedulingIgnoredDuringExecution=list_of(PREFERRED_SCHEDULING_TERM),
)

LABEL_SELECTOR_REQUIREMENT = _obj(
    "LabelSelectorRequirement",
    "label selector requirement (In, NotIn, Exists, DoesNotExist)",
    key=STRING,
    operator=STRING,
    values=STRINGS,
)

LABEL_SELECTOR = _obj(
    "LabelSelector",
    "label selector",
    matchLabels=STRING_MAP,
    matchExpressions=list_of(LABEL_SELECTOR_REQUIREMENT),
)

POD_AFFINITY_TERM = _obj(
    "PodAffinityTerm",
    "pod (anti-)affinity term",
    labelSelector=LABEL_SELECTOR,
    namespaceSelector=LABEL_SELECTOR,
    namespaces=STRINGS,
    topologyKey=STRING,
    matchLabelKeys=STRINGS,
    mismatchLabelKeys=STRINGS,
)

WEIGHTED_POD_AFFINITY_TERM = _obj(
    "WeightedPodAffinityTerm",
    "weighted pod (anti-)affinity term",
    weight=INT,
    podAffinityTerm=POD_AFFINITY_TERM,
)

POD_AFFINITY = _obj(
    "PodAffinity",
    "inter-pod affinity",
    requiredDuringSchedulingIgnoredDuringExecution=list_of(POD_AFFINITY_TERM),
    preferredDuringSchedulingIgnoredDuringExecution=list_of(WEIGHTED_POD_AFFINITY_TERM),
)

POD_ANTI_AFFINITY = _obj(
    "PodAntiAffinity",
    "inter-pod anti-affinity",
    requiredDuringSchedulingIgnoredDuringExecution=list_of(POD_AFFINITY_TERM),
    preferredDuringSchedulingIgnoredDuringExecution=list_of(WEIGHTED_POD_AFFINITY_TERM),
)

AFFINITY = _obj(
    "Affinity",
    "spec.affinity",
    nodeAffinity=NODE_AFFINITY,
    podAffinity=POD_AFFINITY,
    podAntiAffinity=POD_ANTI_AFFINITY,
)

TOPOLOGY_SPREAD_CONSTRAINT = _obj(
    "TopologySpreadConstraint",
    "pod topology spread constraint",
    maxSkew=INT,
    topologyKey=STRING,
    whenUnsatisfiable=STRING,
    labelSelector=LABEL_SELECTOR,
    minDomains=INT,
    nodeAffinityPolicy=STRING,
    nodeTaintsPolicy=STRING,
    matchLabelKeys=STRINGS,
)

POD_SCHEDULING_GATE = _obj("PodSchedulingGate", "scheduling gate", name=STRING)

POD_SPEC = _obj(
    "PodSpec",
    "the pod spec (fields a scheduler needs)",
    containers=list_of(CONTAINER),
    initContainers=list_of(CONTAINER),
    nodeSelector=STRING_MAP,
    nodeName=STRING,
    affinity=AFFINITY,
    tolerations=list_of(TOLERATION),
    priority=INT,
    priorityClassName=STRING,
    schedulerName=STRING,
    preemptionPolicy=STRING,
    overhead=STRING_MAP,
    resources=RESOURCE_REQUIREMENTS,
    topologySpreadConstraints=list_of(TOPOLOGY_SPREAD_CONSTRAINT),
    hostNetwork=BOOL,
    volumes=list_of(DYN),
    restartPolicy=STRING,
    serviceAccountName=STRING,
    terminationGracePeriodSeconds=INT,
    runtimeClassName=STRING,
    schedulingGates=list_of(POD_SCHEDULING_GATE),
)

POD_CONDITION = _obj(
    "PodCondition",
    "pod condition",
    type=STRING,
    status=STRING,
    reason=STRING,
    message=STRING,
    lastProbeTime=TIMESTAMP,
    lastTransitionTime=TIMESTAMP,
)

POD_STATUS = _obj(
    "PodStatus",
    "the pod status",
    phase=STRING,
    conditions=list_of(POD_CONDITION),
    nominatedNodeName=STRING,
    startTime=TIMESTAMP,
    hostIP=STRING,
    podIP=STRING,
    qosClass=STRING,
    reason=STRING,
    message=STRING,
)

POD = ObjectType(
    name="policyd.Pod",
    doc="a pod: Kubernetes shape plus policyd's integer fields (requests, ...)",
    fields={
        "name": STRING,
        "namespace": STRING,
        "uid": STRING,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
        "schedulerName": STRING,
        "priority": INT,
        "preemptionPolicy": STRING,
        "nodeName": STRING,
        "nominatedNodeName": STRING,
        "requests": INT_MAP,
        "nonZeroRequests": INT_MAP,
        "limits": INT_MAP,
        "hostPorts": list_of(HOST_PORT),
        "images": STRINGS,
        "tolerations": list_of(TOLERATION),
        "nodeSelector": STRING_MAP,
        "affinity": AFFINITY,
        "topologySpreadConstraints": list_of(TOPOLOGY_SPREAD_CONSTRAINT),
        "creationTimestamp": TIMESTAMP,
        "startTime": TIMESTAMP,
        "deleting": BOOL,
        "phase": STRING,
        "ownerKey": STRING,
        "metadata": OBJECT_META,
        "spec": POD_SPEC,
        "status": POD_STATUS,
    },
    field_docs={
        "schedulerName": "spec.schedulerName (default-scheduler when unset)",
        "priority": "spec.priority (0 when unset)",
        "preemptionPolicy": "PreemptLowerPriority (default) or Never",
        "nodeName": 'spec.nodeName ("" when unset)',
        "nominatedNodeName": 'status.nominatedNodeName ("" when unset)',
        "requests": "effective requests: cpu in millicores, memory/storage/hugepages in bytes, "
        "extended resources in units; max(sum(containers), max(initContainers)) + overhead",
        "nonZeroRequests": "cpu and memory requests with scoring defaults (100m, 200Mi) for containers "
        "without requests",
        "limits": "summed container limits (integers, as requests)",
        "hostPorts": "host ports of containers with hostPort > 0",
        "images": "container images, normalised with :latest when untagged",
        "creationTimestamp": "metadata.creationTimestamp",
        "startTime": "status.startTime",
        "deleting": "metadata.deletionTimestamp is set",
        "phase": "status.phase",
        "ownerKey": 'Kind/name of the controller owner reference ("" if none)',
    },
)

CONTAINER_IMAGE = _obj("ContainerImage", "an image present on a node", names=STRINGS, sizeBytes=INT)

NODE_CONDITION = _obj(
    "NodeCondition",
    "node condition",
    type=STRING,
    status=STRING,
    reason=STRING,
    message=STRING,
    lastHeartbeatTime=TIMESTAMP,
    lastTransitionTime=TIMESTAMP,
)

NODE_ADDRESS = _obj("NodeAddress", "node address", type=STRING, address=STRING)

NODE_SYSTEM_INFO = _obj(
    "NodeSystemInfo",
    "status.nodeInfo",
    architecture=STRING,
    operatingSystem=STRING,
    osImage=STRING,
    kernelVersion=STRING,
    containerRuntimeVersion=STRING,
    kubeletVersion=STRING,
)

NODE_SPEC = _obj(
    "NodeSpec",
    "the node spec",
    unschedulable=BOOL,
    taints=list_of(TAINT),
    podCIDR=STRING,
    providerID=STRING,
)

NODE_STATUS = _obj(
    "NodeStatus",
    "the node status; quantities are raw strings",
    capacity=STRING_MAP,
    allocatable=STRING_MAP,
    conditions=list_of(NODE_CONDITION),
    images=list_of(CONTAINER_IMAGE),
    addresses=list_of(NODE_ADDRESS),
    nodeInfo=NODE_SYSTEM_INFO,
)

NODE = ObjectType(
    name="policyd.Node",
    doc="a node: Kubernetes shape plus policyd's integer allocation fields",
    fields={
        "name": STRING,
        "uid": STRING,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
        "unschedulable": BOOL,
        "taints": list_of(TAINT),
        "allocatable": INT_MAP,
        "capacity": INT_MAP,
        "requested": INT_MAP,
        "nonZeroRequested": INT_MAP,
        "free": INT_MAP,
        "pods": list_of(POD),
        "podCount": INT,
        "usedPorts": list_of(HOST_PORT),
        "images": INT_MAP,
        "ready": BOOL,
        "metadata": OBJECT_META,
        "spec": NODE_SPEC,
        "status": NODE_STATUS,
    },
    field_docs={
        "unschedulable": "spec.unschedulable (cordoned)",
        "allocatable": "status.allocatable as integers (cpu millicores, bytes, units; pods = pod limit)",
        "capacity": "status.capacity as integers",
        "requested": "sum of requests of pods on the node (every allocatable key; pods = pod count)",
        "nonZeroRequested": "sum of pods' nonZeroRequests (cpu, memory)",
        "free": "allocatable - requested, for every allocatable key",
        "pods": "pods on the node (assumed pods included)",
        "podCount": "size(node.pods)",
        "usedPorts": "host ports of pods on the node",
        "images": "every name of status.images -> sizeBytes",
        "ready": "the Ready condition is True",
    },
)


def policy_variables() -> dict[str, CelType]:
    """The declared variables every policy expression may use (besides `cluster`)."""
    return {"pod": POD, "node": NODE, "victim": POD}


# Expected sizes of lists and maps, for cost estimation (keys are field paths as in `reads`).
_POD_SIZES = {
    "labels": 64,
    "annotations": 64,
    "requests": 16,
    "nonZeroRequests": 2,
    "limits": 16,
    "hostPorts": 10,
    "images": 10,
    "tolerations": 20,
    "nodeSelector": 16,
    "topologySpreadConstraints": 8,
    "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms": 10,
    "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution": 10,
    "affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution": 10,
    "affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution": 10,
    "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution": 10,
    "affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution": 10,
    "spec.containers": 10,
    "spec.initContainers": 10,
    "spec.volumes": 20,
    "status.conditions": 8,
}
SIZE_HINTS: dict[str, int] = {
    **{f"{var}.{path}": size for var in ("pod", "victim") for path, size in _POD_SIZES.items()},
    "node.labels": 64,
    "node.annotations": 64,
    "node.taints": 20,
    "node.allocatable": 16,
    "node.capacity": 16,
    "node.requested": 16,
    "node.nonZeroRequested": 2,
    "node.free": 16,
    "node.pods": 110,
    "node.usedPorts": 220,
    "node.images": 100,
    "node.status.images": 100,
    "node.status.conditions": 10,
    "node.spec.taints": 20,
}
