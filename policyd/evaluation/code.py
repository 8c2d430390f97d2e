"""The run-time side of a compiled policy: the values its generated code uses and what evaluators run.

`UNSET` marks a let slot not computed yet, `LetError` a let whose evaluation failed; `descending` and
`LAST` build queue-sort keys. `CompiledPolicy` is the view of one compiled policy (the code generator's
`policyd.compiler.codegen.PolicyCode`) the evaluators run: its generated functions, its slot layout and
its vectorised plans. `RuleLayout` places a policy's rules among its profile's; `RuleErrors` counts
the evaluations of its rules that failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from policyd import framework as pl
from policyd.cel.runtime import as_eval_error
from policyd.evaluation.plans import PolicyPlan


@dataclass(frozen=True)
class RuleLayout:
    """Where each policy's filter and score rules sit among its profile's (per policy, the index of
    its first rule), and how many the profile has."""

    filter_offsets: Sequence[int]
    n_filters: int
    score_offsets: Sequence[int]
    n_scores: int


class RuleErrors:
    """How many evaluations of each filter and score rule of one compiled policy failed (a missing
    map key, a division by zero, a let that failed: the filter rejected the node, the score was 0),
    counted by the generated per-node functions and the vectorised plans since the policy was
    compiled; read by the metrics (`policyd_rule_errors_total`). A verdict or score kept for
    equivalent pods is counted once, when it was evaluated."""

    __slots__ = ("filters", "scores")

    def __init__(self, filters: int, scores: int) -> None:
        self.filters = [0] * filters
        self.scores = [0] * scores

    def filter_failed(self, index: int) -> None:
        """An evaluation of filter rule `index` failed."""
        self.filters[index] += 1

    def score_failed(self, index: int, count: int = 1) -> None:
        """`count` evaluations of score rule `index` failed."""
        self.scores[index] += count


class _Unset:
    """Marks a let slot not computed yet."""

    __slots__ = ()


class LetError:
    """A let whose evaluation failed; rules that need it fail with its message."""

    __slots__ = ("message",)

    def __init__(self, error: BaseException) -> None:
        self.message = str(as_eval_error(error))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LetError) and other.message == self.message

    def __hash__(self) -> int:
        return hash(self.message)


class Descending:
    """Reverses the ordering of a non-numeric queue key (`desc` strings, timestamps, durations)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: Descending) -> bool:
        return bool(other.value < self.value)

    def __gt__(self, other: Descending) -> bool:
        return bool(other.value > self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Descending) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Descending({self.value!r})"


class Last:
    """A queue key that failed to evaluate: sorts after every value."""

    __slots__ = ()

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return not isinstance(other, Last)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Last)

    def __hash__(self) -> int:
        return 0


UNSET = _Unset()
LAST = Last()


def descending(value: Any) -> Any:
    """The key of `value` for descending order (negated numbers, wrapped anything else)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return -value
    return Descending(value)


class CompiledPolicy(Protocol):
    """What the evaluators run of one compiled policy (its generated functions and slot layout)."""

    @property
    def filters(self) -> tuple[pl.RuleRef, ...]:
        """The filter rules, in order (generated functions report failures by index)."""
        ...

    @property
    def filter(self) -> Callable[..., Any]:
        """(pod, cluster, node, pod slots, node slots) -> the first failure, or None."""
        ...

    @property
    def filter_all(self) -> Callable[..., Any]:
        """(pod, cluster, node, pod slots, node slots) -> every filter's verdict."""
        ...

    @property
    def score(self) -> Callable[..., Any]:
        """(pod, cluster, node, pod slots, node slots) -> raw scores of the score rules."""
        ...

    @property
    def errors(self) -> RuleErrors:
        """The failed evaluations of its rules, counted by its generated functions and plans."""
        ...

    @property
    def score_all(self) -> Callable[..., Any]:
        """(pod, cluster, node, pod slots, node slots) -> per score rule, (raw score, error or None)."""
        ...

    @property
    def pod_slots(self) -> int:
        """Number of pod-only let slots."""
        ...

    @property
    def node_slots(self) -> int:
        """Number of node-dependent let slots."""
        ...

    @property
    def prepare_filter(self) -> Callable[..., Any] | None:
        """(pod, cluster, pod slots): computes the pod-only lets the filters need."""
        ...

    @property
    def prepare_score(self) -> Callable[..., Any] | None:
        """(pod, cluster, pod slots): computes the pod-only lets the scores need."""
        ...

    @property
    def filter_rule_values(self) -> Callable[..., tuple[tuple[Any, ...], ...]] | None:
        """(pod slots) -> per filter rule, the tuple of the pod-only values it reads
        (`filter_rule_pod_slots`' slots)."""
        ...

    @property
    def score_rule_values(self) -> Callable[..., tuple[tuple[Any, ...], ...]] | None:
        """(pod slots) -> per score rule, the tuple of the pod-only values it reads."""
        ...

    @property
    def filter_pod_slots(self) -> tuple[int, ...]:
        """The pod slots `prepare_filter` fills."""
        ...

    @property
    def score_pod_slots(self) -> tuple[int, ...]:
        """The pod slots `prepare_score` fills."""
        ...

    @property
    def filter_rule_pod_slots(self) -> tuple[tuple[int, ...], ...]:
        """Per filter rule, the pod slots of the pod-only lets its verdict, reason and unresolvable read."""
        ...

    @property
    def score_rule_pod_slots(self) -> tuple[tuple[int, ...], ...]:
        """Per score rule, the pod slots of the pod-only lets it reads."""
        ...

    @property
    def filter_verdicts(self) -> tuple[Callable[..., Any] | None, ...]:
        """Per filter rule, its verdict alone (pod, cluster, node, pod slots, node slots) -> True,
        False or None (an error); only for rules that read the node only through labels looked up by
        key, None for the others."""
        ...

    @property
    def filter_key_deltas(self) -> tuple[tuple[Any, ...] | None, ...]:
        """Per filter rule, the declared types of the pod-only values it reads (as in
        `filter_rule_pod_slots`) when it tests node labels against their leaf maps and uses them in
        no other way (`policyd.compiler.membership`); None for the other rules."""
        ...

    @property
    def pod_let_slots(self) -> Mapping[str, int]:
        """Pod-only let name -> its pod slot."""
        ...

    def vector_plan(self) -> PolicyPlan:
        """The policy's rules as vectorised plans."""
        ...
