"""The checked policy: what the front end knows about each expression, computed once.

The loader type-checks every expression of a policy once (`policyd.policy.loader.PolicyChecker`)
and builds a `CheckedPolicy` from the results: each expression's environment and `CheckResult`, the
lets in definition order with the earlier lets each one uses, whether a let is pod-only (reads only
`pod`, `cluster` and other pod-only lets), each expression's let closure and field reads. The code
generator, the lowering and the profile builder consume it and never check again.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from policyd.cel import syntax as cel_ast
from policyd.cel.checker import check
from policyd.cel.env import CelEnv, CheckResult
from policyd.cel.parser import parse_cel
from policyd.cel.types import DYN, CelType
from policyd.cel.walk import free_idents
from policyd.policy import syntax as ir
from policyd.policy.env import Context, policy_env
from policyd.policy.source import SourceFile, SourceMap

# variables a pod-only let may read (besides other pod-only lets)
POD_VARIABLES = frozenset({"pod", "cluster"})


@dataclass(frozen=True)
class CheckedExpression:
    """One policy expression with the environment it was checked in and the checker's verdict."""

    expr: ir.Expression
    context: Context
    env: CelEnv
    result: CheckResult
    # the lets the expression needs, transitively, dependencies first
    lets: tuple[str, ...] = ()
    # field paths read by the expression and the lets it needs (a rule's own reads of let names are
    # left out; a let's are kept, see `CheckedLet.reads`)
    reads: frozenset[str] = frozenset()

    @property
    def ast(self) -> cel_ast.Expr:
        """The expression's syntax tree."""
        return self.expr.ast

    @property
    def ok(self) -> bool:
        """True when the checker reported no issue."""
        return not self.result.issues

    @property
    def type(self) -> CelType:
        """The checked result type (dyn when the check failed)."""
        return self.result.type if self.ok else DYN


@dataclass(frozen=True)
class CheckedLet:
    """A let of a policy: its checked expression, the earlier lets it uses and its evaluation scope."""

    name: str
    index: int
    checked: CheckedExpression
    # earlier lets the expression uses directly, in order of first use
    deps: tuple[str, ...]
    # reads only `pod`, `cluster` and pod-only lets: computed once per pod, not per node
    pod_only: bool
    # field paths read by the let and, transitively, the lets it uses; the names of those lets are
    # included, as the compiler always had them (a rule using such a let wakes on every event)
    reads: frozenset[str]


@dataclass(frozen=True)
class CheckedPolicy:
    """A policy with every expression checked (`expressions` by `id(ir.Expression)`) and its lets analysed."""

    policy: ir.Policy
    expressions: Mapping[int, CheckedExpression]
    # in definition order
    lets: Mapping[str, CheckedLet]

    def of(self, expr: ir.Expression) -> CheckedExpression:
        """The checked form of one of the policy's expressions."""
        return self.expressions[id(expr)]

    @property
    def let_types(self) -> dict[str, CelType]:
        """The checked type of each let."""
        return {name: let.checked.type for name, let in self.lets.items()}

    @property
    def ok(self) -> bool:
        """True when no expression of the policy has a checker issue."""
        return all(c.ok for c in self.expressions.values())


def lets_used(expr: cel_ast.Expr, lets: Collection[str]) -> list[str]:
    """The lets among `lets` that `expr` reads, in order of first use."""
    seen: list[str] = []
    for ident in free_idents(expr):
        if ident.name in lets and ident.name not in seen:
            seen.append(ident.name)
    return seen


def let_closure(expr: cel_ast.Expr, deps: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """The lets (keys of `deps`: let -> lets it uses) `expr` needs, transitively, dependencies first."""
    out: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in out or name in visiting:
            return
        visiting.add(name)
        for dep in deps[name]:
            visit(dep)
        visiting.discard(name)
        out.append(name)

    for name in lets_used(expr, deps):
        visit(name)
    return tuple(out)


def analyse(policy: ir.Policy, checks: Mapping[int, tuple[Context, CelEnv, CheckResult]]) -> CheckedPolicy:
    """The checked policy from the check of each expression (`id(ir.Expression)` -> context, env, result)."""
    let_names = {let.name.value for let in policy.lets}
    deps: dict[str, tuple[str, ...]] = {}
    lets: dict[str, CheckedLet] = {}
    expressions: dict[int, CheckedExpression] = {}
    for index, let in enumerate(policy.lets):
        name = let.name.value
        context, env, result = checks[id(let.expr)]
        if name in lets:  # a duplicate let (an error the loader reports): the first one counts
            expressions[id(let.expr)] = CheckedExpression(let.expr, context, env, result)
            continue
        own = tuple(d for d in lets_used(let.expr.ast, let_names) if d in lets)
        deps[name] = own
        reads = set(result.reads)
        for d in own:
            reads |= lets[d].reads
        roots = {r.split(".")[0] for r in result.reads} - let_names
        pod_only = roots <= POD_VARIABLES and all(lets[d].pod_only for d in own)
        closure = let_closure(let.expr.ast, deps)
        checked = CheckedExpression(let.expr, context, env, result, closure, frozenset(reads))
        lets[name] = CheckedLet(name, index, checked, own, pod_only, frozenset(reads))
        expressions[id(let.expr)] = checked
    for expr in _expressions(policy):
        if id(expr) in expressions:
            continue
        context, env, result = checks[id(expr)]
        closure = let_closure(expr.ast, deps)
        reads = {r for r in result.reads if r.split(".")[0] not in let_names}
        for name in closure:
            reads |= lets[name].reads
        expressions[id(expr)] = CheckedExpression(expr, context, env, result, closure, frozenset(reads))
    return CheckedPolicy(policy, expressions, lets)


def _expressions(policy: ir.Policy) -> list[ir.Expression]:
    """Every expression of a policy but its lets."""
    out: list[ir.Expression] = [] if policy.match is None else [policy.match]
    for rule in policy.filters:
        out += [e for e in (rule.expr, rule.reason, rule.unresolvable) if isinstance(e, ir.Expression)]
    out += [rule.expr for rule in policy.scores]
    if policy.queue is not None:
        out += [key.expr for key in policy.queue.keys]
    if policy.preemption is not None:
        out += [e for e in (policy.preemption.enabled, policy.preemption.victims) if e is not None]
    for permit in policy.permits:
        out += [e for e in (permit.group, permit.min_member, permit.timeout) if e is not None]
    return out


@functools.cache
def default_expression(text: str, context: Context) -> CheckedExpression:
    """A built-in expression (a default of a policy part), parsed and checked once."""
    expr = ir.Expression(text, parse_cel(text), SourceMap(SourceFile("<default>", text)))
    env = policy_env(context)
    result = check(expr.ast, env)
    return CheckedExpression(expr, context, env, result, (), result.reads)
