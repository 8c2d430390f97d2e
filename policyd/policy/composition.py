"""Policies of a profile as ordered layers -> one `EffectivePolicy` per profile (what the compiler consumes).

A profile's layers are the policies that list it in `profiles` and, transitively, the policies they
`extends` (a base joins every profile of a policy built on it). Layers are ordered so that every
policy comes after the policies it extends (ties: policy name). A layer may

- add lets, filters, scores and permits (filters AND, scores add, as they always did);
- `override queue` / `override preemption`: replace the section of a policy it extends;
- `override score POLICY/RULE {weight, normalize}`: change a score rule of a policy it extends;
- `disable POLICY/RULE`: leave out a filter, score or permit of a policy it extends.

An override names only what the overriding policy extends, so of two changes to the same thing one
comes after the other, or they conflict: two changes with no order between them, a rule disabled and
reweighted, a second plain `queue`/`preemption`, an override of nothing are errors naming both places.
`compose` is the one function that computes the effective policy; `EffectivePolicy` records for each
rule where it is defined, its weight, and which layer changed or disabled it and where.

`extends default` names the shipped default.policy when no policy called `default` is among a profile's
sources (`shipped_default`): a layer over the defaults works alone, from a file, a ConfigMap or an
installed wheel, without copying or locating that file. A `default` loaded from another file takes
the name instead, and then it is not looked up elsewhere.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from policyd import shipped
from policyd.errors import Diagnostic, SourceSpan
from policyd.framework import Normalize
from policyd.policy import syntax as ir
from policyd.policy.checked import CheckedPolicy
from policyd.slips import did_you_mean, near_name

RuleKind = Literal["filter", "score", "permit"]

# field paths whose reading makes a filter a resource-fit check (node capacity against requests)
CAPACITY_READS = ("node.allocatable", "node.free", "node.requested", "node.nonZeroRequested")


# the name of the shipped default.policy, which example policies extend
SHIPPED_DEFAULT = "default"


@dataclass(frozen=True)
class Change:
    """One layer's change to a rule or section: what it did, by which policy, where it is written."""

    policy: str
    what: str
    span: SourceSpan


@dataclass(frozen=True)
class EffectiveRule:
    """A rule of a profile as composed: where it is defined and what later layers did to it."""

    kind: RuleKind
    policy: str
    name: str
    span: SourceSpan
    enabled: bool = True
    weight: int | None = None
    normalize: Normalize | None = None
    changes: tuple[Change, ...] = ()

    @property
    def qualified(self) -> str:
        """`policy/rule`."""
        return f"{self.policy}/{self.name}"


@dataclass(frozen=True)
class EffectiveSection:
    """The `queue` or `preemption` section in effect: its policy and place, and the sections it replaced."""

    kind: Literal["queue", "preemption"]
    policy: str
    span: SourceSpan
    replaced: tuple[Change, ...] = ()


@dataclass(frozen=True)
class EffectivePolicy:
    """One profile's policy as composed: its layers in order (changes applied), rules and sections.

    `layers` are the checked policies with disabled rules left out and changed weights applied; the
    compiler compiles exactly these. `queue_owner`/`preemption_owner` is the layer whose section is in
    effect (None: kube-scheduler's defaults).
    """

    profile: str
    layers: tuple[CheckedPolicy, ...]
    rules: tuple[EffectiveRule, ...]
    queue: EffectiveSection | None = None
    preemption: EffectiveSection | None = None
    queue_owner: CheckedPolicy | None = None
    preemption_owner: CheckedPolicy | None = None

    @property
    def policies(self) -> tuple[str, ...]:
        """The layers' policy names, in order."""
        return tuple(c.policy.name.value for c in self.layers)

    def to_json(self) -> dict[str, object]:
        """The `policyd effective -o json` shape of this profile."""

        def place(span: SourceSpan) -> dict[str, object]:
            return {"file": span.file, "line": span.line, "column": span.column}

        def changes(items: tuple[Change, ...]) -> list[dict[str, object]]:
            return [{"policy": c.policy, "change": c.what, **place(c.span)} for c in items]

        def section(s: EffectiveSection | None) -> dict[str, object] | None:
            if s is None:
                return None
            return {"policy": s.policy, **place(s.span), "replaced": changes(s.replaced)}

        return {
            "profile": self.profile,
            "layers": list(self.policies),
            "queue": section(self.queue),
            "preemption": section(self.preemption),
            "rules": [
                {
                    "kind": r.kind,
                    "policy": r.policy,
                    "name": r.name,
                    **place(r.span),
                    "enabled": r.enabled,
                    "weight": r.weight,
                    "normalize": r.normalize,
                    "changes": changes(r.changes),
                }
                for r in self.rules
            ],
        }


@dataclass
class Composition:
    """The effective policy of every profile and the composition's diagnostics."""

    profiles: dict[str, EffectivePolicy] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def add(self, diagnostic: Diagnostic) -> None:
        """Record a diagnostic once (a policy in several profiles is composed several times)."""
        if diagnostic not in self.diagnostics:
            self.diagnostics.append(diagnostic)


def compose(
    checked: Sequence[CheckedPolicy],
    scopes: Mapping[str, frozenset[str]] | None = None,
    shipped_default: Callable[[], CheckedPolicy | None] | None = None,
) -> Composition:
    """The effective policy of each profile; `scopes`: profile -> the files its policies may come from.

    Without `scopes` every policy may join every profile (a set of paths given on the command line);
    with them (a configuration's `profiles[].policySources`) a profile sees only its own files.
    `shipped_default` returns the shipped default policy, checked: what `extends default` names in a
    profile none of whose sources defines `default`, unless a `default` of another file is loaded.
    """
    out = Composition()
    loaded = next((c for c in checked if c.policy.name.value == SHIPPED_DEFAULT), None)
    fallback = shipped_default
    other_default = ""  # the file of a `default` that is not the shipped one
    if loaded is not None:
        if _is_shipped_default(loaded.policy.file):
            fallback = lambda: loaded  # noqa: E731 (the loaded file, for profiles without it)
        else:
            fallback, other_default = None, loaded.policy.file
    if scopes is None:
        names = sorted({p for c in checked for p in c.policy.profiles})
        pools = {name: list(checked) for name in names}
    else:
        pools = {name: [c for c in checked if c.policy.file in files] for name, files in scopes.items()}
    for name, pool in pools.items():
        effective = _Composer(name, pool, out, fallback, other_default).run()
        if effective is not None:
            out.profiles[name] = effective
    return out


def _is_shipped_default(file: str) -> bool:
    try:
        return os.path.samefile(file, shipped.default_policy())
    except (OSError, ValueError):
        return False  # a ConfigMap key, a playground buffer, a file gone


def _ref(span: SourceSpan) -> str:
    return f"{span.file}:{span.line}:{span.column}"


class _Composer:
    """Composes one profile from the policies it may use."""

    def __init__(
        self,
        profile: str,
        pool: Sequence[CheckedPolicy],
        out: Composition,
        fallback: Callable[[], CheckedPolicy | None] | None = None,
        other_default: str = "",
    ) -> None:
        self.profile = profile
        self.out = out
        self.fallback = fallback
        self.other_default = other_default
        self.by_name: dict[str, CheckedPolicy] = {}
        for c in pool:
            self.by_name.setdefault(c.policy.name.value, c)
        self.ancestors: dict[str, frozenset[str]] = {}

    def error(self, at: ir.Name | ir.Queue | ir.Preemption, message: str, code: str) -> None:
        """Record an error at a name or a section keyword."""
        if isinstance(at, ir.Name):
            self.out.add(at.diagnostic("error", message, code))
        else:
            self.out.add(Diagnostic("error", message, at.span, code, at.source_line or None))

    # -- layers ----------------------------------------------------------------------------------

    def run(self) -> EffectivePolicy | None:
        """The effective policy (None when no policy lists the profile)."""
        members = [c for c in self.by_name.values() if self.profile in c.policy.profiles]
        if not members:
            return None
        included: dict[str, CheckedPolicy] = {}
        for c in members:
            self.include(c, included, ())
        layers = self.order(included)
        rules = self.rules(layers)
        queue, queue_owner = self.section("queue", layers)
        preemption, preemption_owner = self.section("preemption", layers)
        views = tuple(self.view(c, rules) for c in layers)
        effective = EffectivePolicy(
            self.profile,
            views,
            tuple(rule for c in layers for rule in rules[c.policy.name.value]),
            queue,
            preemption,
            self.view_of(queue_owner, views),
            self.view_of(preemption_owner, views),
        )
        self.capacity_warning(effective)
        return effective

    def include(self, c: CheckedPolicy, included: dict[str, CheckedPolicy], path: tuple[str, ...]) -> None:
        """Add `c` and the policies it extends; report unknown bases and cycles."""
        name = c.policy.name.value
        if name in path:
            cycle = " -> ".join((*path[path.index(name) :], name))
            self.error(c.policy.name, f"policy {name!r} extends itself ({cycle})", "extends-cycle")
            return
        if name in included:
            return
        included[name] = c
        ancestors: set[str] = set()
        for base in c.policy.extends:
            target = self.base(base.value)
            if target is None:
                known = ", ".join(sorted(self.by_name)) or "none"
                message = (
                    f"policy {name!r} extends {base.value!r}, which is not loaded for profile "
                    f"{self.profile!r} (policies: {known})"
                )
                if base.value == SHIPPED_DEFAULT and self.other_default:
                    message += (
                        f"; the policy {SHIPPED_DEFAULT!r} of {self.other_default} takes the name, so "
                        f"the shipped one is not used: list {self.other_default} in the profile's "
                        "policySources too"
                    )
                elif base.value == SHIPPED_DEFAULT:
                    message += (
                        f"; the shipped {SHIPPED_DEFAULT} policy is {shipped.default_policy()}: "
                        "load it too (`policyd lint` it beside this file, or list it in the profile's "
                        "policySources)"
                    )
                self.error(base, message, "unknown-policy")
                continue
            self.include(target, included, (*path, name))
            ancestors.add(base.value)
            ancestors |= self.ancestors.get(base.value, frozenset())
        self.ancestors[name] = frozenset(ancestors - {name})

    def base(self, name: str) -> CheckedPolicy | None:
        """The policy `extends name` names in this profile (the shipped default where none is loaded)."""
        target = self.by_name.get(name)
        if target is None and name == SHIPPED_DEFAULT and self.fallback is not None:
            target = self.fallback()
            if target is not None:
                self.by_name[name] = target
        return target

    def order(self, included: Mapping[str, CheckedPolicy]) -> list[CheckedPolicy]:
        """Layers: every policy after the policies it extends; ties by name."""
        waiting = {
            n: {b.value for b in c.policy.extends if b.value in included} - {n} for n, c in included.items()
        }
        ready = [n for n, deps in waiting.items() if not deps]
        heapq.heapify(ready)
        out: list[CheckedPolicy] = []
        while ready:
            name = heapq.heappop(ready)
            out.append(included[name])
            for other, deps in waiting.items():
                if name in deps:
                    deps.discard(name)
                    if not deps:
                        heapq.heappush(ready, other)
        done = {c.policy.name.value for c in out}
        out.extend(included[n] for n in sorted(included) if n not in done)  # a cycle (reported)
        return out

    def ordered(self, a: str, b: str) -> bool:
        """True when one of the policies extends the other (their changes have an order)."""
        return a == b or a in self.ancestors.get(b, ()) or b in self.ancestors.get(a, ())

    # -- sections --------------------------------------------------------------------------------

    def section(
        self, kind: Literal["queue", "preemption"], layers: Sequence[CheckedPolicy]
    ) -> tuple[EffectiveSection | None, CheckedPolicy | None]:
        """The section in effect and its layer; report a second plain section and conflicting overrides."""
        plain: list[tuple[CheckedPolicy, ir.Queue | ir.Preemption]] = []
        overrides: list[tuple[CheckedPolicy, ir.Queue | ir.Preemption]] = []
        for c in layers:
            part: ir.Queue | ir.Preemption | None = c.policy.queue if kind == "queue" else c.policy.preemption
            if part is not None:
                (overrides if part.override else plain).append((c, part))
        for c, part in plain[1:]:
            first, first_part = plain[0]
            name, first_name = c.policy.name.value, first.policy.name.value
            hint = (
                f"; write `override {kind}` to replace it"
                if first_name in self.ancestors.get(name, ())
                else f"; make one policy extend the other and write `override {kind}` in it"
            )
            message = (
                f"profile {self.profile!r} has a second {kind} section (policy {name!r}; the first is in "
                f"policy {first_name!r} at {_ref(first_part.span)}){hint}"
            )
            self.error(part, message, f"duplicate-{kind}")
        for c, part in overrides:
            name = c.policy.name.value
            bases = [
                (b, p) for b, p in (*plain, *overrides) if b.policy.name.value in self.ancestors.get(name, ())
            ]
            if not bases:
                message = (
                    f"override {kind} in policy {name!r}: no policy it extends has a {kind} section "
                    f"(write `{kind}` instead)"
                )
                self.error(part, message, "override-nothing")
        for i, (a, part_a) in enumerate(overrides):
            for b, part_b in overrides[i + 1 :]:
                if not self.ordered(a.policy.name.value, b.policy.name.value):
                    message = (
                        f"policies {a.policy.name.value!r} and {b.policy.name.value!r} both override the "
                        f"{kind} of profile {self.profile!r} and neither extends the other (the other "
                        f"override is at {_ref(part_a.span)})"
                    )
                    self.error(part_b, message, "override-conflict")
        defined = [*plain, *overrides]
        if not defined:
            return None, None
        owner, part = max(defined, key=lambda item: layers.index(item[0]))
        replaced = tuple(
            Change(c.policy.name.value, "replaced", p.span) for c, p in defined if c is not owner
        )
        return EffectiveSection(kind, owner.policy.name.value, part.span, replaced), owner

    # -- rules -----------------------------------------------------------------------------------

    def rules(self, layers: Sequence[CheckedPolicy]) -> dict[str, list[EffectiveRule]]:
        """Each layer's rules with the changes of later layers applied (by policy name)."""
        rules: dict[str, list[EffectiveRule]] = {}
        for c in layers:
            p = c.policy
            rules[p.name.value] = [
                *(EffectiveRule("filter", p.name.value, f.name.value, f.name.span) for f in p.filters),
                *(
                    EffectiveRule(
                        "score", p.name.value, s.name.value, s.name.span, True, s.weight, s.normalize
                    )
                    for s in p.scores
                ),
                *(EffectiveRule("permit", p.name.value, q.name.value, q.name.span) for q in p.permits),
            ]
        # qualified rule -> [(layer, override)] in layer order
        applied: dict[str, list[tuple[str, ir.RuleOverride]]] = {}
        for c in layers:
            for change in c.policy.overrides:
                if self.target_ok(c.policy, change, rules):
                    applied.setdefault(change.target.value, []).append((c.policy.name.value, change))
        for target, items in applied.items():
            self.conflicts(target, items)
            policy, _, rule_name = target.partition("/")
            rows = rules[policy]
            for i, rule in enumerate(rows):
                if rule.name == rule_name:
                    rows[i] = _apply(rule, items)
        return rules

    def target_ok(
        self, policy: ir.Policy, change: ir.RuleOverride, rules: Mapping[str, list[EffectiveRule]]
    ) -> bool:
        """Report an override naming a policy not extended or a rule that does not exist."""
        name = policy.name.value
        verb = "disable" if change.disable else "override score"
        if change.policy not in self.by_name:
            message = f"{verb} {change.target.value}: no policy {change.policy!r} is loaded for profile {self.profile!r}"
            self.error(change.target, message, "unknown-policy")
            return False
        if change.policy not in self.ancestors.get(name, ()):
            message = (
                f"{verb} {change.target.value}: policy {name!r} does not extend {change.policy!r} "
                f"(add `extends {change.policy}`)"
            )
            self.error(change.target, message, "not-extended")
            return False
        found = [r for r in rules.get(change.policy, ()) if r.name == change.rule]
        if not found:
            names = [r.name for r in rules.get(change.policy, ())]
            near = did_you_mean(near_name(change.rule, names))
            known = ", ".join(names) or "none"
            message = (
                f"{verb} {change.target.value}: policy {change.policy!r} has no rule {change.rule!r}{near} "
                f"(rules: {known})"
            )
            self.error(change.target, message, "unknown-rule")
            return False
        if not change.disable and found[0].kind != "score":
            message = (
                f"override score {change.target.value}: it is a {found[0].kind}; only a score has a weight"
            )
            self.error(change.target, message, "not-a-score")
            return False
        return True

    def conflicts(self, target: str, items: Sequence[tuple[str, ir.RuleOverride]]) -> None:
        """Report a rule disabled and reweighted, or changed twice by layers with no order between them."""
        for i, (a, first) in enumerate(items):
            for b, second in items[i + 1 :]:
                where = _ref(first.target.span)
                if first.disable != second.disable:
                    message = f"{target} is both disabled and reweighted (the other change is at {where})"
                    self.error(second.target, message, "override-conflict")
                elif not self.ordered(a, b) and (
                    first.disable
                    or (first.weight is not None and second.weight is not None)
                    or (first.normalize is not None and second.normalize is not None)
                ):
                    message = (
                        f"policies {a!r} and {b!r} both change {target} and neither extends the other "
                        f"(the other change is at {where})"
                    )
                    self.error(second.target, message, "override-conflict")

    # -- views -----------------------------------------------------------------------------------

    def view(self, c: CheckedPolicy, rules: Mapping[str, list[EffectiveRule]]) -> CheckedPolicy:
        """`c` with its disabled rules left out and changed weights applied (itself when unchanged)."""
        rows = {(r.kind, r.name): r for r in rules[c.policy.name.value]}
        if not any(r.changes for r in rows.values()):
            return c
        p = c.policy
        scores = []
        for s in p.scores:
            row = rows[("score", s.name.value)]
            if row.enabled:
                weight = s.weight if row.weight is None else row.weight
                scores.append(replace(s, weight=weight, normalize=row.normalize or s.normalize))
        policy = replace(
            p,
            filters=tuple(f for f in p.filters if rows[("filter", f.name.value)].enabled),
            scores=tuple(scores),
            permits=tuple(q for q in p.permits if rows[("permit", q.name.value)].enabled),
        )
        return replace(c, policy=policy)

    def view_of(self, owner: CheckedPolicy | None, views: Sequence[CheckedPolicy]) -> CheckedPolicy | None:
        """The view of a layer."""
        if owner is None:
            return None
        return next(v for v in views if v.policy.name.value == owner.policy.name.value)

    def capacity_warning(self, effective: EffectivePolicy) -> None:
        """Warn when no enabled filter of the profile reads node capacity (nothing stops a full node)."""
        for c in effective.layers:
            for f in c.policy.filters:
                reads = c.of(f.expr).reads
                if any(r == cap or r.startswith(cap + ".") for r in reads for cap in CAPACITY_READS):
                    return
        first = effective.layers[0].policy
        message = (
            f"profile {self.profile!r} has no filter reading node capacity ({', '.join(CAPACITY_READS[:3])}): "
            "pods may be placed on full nodes (extend `default`, or add a resource-fit filter)"
        )
        self.out.add(first.name.diagnostic("warning", message, "no-resource-fit"))


def _apply(rule: EffectiveRule, items: Sequence[tuple[str, ir.RuleOverride]]) -> EffectiveRule:
    """The rule after the changes, in layer order."""
    for policy, change in items:
        if change.disable:
            rule = replace(
                rule, enabled=False, changes=(*rule.changes, Change(policy, "disabled", change.target.span))
            )
            continue
        if change.weight is not None:
            what = f"weight {rule.weight} -> {change.weight}"
            rule = replace(
                rule, weight=change.weight, changes=(*rule.changes, Change(policy, what, change.target.span))
            )
        if change.normalize is not None:
            what = f"normalize {rule.normalize} -> {change.normalize}"
            rule = replace(
                rule,
                normalize=change.normalize,
                changes=(*rule.changes, Change(policy, what, change.target.span)),
            )
    return rule
