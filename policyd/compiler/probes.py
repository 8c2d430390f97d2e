"""Where coverage probes go in a policy expression: its branch conditions and their source text.

A branch condition is the condition of a ternary or an operand of a chain of `&&` / `||` (a chain of
one operator is flattened: `a && b && c` has the conditions `a`, `b` and `c`; `a && (b || c)` has `a`,
`b || c`, `b` and `c`). The `&&`, `||` and ternaries a macro expands to (`all`, `exists`, `map`, ...)
are its machinery, not the author's: they are skipped, the author's predicate inside them is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from policyd.cel import syntax as cel_ast
from policyd.cel.walk import nodes
from policyd.evaluation.coverage import BranchPoint
from policyd.policy import syntax as ir

_POINTS: dict[str, BranchPoint] = {"_?_:_": "?:", "_&&_": "&&", "_||_": "||"}
_OPEN, _CLOSE = "([{", ")]}"
TEXT_LIMIT = 60


@dataclass(frozen=True)
class Condition:
    """One branch condition of an expression: its node, the branch point and its source text."""

    node: cel_ast.Expr
    point: BranchPoint
    offset: int  # where the condition starts (AST offsets of the expression)
    text: str


def _is_machinery(call: cel_ast.Call) -> bool:
    """True for the `&&` / `||` / ternary a macro expansion wrote (it reads the accumulator)."""
    return any(isinstance(a, cel_ast.Ident) and a.name == cel_ast.ACCUMULATOR for a in call.args)


def _operands(call: cel_ast.Call) -> list[cel_ast.Expr]:
    """The operands of a chain of one logic operator, left to right."""
    out: list[cel_ast.Expr] = []
    for arg in call.args:
        if isinstance(arg, cel_ast.Call) and arg.function == call.function and not _is_machinery(arg):
            out.extend(_operands(arg))
        else:
            out.append(arg)
    return out


def _start(e: cel_ast.Expr) -> int:
    return min(n.offset for n in nodes(e))


def _balanced(text: str) -> str:
    """`text` without the unmatched brackets a boundary cut left at either end."""
    text = text.strip()
    while text and text[-1] in _CLOSE and text.count(_OPEN[_CLOSE.index(text[-1])]) < text.count(text[-1]):
        text = text[:-1].rstrip()
    while text and text[0] in _OPEN and text.count(text[0]) > text.count(_CLOSE[_OPEN.index(text[0])]):
        text = text[1:].lstrip()
    return text


def _token_end(source: str, i: int) -> int:
    """The index just past the token starting at `i` (a string literal, a name or a number)."""
    if i >= len(source):
        return len(source)
    if source[i] in "\"'":
        end = source.find(source[i], i + 1)
        return len(source) if end < 0 else end + 1
    j = i
    while j < len(source) and (source[j].isalnum() or source[j] in "_."):
        j += 1
    return max(j, i + 1)


def _depth(text: str) -> int:
    """Opening brackets minus closing ones."""
    return sum(text.count(c) for c in _OPEN) - sum(text.count(c) for c in _CLOSE)


def _text(expr: ir.Expression, start: int, end: int, *, close: bool = False) -> tuple[int, str]:
    """Where the source text of AST offsets [start, end) starts, and the text (shortened); with
    `close`, extended over brackets left open."""
    source = expr.text
    lo = max(0, start - expr.start)
    while lo > 0 and (source[lo - 1].isalnum() or source[lo - 1] == "_"):
        lo -= 1  # a global call's offset is its parenthesis: take in the function's name
    hi = max(lo, end - expr.start)
    while _depth(source[lo:hi]) < 0 and lo > 0 and source[lo - 1] in "( \t\n":
        lo -= 1  # an operand that starts inside parentheses closed within it
    depth = _depth(source[lo:hi])
    while close and depth > 0 and hi < len(source):
        depth += (source[hi] in _OPEN) - (source[hi] in _CLOSE)
        hi += 1
    raw = source[lo:hi]
    lo += len(raw) - len(raw.lstrip())
    text = " ".join(_balanced(raw).split())
    return lo + expr.start, text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


def conditions(expr: ir.Expression) -> list[Condition]:
    """The branch conditions of `expr`, in source order."""
    chained: set[int] = set()
    out: list[Condition] = []
    for node in nodes(expr.ast):
        if not isinstance(node, cel_ast.Call) or node.function not in _POINTS or _is_machinery(node):
            continue
        point = _POINTS[node.function]
        if node.function == "_?_:_":
            cond = node.args[0]
            out.append(Condition(cond, point, *_text(expr, _start(cond), node.offset)))
            continue
        if id(node) in chained:
            continue
        chained.update(id(inner) for inner in _inner_chain(node))
        operands = _operands(node)
        ends = _operator_offsets(node)
        for i, operand in enumerate(operands):
            start = _start(operand)
            if i < len(ends):
                offset, text = _text(expr, start, ends[i])
            else:
                last = max(n.offset for n in nodes(operand))
                end = _token_end(expr.text, last - expr.start) + expr.start
                offset, text = _text(expr, start, end, close=True)
            out.append(Condition(operand, point, offset, text))
    return sorted(out, key=lambda c: c.offset)


def _inner_chain(call: cel_ast.Call) -> list[cel_ast.Call]:
    """The calls of the same operator nested in a chain (the chain's inner nodes)."""
    out: list[cel_ast.Call] = []
    for arg in call.args:
        if isinstance(arg, cel_ast.Call) and arg.function == call.function and not _is_machinery(arg):
            out.append(arg)
            out.extend(_inner_chain(arg))
    return out


def _operator_offsets(call: cel_ast.Call) -> list[int]:
    """The offsets of a chain's operators, left to right (one fewer than its operands)."""
    out: list[int] = []
    left, right = call.args
    if isinstance(left, cel_ast.Call) and left.function == call.function and not _is_machinery(left):
        out.extend(_operator_offsets(left))
    out.append(call.offset)
    if isinstance(right, cel_ast.Call) and right.function == call.function and not _is_machinery(right):
        out.extend(_operator_offsets(right))
    return out
