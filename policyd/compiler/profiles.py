"""Compiled policies -> `CompiledProfile`s: per-pod evaluators, queue order, preemption, permits.

`compile_effective` compiles the effective policy of each scheduler name (`policyd.policy.composition`:
its layers in order, overrides applied; filters AND, scores add) into one profile; each layer's
generated code comes from `policyd.compiler.codegen`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policyd import framework as pl
from policyd.cel.codegen import generate_function
from policyd.cel.runtime import EVAL_ERRORS, as_eval_error
from policyd.compiler.codegen import (
    PolicyCode,
    branch_recorders,
    compile_policy,
    pod_fields,
    rule_recorder,
    rule_ref,
)
from policyd.errors import PolicyError
from policyd.evaluation.code import LAST, RuleLayout, descending
from policyd.evaluation.coverage import CoverageCollector, RuleKind
from policyd.evaluation.generated import GeneratedEvaluator
from policyd.policy import syntax as ir
from policyd.policy.checked import CheckedExpression, CheckedPolicy, default_expression
from policyd.policy.checker import timeout_value
from policyd.policy.composition import EffectivePolicy, compose
from policyd.policy.env import Context
from policyd.policy.loader import load_policies, load_texts, shipped_default

log = logging.getLogger(__name__)

DEFAULT_PERMIT_TIMEOUT = 60.0

# field read -> cluster events that may make a rejected pod schedulable
_READ_EVENTS: dict[str, frozenset[str]] = {
    "node.labels": frozenset({pl.EVENT_NODE_LABELS, pl.EVENT_NODE_ADD}),
    "node.taints": frozenset({pl.EVENT_NODE_TAINTS, pl.EVENT_NODE_ADD}),
    "node.unschedulable": frozenset({pl.EVENT_NODE_SPEC, pl.EVENT_NODE_ADD}),
    "node.spec": frozenset({pl.EVENT_NODE_SPEC, pl.EVENT_NODE_ADD}),
    "cluster": frozenset(
        {
            pl.EVENT_POD_ASSIGNED_ADD,
            pl.EVENT_POD_ASSIGNED_UPDATE,
            pl.EVENT_POD_ASSIGNED_DELETE,
            pl.EVENT_NODE_ADD,
            pl.EVENT_NODE_LABELS,
            pl.EVENT_STORAGE_CHANGE,
        }
    ),
}
_RESOURCE_EVENTS = frozenset(
    {
        pl.EVENT_POD_ASSIGNED_DELETE,
        pl.EVENT_POD_ASSIGNED_SCALE_DOWN,
        pl.EVENT_NODE_ALLOCATABLE,
        pl.EVENT_NODE_ADD,
    }
)
for _read in ("node.free", "node.requested", "node.pods", "node.podCount", "node.usedPorts"):
    _READ_EVENTS[_read] = _RESOURCE_EVENTS


def events_for_reads(reads: frozenset[str]) -> frozenset[str]:
    """Event kinds that may change the value of an expression reading `reads`."""
    out: set[str] = set()
    for read in reads:
        if read.startswith("pod.") or read == "pod":
            continue
        key = read if read in _READ_EVENTS else ".".join(read.split(".")[:2])
        if key.startswith("cluster"):
            key = "cluster"
        events = _READ_EVENTS.get(key)
        if events is None:
            return pl.ALL_EVENTS
        out |= events
    return frozenset(out) if out else pl.ALL_EVENTS


def _function(
    checked: CheckedExpression,
    params: tuple[str, ...],
    probes: Mapping[int, Callable[[Any], Any]] | None = None,
) -> Callable[..., Any]:
    """A single compiled CEL function of a checked expression (positional `params`)."""
    return generate_function(checked.ast, checked.result, checked.env, params, probes).compile()


def _section_function(
    owner: CheckedPolicy,
    expr: ir.Expression,
    params: tuple[str, ...],
    coverage: CoverageCollector | None,
    item: tuple[RuleKind, str],
) -> Callable[..., Any]:
    """The compiled function of a section expression of `owner` (a queue key, preemption, a permit);
    with `coverage`, each call counts as an evaluation of `item` (kind, name) and its branch
    conditions are probed."""
    if coverage is None:
        return _function(owner.of(expr), params)
    kind, name = item
    probes = branch_recorders(coverage, owner.policy, expr, f"{kind} {name}")
    fn = _function(owner.of(expr), params, probes)
    evaluated = rule_recorder(coverage, owner.policy, kind, name, expr.span)

    def counted(*args: Any) -> Any:
        evaluated()
        return fn(*args)

    return counted


@dataclass
class _Profile:
    """A `CompiledProfile`: the policies of one scheduler name, in policy-name order."""

    scheduler_name: str
    codes: tuple[PolicyCode, ...]
    preemption: pl.PreemptionSpec
    permits: tuple[pl.PermitSpec, ...]
    queue_fn: Callable[[pl.CelObject], tuple[Any, ...]]
    policies: tuple[str, ...] = ()
    filters: tuple[pl.RuleRef, ...] = ()
    scores: tuple[pl.ScoreRule, ...] = ()
    score_offsets: tuple[int, ...] = ()
    filter_offsets: tuple[int, ...] = ()
    wake: Mapping[pl.RuleRef, frozenset[str]] = field(default_factory=dict)
    node_pod_fields: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self.policies = tuple(c.policy.name.value for c in self.codes)
        self.filters = tuple(f for c in self.codes for f in c.filters)
        self.scores = tuple(s for c in self.codes for s in c.scores)
        self.score_offsets = _offsets(len(c.scores) for c in self.codes)
        self.filter_offsets = _offsets(len(c.filters) for c in self.codes)
        self.wake = {
            ref: events_for_reads(code.reads.get(ref.name, frozenset()))
            for code in self.codes
            for ref in code.filters
        }
        fields: set[str] = set()
        for code in self.codes:
            if code.node_pod_fields is None:
                fields = {"*"}
                break
            fields |= code.node_pod_fields
        self.node_pod_fields = None if "*" in fields else tuple(sorted(fields))

    def matches(self, code: PolicyCode, pod: pl.CelObject, cluster: Any) -> bool:
        """Does `code`'s policy apply to `pod` (a failing match does not apply)."""
        try:
            return bool(code.match(pod, cluster))
        except EVAL_ERRORS as e:
            log.warning("policy=%s match error=%s", code.policy.name.value, as_eval_error(e))
            return False

    def applies(self, pod: pl.CelObject) -> bool:
        """True when at least one policy of the profile matches the pod."""
        return any(self.matches(c, pod, None) for c in self.codes)

    def queue_key(self, pod: pl.CelObject) -> tuple[Any, ...]:
        """Sort key for the active queue (smaller first)."""
        return self.queue_fn(pod)

    def evaluator(self, pod: pl.CelObject, cluster: pl.ClusterFunctions) -> pl.PodEvaluator:
        """Prepare the per-pod evaluation: the policies that apply to `pod`, their generated functions."""
        parts = [(k, code) for k, code in enumerate(self.codes) if self.matches(code, pod, cluster)]
        return GeneratedEvaluator(
            pod,
            cluster,
            parts,
            RuleLayout(self.filter_offsets, len(self.filters), self.score_offsets, len(self.scores)),
            self.node_pod_fields,
        )

    def wake_events(self, rule: pl.RuleRef) -> frozenset[str]:
        """Event kinds that may make a pod rejected by `rule` schedulable."""
        return self.wake.get(rule, pl.ALL_EVENTS)

    def rule_errors(self) -> dict[int, list[tuple[pl.RuleRef, str, int]]]:
        """Per compiled policy of the profile (by identity), (rule, extension point, count) of each
        of its rules with failed evaluations since it was compiled."""
        out: dict[int, list[tuple[pl.RuleRef, str, int]]] = {}
        for code in self.codes:
            errors = code.errors
            failed = [(ref, "Filter", n) for ref, n in zip(code.filters, errors.filters, strict=True) if n]
            failed.extend((s.rule, "Score", n) for s, n in zip(code.scores, errors.scores, strict=True) if n)
            out[id(errors)] = failed
        return out


def _offsets(sizes: Iterable[int]) -> tuple[int, ...]:
    """Where each policy's rules start in the profile's rules (running sums of `sizes`)."""
    out, total = [], 0
    for size in sizes:
        out.append(total)
        total += size
    return tuple(out)


def _queue_function(
    owner: CheckedPolicy | None, coverage: CoverageCollector | None = None
) -> Callable[[pl.CelObject], tuple[Any, ...]]:
    queue = owner.policy.queue if owner is not None else None
    if owner is None or queue is None:

        def priority_sort(pod: pl.CelObject) -> tuple[Any, ...]:
            return (-int(pod.get("priority") or 0),)

        return priority_sort
    keys = [
        (_section_function(owner, k.expr, ("pod",), coverage, ("queue", f"order {i}")), k.direction == "desc")
        for i, k in enumerate(queue.keys, 1)
    ]

    def key(pod: pl.CelObject) -> tuple[Any, ...]:
        out: list[Any] = []
        for fn, desc in keys:
            try:
                value = fn(pod)
            except EVAL_ERRORS:
                out.append(LAST)
                continue
            out.append(descending(value) if desc else value)
        return tuple(out)

    return key


_DEFAULT_ENABLED = 'pod.preemptionPolicy != "Never"'
_DEFAULT_VICTIMS = "victim.priority < pod.priority"


def _preemption(owner: CheckedPolicy | None, coverage: CoverageCollector | None = None) -> pl.PreemptionSpec:
    section = owner.policy.preemption if owner is not None else None
    if owner is not None and section is not None and section.enabled is not None:
        may = _section_function(owner, section.enabled, ("pod",), coverage, ("preemption", "enabled"))
    else:
        may = _function(default_expression(_DEFAULT_ENABLED, Context.PREEMPT_ENABLED), ("pod",))
    if owner is not None and section is not None and section.victims is not None:
        victim = _section_function(
            owner, section.victims, ("pod", "victim"), coverage, ("preemption", "victims")
        )
        victim_fields = pod_fields(owner.of(section.victims).ast)
    else:
        default_victims = default_expression(_DEFAULT_VICTIMS, Context.VICTIMS)
        victim = _function(default_victims, ("pod", "victim"))
        victim_fields = pod_fields(default_victims.ast)

    def may_preempt(pod: pl.CelObject) -> bool:
        try:
            return may(pod) is True
        except EVAL_ERRORS:
            return False

    def eligible_victim(pod: pl.CelObject, candidate: pl.CelObject) -> bool:
        try:
            return victim(pod, candidate) is True
        except EVAL_ERRORS:
            return False

    honor = section.honor_pdb if section is not None else True
    return pl.PreemptionSpec(may_preempt, eligible_victim, honor, victim_fields)


def _permit(
    checked: CheckedPolicy, permit: ir.Permit, coverage: CoverageCollector | None = None
) -> pl.PermitSpec:
    name = permit.name.value
    group_fn = _section_function(checked, permit.group, ("pod",), coverage, ("permit", f"{name} group"))
    min_fn = _section_function(
        checked, permit.min_member, ("pod",), coverage, ("permit", f"{name} minMember")
    )
    timeout = DEFAULT_PERMIT_TIMEOUT
    if permit.timeout is not None:
        constant = checked.of(permit.timeout)
        try:
            timeout = timeout_value(permit.timeout, constant.result, constant.env)
        except ValueError as e:
            label = f"permit {permit.name.value!r}: timeout: {e}"
            raise PolicyError(permit.timeout.diagnostic("error", label, code="constant")) from e

    def group(pod: pl.CelObject) -> str | None:
        try:
            value = group_fn(pod)
        except EVAL_ERRORS:
            return None
        return value if isinstance(value, str) and value else None

    def min_members(pod: pl.CelObject) -> int:
        try:
            return int(min_fn(pod))
        except EVAL_ERRORS:
            return 1

    return pl.PermitSpec(rule_ref(checked.policy, permit.name), group, min_members, timeout)


def content_hash(policies: Sequence[ir.Policy]) -> str:
    """sha256 over each source file's path and text, in path order."""
    return texts_hash({p.file: p.source_text for p in policies})


def texts_hash(texts: Mapping[str, str]) -> str:
    """sha256 over (name, text) pairs in name order: the identity of a policy set's sources."""
    digest = hashlib.sha256()
    for name in sorted(texts):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(texts[name].encode())
        digest.update(b"\0")
    return digest.hexdigest()


def compile_effective(
    profiles: Mapping[str, EffectivePolicy],
    checked: Sequence[CheckedPolicy],
    *,
    generation: int,
    coverage: CoverageCollector | None = None,
) -> pl.CompiledPolicySet:
    """Compile the effective policy of each profile; `checked` (every loaded policy) names the sources
    (instrumented for `coverage` if given)."""
    compiled: dict[str, pl.CompiledProfile] = {}
    for name, effective in profiles.items():
        layers = effective.layers
        compiled[name] = _Profile(
            scheduler_name=name,
            codes=tuple(compile_policy(c, coverage) for c in layers),
            preemption=_preemption(effective.preemption_owner, coverage),
            permits=tuple(_permit(c, permit, coverage) for c in layers for permit in c.policy.permits),
            queue_fn=_queue_function(effective.queue_owner, coverage),
        )
    policies = [c.policy for c in checked]
    files = tuple(sorted({p.file for p in policies}))
    return pl.CompiledPolicySet(generation, content_hash(policies), compiled, files)


def compile_policy_set(
    checked: Sequence[CheckedPolicy],
    *,
    generation: int,
    scopes: Mapping[str, frozenset[str]] | None = None,
    coverage: CoverageCollector | None = None,
) -> pl.CompiledPolicySet:
    """Compose checked policies into profiles by scheduler name and compile them (PolicyError on a
    conflict; instrumented for `coverage` if given)."""
    composition = compose(checked, scopes, shipped_default)
    errors = [d for d in composition.diagnostics if d.severity == "error"]
    if errors:
        raise PolicyError(errors)
    return compile_effective(composition.profiles, checked, generation=generation, coverage=coverage)


def compile_paths(
    paths: Sequence[str], generation: int, coverage: CoverageCollector | None = None
) -> pl.CompiledPolicySet:
    """Load, check and compile policies; raises PolicyError with every diagnostic on any error."""
    result = load_policies(paths)
    problems = [p.diagnostic() for p in result.io_errors]
    if problems or result.has_errors:
        raise PolicyError(problems + result.diagnostics)
    return compile_effective(result.profiles, result.checked, generation=generation, coverage=coverage)


def compile_sources(
    texts: Mapping[str, str], *, generation: int, scopes: Mapping[str, frozenset[str]] | None = None
) -> pl.CompiledPolicySet:
    """Check, compose and compile policy texts by name (`scopes`: profile -> its text names).

    Raises PolicyError with every diagnostic on any error.
    """
    result = load_texts(texts, scopes)
    if result.has_errors:
        raise PolicyError(result.diagnostics)
    return compile_effective(result.profiles, result.checked, generation=generation)
