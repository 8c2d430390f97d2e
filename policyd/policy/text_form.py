"""The `.policy` text form -> policy IR (grammar in `policy.lark`; CEL parsed in place).

`parse_policy_text(text, path)` returns the policies of one file and the diagnostics found while
parsing (syntax errors with a human message, CEL syntax errors, repeated or missing fields). Type
checking is the loader's job (`policyd.policy.loader`).
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lark
from lark import Lark, Token, Tree
from lark.parsers.lalr_interactive_parser import InteractiveParser

from policyd.cel import syntax as cel_ast
from policyd.cel.parser import GRAMMAR_DIR, CelTreeBuilder, parser_cache
from policyd.errors import CelError, Diagnostic
from policyd.policy import syntax as ir
from policyd.policy.delimiters import scan
from policyd.policy.source import SourceFile, SourceMap

GRAMMAR_PATH = str(Path(__file__).parent / "policy.lark")

# how expected terminals read in syntax errors
_TERMINAL_WORDS = {
    "NAME": "a name",
    "IDENT": "an identifier",
    "WORD": "a word",
    "PROFILE": "a string",
    "SIGNED_INT": "an integer",
    "DIRECTION": "'asc' or 'desc'",
    "QUALIFIED": "a rule as POLICY/RULE",
    "$END": "end of file",
}
# a keyword terminal of policy.lark: the word, then a lookahead that it ends there
_KEYWORD = re.compile(r"([A-Za-z]+)\(\?!\[A-Za-z0-9_\]\)")
_EXPRESSION_START = {"cel__INT_LIT", "cel__STRING_LIT", "cel__FLOAT_LIT", "cel__UINT_LIT"}
_OPERATORS = {
    "cel__QUESTION",
    "cel__OR",
    "cel__AND",
    "cel__LT",
    "cel__LE",
    "cel__GT",
    "cel__GE",
    "cel__EQ",
    "cel__NE",
    "cel__IN",
    "cel__PLUS",
    "cel__MINUS",
    "cel__STAR",
    "cel__SLASH",
    "cel__PERCENT",
    "cel__DOT",
    "cel__LBRACKET",
    "cel__LPAREN",
}


@functools.cache
def _parser() -> Lark:
    with open(GRAMMAR_PATH, encoding="utf-8") as f:
        grammar = f.read()
    imports = [GRAMMAR_DIR]  # cel.lark
    return Lark(
        grammar,
        parser="lalr",
        lexer="contextual",
        propagate_positions=True,
        maybe_placeholders=True,
        import_paths=imports,
        cache=parser_cache("policy", grammar, imports),
    )


@dataclass
class ParseResult:
    """The policies of one file and the diagnostics found while parsing it."""

    policies: list[ir.Policy] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def parse_policy_text(text: str, path: str = "<input>") -> ParseResult:
    """Parse the text form; never raises for bad input (problems become diagnostics)."""
    source = SourceFile(path, text)
    result = ParseResult()
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        result.diagnostics.append(_syntax_diagnostic(e, source))
        return result
    builder = _PolicyBuilder(source, result.diagnostics)
    for node in tree.children:
        if isinstance(node, Tree):
            policy = builder.policy(node)
            if policy is not None:
                result.policies.append(policy)
    return result


def _describe(name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    for term in _parser().terminals:
        if term.name == name:
            if term.pattern.type == "str":
                return repr(term.pattern.value)
            keyword = _KEYWORD.fullmatch(term.pattern.value)
            if keyword:
                return repr(keyword[1])
            break
    return name.split("__")[-1].lower()


def _expected_text(expected: set[str]) -> str:
    words: list[str] = []
    names = set(expected)
    if names & _EXPRESSION_START:
        names -= _EXPRESSION_START | {"IDENT", "cel__MINUS", "cel__NOT", "cel__DOT", "cel__LPAREN"}
        names -= {"cel__LBRACKET", "cel__LBRACE", "cel__TRUE", "cel__FALSE", "cel__NULL"}
        words.append("an expression")
    if len(names & _OPERATORS) > 3:
        names -= _OPERATORS
        words.append("an operator")
    words.extend(sorted({_describe(n) for n in names}))
    if not words:
        return "something else"
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _syntax_diagnostic(e: lark.exceptions.UnexpectedInput, source: SourceFile) -> Diagnostic:
    """The parser's error; when a string or bracket opened before it is never closed, at that opener."""
    found = _parser_diagnostic(e, source)
    start = source.offset(found.span.line, found.span.column)
    delimiters = scan(source.text, start)
    at = f"{found.span.line}:{found.span.column}"
    reason = found.message.removeprefix("syntax error: ")
    if delimiters.unterminated is not None and delimiters.unterminated[1] <= start:
        quote, offset = delimiters.unterminated
        message = "syntax error: unterminated string literal"
        if offset < start:
            message += f" (the parser stopped at {at}: {reason})"
        return source.diagnostic("error", message, offset, offset + len(quote), "syntax")
    innermost = delimiters.innermost()
    if delimiters.balanced or innermost is None:
        return found
    opener, offset = innermost
    opened_line, _ = source.position(offset)
    at_end = start >= len(source.text.rstrip())
    if opened_line == found.span.line and not at_end:
        return found
    message = f"syntax error: '{opener}' was never closed (the parser stopped at {at}: {reason})"
    return source.diagnostic("error", message, offset, offset + 1, "syntax")


def _accepted(interactive: InteractiveParser) -> set[str]:
    """The terminals that can come next, as Lark's `accepts()`, with the imported CEL ones (`cel__AND`,
    `cel__LBRACE`, which also stands for the policy grammar's `{`) that it skips as not upper case."""
    quiet = copy.copy(interactive.parser_state.parse_conf)
    quiet.callbacks = {}  # feeding a trial token must not build trees
    out: set[str] = set()
    for name in interactive.choices():
        if not name.rpartition("__")[2].isupper():
            continue  # a rule, not a terminal
        cursor = interactive.copy(deepcopy_values=False)
        cursor.parser_state.parse_conf = quiet
        try:
            cursor.feed_token(Token(name, ""))
        except lark.exceptions.UnexpectedToken:
            continue
        out.add(name)
    return out


def _parser_diagnostic(e: lark.exceptions.UnexpectedInput, source: SourceFile) -> Diagnostic:
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            found = "end of file"
            start = len(source.text.rstrip())
        else:
            found = repr(str(tok.value))
            start = tok.start_pos or 0
        expected = set(e.expected)
        interactive = getattr(e, "interactive_parser", None)
        if interactive is not None:
            try:
                expected = _accepted(interactive) or expected
            except lark.exceptions.LarkError:  # pragma: no cover - defensive
                pass
        message = f"syntax error: expected {_expected_text(expected)} but found {found}"
        end = None if tok.type == "$END" else start + len(str(tok.value))
        return source.diagnostic("error", message, start, end, code="syntax")
    if isinstance(e, lark.exceptions.UnexpectedCharacters):
        start = e.pos_in_stream or 0
        char = source.text[start : start + 1]
        allowed = getattr(e, "allowed", None) or set()
        message = f"syntax error: unexpected character {char!r}"
        if allowed:
            message += f" (expected {_expected_text(set(allowed))})"
        return source.diagnostic("error", message, start, start + 1, code="syntax")
    start = getattr(e, "pos_in_stream", len(source.text)) or len(source.text)
    return source.diagnostic("error", "syntax error: unexpected end of file", start, code="syntax")


class _PolicyBuilder:
    """Walks the parse tree of one file and builds `ir.Policy` values (a transformer per concern)."""

    def __init__(self, source: SourceFile, diagnostics: list[Diagnostic]) -> None:
        self.source = source
        self.diagnostics = diagnostics
        self.cel = CelTreeBuilder(text=source.text)
        self.map = SourceMap(source)

    # -- helpers -------------------------------------------------------------------------------

    def error(self, message: str, start: int, end: int | None = None, code: str = "") -> None:
        """Record an error at file offsets [start, end)."""
        self.diagnostics.append(self.source.diagnostic("error", message, start, end, code))

    def name(self, tok: Token) -> ir.Name:
        """An `ir.Name` for a name token."""
        start = tok.start_pos or 0
        span = self.source.span(start, start + len(tok))
        return ir.Name(str(tok), span, self.source.line_text(span.line))

    def expression(self, tree: Tree[Any] | Token) -> ir.Expression | None:
        """Build the CEL AST of an imported `expr` subtree (None after reporting a CEL error)."""
        if isinstance(tree, Token):
            start, end = tree.start_pos or 0, tree.end_pos or 0
        else:
            start, end = tree.meta.start_pos, tree.meta.end_pos
        try:
            node: cel_ast.Expr = self.cel.build(tree)
        except CelError as e:
            self.error(e.message, e.offset, code="cel-syntax")
            return None
        return ir.Expression(self.source.text[start:end], node, self.map, start)

    def _once(self, seen: dict[str, Token], key: str, tok: Token | None, where: str) -> bool:
        """False (after an error) when field `key` was already given."""
        if tok is None:
            return True
        if key in seen:
            self.error(
                f"{where}: '{key}' given twice", tok.start_pos or 0, tok.end_pos, code="duplicate-field"
            )
            return False
        seen[key] = tok
        return True

    # -- policy --------------------------------------------------------------------------------

    def policy(self, tree: Tree[Any]) -> ir.Policy | None:
        """One `policy NAME { ... }` block."""
        name_tok = tree.children[0]
        assert isinstance(name_tok, Token)
        fields: dict[str, Any] = {
            "lets": [],
            "filters": [],
            "scores": [],
            "permits": [],
        }
        seen: dict[str, Token] = {}
        where = f"policy {name_tok}"
        extends: list[ir.Name] = []
        overrides: list[ir.RuleOverride] = []
        for item in tree.children[1:]:
            if not isinstance(item, Tree):
                continue
            kind = str(item.data)
            if kind == "extends":
                for t in item.children:
                    if not isinstance(t, Token):
                        continue
                    if any(base.value == str(t) for base in extends):
                        self.error(f"extends {str(t)!r} twice", t.start_pos or 0, t.end_pos, code="bad-value")
                        continue
                    extends.append(self.name(t))
                continue
            if kind == "disable":
                overrides.extend(
                    ir.RuleOverride(self.name(t), disable=True) for t in item.children if isinstance(t, Token)
                )
                continue
            override = kind == "override"
            if override:
                item = item.children[0]
                kind = str(item.data)
                if kind == "score_override":
                    self._score_override(item, overrides)
                    continue
            keyword = self._keyword(item)
            if kind in ("profiles", "match", "queue", "preemption"):
                if not self._once(seen, kind, keyword, where):
                    continue
            if kind in ("queue", "preemption"):
                getattr(self, f"_{kind}")(item, fields, override)
                continue
            method = getattr(self, f"_{kind}")
            method(item, fields)
        return ir.Policy(
            name=self.name(name_tok),
            file=self.source.path,
            profiles=fields.get("profiles", ir.DEFAULT_PROFILES),
            match=fields.get("match"),
            lets=tuple(fields["lets"]),
            filters=tuple(fields["filters"]),
            scores=tuple(fields["scores"]),
            queue=fields.get("queue"),
            preemption=fields.get("preemption"),
            permits=tuple(fields["permits"]),
            source_text=self.source.text,
            extends=tuple(extends),
            overrides=tuple(overrides),
        )

    def _keyword(self, tree: Tree[Any]) -> Token | None:
        """A token standing for the item's keyword (for 'given twice' errors)."""
        first = tree.children[0] if tree.children else None
        if isinstance(first, Token) and first.type in ("QUEUE", "PREEMPTION"):
            return first
        meta = tree.meta
        return Token(
            "KEYWORD", str(tree.data), start_pos=meta.start_pos, end_pos=meta.start_pos + len(str(tree.data))
        )

    def _profiles(self, tree: Tree[Any], fields: dict[str, Any]) -> None:
        names: list[str] = []
        for tok in tree.children:
            if not isinstance(tok, Token):
                continue
            name = str(tok)[1:-1]
            start = tok.start_pos or 0
            if "\\" in name:
                message = f'profile name "{name}": a scheduler name has no backslash escapes or quotes'
                self.error(message, start + 1 + name.index("\\"), code="bad-value")
                continue
            problem = ir.profile_name_problem(name)
            if problem is not None:
                self.error(problem, start, tok.end_pos, code="bad-value")
                continue
            if name in names:
                self.error(f"profile {name!r} is listed twice", start, tok.end_pos, code="bad-value")
                continue
            names.append(name)
        if not any(isinstance(t, Token) for t in tree.children):
            self.error("profiles: at least one scheduler name is required", tree.meta.start_pos)
        fields["profiles"] = tuple(names) or ir.DEFAULT_PROFILES

    def _match(self, tree: Tree[Any], fields: dict[str, Any]) -> None:
        expr = self.expression(tree.children[0])
        if expr is not None:
            fields["match"] = expr

    def _let(self, tree: Tree[Any], fields: dict[str, Any]) -> None:
        name_tok, body = tree.children
        expr = self.expression(body)
        if expr is not None and isinstance(name_tok, Token):
            fields["lets"].append(ir.Let(self.name(name_tok), expr))

    def _rule_fields(self, tree: Tree[Any], what: str) -> tuple[Token, dict[str, Any]]:
        """The name token and the `*_field` children (each at most once) of a rule block."""
        name_tok = tree.children[0]
        assert isinstance(name_tok, Token)
        values: dict[str, Any] = {}
        seen: dict[str, Token] = {}
        for child in tree.children[1:]:
            if not isinstance(child, Tree):
                continue
            key = str(child.data).removesuffix("_field")
            keyword = Token(
                "KEYWORD", key, start_pos=child.meta.start_pos, end_pos=child.meta.start_pos + len(key)
            )
            if not self._once(seen, _FIELD_NAMES.get(key, key), keyword, f"{what} {name_tok}"):
                continue
            value = child.children[0]
            if isinstance(value, Token) and value.type in ("WORD", "SIGNED_INT"):
                values[key] = value
            else:
                values[key] = self.expression(value) if value is not None else None
                if values[key] is None:
                    values[key] = _FAILED
        return name_tok, values

    def _require(self, values: dict[str, Any], key: str, name_tok: Token, what: str) -> bool:
        if key not in values:
            self.error(
                f"{what} {name_tok}: '{_FIELD_NAMES.get(key, key)}' is required",
                name_tok.start_pos or 0,
                name_tok.end_pos,
                code="missing-field",
            )
            return False
        return values[key] is not _FAILED

    def _filter(self, tree: Tree[Any], fields: dict[str, Any]) -> None:
        name_tok, values = self._rule_fields(tree, "filter")
        if not self._require(values, "expr", name_tok, "filter"):
            return
        reason = values.get("reason")
        unresolvable = values.get("unresolvable", False)
        fields["filters"].append(
            ir.FilterRule(
                self.name(name_tok),
                values["expr"],
                None if reason is _FAILED else reason,
                False if unresolvable is _FAILED else unresolvable,
            )
        )

    def _score(self, tree: Tree[Any], fields: dict[str, Any]) -> None:
        name_tok, values = self._rule_fields(tree, "score")
        # a bad weight or normalize is reported and the rule kept with the default in its place, so
        # that its expression is still checked (its errors reported, the lets it reads counted as used)
        weight: int | None = 1
        if "weight" in values:
            weight = self._weight(values["weight"])
        normalize: Any = "none"
        if "normalize" in values:
            normalize = self._normalize(values["normalize"])
        weight = 1 if weight is None else weight
        normalize = "none" if normalize is None else normalize
        if not self._require(values, "expr", name_tok, "score"):
            return
        fields["scores"].append(ir.ScoreRule(self.name(name_tok), values["expr"], weight, normalize))

    def _score_override(self, tree: Tree[Any], overrides: list[ir.RuleOverride]) -> None:
        """`override score POLICY/RULE { weight = N  normalize = WORD }`."""
        name_tok, values = self._rule_fields(tree, "override score")
        weight = None
        if "weight" in values:
            weight = self._weight(values["weight"])
            if weight is None:
                return
        normalize: Any = None
        if "normalize" in values:
            normalize = self._normalize(values["normalize"])
            if normalize is None:
                return
        if weight is None and normalize is None:
            self.error(
                f"override score {name_tok}: give 'weight' or 'normalize'",
                name_tok.start_pos or 0,
                name_tok.end_pos,
                code="missing-field",
            )
            return
        overrides.append(ir.RuleOverride(self.name(name_tok), weight=weight, normalize=normalize))

    def _weight(self, tok: Token) -> int | None:
        """The weight a SIGNED_INT token gives (None after reporting a negative one)."""
        weight = int(str(tok))
        if weight < 0:
            self.error(
                f"weight {weight} is negative (a score that should prefer low values: normalize = reverse)",
                tok.start_pos or 0,
                tok.end_pos,
                code="bad-value",
            )
            return None
        return weight

    def _normalize(self, tok: Token) -> Any:
        """The normalisation a WORD token names (None after reporting an unknown one)."""
        normalize = str(tok)
        if normalize not in ir.NORMALIZE_VALUES:
            allowed = ", ".join(ir.NORMALIZE_VALUES)
            self.error(
                f"unknown normalize value {normalize!r} (expected one of {allowed})",
                tok.start_pos or 0,
                tok.end_pos,
                code="bad-value",
            )
            return None
        return normalize

    def _queue(self, tree: Tree[Any], fields: dict[str, Any], override: bool = False) -> None:
        keyword = tree.children[0]
        assert isinstance(keyword, Token)
        keys: list[ir.QueueKey] = []
        for order in tree.children[1:]:
            if not isinstance(order, Tree):
                continue
            body, direction = order.children
            expr = self.expression(body)
            if expr is not None:
                keys.append(ir.QueueKey(expr, "desc" if str(direction) == "desc" else "asc"))
        span = self.source.span(keyword.start_pos or 0, keyword.end_pos)
        fields["queue"] = ir.Queue(tuple(keys), span, self.source.line_text(span.line), override)

    def _preemption(self, tree: Tree[Any], fields: dict[str, Any], override: bool = False) -> None:
        keyword = tree.children[0]
        assert isinstance(keyword, Token)
        sub = Tree("preemption", tree.children)
        _, values = self._rule_fields(sub, "preemption")
        honor = True
        if "pdb" in values:
            tok = values["pdb"]
            if str(tok) not in ir.PDB_VALUES:
                self.error(
                    f"unknown pdb value {str(tok)!r} (expected honor or ignore)",
                    tok.start_pos or 0,
                    tok.end_pos,
                    code="bad-value",
                )
            honor = str(tok) != "ignore"
        enabled = values.get("enabled")
        victims = values.get("victims")
        span = self.source.span(keyword.start_pos or 0, keyword.end_pos)
        fields["preemption"] = ir.Preemption(
            span,
            None if enabled is _FAILED else enabled,
            None if victims is _FAILED else victims,
            honor,
            self.source.line_text(span.line),
            override,
        )

    def _permit(self, tree: Tree[Any], fields: dict[str, Any]) -> None:
        name_tok, values = self._rule_fields(tree, "permit")
        ok = self._require(values, "group", name_tok, "permit")
        ok = self._require(values, "min_member", name_tok, "permit") and ok
        if not ok:
            return
        timeout = values.get("timeout")
        fields["permits"].append(
            ir.Permit(
                self.name(name_tok),
                values["group"],
                values["min_member"],
                None if timeout is _FAILED else timeout,
            )
        )


_FAILED = object()
_FIELD_NAMES = {"min_member": "minMember"}
