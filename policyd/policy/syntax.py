"""The policy IR: what both policy syntaxes (`.policy` text, YAML) become.

Every expression keeps its CEL syntax tree and a `SourceMap`, so a checker issue at an expression
offset can be reported at a file line and column. Names keep the span of the name token, so
duplicate-name errors point at the second name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from policyd.cel import syntax as cel_ast
from policyd.errors import Diagnostic, Severity, SourceSpan
from policyd.framework import DEFAULT_PROFILE, Normalize
from policyd.policy.source import SourceMap

NORMALIZE_VALUES: tuple[Normalize, ...] = ("none", "max", "reverse", "minmax", "reverse-minmax")
PDB_VALUES = ("honor", "ignore")
DIRECTIONS = ("asc", "desc")
DEFAULT_PROFILES = (DEFAULT_PROFILE,)
# a scheduler name (a pod's spec.schedulerName; the configuration's schema has the same pattern)
PROFILE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
PROFILE_NAME_MAX = 253


def profile_name_problem(name: str) -> str | None:
    """Why `name` is not a valid scheduler name, or None."""
    if len(name) > PROFILE_NAME_MAX:
        return f"profile name {name!r} is longer than {PROFILE_NAME_MAX} characters"
    if not PROFILE_NAME.match(name):
        return (
            f"profile name {name!r} is not a valid scheduler name (lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return None


Direction = Literal["asc", "desc"]


@dataclass(frozen=True, eq=False)
class Expression:
    """A CEL expression in a policy: its text, syntax tree and where it was written."""

    text: str
    ast: cel_ast.Expr
    source: SourceMap
    # offset of the expression's first character in the offsets the AST uses
    start: int = 0

    @property
    def span(self) -> SourceSpan:
        """Where the expression starts in its file."""
        return self.source.span(self.start, self.start + len(self.text))

    def diagnostic(
        self, severity: Severity, message: str, offset: int | None = None, code: str = ""
    ) -> Diagnostic:
        """A diagnostic at an AST offset of this expression (default: its start)."""
        return self.source.diagnostic(severity, message, self.start if offset is None else offset, code=code)


@dataclass(frozen=True)
class Name:
    """A declared name and the span of its token."""

    value: str
    span: SourceSpan
    source_line: str = ""

    def diagnostic(self, severity: Severity, message: str, code: str = "") -> Diagnostic:
        """A diagnostic pointing at this name."""
        return Diagnostic(severity, message, self.span, code, self.source_line or None)


@dataclass(frozen=True)
class Let:
    """`let NAME = EXPR`: lazily evaluated, at most once per evaluation."""

    name: Name
    expr: Expression


@dataclass(frozen=True)
class FilterRule:
    """`filter NAME {expr, reason, unresolvable}`; reason: fixed text, a CEL string/list(string), or None.

    `unresolvable` (a constant or a CEL bool evaluated only when the rule fails) marks a failure that
    removing pods from the node cannot fix (kube-scheduler's UnschedulableAndUnresolvable): preemption
    skips such nodes.
    """

    name: Name
    expr: Expression
    reason: Expression | str | None = None
    unresolvable: Expression | bool = False


@dataclass(frozen=True)
class ScoreRule:
    """`score NAME {expr, weight, normalize}`."""

    name: Name
    expr: Expression
    weight: int = 1
    normalize: Normalize = "none"


@dataclass(frozen=True)
class QueueKey:
    """One `order EXPR asc|desc` entry."""

    expr: Expression
    direction: Direction = "asc"


@dataclass(frozen=True)
class Queue:
    """`queue { order ... }`; `span` is the `queue` keyword; `override`: replaces an extended policy's queue."""

    keys: tuple[QueueKey, ...]
    span: SourceSpan
    source_line: str = ""
    override: bool = False


@dataclass(frozen=True)
class Preemption:
    """`preemption {enabled, victims, pdb}`; absent fields take kube-scheduler's defaults."""

    span: SourceSpan
    enabled: Expression | None = None
    victims: Expression | None = None
    honor_pdb: bool = True
    source_line: str = ""
    # `override preemption`: replaces the section of a policy this one extends
    override: bool = False


@dataclass(frozen=True)
class Permit:
    """`permit NAME {group, minMember, timeout}`: gang scheduling."""

    name: Name
    group: Expression
    min_member: Expression
    timeout: Expression | None = None


@dataclass(frozen=True)
class RuleOverride:
    """`override score POLICY/RULE {weight, normalize}` or `disable POLICY/RULE`: a change to an extended rule.

    `target` is the qualified name as written (`policy/rule`); `span` is where it is written.
    """

    target: Name
    disable: bool = False
    weight: int | None = None
    normalize: Normalize | None = None

    @property
    def policy(self) -> str:
        """The policy part of the qualified name."""
        return self.target.value.partition("/")[0]

    @property
    def rule(self) -> str:
        """The rule part of the qualified name."""
        return self.target.value.partition("/")[2]


@dataclass(frozen=True)
class Policy:
    """One policy, from either syntax."""

    name: Name
    file: str
    profiles: tuple[str, ...] = DEFAULT_PROFILES
    match: Expression | None = None
    lets: tuple[Let, ...] = ()
    filters: tuple[FilterRule, ...] = ()
    scores: tuple[ScoreRule, ...] = ()
    queue: Queue | None = None
    preemption: Preemption | None = None
    permits: tuple[Permit, ...] = ()
    # source text of the whole file (for the content hash)
    source_text: str = ""
    # the policies this one builds on (`extends a, b`): they come before it in every profile it is in
    extends: tuple[Name, ...] = ()
    # changes to rules of extended policies, in source order
    overrides: tuple[RuleOverride, ...] = ()

    @property
    def span(self) -> SourceSpan:
        """Where the policy's name is written."""
        return self.name.span

    def expressions(self) -> list[tuple[str, Expression]]:
        """Every expression of the policy with a short label of where it is used."""
        out: list[tuple[str, Expression]] = []
        if self.match is not None:
            out.append(("match", self.match))
        out.extend((f"let {let.name.value}", let.expr) for let in self.lets)
        for f in self.filters:
            out.append((f"filter {f.name.value}", f.expr))
            if isinstance(f.reason, Expression):
                out.append((f"filter {f.name.value} reason", f.reason))
        out.extend((f"score {s.name.value}", s.expr) for s in self.scores)
        if self.queue is not None:
            out.extend(("queue order", k.expr) for k in self.queue.keys)
        if self.preemption is not None:
            if self.preemption.enabled is not None:
                out.append(("preemption enabled", self.preemption.enabled))
            if self.preemption.victims is not None:
                out.append(("preemption victims", self.preemption.victims))
        for p in self.permits:
            out.append((f"permit {p.name.value} group", p.group))
            out.append((f"permit {p.name.value} minMember", p.min_member))
            if p.timeout is not None:
                out.append((f"permit {p.name.value} timeout", p.timeout))
        return out
