"""Policy syntax tree -> generated Python: one module of functions per policy (`PolicyCode`).

Each policy becomes generated Python (one module per policy, `compile()`d once): a `match` function
and per-node `filter`, `filter_all`, `score` and `score_all` functions written as straight-line code.
A `let` is computed just before the first rule that needs it and cached in a slot list: pod-only lets
(reading only `pod`/`cluster`/other pod-only lets) in a per-pod list, node-dependent lets in a
per-node list, so each let is evaluated lazily and at most once per evaluation. CEL expressions are
embedded with `cel_codegen.expression_source`; generated code embeds literals only through `repr()`
and names are mangled (`v_pod`, `l3`), so no policy text becomes Python code.

With a `CoverageCollector` (`policyd test --coverage`) the generated code is instrumented: a probe
call as each filter or score rule is evaluated, and each branch condition's value passes through a
probe (`policyd.compiler.probes` says which); such code has no vectorised plans, so the generated
functions evaluate every rule. Without one (the default) the code has no probes at all.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from policyd import framework as pl
from policyd.cel import syntax as cel_ast
from policyd.cel.codegen import expression_source
from policyd.cel.runtime import EVAL_ERRORS, as_eval_error
from policyd.cel.types import CelType
from policyd.cel.walk import Bound, Scoped, is_field_of, is_free, scoped_children, walk
from policyd.compiler import lowering, membership
from policyd.compiler.probes import conditions
from policyd.errors import SourceSpan
from policyd.evaluation.code import UNSET, LetError, RuleErrors
from policyd.evaluation.coverage import BranchProbe, CoverageCollector, RuleKind, RuleProbe
from policyd.evaluation.plans import PolicyPlan
from policyd.policy import syntax as ir
from policyd.policy.checked import CheckedPolicy
from policyd.policy.env import LET_CONTEXTS, Context

log = logging.getLogger(__name__)


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
class PolicyCode:
    """Generated functions of one policy and the static tables around them (an `evaluation.code.CompiledPolicy`)."""

    checked: CheckedPolicy
    filters: tuple[pl.RuleRef, ...]
    scores: tuple[pl.ScoreRule, ...]
    match: Callable[..., Any]
    filter: Callable[..., Any]
    score: Callable[..., Any]
    # the explanations' `filter_all` and `score_all`, generated when first asked for (`explaining`)
    explaining: Callable[[], tuple[Callable[..., Any], Callable[..., Any]]]
    errors: RuleErrors  # the failed evaluations of its rules (`score`, `filter` and the plans count them)
    pod_slots: int
    node_slots: int
    # rule name -> field paths read by its expressions (lets included)
    reads: dict[str, frozenset[str]] = field(default_factory=dict)
    source: str = ""
    # compute the pod-only lets the filters / the scores need into the pod slots (`P`), so that
    # node evaluations after it call the cluster functions only from node-dependent code
    prepare_filter: Callable[..., Any] | None = None
    prepare_score: Callable[..., Any] | None = None
    # (pod slots) -> per filter (score) rule, the tuple of the pod-only values it reads
    filter_rule_values: Callable[..., tuple[tuple[Any, ...], ...]] | None = None
    score_rule_values: Callable[..., tuple[tuple[Any, ...], ...]] | None = None
    filter_pod_slots: tuple[int, ...] = ()
    score_pod_slots: tuple[int, ...] = ()
    # per filter rule (in order), the pod slots of the pod-only lets its verdict, reason and
    # unresolvable read; per score rule, those its expression reads
    filter_rule_pod_slots: tuple[tuple[int, ...], ...] = ()
    score_rule_pod_slots: tuple[tuple[int, ...], ...] = ()
    # top-level pod fields node-dependent code reads (rules and node-dependent lets); None: the whole
    # pod object is used other than as an argument of a `cluster` function
    node_pod_fields: frozenset[str] | None = None
    # pod-only let name -> its slot in `P`
    pod_let_slots: dict[str, int] = field(default_factory=dict)
    # probes report to a coverage collector: no vectorised plans, every rule runs the functions
    instrumented: bool = False
    # per filter rule, for a rule that reads the node only through labels looked up by key
    # (`lowering.reads_labels_by_key`): (pod, cluster, node, pod slots, node slots) -> True (passed),
    # False (failed) or None (an error, or a value not a bool); None for every other rule
    filter_verdicts: tuple[Callable[..., Any] | None, ...] = ()
    # per filter rule, the declared types of its pod-only values (`filter_rule_pod_slots`) when a
    # change in their leaf maps' keys can only move its verdict on nodes labelled with those keys
    # (`membership.key_delta_safe`); None for the other rules
    filter_key_deltas: tuple[tuple[CelType | None, ...] | None, ...] = ()
    _vector: Any = None

    @property
    def policy(self) -> ir.Policy:
        """The policy the functions were generated from."""
        return self.checked.policy

    @functools.cached_property
    def _explained(self) -> tuple[Callable[..., Any], Callable[..., Any]]:
        return self.explaining()

    @property
    def filter_all(self) -> Callable[..., Any]:
        """Every filter rule's verdict on a node (explanations; generated on first use)."""
        return self._explained[0]

    @property
    def score_all(self) -> Callable[..., Any]:
        """Every score rule's raw score and failure on a node (explanations; generated on first use)."""
        return self._explained[1]

    def vector_plan(self) -> PolicyPlan:
        """The policy's rules lowered to vectorised plans (`policyd.compiler.lowering`), made once."""
        if self._vector is None:
            if self.instrumented:  # no plans: the probed functions evaluate every rule
                p = self.policy
                self._vector = PolicyPlan(
                    {}, (None,) * len(p.filters), (None,) * len(p.scores), lowering.plan_functions()
                )
            else:
                self._vector = lowering.lower_policy(self.checked)
        return self._vector  # type: ignore[no-any-return]


class _PolicyGenerator:
    """Writes the Python module of one policy (a visitor over its rules, as Jinja2's CodeGenerator)."""

    def __init__(self, checked: CheckedPolicy, coverage: CoverageCollector | None = None) -> None:
        self.checked = checked
        self.coverage = coverage
        self.policy = policy = checked.policy
        self.errors = RuleErrors(len(policy.filters), len(policy.scores))
        self.globals: dict[str, Any] = {
            "_filter_failed": self.errors.filter_failed,
            "_score_failed": self.errors.score_failed,
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
        self.slot: dict[str, tuple[str, int]] = {}
        pod_slots = node_slots = 0
        for name, let in checked.lets.items():
            if let.pod_only:
                self.slot[name] = ("P", pod_slots)
                pod_slots += 1
            else:
                self.slot[name] = ("N", node_slots)
                node_slots += 1
        self.pod_slots = pod_slots
        self.node_slots = node_slots

    # -- analysis (from the checked policy) ------------------------------------------------------

    def closure(self, expr: ir.Expression) -> list[str]:
        """The lets `expr` needs, dependencies first."""
        return list(self.checked.of(expr).lets)

    def reads_of(self, *exprs: ir.Expression | None) -> frozenset[str]:
        """Field paths read by expressions and the lets they use."""
        out: set[str] = set()
        for expr in exprs:
            if expr is not None:
                out |= self.checked.of(expr).reads
        return frozenset(out)

    def filter_exprs(self) -> list[ir.Expression]:
        """Every expression of the filter rules (verdicts, reasons, unresolvable)."""
        return [e for rule in self.policy.filters for e in self.rule_exprs(rule)]

    @staticmethod
    def rule_exprs(rule: ir.FilterRule) -> list[ir.Expression]:
        """The expressions of one filter rule: its verdict, then its reason and unresolvable if CEL."""
        return [rule.expr, *(e for e in (rule.reason, rule.unresolvable) if isinstance(e, ir.Expression))]

    def pod_lets_of(self, exprs: Sequence[ir.Expression]) -> list[str]:
        """The pod-only lets `exprs` need, dependencies first."""
        out: list[str] = []
        for expr in exprs:
            out.extend(n for n in self.closure(expr) if self.checked.lets[n].pod_only and n not in out)
        return out

    def node_pod_fields(self) -> frozenset[str] | None:
        """Top-level pod fields read by node-dependent code (see `PolicyCode.node_pod_fields`)."""
        exprs = [*self.filter_exprs(), *(r.expr for r in self.policy.scores)]
        exprs += [let.checked.expr for let in self.checked.lets.values() if not let.pod_only]
        fields: set[str] = set()
        for expr in exprs:
            read = pod_fields(expr.ast)
            if read is None:
                return None
            fields |= read
        return frozenset(fields)

    # -- code ------------------------------------------------------------------------------------

    def prefix(self) -> str:
        self.counter += 1
        return f"_c{self.counter}_"

    def embed(self, w: _Writer, expr: ir.Expression, context: Context) -> str:
        """Emit the prelude of `expr` and return the Python expression computing it."""
        checked = self.checked.of(expr)
        names = {"pod": "v_pod", "node": "v_node", "cluster": "v_cluster", "victim": "v_victim"}
        if context in LET_CONTEXTS:
            names.update({name: f"l{self.let_index[name]}" for name in self.checked.lets})
        probes = self.branch_probes(expr) if self.coverage is not None else None
        generated = expression_source(expr.ast, checked.result, checked.env, names, self.prefix(), probes)
        self.globals.update(generated.globals)
        w.block(generated.prelude)
        return generated.expr

    def owner(self, expr: ir.Expression) -> str:
        """What `expr` is part of, for coverage reports ("filter fits", "let free", "match", ...)."""
        p = self.policy
        if expr is p.match:
            return "match"
        for let in p.lets:
            if expr is let.expr:
                return f"let {let.name.value}"
        for rule in p.filters:
            parts = {"": rule.expr, " reason": rule.reason, " unresolvable": rule.unresolvable}
            for part, e in parts.items():
                if expr is e:
                    return f"filter {rule.name.value}{part}"
        for score in p.scores:
            if expr is score.expr:
                return f"score {score.name.value}"
        return "expression"

    def branch_probes(self, expr: ir.Expression) -> dict[int, Callable[[Any], Any]]:
        """Syntax node id -> the coverage recorder of each branch condition of `expr`."""
        assert self.coverage is not None
        return branch_recorders(self.coverage, self.policy, expr, self.owner(expr))

    def rule_probe(self, w: _Writer, kind: RuleKind, name: ir.Name) -> None:
        """Emit the coverage probe of evaluating rule `name` (nothing without a collector)."""
        if self.coverage is None:
            return
        self.counter += 1
        global_name = f"_cov{self.counter}"
        self.globals[global_name] = rule_recorder(self.coverage, self.policy, kind, name.value, name.span)
        w.line(f"{global_name}()")

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
            failed = [f"l{self.let_index[d]}" for d in self.checked.lets[name].deps]
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
        self.rule_probe(w, "filter", rule.name)
        w.line("_ok = None")
        w.line("while True:")
        w.indent += 1
        # the per-node `filter` counts the failed evaluations (`RuleErrors`); `filter_all` explains
        counted = "" if collect else f"_filter_failed({index!r}); "
        self.let_guard(
            w,
            self.closure(rule.expr),
            lambda msg: (
                counted
                + verdict("False", f"({name!r} + ': ' + {msg},)", msg)
                + ("; break" if collect else "")
            ),
        )
        failure = verdict("False", f"({name!r} + ': ' + _msg,)", "_msg")
        self.guarded(
            w,
            rule.expr,
            Context.FILTER,
            lambda v: [f"_ok = {v}"],
            ["_msg = _str(_as_eval_error(_e))", counted + failure, "break"],
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

    def label_keyed(self) -> list[int]:
        """The filter rules that read the node only through labels looked up by key (none when
        instrumented: coverage runs every rule through the functions)."""
        if self.coverage is not None:
            return []
        out = []
        for index, rule in enumerate(self.policy.filters):
            result = self.checked.of(rule.expr)
            if not result.ok:
                continue
            lets = [self.checked.lets[name].checked.ast for name in result.lets]
            if lowering.reads_labels_by_key([rule.expr.ast, *lets]):
                out.append(index)
        return out

    def key_delta_types(self, rule: ir.FilterRule) -> tuple[CelType | None, ...] | None:
        """The declared types of the pod-only values `rule` reads when some may hold leaf maps and a
        change in their keys can only move its verdict on nodes labelled with a moved key (None
        otherwise, and when instrumented)."""
        exprs = self.rule_exprs(rule)
        results = [self.checked.of(e) for e in exprs]
        if self.coverage is not None or not all(r.ok for r in results):
            return None
        pod_lets = self.pod_lets_of(exprs)
        if not pod_lets:  # no pod-only value: nothing can move
            return None
        closure: list[str] = []
        for r in results:
            closure.extend(n for n in r.lets if n not in closure)
        node_lets = [n for n in closure if not self.checked.lets[n].pod_only]
        types: dict[int, Any] = {}
        for name in node_lets:
            let = self.checked.lets[name].checked
            types.update(lowering.checked_types(let.ast, let.result.types))
        for e, r in zip(exprs, results, strict=True):
            types.update(lowering.checked_types(e.ast, r.result.types))
        let_types = self.checked.let_types
        if not any(membership.may_carry(let_types.get(n)) for n in pod_lets):
            return None  # no leaf map among its values: no key move to narrow a renewal to
        safe = membership.key_delta_safe(
            [e.ast for e in exprs],
            [self.checked.lets[n].checked.ast for n in node_lets],
            {n: let_types.get(n) for n in pod_lets},
            node_lets,
            types,
        )
        return tuple(let_types.get(n) for n in pod_lets) if safe else None

    def verdict_function(self, w: _Writer, index: int) -> None:
        """Emit `verdict_<index>`: filter rule `index`'s verdict alone (True, False, or None for an
        error or a value not a bool, which the per-node `filter` reports)."""
        rule = self.policy.filters[index]
        w.line(f"def verdict_{index}(v_pod, v_cluster, v_node, P, N):")
        w.indent += 1
        needed = self.closure(rule.expr)
        self.ensure_lets(w, needed, set())
        self.let_guard(w, needed, lambda msg: "return None")
        self.guarded(w, rule.expr, Context.FILTER, lambda v: [f"_ok = {v}"], ["return None"])
        w.line("return _ok if _ok is True or _ok is False else None")
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

    def generate_explaining(self) -> str:
        """The module source of the explanations' functions: `filter_all` and `score_all`."""
        w = _Writer()
        self.filter_function(w, collect=True)
        self.score_function(w, collect=True)
        return "\n".join(w.lines) + "\n"

    def filter_function(self, w: _Writer, collect: bool) -> None:
        """Emit `filter` (the first failing rule) or, `collect`ing, `filter_all` (every rule's verdict)."""
        w.line(f"def {'filter_all' if collect else 'filter'}(v_pod, v_cluster, v_node, P, N):")
        w.indent += 1
        if collect:
            w.line("_out = []")
        done: set[str] = set()
        for index, filter_rule in enumerate(self.policy.filters):
            self.rule_body(w, filter_rule, index, done, collect)
        w.line("return _out" if collect else "return None")
        w.indent -= 1

    def generate(self) -> str:
        """The module source of the scheduling functions: `match`, `filter`, the label-keyed verdicts,
        `prepare_*`, `*_rule_values` and `score` (the explanations' are `generate_explaining`'s)."""
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
        self.filter_function(w, collect=False)
        for index in self.label_keyed():
            self.verdict_function(w, index)
        for fn, exprs in (
            ("prepare_filter", self.filter_exprs()),
            ("prepare_score", [r.expr for r in p.scores]),
        ):
            w.line(f"def {fn}(v_pod, v_cluster, P):")
            w.indent += 1
            self.ensure_lets(w, self.pod_lets_of(exprs), set())
            w.line("return None")
            w.indent -= 1
        # per rule, the pod-only values it reads (a tuple each, in slot order): `GeneratedEvaluator.prepare`
        for fn, per_rule in (
            ("filter_rule_values", [self.rule_exprs(r) for r in p.filters]),
            ("score_rule_values", [[r.expr] for r in p.scores]),
        ):
            tuples = [
                "(" + "".join(f"P[{self.slot[n][1]}], " for n in self.pod_lets_of(e)) + ")" for e in per_rule
            ]
            w.line(f"def {fn}(P):")
            w.line(f"    return ({''.join(t + ', ' for t in tuples)})")
        self.score_function(w, collect=False)
        return "\n".join(w.lines) + "\n"

    def score_function(self, w: _Writer, collect: bool) -> None:
        """Emit `score` (the raw scores, 0 where a rule's evaluation failed) or, `collect`ing,
        `score_all` (per rule the raw score and the failure's message, or None; for explanations)."""
        w.line(f"def {'score_all' if collect else 'score'}(v_pod, v_cluster, v_node, P, N):")
        w.indent += 1
        w.line("_out = []")
        done: set[str] = set()
        for index, rule in enumerate(self.policy.scores):
            self.score_body(w, rule, index, done, collect)
        w.line("return _out")
        w.indent -= 1

    def score_body(self, w: _Writer, rule: ir.ScoreRule, index: int, done: set[str], collect: bool) -> None:
        """Emit the evaluation of score `rule`, appending its value (`collect`: and its failure's
        message); `score` counts a failed evaluation (`RuleErrors`), `score_all` explains it."""
        w.line(f"# score {rule.name.value}")
        self.rule_probe(w, "score", rule.name)
        needed = self.closure(rule.expr)
        self.ensure_lets(w, needed, done)
        w.line("_s = 0.0")
        if collect:
            w.line("_err = None")
        w.line("while True:")
        w.indent += 1
        failed = f"_score_failed({index!r})"
        self.let_guard(w, needed, lambda msg: f"_err = {msg}; break" if collect else f"{failed}; break")
        on_error = ["_err = _str(_as_eval_error(_e))"] if collect else [failed]
        self.guarded(w, rule.expr, Context.SCORE, lambda v: [f"_s = _float({v})"], on_error)
        w.line("break")
        w.indent -= 1
        w.line("_out.append((_s, _err))" if collect else "_out.append(_s)")

    def namespace(self, source: str) -> dict[str, Any]:
        """Compile and run generated `source`: the functions it defines, by name."""
        namespace: dict[str, Any] = {"__builtins__": {}}
        namespace.update(self.globals)
        code = compile(source, f"<policy {self.policy.name.value}>", "exec")
        exec(code, namespace)  # noqa: S102 - generated from the IR; literals only via repr()
        return namespace

    def build(self) -> PolicyCode:
        """Generate, compile and wrap the policy's functions (the explanations' when first used,
        or now when instrumented: coverage probes are made as code is generated)."""
        source = self.generate()
        namespace = self.namespace(source)
        p = self.policy
        filters = tuple(rule_ref(p, r.name) for r in p.filters)
        scores = tuple(pl.ScoreRule(rule_ref(p, s.name), s.weight, s.normalize) for s in p.scores)
        reads = {
            r.name.value: self.reads_of(r.expr, r.reason if isinstance(r.reason, ir.Expression) else None)
            for r in p.filters
        }
        code = PolicyCode(
            checked=self.checked,
            filters=filters,
            scores=scores,
            match=namespace["match"],
            filter=namespace["filter"],
            score=namespace["score"],
            explaining=functools.partial(explaining_functions, self.checked, self.coverage),
            errors=self.errors,
            pod_slots=self.pod_slots,
            node_slots=self.node_slots,
            reads=reads,
            source=source,
            prepare_filter=namespace["prepare_filter"],
            prepare_score=namespace["prepare_score"],
            filter_rule_values=namespace["filter_rule_values"],
            score_rule_values=namespace["score_rule_values"],
            filter_pod_slots=tuple(self.slot[n][1] for n in self.pod_lets_of(self.filter_exprs())),
            score_pod_slots=tuple(self.slot[n][1] for n in self.pod_lets_of([r.expr for r in p.scores])),
            filter_rule_pod_slots=tuple(
                tuple(self.slot[n][1] for n in self.pod_lets_of(self.rule_exprs(r))) for r in p.filters
            ),
            score_rule_pod_slots=tuple(
                tuple(self.slot[n][1] for n in self.pod_lets_of([r.expr])) for r in p.scores
            ),
            node_pod_fields=self.node_pod_fields(),
            pod_let_slots={name: i for name, (table, i) in self.slot.items() if table == "P"},
            instrumented=self.coverage is not None,
            filter_verdicts=tuple(namespace.get(f"verdict_{i}") for i in range(len(p.filters))),
            filter_key_deltas=tuple(self.key_delta_types(r) for r in p.filters),
        )
        if self.coverage is not None:
            code.filter_all  # noqa: B018 - generated now: coverage probes are made with the code
        return code


def explaining_functions(
    checked: CheckedPolicy, coverage: CoverageCollector | None = None
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Generate and compile the explanations' `filter_all` and `score_all` of one checked policy."""
    generator = _PolicyGenerator(checked, coverage)
    namespace = generator.namespace(generator.generate_explaining())
    return namespace["filter_all"], namespace["score_all"]


def branch_recorders(
    coverage: CoverageCollector, policy: ir.Policy, expr: ir.Expression, owner: str
) -> dict[int, Callable[[Any], Any]]:
    """Syntax node id -> the coverage recorder of each branch condition of `expr` (part of `owner`)."""
    out: dict[int, Callable[[Any], Any]] = {}
    for cond in conditions(expr):
        span = expr.source.span(cond.offset)
        probe = BranchProbe(
            span.file, span.line, span.column, policy.name.value, owner, cond.point, cond.text
        )
        out[cond.node.id] = coverage.branch(probe)
    return out


def rule_recorder(
    coverage: CoverageCollector, policy: ir.Policy, kind: RuleKind, name: str, span: SourceSpan
) -> Callable[[], None]:
    """The coverage recorder of one evaluable item of `policy` (a rule, queue key, ...) written at `span`."""
    return coverage.rule(RuleProbe(span.file, span.line, span.column, policy.name.value, kind, name))


def rule_ref(policy: ir.Policy, name: ir.Name) -> pl.RuleRef:
    return pl.RuleRef(policy.name.value, name.value, name.span.file, name.span.line, name.span.column)


def pod_fields(e: cel_ast.Expr) -> frozenset[str] | None:
    """The top-level `pod.<field>` names `e` reads; None when `pod` is used whole.

    `pod` as an argument of a `cluster.<function>(...)` call is not a whole use: the runtime notices
    calls into the cluster functions while it evaluates a node and does not reuse such results.
    """
    fields: set[str] = set()
    for node, bound in walk(e, into=_pod_children):
        if is_field_of(node, "pod", bound):
            assert isinstance(node, cel_ast.Select)
            fields.add(node.field)
        elif is_free(node, "pod", bound):
            return None
    return frozenset(fields)


def _pod_children(e: cel_ast.Expr, bound: Bound) -> tuple[Scoped, ...]:
    """What `pod_fields` descends into: not `pod.<field>`, nor a bare `pod` passed to the cluster view."""
    if is_field_of(e, "pod", bound):
        return ()
    kids = scoped_children(e, bound)
    if isinstance(e, cel_ast.Call) and e.target is not None and is_free(e.target, "cluster", bound):
        return tuple((k, b) for k, b in kids if not is_free(k, "pod", b))
    return kids


# id(policy) -> (checked policy, code): the loader reuses the checked policies of unchanged files, so
# their code is reused too
_CODE_CACHE: OrderedDict[int, tuple[CheckedPolicy, PolicyCode]] = OrderedDict()
_CODE_CACHE_SIZE = 1024
_CODE_CACHE_LOCK = threading.Lock()


def compile_policy(checked: CheckedPolicy, coverage: CoverageCollector | None = None) -> PolicyCode:
    """Generate and compile one checked policy's functions (cached; instrumented, uncached, with `coverage`)."""
    if coverage is not None:
        return _PolicyGenerator(checked, coverage).build()
    with _CODE_CACHE_LOCK:
        hit = _CODE_CACHE.get(id(checked))
        if hit is not None and hit[0] is checked:
            _CODE_CACHE.move_to_end(id(checked))
            return hit[1]
    code = _PolicyGenerator(checked).build()
    with _CODE_CACHE_LOCK:
        _CODE_CACHE[id(checked)] = (checked, code)
        while len(_CODE_CACHE) > _CODE_CACHE_SIZE:
            _CODE_CACHE.popitem(last=False)
    return code
