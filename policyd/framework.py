"""The compiled plugin objects: the only thing the runtime sees of a policy.

The compiler (policyd.compiler.codegen) turns a set of policy IRs into one `CompiledPolicySet`
per generation. The runtime calls these objects; it never sees policy text or syntax trees.

Values passed in are the CEL-visible object dicts built once at the cache boundary by
`policyd.scheduler.cluster.objects` (see docs/DESIGN.md, "CEL-visible objects"): `pod` and `node` are
plain dicts (`PodInfo.cel`, `NodeInfo.cel`); `cluster` is the runtime's `ClusterFunctions` object
(policyd.scheduler.cluster.functions), implementing the functions declared in
`policyd.policy.cluster_decls`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

CelObject = Mapping[str, Any]
Normalize = Literal["none", "max", "reverse", "minmax", "reverse-minmax"]

MAX_NODE_SCORE = 100
# the profile (schedulerName) of policies that name none, and of pods whose schedulerName no profile has
DEFAULT_PROFILE = "policyd"

IntpArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
Int8Array = npt.NDArray[np.int8]

# one filter rule's verdict on one node, as `PodEvaluator.bulk_filter` reports it
RULE_UNKNOWN = 0  # not evaluated, or the plans were unsure (the per-node function decides)
RULE_PASS = 1  # passed, or the rule's policy does not apply to the pod
RULE_FAIL = 2


@dataclass(frozen=True)
class RuleRef:
    """Identifies a rule: the policy it comes from, its name and where it was written."""

    policy: str
    name: str
    file: str = ""
    line: int = 0
    column: int = 0


@dataclass(frozen=True)
class FilterFailure:
    """Why a node was rejected: the first failing rule and its reason(s) (kube-scheduler style)."""

    rule: RuleRef
    reasons: tuple[str, ...]
    # True when the failure is an evaluation error rather than a `false` verdict
    error: bool = False
    # True when removing pods from the node cannot help (kube-scheduler UnschedulableAndUnresolvable)
    unresolvable: bool = False


@dataclass(frozen=True)
class FilterResult:
    """One rule's verdict for one node (used by explanations)."""

    rule: RuleRef
    passed: bool
    reasons: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class ScoreRule:
    """Static description of one score rule of a profile."""

    rule: RuleRef
    weight: int
    normalize: Normalize


class NodeTable(Protocol):
    """The snapshot's nodes held column-wise for the vectorised evaluator, one row per snapshot row
    (`policyd.evaluation.columns.NodeColumns`)."""

    def __len__(self) -> int:
        """The number of rows."""
        ...

    def rows_labelled(self, values: Iterable[str]) -> IntpArray:
        """The rows with one of `values` under some label key, in order."""
        ...


class ClusterFunctions(Protocol):
    """What the algorithm calls on the cluster functions object (besides the functions rules call)."""

    def prescore(self, pod: CelObject, feasible: Sequence[CelObject]) -> None:
        """Tell the cluster functions which nodes passed the filters for `pod` (kube-scheduler PreScore input)."""
        ...

    def with_nominated(self, node: CelObject, pods: Sequence[CelObject]) -> ClusterFunctions:
        """The functions of `node`'s first filter pass: `pods` (nominated to it) added to the
        PreFilter states (kube-scheduler AddPod)."""
        ...

    def reads_pods(self, pod: CelObject) -> bool:
        """True when a state memoised for `pod` so far may have been counted from the pods on the
        nodes (preemption's what-ifs, which remove pods, then need cluster functions of their own)."""
        ...


class RowSelection(Sequence[CelObject]):
    """Some of a snapshot's node objects (`Snapshot.cels()`), in order, with their rows: the
    algorithm's PreScore input, which the cluster functions need not look up by name."""

    def __init__(self, cels: Sequence[CelObject], rows: IntpArray) -> None:
        self.cels = cels
        self.rows = rows
        self._items: list[CelObject] | None = None

    def __getitem__(self, index: Any) -> Any:
        if self._items is None:
            self._items = [self.cels[r] for r in self.rows.tolist()]
        return self._items[index]

    def __len__(self) -> int:
        return len(self.rows)


EvaluationPhase = Literal["filter", "score"]


class PodEvaluator(Protocol):
    """Evaluates one pod's rules against nodes; created once per pod per cycle (PreFilter).

    Two evaluators answer behind it: the generated per-node functions (`filter`, `filter_all`, `score`)
    and the vectorised plans over node columns (`bulk_filter`, `bulk_scores`, which may decline with
    None or leave rows unsure; the per-node functions decide those). The rest serves the reuse cache in
    front of it (policyd.scheduler.algorithm.reuse): what identifies equivalent pods (`signature`), the
    pod-only values both phases depend on (`prepare`), and whether a node evaluation consulted the
    cluster functions (whose answers depend on more than the pod and the node).
    """

    def filter(self, node: CelObject) -> FilterFailure | None:
        """The first failing filter rule for `node`, or None when every filter passes."""
        ...

    def filter_all(self, node: CelObject) -> list[FilterResult]:
        """Every filter rule's verdict for `node` (no short-circuit; for explanations)."""
        ...

    def score(self, node: CelObject) -> list[float]:
        """Raw (un-normalised) scores, one per `CompiledProfile.scores` entry, for a feasible node."""
        ...

    def score_errors(self, node: CelObject) -> list[str | None]:
        """Per `CompiledProfile.scores` entry, why its evaluation on `node` failed (it scored 0), or
        None (for explanations)."""
        ...

    def bulk_filter(
        self, columns: NodeTable, rows: IntpArray, wanted: BoolArray
    ) -> tuple[Int8Array, BoolArray] | None:
        """The verdicts of the `wanted` filter rules on `rows` by the vectorised plans (one column per
        `CompiledProfile.filters` entry: `RULE_PASS`, `RULE_FAIL`, or `RULE_UNKNOWN` where unsure or
        not wanted; rules of policies that do not apply pass), and per rule whether they may be reused
        for equivalent pods; None when the plans cannot evaluate this pod."""
        ...

    def filter_by_classes(self, columns: NodeTable, rules: Sequence[int]) -> Int8Array | None:
        """The verdicts of filter `rules` (`CompiledProfile.filters` indexes) on every row of
        `columns`, one column per rule (`RULE_PASS`, `RULE_FAIL`, `RULE_UNKNOWN` where unsure), each
        decided once per class of nodes alike under the node labels the rule reads, and reusable for
        equivalent pods; None when one of them cannot be decided so."""
        ...

    def bulk_scores(
        self, columns: NodeTable, rows: IntpArray, wanted: BoolArray
    ) -> tuple[FloatArray, BoolArray] | None:
        """Raw scores of `rows` (one column per score rule, as `score`; only the `wanted` rules' columns
        are meaningful) by the vectorised plans, and per rule whether they may be reused; None when
        the plans cannot give them."""
        ...

    def rows_to_renew(self, columns: NodeTable, rule: int, old: Any, new: Any) -> IntpArray | None:
        """The rows of `columns` on which filter `rule` (a `CompiledProfile.filters` index) may judge
        otherwise with its pod-only values `new` (as `prepare` gives them) than with `old`, when the
        rule and the change allow telling them (`policyd.compiler.membership`); None: any row may."""
        ...

    def signature(self) -> Hashable | None:
        """A key equal for pods whose node evaluations read the same pod values (None: not reusable)."""
        ...

    def prepare(self, phase: EvaluationPhase) -> tuple[Any, ...]:
        """Compute the pod-only lets of `phase` before any node; returns one tuple per
        `CompiledProfile.filters` (or `.scores`) entry: the pod-only values that rule reads."""
        ...

    def track_cluster(self) -> None:
        """From now on note whether node evaluations call the cluster functions."""
        ...

    def applied(self) -> tuple[int, ...]:
        """The policies that apply to the pod (their `match` holds), as indexes into the profile's `policies`."""
        ...

    @property
    def cluster_called(self) -> bool:
        """True when a node evaluation called the cluster functions since `reset_cluster_called`."""
        ...

    def reset_cluster_called(self) -> None:
        """Start noting cluster function calls afresh."""
        ...


@dataclass(frozen=True)
class PreemptionSpec:
    """Compiled preemption rules of a profile."""

    may_preempt: Any  # Callable[[CelObject], bool]: may this pod preempt at all
    eligible_victim: Any  # Callable[[CelObject, CelObject], bool]: (pod, victim) -> may be evicted
    honor_pdb: bool = True
    # the top-level pod fields `eligible_victim` reads (None: unknown, or the pod used whole)
    victim_pod_fields: frozenset[str] | None = None


@dataclass(frozen=True)
class PermitSpec:
    """Compiled gang-scheduling rule: pods of one group wait until `min_members` are reserved."""

    rule: RuleRef
    group: Any  # Callable[[CelObject], str | None]: group key of a pod, None = not gang-scheduled
    min_members: Any  # Callable[[CelObject], int]
    timeout_seconds: float


class CompiledProfile(Protocol):
    """Everything the runtime needs to schedule the pods of one scheduler name."""

    scheduler_name: str
    policies: tuple[str, ...]
    filters: tuple[RuleRef, ...]
    scores: tuple[ScoreRule, ...]
    preemption: PreemptionSpec
    permits: tuple[PermitSpec, ...]

    def applies(self, pod: CelObject) -> bool:
        """True when at least one policy of this profile matches the pod."""
        ...

    def queue_key(self, pod: CelObject) -> tuple[Any, ...]:
        """Sort key for the active queue (smaller first); the runtime appends enqueue time, ns/name."""
        ...

    def evaluator(self, pod: CelObject, cluster: ClusterFunctions) -> PodEvaluator:
        """Prepare the per-pod evaluation (pod-only `let`s evaluated once here)."""
        ...

    def wake_events(self, rule: RuleRef) -> frozenset[str]:
        """Cluster event kinds that may make a pod rejected by `rule` schedulable (queueing hints)."""
        ...

    def rule_errors(self) -> Mapping[int, list[tuple[RuleRef, str, int]]]:
        """Per compiled policy of the profile, keyed by its identity (profiles built on one policy
        share its code and its counts), (rule, extension point `Filter`/`Score`, count) of each rule
        whose evaluations failed since it was compiled (a filter then rejects the node, a score is 0)."""
        ...


@dataclass(frozen=True)
class CompiledPolicySet:
    """One generation of compiled policies: profiles by scheduler name."""

    generation: int
    content_hash: str
    profiles: Mapping[str, CompiledProfile]
    sources: Sequence[str] = field(default_factory=tuple)


# Event kinds used by `wake_events` (the runtime maps informer events onto these).
EVENT_NODE_ADD = "NodeAdd"
EVENT_NODE_LABELS = "NodeLabelsChange"
EVENT_NODE_TAINTS = "NodeTaintsChange"
EVENT_NODE_ALLOCATABLE = "NodeAllocatableChange"
EVENT_NODE_SPEC = "NodeSpecChange"  # unschedulable flag and other spec fields
EVENT_NODE_OTHER = "NodeOtherChange"  # status, images, conditions, annotations
EVENT_POD_ASSIGNED_ADD = "AssignedPodAdd"
EVENT_POD_ASSIGNED_UPDATE = "AssignedPodUpdate"
EVENT_POD_ASSIGNED_DELETE = "AssignedPodDelete"
# an assigned pod now asks less of some resource (an in-place resize scaled it down)
EVENT_POD_ASSIGNED_SCALE_DOWN = "AssignedPodScaleDown"
EVENT_POLICY_CHANGE = "PolicyChange"
# a PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode or CSIDriver was added, changed or deleted
EVENT_STORAGE_CHANGE = "StorageChange"
ALL_EVENTS = frozenset(
    {
        EVENT_NODE_ADD,
        EVENT_NODE_LABELS,
        EVENT_NODE_TAINTS,
        EVENT_NODE_ALLOCATABLE,
        EVENT_NODE_SPEC,
        EVENT_NODE_OTHER,
        EVENT_POD_ASSIGNED_ADD,
        EVENT_POD_ASSIGNED_UPDATE,
        EVENT_POD_ASSIGNED_DELETE,
        EVENT_POD_ASSIGNED_SCALE_DOWN,
        EVENT_POLICY_CHANGE,
        EVENT_STORAGE_CHANGE,
    }
)
