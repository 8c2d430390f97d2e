"""Policy IR set -> `CompiledPolicySet` (the plugin objects of `policyd.framework`).

Each policy becomes generated Python (one module per policy, `compile()`d once): a `match` function
and per-node `filter`, `filter_all` and `score` functions written as straight-line code. A `let` is
computed just before the first rule that needs it and cached in a slot list: pod-only lets (reading
only `pod`/`cluster`/other pod-only lets) in a per-pod list, node-dependent lets in a per-node list, so
each let is evaluated lazily and at most once per evaluation. CEL expressions are embedded with
`cel_codegen.expression_source`; generated code embeds literals only through `repr()` and names are
mangled (`v_pod`, `l3`), so no policy text becomes Python code.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policyd import framework as pl
from policyd.cel import syntax as cel_ast
from policyd.cel.checker import check
from policyd.cel.codegen import expression_source, generate_function
from policyd.cel.parser import parse_cel
from policyd.cel.runtime import EVAL_ERRORS, as_eval_error
from policyd.cel.types import DYN, CelType
from policyd.cel.values import Duration, freeze
from policyd.compiler import lowering as vectorize
from policyd.errors import Diagnostic, PolicyError, SourceSpan
from policyd.policy import syntax as ir
from policyd.policy.env import LET_CONTEXTS, Context, policy_env
from policyd.policy.loader import idents, load_policies, load_texts

log = logging.getLogger(__name__)

DEFAULT_PERMIT_TIMEOUT = 60.0
POD_VARIABLES = frozenset({"pod", "cluster"})

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
        }
    ),
}
_RESOURCE_EVENTS = frozenset({pl.EVENT_POD_ASSIGNED_DELETE, pl.EVENT_NODE_ALLOCATABLE, pl.EVENT_NODE_ADD})
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


def _assign(target: str, value: str) -> list[str]:
    """Generated lines assigning `value` to `target`."""
    return [f"{target} = {value}"]


class _Writer:
    """Accumulates indented lines of generated source (the code generator's output buffer)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def block(self, lines: Sequence[str]) -> None:
        for text in lines:
            self.lines.append("    " * self.indent + text)


@dataclass
class _PolicyCode:
    """Generated functions of one policy and the static tables around them."""

    policy: ir.Policy
    filters: tuple[pl.RuleRef, ...]
    scores: tuple[pl.ScoreRule, ...]
    match: Callable[..., Any]
    filter: Callable[..., Any]
    filter_all: Callable[..., Any]
    score: Callable[..., Any]
    pod_slots: int
    node_slots: int
    # rule name -> field paths read by its expressions (lets included)
    reads: dict[str, frozenset[str]] = field(default_factory=dict)
    source: str = ""
    # compute the pod-only lets the filters / the scores need into the pod slots (`P`), so that
    # node evaluations after it call the cluster view only from node-dependent code
    prepare_filter: Callable[..., Any] | None = None
    prepare_score: Callable[..., Any] | None = None
    filter_pod_slots: tuple[int, ...] = ()
    score_pod_slots: tuple[int, ...] = ()
    # top-level pod fields node-dependent code reads (rules and node-dependent lets); None: the whole
    # pod object is used other than as an argument of a `cluster` function
    node_pod_fields: frozenset[str] | None = None
    # pod-only let name -> its slot in `P`
    pod_let_slots: dict[str, int] = field(default_factory=dict)
    _vector: Any = None

    def vector_plan(self) -> vectorize.PolicyPlan:
        """The policy's rules lowered to vectorised plans (`policyd.compiler.lowering`), made once."""
        if self._vector is None:
            self._vector = vectorize.lower_policy(self.policy)
        return self._vector  # type: ignore[no-any-return]


class _PolicyGenerator:
    """Writes the Python module of one policy (a visitor over its rules, as Jinja2's CodeGenerator)."""

    def __init__(self, policy: ir.Policy) -> None:
        self.policy = policy
        self.globals: dict[str, Any] = {
            "_UNSET": UNSET,
            "_LetError": LetError,
            "_ERRS": EVAL_ERRORS,
            "_as_eval_error": as_eval_error,
            "_str": str,
            "_tuple": tuple,
            "_isinstance": isinstance,
            "_list": list,
            "_float": float,
            "_int": int,
        }
        self.counter = 0
        self.let_index = {let.name.value: i for i, let in enumerate(policy.lets)}
        self.let_types: dict[str, CelType] = {}
        self.let_reads: dict[str, frozenset[str]] = {}
        self.let_deps: dict[str, list[str]] = {}
        self.pod_only: dict[str, bool] = {}
        self.slot: dict[str, tuple[str, int]] = {}
        self._analyse_lets()

    # -- analysis --------------------------------------------------------------------------------

    def _lets_used(self, expr: ir.Expression) -> list[str]:
        seen: list[str] = []
        for ident in idents(expr.ast):
            if ident.name in self.let_index and ident.name not in seen:
                seen.append(ident.name)
        return seen

    def _analyse_lets(self) -> None:
        pod_slots = node_slots = 0
        for let in self.policy.lets:
            name = let.name.value
            env = policy_env(Context.LET, self.let_types)
            result = check(let.expr.ast, env)
            self.let_types[name] = result.type if not result.issues else DYN
            deps = [d for d in self._lets_used(let.expr) if d in self.let_types and d != name]
            self.let_deps[name] = deps
            reads = set(result.reads)
            for d in deps:
                reads |= self.let_reads[d]
            self.let_reads[name] = frozenset(reads)
            own = {r.split(".")[0] for r in result.reads} - set(self.let_index)
            self.pod_only[name] = own <= POD_VARIABLES and all(self.pod_only[d] for d in deps)
            if self.pod_only[name]:
                self.slot[name] = ("P", pod_slots)
                pod_slots += 1
            else:
                self.slot[name] = ("N", node_slots)
                node_slots += 1
        self.pod_slots = pod_slots
        self.node_slots = node_slots

    def closure(self, expr: ir.Expression) -> list[str]:
        """The lets `expr` needs, dependencies first."""
        out: list[str] = []

        def visit(name: str) -> None:
            if name in out:
                return
            for dep in self.let_deps.get(name, ()):
                visit(dep)
            out.append(name)

        for name in self._lets_used(expr):
            if name in self.let_types:
                visit(name)
        return out

    def reads_of(self, *exprs: ir.Expression | None) -> frozenset[str]:
        """Field paths read by expressions and the lets they use."""
        out: set[str] = set()
        for expr in exprs:
            if expr is None:
                continue
            result = check(expr.ast, policy_env(Context.FILTER, self.let_types))
            out |= {r for r in result.reads if r.split(".")[0] not in self.let_types}
            for name in self.closure(expr):
                out |= self.let_reads[name]
        return frozenset(out)

    def filter_exprs(self) -> list[ir.Expression]:
        """Every expression of the filter rules (verdicts, reasons, unresolvable)."""
        out: list[ir.Expression] = []
        for rule in self.policy.filters:
            out.append(rule.expr)
            for extra in (rule.reason, rule.unresolvable):
                if isinstance(extra, ir.Expression):
                    out.append(extra)
        return out

    def pod_lets_of(self, exprs: Sequence[ir.Expression]) -> list[str]:
        """The pod-only lets `exprs` need, dependencies first."""
        out: list[str] = []
        for expr in exprs:
            out.extend(n for n in self.closure(expr) if self.pod_only[n] and n not in out)
        return out

    def node_pod_fields(self) -> frozenset[str] | None:
        """Top-level pod fields read by node-dependent code (see `_PolicyCode.node_pod_fields`)."""
        exprs = [*self.filter_exprs(), *(r.expr for r in self.policy.scores)]
        exprs += [let.expr for let in self.policy.lets if not self.pod_only[let.name.value]]
        fields: set[str] = set()
        for expr in exprs:
            if not _pod_fields(expr.ast, fields):
                return None
        return frozenset(fields)

    # -- code ------------------------------------------------------------------------------------

    def prefix(self) -> str:
        self.counter += 1
        return f"_c{self.counter}_"

    def embed(self, w: _Writer, expr: ir.Expression, context: Context) -> str:
        """Emit the prelude of `expr` and return the Python expression computing it."""
        lets = self.let_types if context in LET_CONTEXTS else {}
        env = policy_env(context, lets)
        names = {"pod": "v_pod", "node": "v_node", "cluster": "v_cluster", "victim": "v_victim"}
        names.update({name: f"l{self.let_index[name]}" for name in lets})
        generated = expression_source(expr.ast, check(expr.ast, env), env, names, self.prefix())
        self.globals.update(generated.globals)
        w.block(generated.prelude)
        return generated.expr

    def ensure_lets(self, w: _Writer, names: list[str], done: set[str]) -> None:
        """Emit the lazy computation of lets `names` (in order) not yet computed in this function."""
        for name in names:
            if name in done:
                continue
            done.add(name)
            let = self.policy.lets[self.let_index[name]]
            local = f"l{self.let_index[name]}"
            table, index = self.slot[name]
            w.line(f"{local} = {table}[{index!r}]")
            w.line(f"if {local} is _UNSET:")
            w.indent += 1
            failed = [f"l{self.let_index[d]}" for d in self.let_deps[name]]
            if failed:
                w.line(f"for _dep in ({', '.join(failed)},):")
                w.line("    if _isinstance(_dep, _LetError):")
                w.line(f"        {local} = _dep")
                w.line("        break")
                w.line("else:")
                w.indent += 1
            self.guarded(
                w, let.expr, Context.LET, functools.partial(_assign, local), [f"{local} = _LetError(_e)"]
            )
            if failed:
                w.indent -= 1
            w.line(f"{table}[{index!r}] = {local}")
            w.indent -= 1

    def let_guard(self, w: _Writer, names: list[str], fail: Callable[[str], str]) -> None:
        """Emit: when a needed let failed, `fail(message expression)`."""
        for name in names:
            local = f"l{self.let_index[name]}"
            w.line(f"if _isinstance({local}, _LetError):")
            w.line(f"    {fail(f'{local}.message')}")

    def rule_body(self, w: _Writer, rule: ir.FilterRule, index: int, done: set[str], collect: bool) -> None:
        """Emit the evaluation of filter `rule` (returning or appending its verdict)."""
        name = rule.name.value
        exprs: list[ir.Expression] = [rule.expr]
        if isinstance(rule.reason, ir.Expression):
            exprs.append(rule.reason)
        if isinstance(rule.unresolvable, ir.Expression):
            exprs.append(rule.unresolvable)
        needed: list[str] = []
        for e in exprs:
            needed.extend(n for n in self.closure(e) if n not in needed)
        self.ensure_lets(w, needed, done)

        def verdict(passed: str, reasons: str, error: str) -> str:
            if collect:
                return f"_out.append(({index!r}, {passed}, {reasons}, {error}))"
            unresolvable = "_unres" if passed == "False" and error == "None" else "False"
            return f"return ({index!r}, {reasons}, {error != 'None'}, {unresolvable})"

        w.line(f"# filter {name}")
        w.line("_ok = None")
        w.line("while True:")
        w.indent += 1
        self.let_guard(
            w,
            self.closure(rule.expr),
            lambda msg: verdict("False", f"({name!r} + ': ' + {msg},)", msg) + ("; break" if collect else ""),
        )
        failure = verdict("False", f"({name!r} + ': ' + _msg,)", "_msg")
        self.guarded(
            w,
            rule.expr,
            Context.FILTER,
            lambda v: [f"_ok = {v}"],
            ["_msg = _str(_as_eval_error(_e))", failure, "break"],
        )
        w.line("if _ok is True:")
        if collect:
            w.line("    " + verdict("True", "()", "None"))
        w.line("    break")
        self.reason(w, rule)
        if not collect:
            self.unresolvable(w, rule)
        w.line(verdict("False", "_reasons", "None"))
        w.line("break")
        w.indent -= 1

    def unresolvable(self, w: _Writer, rule: ir.FilterRule) -> None:
        """Emit `_unres = ...` for a failed rule (a failing or erroring expression counts as False)."""
        if not isinstance(rule.unresolvable, ir.Expression):
            w.line(f"_unres = {bool(rule.unresolvable)!r}")
            return
        w.line("_unres = False")
        guards = [f"_isinstance(l{self.let_index[n]}, _LetError)" for n in self.closure(rule.unresolvable)]
        w.line(f"if not ({' or '.join(guards) or 'False'}):")
        w.indent += 1
        self.guarded(
            w, rule.unresolvable, Context.UNRESOLVABLE, lambda v: [f"_unres = {v} is True"], ["pass"]
        )
        w.indent -= 1

    def guarded(
        self,
        w: _Writer,
        expr: ir.Expression,
        context: Context,
        body: Callable[[str], list[str]],
        on_error: list[str],
    ) -> None:
        """Emit `try: <body(value of expr)> except _ERRS as _e: <on_error>` (CEL errors never escape)."""
        w.line("try:")
        w.indent += 1
        value = self.embed(w, expr, context)
        w.block(body(value))
        w.indent -= 1
        w.line("except _ERRS as _e:")
        w.indent += 1
        w.block(on_error)
        w.indent -= 1

    def reason(self, w: _Writer, rule: ir.FilterRule) -> None:
        """Emit `_reasons = (...)` for a failed rule."""
        name = rule.name.value
        if rule.reason is None:
            w.line(f"_reasons = ({f'node(s) did not satisfy {name}'!r},)")
            return
        if isinstance(rule.reason, str):
            w.line(f"_reasons = ({rule.reason!r},)")
            return
        names = self.closure(rule.reason)
        w.line("_reasons = None")
        for n in names:
            w.line(f"if _isinstance(l{self.let_index[n]}, _LetError):")
            w.line(f"    _reasons = ({name!r} + ': ' + l{self.let_index[n]}.message,)")
        w.line("if _reasons is None:")
        w.indent += 1
        self.guarded(
            w,
            rule.reason,
            Context.REASON,
            lambda v: [
                f"_r = {v}",
                "_reasons = (_r,) if _isinstance(_r, _str) else _tuple(_str(_x) for _x in _r)",
            ],
            [f"_reasons = ({name!r} + ': reason: ' + _str(_as_eval_error(_e)),)"],
        )
        w.indent -= 1

    def generate(self) -> str:
        """The module source: `match`, `filter`, `filter_all`, `score`."""
        w = _Writer()
        p = self.policy
        w.line("def match(v_pod, v_cluster):")
        w.indent += 1
        if p.match is None:
            w.line("return True")
        else:
            value = self.embed(w, p.match, Context.MATCH)
            w.line(f"return {value} is True")
        w.indent -= 1
        for collect in (False, True):
            w.line(f"def {'filter_all' if collect else 'filter'}(v_pod, v_cluster, v_node, P, N):")
            w.indent += 1
            if collect:
                w.line("_out = []")
            done: set[str] = set()
            for index, filter_rule in enumerate(p.filters):
                self.rule_body(w, filter_rule, index, done, collect)
            w.line("return _out" if collect else "return None")
            w.indent -= 1
        for fn, exprs in (
            ("prepare_filter", self.filter_exprs()),
            ("prepare_score", [r.expr for r in p.scores]),
        ):
            w.line(f"def {fn}(v_pod, v_cluster, P):")
            w.indent += 1
            self.ensure_lets(w, self.pod_lets_of(exprs), set())
            w.line("return None")
            w.indent -= 1
        w.line("def score(v_pod, v_cluster, v_node, P, N):")
        w.indent += 1
        w.line("_out = []")
        done = set()
        for rule in p.scores:
            w.line(f"# score {rule.name.value}")
            needed = self.closure(rule.expr)
            self.ensure_lets(w, needed, done)
            w.line("_s = 0.0")
            w.line("while True:")
            w.indent += 1
            self.let_guard(w, needed, lambda msg: "break")
            self.guarded(w, rule.expr, Context.SCORE, lambda v: [f"_s = _float({v})"], ["pass"])
            w.line("break")
            w.indent -= 1
            w.line("_out.append(_s)")
        w.line("return _out")
        w.indent -= 1
        return "\n".join(w.lines) + "\n"

    def build(self) -> _PolicyCode:
        """Generate, compile and wrap the policy's functions."""
        source = self.generate()
        namespace: dict[str, Any] = {"__builtins__": {}}
        namespace.update(self.globals)
        code = compile(source, f"<policy {self.policy.name.value}>", "exec")
        exec(code, namespace)  # noqa: S102 - generated from the IR; literals only via repr()
        p = self.policy
        filters = tuple(_rule_ref(p, r.name) for r in p.filters)
        scores = tuple(pl.ScoreRule(_rule_ref(p, s.name), s.weight, s.normalize) for s in p.scores)
        reads = {
            r.name.value: self.reads_of(r.expr, r.reason if isinstance(r.reason, ir.Expression) else None)
            for r in p.filters
        }
        return _PolicyCode(
            policy=p,
            filters=filters,
            scores=scores,
            match=namespace["match"],
            filter=namespace["filter"],
            filter_all=namespace["filter_all"],
            score=namespace["score"],
            pod_slots=self.pod_slots,
            node_slots=self.node_slots,
            reads=reads,
            source=source,
            prepare_filter=namespace["prepare_filter"],
            prepare_score=namespace["prepare_score"],
            filter_pod_slots=tuple(self.slot[n][1] for n in self.pod_lets_of(self.filter_exprs())),
            score_pod_slots=tuple(self.slot[n][1] for n in self.pod_lets_of([r.expr for r in p.scores])),
            node_pod_fields=self.node_pod_fields(),
            pod_let_slots={name: i for name, (table, i) in self.slot.items() if table == "P"},
        )


def _pod_fields(e: Any, out: set[str]) -> bool:
    """Add the top-level `pod.<field>` names `e` reads to `out`; False when `pod` is used whole.

    `pod` as an argument of a `cluster.<function>(...)` call is not a whole use: the runtime notices
    calls into the cluster view while it evaluates a node and does not reuse such results.
    """
    if isinstance(e, cel_ast.Select) and isinstance(e.operand, cel_ast.Ident) and e.operand.name == "pod":
        out.add(e.field)
        return True
    if isinstance(e, cel_ast.Ident):
        return e.name != "pod"
    if isinstance(e, cel_ast.Call):
        cluster_call = isinstance(e.target, cel_ast.Ident) and e.target.name == "cluster"
        parts = list(e.args) + ([e.target] if e.target is not None else [])
        for a in parts:
            if cluster_call and isinstance(a, cel_ast.Ident) and a.name == "pod":
                continue
            if not _pod_fields(a, out):
                return False
        return True
    if isinstance(e, cel_ast.Select):
        return _pod_fields(e.operand, out)
    if isinstance(e, cel_ast.CreateList):
        return all(_pod_fields(x, out) for x in e.elements)
    if isinstance(e, cel_ast.CreateMap):
        return all(_pod_fields(x.key, out) and _pod_fields(x.value, out) for x in e.entries)
    if isinstance(e, cel_ast.CreateMessage):
        return all(_pod_fields(f.value, out) for f in e.fields)
    if isinstance(e, cel_ast.Comprehension):
        loop = (e.iter_range, e.accu_init, e.loop_condition, e.loop_step, e.result)
        return all(_pod_fields(x, out) for x in loop)
    return True


def _rule_ref(policy: ir.Policy, name: ir.Name) -> pl.RuleRef:
    return pl.RuleRef(policy.name.value, name.value, name.span.file, name.span.line, name.span.column)


def _function(expr: ir.Expression, context: Context, params: tuple[str, ...]) -> Callable[..., Any]:
    """A single compiled CEL function of an expression (positional `params`)."""
    env = policy_env(context)
    generated = generate_function(expr.ast, check(expr.ast, env), env, params)
    return generated.compile()


def _default_expression(text: str) -> ir.Expression:
    from policyd.policy.source import SourceFile, SourceMap

    return ir.Expression(text, parse_cel(text), SourceMap(SourceFile("<default>", text)))


class _ClusterCalls:
    """Stands in for the cluster view during node evaluations and notes whether it was called."""

    __slots__ = ("called", "view")

    def __init__(self, view: Any) -> None:
        self.view = view
        self.called = False

    def __getattr__(self, name: str) -> Any:
        self.called = True
        return getattr(self.view, name)


class _Evaluator:
    """Per-pod evaluation against nodes (the `PodEvaluator` of one profile).

    Besides the `PodEvaluator` calls it offers what the runtime needs to reuse node results across
    pods of one group (docs/DESIGN.md, "Equivalent pods"): `signature()` (the pod fields node
    evaluations read), `prepare(phase)` (the pod-only lets of the filters or scores, computed before
    any node so they can be compared between pods) and `cluster_called` (whether the last node
    evaluation called the cluster view, whose answers depend on more than the pod and the node).
    """

    def __init__(self, profile: _Profile, pod: pl.CelObject, cluster: Any) -> None:
        self.pod = pod
        self.profile = profile
        self.calls = _ClusterCalls(cluster)
        self.cluster: Any = cluster
        self.parts: list[tuple[int, _PolicyCode, list[Any]]] = []
        self.node: Any = None
        self.node_slots: list[list[Any]] = []
        for k, code in enumerate(profile.codes):
            if profile.matches(code, pod, cluster):
                self.parts.append((k, code, [UNSET] * code.pod_slots))
        self.score_offsets = profile.score_offsets
        self.n_scores = len(profile.scores)

    # -- reuse across pods

    def signature(self) -> Any:
        """A hashable key equal for pods whose node evaluations read the same pod values, or None."""
        fields = self.profile.node_pod_fields
        if fields is None:
            return None
        pod = self.pod
        try:
            frozen = tuple(freeze(pod.get(f, _MISSING)) for f in fields)
            key = (tuple(k for k, _, _ in self.parts), frozen)
            hash(key)
        except TypeError:
            return None
        return key

    def prepare(self, phase: str) -> tuple[Any, ...]:
        """Compute the pod-only lets of `phase` ("filter" or "score"); returns their values."""
        values: list[Any] = []
        view = self.calls.view
        for _, code, pod_slots in self.parts:
            if phase == "filter":
                assert code.prepare_filter is not None
                code.prepare_filter(self.pod, view, pod_slots)
                values.extend(pod_slots[i] for i in code.filter_pod_slots)
            else:
                assert code.prepare_score is not None
                code.prepare_score(self.pod, view, pod_slots)
                values.extend(pod_slots[i] for i in code.score_pod_slots)
        return tuple(values)

    def track_cluster(self) -> None:
        """From now on node evaluations see the cluster view through `_ClusterCalls`."""
        self.cluster = self.calls

    @property
    def cluster_called(self) -> bool:
        """True when a node evaluation called the cluster view since the last `reset_cluster_called`."""
        return self.calls.called

    def reset_cluster_called(self) -> None:
        """Start noting cluster view calls afresh."""
        self.calls.called = False

    # -- many nodes at once (vectorised plans over node columns)

    def _plans(self, kind: str) -> list[tuple[int, _PolicyCode, list[Any], Any]] | None:
        out = []
        for k, code, pod_slots in self.parts:
            plan = code.vector_plan()
            rules = plan.filters if kind == "filter" else plan.scores
            if any(r is None for r in rules):
                return None
            out.append((k, code, pod_slots, plan))
        return out

    def _evaluation(self, code: _PolicyCode, pod_slots: list[Any], plan: Any, columns: Any, rows: Any) -> Any:
        """A plan evaluation over `rows` that reuses the pod-only lets computed by `prepare`."""
        memo = plan.evaluation(columns, self.pod, self.calls, rows=rows)
        known = memo._ev.let_values
        for name, slot in code.pod_let_slots.items():
            value = pod_slots[slot]
            if value is UNSET:
                continue
            known[name] = vectorize.EvalErr(value.message) if isinstance(value, LetError) else value
        return memo

    def bulk_filter(self, columns: Any, rows: Any) -> tuple[Any, bool] | None:
        """Which of `rows` pass every filter, by the vectorised plans, and whether that verdict may be
        reused for equivalent pods (no cluster view call depended on the node); None: some rule has no
        plan or a plan cannot evaluate this pod exactly. Rows not passed may fail or be unsure."""
        plans = self._plans("filter")
        if plans is None:
            return None
        passed = np.ones(len(rows), dtype=bool)
        self.calls.called = False
        try:
            for _, code, pod_slots, plan in plans:
                memo = self._evaluation(code, pod_slots, plan, columns, rows)
                for rule in plan.filters:
                    passed &= rule.evaluate(self.pod, columns, self.calls, memo, rows=rows).values
        except vectorize.Unsupported:
            return None
        return passed, not self.calls.called

    def bulk_scores(self, columns: Any, rows: Any) -> tuple[Any, bool] | None:
        """Raw scores of `rows` (one column per profile score rule, as `score`), by the vectorised plans,
        and whether they may be reused; None when the plans cannot give them."""
        plans = self._plans("score")
        if plans is None:
            return None
        out = np.zeros((len(rows), self.n_scores), dtype=np.float64)
        self.calls.called = False
        try:
            for k, code, pod_slots, plan in plans:
                memo = self._evaluation(code, pod_slots, plan, columns, rows)
                start = self.score_offsets[k]
                for j, rule in enumerate(plan.scores):
                    out[:, start + j] = rule.evaluate(self.pod, columns, self.calls, memo, rows=rows).values
        except vectorize.Unsupported:
            return None
        return out, not self.calls.called

    # -- PodEvaluator

    def _slots(self, node: pl.CelObject) -> list[list[Any]]:
        if node is not self.node:
            self.node = node
            self.node_slots = [[UNSET] * code.node_slots for _, code, _ in self.parts]
        return self.node_slots

    def filter(self, node: pl.CelObject) -> pl.FilterFailure | None:
        """The first failing filter rule for `node`, or None."""
        slots = self._slots(node)
        for i, (_, code, pod_slots) in enumerate(self.parts):
            failed = code.filter(self.pod, self.cluster, node, pod_slots, slots[i])
            if failed is not None:
                index, reasons, error, unresolvable = failed
                return pl.FilterFailure(
                    code.filters[index], tuple(reasons), error=error, unresolvable=unresolvable
                )
        return None

    def filter_all(self, node: pl.CelObject) -> list[pl.FilterResult]:
        """Every filter rule's verdict for `node` (applying policies only)."""
        slots = self._slots(node)
        out: list[pl.FilterResult] = []
        for i, (_, code, pod_slots) in enumerate(self.parts):
            for index, passed, reasons, error in code.filter_all(
                self.pod, self.cluster, node, pod_slots, slots[i]
            ):
                out.append(pl.FilterResult(code.filters[index], passed, tuple(reasons), error))
        return out

    def score(self, node: pl.CelObject) -> list[float]:
        """Raw scores per profile score rule (0 for rules of policies that do not apply)."""
        slots = self._slots(node)
        out = [0.0] * self.n_scores
        for i, (k, code, pod_slots) in enumerate(self.parts):
            start = self.score_offsets[k]
            values = code.score(self.pod, self.cluster, node, pod_slots, slots[i])
            out[start : start + len(values)] = values
        return out


_MISSING = object()


@dataclass
class _Profile:
    """A `CompiledProfile`: the policies of one scheduler name, in policy-name order."""

    scheduler_name: str
    codes: tuple[_PolicyCode, ...]
    preemption: pl.PreemptionSpec
    permits: tuple[pl.PermitSpec, ...]
    queue_fn: Callable[[pl.CelObject], tuple[Any, ...]]
    policies: tuple[str, ...] = ()
    filters: tuple[pl.RuleRef, ...] = ()
    scores: tuple[pl.ScoreRule, ...] = ()
    score_offsets: tuple[int, ...] = ()
    wake: Mapping[pl.RuleRef, frozenset[str]] = field(default_factory=dict)
    node_pod_fields: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self.policies = tuple(c.policy.name.value for c in self.codes)
        self.filters = tuple(f for c in self.codes for f in c.filters)
        self.scores = tuple(s for c in self.codes for s in c.scores)
        offsets, total = [], 0
        for c in self.codes:
            offsets.append(total)
            total += len(c.scores)
        self.score_offsets = tuple(offsets)
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

    def matches(self, code: _PolicyCode, pod: pl.CelObject, cluster: Any) -> bool:
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

    def evaluator(self, pod: pl.CelObject, cluster: Any) -> pl.PodEvaluator:
        """Prepare the per-pod evaluation."""
        return _Evaluator(self, pod, cluster)

    def wake_events(self, rule: pl.RuleRef) -> frozenset[str]:
        """Event kinds that may make a pod rejected by `rule` schedulable."""
        return self.wake.get(rule, pl.ALL_EVENTS)


def _queue_function(queue: ir.Queue | None) -> Callable[[pl.CelObject], tuple[Any, ...]]:
    if queue is None:

        def priority_sort(pod: pl.CelObject) -> tuple[Any, ...]:
            return (-int(pod.get("priority") or 0),)

        return priority_sort
    keys = [(_function(k.expr, Context.QUEUE, ("pod",)), k.direction == "desc") for k in queue.keys]

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


def _preemption(section: ir.Preemption | None) -> pl.PreemptionSpec:
    enabled = section.enabled if section is not None and section.enabled is not None else None
    victims = section.victims if section is not None and section.victims is not None else None
    may = _function(enabled or _default_expression(_DEFAULT_ENABLED), Context.PREEMPT_ENABLED, ("pod",))
    victim = _function(victims or _default_expression(_DEFAULT_VICTIMS), Context.VICTIMS, ("pod", "victim"))

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

    return pl.PreemptionSpec(may_preempt, eligible_victim, section.honor_pdb if section is not None else True)


def _permit(policy: ir.Policy, permit: ir.Permit) -> pl.PermitSpec:
    group_fn = _function(permit.group, Context.PERMIT_GROUP, ("pod",))
    min_fn = _function(permit.min_member, Context.PERMIT_MIN_MEMBER, ("pod",))
    timeout = DEFAULT_PERMIT_TIMEOUT
    if permit.timeout is not None:
        value = _function(permit.timeout, Context.PERMIT_TIMEOUT, ("pod",))({})
        if isinstance(value, Duration):
            timeout = value.ns / 1e9

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

    return pl.PermitSpec(_rule_ref(policy, permit.name), group, min_members, timeout)


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


# id(policy) -> (policy, code): the loader reuses the IR of unchanged files, so their code is reused too
_CODE_CACHE: OrderedDict[int, tuple[ir.Policy, _PolicyCode]] = OrderedDict()
_CODE_CACHE_SIZE = 1024
_CODE_CACHE_LOCK = threading.Lock()


def compile_policy(policy: ir.Policy) -> _PolicyCode:
    """Generate and compile one policy's functions (cached for the same IR object)."""
    with _CODE_CACHE_LOCK:
        hit = _CODE_CACHE.get(id(policy))
        if hit is not None and hit[0] is policy:
            _CODE_CACHE.move_to_end(id(policy))
            return hit[1]
    code = _PolicyGenerator(policy).build()
    with _CODE_CACHE_LOCK:
        _CODE_CACHE[id(policy)] = (policy, code)
        while len(_CODE_CACHE) > _CODE_CACHE_SIZE:
            _CODE_CACHE.popitem(last=False)
    return code


def compile_policy_set(policies: Sequence[ir.Policy], *, generation: int) -> pl.CompiledPolicySet:
    """Compile checked policies into profiles by scheduler name."""
    ordered = sorted(policies, key=lambda p: p.name.value)
    codes = {p.name.value: compile_policy(p) for p in ordered}
    by_profile: dict[str, list[ir.Policy]] = {}
    for p in ordered:
        for name in p.profiles:
            by_profile.setdefault(name, []).append(p)
    profiles: dict[str, pl.CompiledProfile] = {}
    for name, members in by_profile.items():
        queue = next((p.queue for p in members if p.queue is not None), None)
        preemption = next((p.preemption for p in members if p.preemption is not None), None)
        permits = tuple(_permit(p, permit) for p in members for permit in p.permits)
        profiles[name] = _Profile(
            scheduler_name=name,
            codes=tuple(codes[p.name.value] for p in members),
            preemption=_preemption(preemption),
            permits=permits,
            queue_fn=_queue_function(queue),
        )
    files = tuple(sorted({p.file for p in policies}))
    return pl.CompiledPolicySet(generation, content_hash(policies), profiles, files)


def compile_paths(paths: Sequence[str], generation: int) -> pl.CompiledPolicySet:
    """Load, check and compile policies; raises PolicyError with every diagnostic on any error."""
    result = load_policies(paths)
    problems: list[Diagnostic] = [
        Diagnostic("error", message, SourceSpan(message.split(":")[0]), "io") for message in result.io_errors
    ]
    if problems or result.has_errors:
        raise PolicyError(problems + result.diagnostics)
    return compile_policy_set(result.policies, generation=generation)


def compile_sources(texts: Mapping[str, str], *, generation: int) -> pl.CompiledPolicySet:
    """Check and compile policy texts by name; raises PolicyError with every diagnostic on any error."""
    result = load_texts(texts)
    if result.has_errors:
        raise PolicyError(result.diagnostics)
    return compile_policy_set(result.policies, generation=generation)
