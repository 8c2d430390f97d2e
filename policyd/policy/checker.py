"""Checks of one policy: each expression type-checked once in the environment of where it is written.

`PolicyChecker(policy).run()` reports lets used out of order or out of scope, misplaced `victim`,
checker issues, wrong result types, over-budget costs, duplicate lets and rule names and unused lets,
and returns the `CheckedPolicy` the compiler consumes.
"""

from __future__ import annotations

from typing import Any

from policyd.cel.checker import check
from policyd.cel.codegen import generate_function
from policyd.cel.cost import cost_report
from policyd.cel.env import CelEnv, CheckResult
from policyd.cel.runtime import EVAL_ERRORS, as_eval_error
from policyd.cel.types import CelType
from policyd.cel.values import Duration
from policyd.cel.walk import free_idents
from policyd.errors import Diagnostic
from policyd.policy import syntax as ir
from policyd.policy.checked import CheckedPolicy, analyse
from policyd.policy.env import COST_LIMIT, LET_CONTEXTS, Context, policy_env, result_problem
from policyd.slips import did_you_mean


class PolicyChecker:
    """Type-checks one policy's expressions; collects diagnostics."""

    def __init__(self, policy: ir.Policy) -> None:
        self.policy = policy
        self.diagnostics: list[Diagnostic] = []
        # id(ir.Expression) -> (context, environment, check result)
        self.checks: dict[int, tuple[Context, CelEnv, CheckResult]] = {}
        self.let_types: dict[str, CelType] = {}
        self.used_lets: set[str] = set()

    def run(self) -> CheckedPolicy:
        """Check every part of the policy; the checked policy."""
        p = self.policy
        if p.match is not None:
            self.expression(p.match, Context.MATCH, "match")
        self.lets()
        self.rule_names()
        self.override_targets()
        for f in p.filters:
            self.expression(f.expr, Context.FILTER, f"filter {f.name.value!r}: expr")
            if isinstance(f.reason, ir.Expression):
                self.expression(f.reason, Context.REASON, f"filter {f.name.value!r}: reason")
            if isinstance(f.unresolvable, ir.Expression):
                self.expression(
                    f.unresolvable, Context.UNRESOLVABLE, f"filter {f.name.value!r}: unresolvable"
                )
        for s in p.scores:
            self.expression(s.expr, Context.SCORE, f"score {s.name.value!r}: expr")
        if p.queue is not None:
            for key in p.queue.keys:
                self.expression(key.expr, Context.QUEUE, "queue order key")
        if p.preemption is not None:
            if p.preemption.enabled is not None:
                self.expression(p.preemption.enabled, Context.PREEMPT_ENABLED, "preemption enabled")
            if p.preemption.victims is not None:
                self.expression(p.preemption.victims, Context.VICTIMS, "preemption victims")
        for permit in p.permits:
            label = f"permit {permit.name.value!r}"
            self.expression(permit.group, Context.PERMIT_GROUP, f"{label}: group")
            result = self.expression(permit.min_member, Context.PERMIT_MIN_MEMBER, f"{label}: minMember")
            if (
                not result.issues
                and result_problem(Context.PERMIT_MIN_MEMBER, result.type) is None
                and next(free_idents(permit.min_member.ast), None) is None
            ):
                self.min_member(permit.min_member, result, f"{label}: minMember")
            if permit.timeout is not None:
                result = self.expression(permit.timeout, Context.PERMIT_TIMEOUT, f"{label}: timeout")
                if not result.issues and result_problem(Context.PERMIT_TIMEOUT, result.type) is None:
                    self.timeout(permit.timeout, result, f"{label}: timeout")
        for let in p.lets:
            if let.name.value not in self.used_lets:
                self.diagnostics.append(
                    let.name.diagnostic("warning", f"let {let.name.value!r} is never used", "unused-let")
                )
        return analyse(p, self.checks)

    def lets(self) -> None:
        """Check lets in order; each sees the earlier ones."""
        seen: dict[str, ir.Name] = {}
        for let in self.policy.lets:
            name = let.name.value
            first = seen.get(name)
            if first is not None:
                message = f"duplicate let {name!r} (first defined at {first.span.line}:{first.span.column})"
                self.diagnostics.append(let.name.diagnostic("error", message, "duplicate-let"))
            else:
                seen[name] = let.name
            result = self.expression(let.expr, Context.LET, f"let {name!r}")
            self.let_types[name] = result.type

    def rule_names(self) -> None:
        """Filter, score and permit names are unique within a policy."""
        seen: dict[str, ir.Name] = {}
        names = [
            *(f.name for f in self.policy.filters),
            *(s.name for s in self.policy.scores),
            *(p.name for p in self.policy.permits),
        ]
        for name in sorted(names, key=lambda n: (n.span.line, n.span.column)):
            first = seen.get(name.value)
            if first is not None:
                message = f"duplicate rule name {name.value!r} (first defined at {first.span.line}:{first.span.column})"
                self.diagnostics.append(name.diagnostic("error", message, "duplicate-rule"))
            else:
                seen[name.value] = name

    def override_targets(self) -> None:
        """A policy disables an extended rule once, and sets its weight or normalize once.

        (Disabling and reweighting one rule is reported by `composition`, within a policy or not.)
        """
        seen: dict[tuple[str, str], ir.Name] = {}
        for change in self.policy.overrides:
            target = change.target
            given = (
                ("disable", change.disable),
                ("weight", change.weight is not None),
                ("normalize", change.normalize is not None),
            )
            parts = [part for part, present in given if present]
            for part in parts:
                first = seen.setdefault((target.value, part), target)
                if first is target:
                    continue
                what = "disables" if part == "disable" else f"sets the {part} of"
                verb = "disable" if change.disable else "override score"
                at = f"{first.span.line}:{first.span.column}"
                message = f"{verb} {target.value}: this policy already {what} {target.value} (at {at})"
                self.diagnostics.append(target.diagnostic("error", message, "duplicate-override"))
                break

    def _scope_problems(self, expr: ir.Expression, context: Context) -> set[int]:
        """Report lets used before definition and misplaced `victim`; the offsets reported."""
        reported: set[int] = set()
        let_names = {let.name.value for let in self.policy.lets}
        for ident in free_idents(expr.ast):
            name = ident.name
            if name in let_names:
                self.used_lets.add(name)
                if context in LET_CONTEXTS:
                    if name not in self.let_types:
                        message = f"let {name!r} is used before it is defined (a let may refer only to earlier lets)"
                        self.diagnostics.append(expr.diagnostic("error", message, ident.offset, "let-order"))
                        reported.add(ident.offset)
                else:
                    message = (
                        f"let {name!r} is not visible in {context.value} (lets serve filters and scores)"
                    )
                    self.diagnostics.append(expr.diagnostic("error", message, ident.offset, "let-scope"))
                    reported.add(ident.offset)
            elif name == "pod" and context is Context.PERMIT_TIMEOUT:
                message = "a permit timeout is a constant, evaluated once when the policy is loaded: it cannot read 'pod'"
                self.diagnostics.append(expr.diagnostic("error", message, ident.offset, "not-constant"))
                reported.add(ident.offset)
            elif name == "victim" and context is not Context.VICTIMS:
                message = "'victim' is only defined in preemption victims"
                self.diagnostics.append(expr.diagnostic("error", message, ident.offset, "undefined"))
                reported.add(ident.offset)
        return reported

    def expression(self, expr: ir.Expression, context: Context, label: str) -> CheckResult:
        """Check one expression; report issues, a wrong result type and an over-budget cost."""
        reported = self._scope_problems(expr, context)
        env = policy_env(context, self.let_types)
        result = check(expr.ast, env)
        for issue in result.issues:
            if issue.offset in reported:
                continue
            message = issue.message + did_you_mean(issue.near)
            self.diagnostics.append(expr.diagnostic("error", message, issue.offset, "type"))
        self.checks[id(expr)] = (context, env, result)
        if not result.issues and not reported:
            problem = result_problem(context, result.type)
            if problem is not None:
                self.diagnostics.append(expr.diagnostic("error", f"{label} {problem}", code="result-type"))
            else:
                self.cost(expr, env, result, label)
        return result

    def timeout(self, expr: ir.Expression, result: CheckResult, label: str) -> None:
        """Evaluate a permit timeout now (it is a constant): report an error or a negative duration."""
        env = policy_env(Context.PERMIT_TIMEOUT)
        try:
            value = timeout_value(expr, result, env)
        except ValueError as e:
            self.diagnostics.append(expr.diagnostic("error", f"{label}: {e}", code="constant"))
            return
        if value < 0:
            self.diagnostics.append(
                expr.diagnostic("error", f"{label}: must not be negative", code="constant")
            )

    def min_member(self, expr: ir.Expression, result: CheckResult, label: str) -> None:
        """Evaluate a constant minMember now: a group smaller than one pod waits for nothing."""
        try:
            value = constant_value(expr, result, policy_env(Context.PERMIT_MIN_MEMBER))
        except ValueError as e:
            self.diagnostics.append(expr.diagnostic("error", f"{label}: {e}", code="constant"))
            return
        if type(value) is int and value < 1:
            message = f"{label}: {value} is below 1 (the group's pods would never wait for each other)"
            self.diagnostics.append(expr.diagnostic("error", message, code="constant"))

    def cost(self, expr: ir.Expression, env: CelEnv, result: CheckResult, label: str) -> None:
        """Report an expression whose estimated cost is over the limit, at its most expensive part."""
        report = cost_report(expr.ast, result, env)
        if report.total <= COST_LIMIT:
            return
        message = f"{label}: {report.message(COST_LIMIT)}"
        self.diagnostics.append(expr.diagnostic("error", message, report.hotspot_offset, "cost"))


def constant_value(expr: ir.Expression, result: CheckResult, env: CelEnv) -> Any:
    """The value of an expression that reads nothing; ValueError naming the evaluation error."""
    try:
        return generate_function(expr.ast, result, env, ()).compile()()
    except EVAL_ERRORS as e:
        raise ValueError(str(as_eval_error(e))) from e


def timeout_value(expr: ir.Expression, result: CheckResult, env: CelEnv) -> float:
    """The seconds of a constant permit timeout; ValueError naming the evaluation error."""
    value = constant_value(expr, result, env)
    if not isinstance(value, Duration):
        raise ValueError(f"must be a duration, got {value!r}")
    return value.ns / 1e9
