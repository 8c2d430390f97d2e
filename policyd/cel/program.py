"""The CEL engine facade: environments, `compile_expression`, and the evaluation used by `policyd eval`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policyd.cel import library
from policyd.cel import runtime as rt
from policyd.cel import syntax as ast
from policyd.cel.checker import check as check_expression
from policyd.cel.codegen import container_candidates, generate_function
from policyd.cel.cost import estimate
from policyd.cel.env import CelEnv, CheckIssue, CheckResult, FunctionDecl
from policyd.cel.parser import parse_cel
from policyd.cel.types import DYN, CelType
from policyd.cel.walk import Bound, Scoped, scoped_children, walk
from policyd.errors import CelError, CelEvalError, SourceSpan

_EMPTY: Mapping[str, Any] = {}


def library_functions() -> dict[str, FunctionDecl]:
    """The standard library, cel-go's extensions and the Kubernetes CEL libraries."""
    return library.library_functions()


def standard_env(
    variables: Mapping[str, CelType] = _EMPTY,
    functions: Mapping[str, FunctionDecl] = _EMPTY,
    **kw: Any,
) -> CelEnv:
    """A CelEnv with the standard and Kubernetes libraries plus the given declarations."""
    all_functions = library_functions()
    all_functions.update(functions)
    return CelEnv(variables=dict(variables), functions=all_functions, **kw)


class CelCompileError(CelError):
    """A CelError carrying every checker issue (`.issues`)."""

    def __init__(self, message: str, offset: int, line: int, column: int, issues: tuple[CheckIssue, ...]):
        super().__init__(message, offset, line, column)
        self.issues = issues


@dataclass
class CompiledExpression:
    """A compiled CEL expression: checked type, cost, reads, generated source and the function."""

    type: CelType
    cost: int
    reads: frozenset[str]
    python_source: str
    params: tuple[str, ...]
    fn: Callable[..., Any]
    ast: ast.Expr | None = None
    check_result: CheckResult | None = None
    span: SourceSpan | None = None
    globals: dict[str, Any] = field(default_factory=dict)

    def evaluate(self, activation: Mapping[str, Any] = _EMPTY) -> Any:
        """Evaluate with variables from `activation`; raises CelEvalError."""
        try:
            args = [activation[p] for p in self.params]
        except KeyError as e:
            raise CelEvalError(f"no value for variable {e.args[0]!r}") from None
        try:
            return self.fn(*args)
        except CelEvalError:
            raise
        except rt.EVAL_ERRORS as e:
            raise rt.as_eval_error(e) from None


def _line_col(text: str | None, offset: int) -> tuple[int, int]:
    if text is None:
        return 1, 1
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def reads_of(expr: ast.Expr, env: CelEnv) -> frozenset[str]:
    """Field paths read (`var` or `var.field`) by `expr` without checking it (what `check=False` reports)."""
    out: set[str] = set()

    def declared(name: str) -> str | None:
        for cand in container_candidates(name, env.container):
            if cand in env.variables:
                return cand
        return None

    def variable_field(e: ast.Expr, bound: Bound) -> tuple[str, str] | None:
        if isinstance(e, ast.Select) and isinstance(e.operand, ast.Ident) and e.operand.name not in bound:
            var = declared(e.operand.name)
            if var is not None:
                return var, e.field
        return None

    def into(e: ast.Expr, bound: Bound) -> tuple[Scoped, ...]:
        return () if variable_field(e, bound) is not None else scoped_children(e, bound)

    for node, bound in walk(expr, into=into):
        selected = variable_field(node, bound)
        if selected is not None:
            variable, name = selected
            out.add(variable if variable == "cluster" else f"{variable}.{name}")
        elif isinstance(node, ast.Ident) and node.name not in bound:
            whole = declared(node.name)
            if whole is not None:
                out.add(whole)
    return frozenset(out)


def compile_expression(
    text_or_ast: str | ast.Expr,
    env: CelEnv,
    *,
    check: bool = True,
    span: SourceSpan | None = None,
) -> CompiledExpression:
    """Parse (if text), type-check, estimate and compile one CEL expression; raises CelError."""
    text = text_or_ast if isinstance(text_or_ast, str) else None
    expr = parse_cel(text_or_ast, macros=env.macros) if isinstance(text_or_ast, str) else text_or_ast
    result: CheckResult | None = None
    typ: CelType = DYN
    if check:
        result = check_expression(expr, env)
        if result.issues:
            first = result.issues[0]
            line, column = _line_col(text, first.offset)
            raise CelCompileError(first.message, first.offset, line, column, tuple(result.issues))
        typ = result.type
    cost = 0
    if result is not None:
        cost = int(estimate(expr, result, env))
        if env.cost_limit is not None and cost > env.cost_limit:
            line, column = _line_col(text, expr.offset)
            raise CelCompileError(
                f"estimated cost {cost} exceeds the limit {env.cost_limit}", expr.offset, line, column, ()
            )
    reads = result.reads if result is not None else reads_of(expr, env)
    try:
        generated = generate_function(expr, result, env)
    except CelError as e:
        line, column = _line_col(text, e.offset)
        raise CelCompileError(e.message, e.offset, line, column, ()) from None
    fn = generated.compile()
    return CompiledExpression(
        type=typ,
        cost=cost,
        reads=reads,
        python_source=generated.source,
        params=generated.params,
        fn=fn,
        ast=expr,
        check_result=result,
        span=span,
        globals=generated.globals,
    )
