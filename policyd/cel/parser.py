"""CEL text -> `policyd.cel.syntax` nodes (Lark LALR, grammar in `cel.lark`), macros expanded.

Use `parse_cel(text)` for a standalone expression. Offsets in the tree are Lark `start_pos` values,
so they are offsets in whatever text Lark parsed.

Embedding CEL in another Lark grammar
-------------------------------------
A grammar that wants CEL expressions imports the entry rule (Lark namespaces every imported rule and
terminal, here with the `cel__` prefix) and hands the resulting subtrees to `CelTreeBuilder`::

    // policy.lark
    %import cel.expr -> cel_expr           # rules become cel__<name>, terminals cel__<NAME>
    rule: "expr" "=" cel_expr
    %ignore WS                             # %ignore is not imported: declare your own (CEL's
                                           # `//` comments too, if you want them inside CEL)

    parser = Lark(grammar, parser="lalr", propagate_positions=True,
                  import_paths=[policyd.cel.parser.GRAMMAR_DIR])
    tree = parser.parse(text)
    builder = CelTreeBuilder()                 # one builder per file: node ids stay unique
    ast = builder.build(subtree)               # subtree: the Tree (or Token) matched by cel_expr

The builder ignores namespace prefixes (everything up to the last `__` of a rule or terminal name), so
it works on trees from this grammar and from any grammar that imports it, under any alias. Because the
parser was run with `propagate_positions=True`, node offsets are offsets in the importing file.
`CelError`s raised by the builder carry that offset and the line/column Lark reports.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lark
from lark import Lark, Token, Tree

from policyd.cel import syntax as ast
from policyd.cel.walk import nodes, too_deep
from policyd.errors import CelError
from policyd.user_cache import cache_directory

GRAMMAR_DIR = str(Path(__file__).parent)
GRAMMAR_PATH = str(Path(__file__).parent / "cel.lark")

RESERVED = frozenset(
    {
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    }
)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

MACRO_NAMES = frozenset(
    {
        "has",
        "all",
        "exists",
        "exists_one",
        "existsOne",
        "map",
        "filter",
        "transformList",
        "transformMap",
        "transformMapEntry",
        "optMap",
        "optFlatMap",
        "sortBy",
    }
)
# `cel.<name>(...)` calls the parser expands (the bindings and block extensions)
CEL_MACROS = frozenset({"bind", "block", "index", "iterVar", "accuVar"})


def parser_cache(name: str, grammar: str, import_paths: Sequence[str] = ()) -> str | bool:
    """Where Lark keeps the analysed LALR tables of `grammar` between processes (its `cache` option),
    or False where there is no cache directory and none can be made (a read-only file system).

    Building the tables of CEL and of the policy grammar takes about 0.2 s, a quarter of a `policyd
    lint FILE`; loading them takes a tenth of that. The file is in the user's cache directory
    (`$XDG_CACHE_HOME/policyd`, else `~/.cache/policyd`), never a shared temporary directory, as it
    is a pickle. Its name holds a digest of the grammar, Lark's version and Python's, and of
    `import_paths`, the directories the grammar imports from (Lark's option of that name). Lark checks
    the grammar, its options and the files it imports again when it loads the file, and builds and
    rewrites it when they differ or the file is unreadable (another process half-way through writing
    it). Without the directories in the name, two checkouts or installations used in turn would each
    find the other's file, build the tables and write over it.
    """
    directory = cache_directory()
    if directory is None:
        return False  # Lark also carries on when it cannot write the file
    key = "\0".join((grammar, lark.__version__, str(sys.version_info[:2]), *import_paths))
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return os.path.join(directory, f"{name}-{digest}.lark")


@functools.cache
def _parser() -> Lark:
    with open(GRAMMAR_PATH, encoding="utf-8") as f:
        grammar = f.read()
    return Lark(
        grammar,
        start="expr",
        parser="lalr",
        propagate_positions=True,
        maybe_placeholders=True,
        cache=parser_cache("cel", grammar),
    )


def parse_cel(text: str, *, macros: bool = True) -> ast.Expr:
    """Parse one CEL expression; raises CelError (with offset, line, column) on syntax errors."""
    try:
        tree = _parser().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        raise _syntax_error(e, text) from None
    except lark.exceptions.LarkError as e:  # pragma: no cover - defensive
        raise CelError(f"syntax error: {e}") from None
    return CelTreeBuilder(macros=macros, text=text).build(tree)


def _syntax_error(e: lark.exceptions.UnexpectedInput, text: str) -> CelError:
    pos = getattr(e, "pos_in_stream", None) or 0
    line = getattr(e, "line", 1) or 1
    column = getattr(e, "column", 1) or 1
    if isinstance(e, lark.exceptions.UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            msg = "syntax error: unexpected end of expression"
            pos = len(text)
            line, column = _line_col(text, pos)
        else:
            msg = f"syntax error: unexpected {tok.value!r}"
            pos = tok.start_pos or 0
            line, column = tok.line or line, tok.column or column
    elif isinstance(e, lark.exceptions.UnexpectedCharacters):
        msg = (
            f"syntax error: unexpected character {text[pos : pos + 1]!r}"
            if pos < len(text)
            else "syntax error"
        )
    else:
        msg = "syntax error: unexpected end of expression"
    return CelError(msg, pos, line, column)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _base(name: str) -> str:
    """A rule/terminal name without its import namespace (`cel__expr` -> `expr`)."""
    i = name.rfind("__")
    return name[i + 2 :] if i >= 0 else name


_BINOPS = {
    "||": "_||_",
    "&&": "_&&_",
    "<": "_<_",
    "<=": "_<=_",
    ">": "_>_",
    ">=": "_>=_",
    "==": "_==_",
    "!=": "_!=_",
    "in": "@in",
    "+": "_+_",
    "-": "_-_",
    "*": "_*_",
    "/": "_/_",
    "%": "_%_",
}


# the deepest expression tree accepted (levels from the top node down): every pass over a tree
# recurses once per level, and the generated Python nests with it; cel-go's parser likewise refuses
# expressions nested beyond its recursion limit. Long `&&`/`||` chains are balanced and repeated `!`/`-`
# collapse (as in cel-go), so only real nesting counts.
MAX_DEPTH = 100
# `&&`/`||` chains of more terms than this are built balanced (as cel-go builds every chain)
LEFT_NESTED_TERMS = 16
TOO_DEEP = f"expression nested too deeply (more than {MAX_DEPTH} levels)"


class CelTreeBuilder:
    """Builds CEL AST nodes from Lark trees of `cel.lark` (also when namespaced by `%import`)."""

    def __init__(self, *, macros: bool = True, text: str | None = None) -> None:
        self.macros = macros
        self.text = text
        self._ids = 0

    def next_id(self) -> int:
        """A fresh node id, unique within this builder."""
        self._ids += 1
        return self._ids

    def build(self, tree: Tree[Any] | Token) -> ast.Expr:
        """Convert one `expr` subtree (or a bare token) to an AST node; raises CelError, also for a
        tree more than `MAX_DEPTH` levels deep."""
        first = self._ids
        try:
            expr = self._expr(tree)
        except RecursionError:
            raise self._error(TOO_DEEP, tree) from None
        # a tree is at most as deep as it has nodes (a comprehension has more than its 3 levels)
        deepest = too_deep(expr, MAX_DEPTH) if self._ids - first > MAX_DEPTH else None
        if deepest is not None:
            raise self._error(TOO_DEEP, deepest.offset)
        return expr

    # -- helpers -------------------------------------------------------------------------------

    def _pos(self, item: Tree[Any] | Token) -> int:
        if isinstance(item, Token):
            return item.start_pos or 0
        meta = item.meta
        return getattr(meta, "start_pos", 0) or 0

    def _error(self, message: str, item: Tree[Any] | Token | int) -> CelError:
        if isinstance(item, int):
            pos = item
            line, column = _line_col(self.text, pos) if self.text is not None else (1, 1)
        else:
            pos = self._pos(item)
            if isinstance(item, Token):
                line, column = item.line or 1, item.column or 1
            elif self.text is not None:
                line, column = _line_col(self.text, pos)
            else:
                line = getattr(item.meta, "line", 1) or 1
                column = getattr(item.meta, "column", 1) or 1
        return CelError(message, pos, line, column)

    def _ident_name(self, tok: Any) -> str:
        name = str(tok)
        if name in RESERVED:
            raise self._error(f"reserved identifier: {name}", tok)
        return name

    # -- expressions ---------------------------------------------------------------------------

    def _expr(self, item: Tree[Any] | Token) -> ast.Expr:
        if isinstance(item, Token):
            return self._literal_token(item)
        kind = _base(str(item.data))
        method = getattr(self, f"_r_{kind}", None)
        if method is None:
            raise self._error(f"unsupported syntax: {kind}", item)
        result: ast.Expr = method(item)
        return result

    def _r_expr(self, t: Tree[Any]) -> ast.Expr:
        return self._expr(t.children[0])

    _r_primary = _r_expr
    _r_member = _r_expr
    _r_unary = _r_expr

    def _r_ternary(self, t: Tree[Any]) -> ast.Expr:
        cond, q, a, b = t.children
        args = (self._expr(cond), self._expr(a), self._expr(b))
        return ast.Call("_?_:_", args, offset=self._pos(q), id=self.next_id())

    def _r_binop(self, t: Tree[Any]) -> ast.Expr:
        left, op, right = t.children
        if str(op) in ("&&", "||"):
            return self._logic_chain(t, str(op))
        lhs = self._expr(left)
        rhs = self._expr(right)
        return ast.Call(_BINOPS[str(op)], (lhs, rhs), offset=self._pos(op), id=self.next_id())

    def _logic_chain(self, t: Tree[Any], op: str) -> ast.Expr:
        """`a && b && c ...` (or `||`): a long chain as a balanced tree, as cel-go's parser builds it
        (the operator is associative, and n terms are then log2(n) levels deep, not n)."""
        rights: list[Tree[Any] | Token] = []
        tokens: list[Tree[Any] | Token] = []
        node: Tree[Any] | Token = t
        while isinstance(node, Tree) and _base(str(node.data)) == "binop" and str(node.children[1]) == op:
            rights.append(node.children[2])
            tokens.append(node.children[1])
            node = node.children[0]
        terms = [self._expr(node), *(self._expr(r) for r in reversed(rights))]
        offsets = [self._pos(tok) for tok in reversed(tokens)]
        if len(terms) <= LEFT_NESTED_TERMS:
            # short chains stay left-nested: the code generator joins a run of error-free operands
            # with Python's own `and`/`or`, which a balanced tree would split
            tree = terms[0]
            for term, offset in zip(terms[1:], offsets, strict=True):
                tree = ast.Call(_BINOPS[op], (tree, term), offset=offset, id=self.next_id())
            return tree

        def balanced(lo: int, hi: int) -> ast.Expr:  # terms lo..hi joined by the operators between them
            if lo == hi:
                return terms[lo]
            mid = (lo + hi + 1) // 2  # the operator before terms[mid]
            return ast.Call(
                _BINOPS[op],
                (balanced(lo, mid - 1), balanced(mid, hi)),
                offset=offsets[mid - 1],
                id=self.next_id(),
            )

        return balanced(0, len(terms) - 1)

    def _r_not_chain(self, t: Tree[Any]) -> ast.Expr:
        # as cel-go: an even number of `!` is the operand itself, an odd number one `!`
        *ops, operand = t.children
        node = self._expr(operand)
        if len(ops) % 2 == 0:
            return node
        return ast.Call("!_", (node,), offset=self._pos(ops[0]), id=self.next_id())

    def _r_neg_chain(self, t: Tree[Any]) -> ast.Expr:
        *ops, operand = t.children
        if isinstance(operand, Tree) and _base(str(operand.data)) == "literal":
            tok: Any = operand.children[0]
            if _base(tok.type) in ("INT_LIT", "FLOAT_LIT"):
                node: ast.Expr = self._literal_token(tok, negate=True, start=self._pos(ops[-1]))
                ops = ops[:-1]
            else:
                node = self._expr(operand)
        else:
            node = self._expr(operand)
        # as cel-go: an even number of `-` is the operand itself, an odd number one `-`
        if len(ops) % 2 == 0:
            return node
        return ast.Call("-_", (node,), offset=self._pos(ops[0]), id=self.next_id())

    def _r_literal(self, t: Tree[Any]) -> ast.Expr:
        return self._literal_token(t.children[0])

    def _r_ident(self, t: Tree[Any]) -> ast.Expr:
        toks = [c for c in t.children if isinstance(c, Token)]
        name_tok = toks[-1]
        name = self._ident_name(name_tok)
        if len(toks) == 2:
            return ast.Ident("." + name, offset=self._pos(toks[0]), id=self.next_id())
        return ast.Ident(name, offset=self._pos(name_tok), id=self.next_id())

    def _field_name(self, item: Tree[Any] | Token) -> str:
        """The text of a `field_name` (an identifier, or backquoted text without the quotes)."""
        tok = item.children[0] if isinstance(item, Tree) else item
        text = str(tok)
        return text[1:-1] if text.startswith("`") else text

    def _r_select(self, t: Tree[Any]) -> ast.Expr:
        operand, dot, name = t.children
        op = self._expr(operand)
        # as cel-go: reserved words are rejected as identifiers, not as field names (`request.namespace`)
        return ast.Select(op, self._field_name(name), offset=self._pos(dot), id=self.next_id())

    def _r_opt_select(self, t: Tree[Any]) -> ast.Expr:
        operand, dot, _question, name = t.children
        op = self._expr(operand)
        field = ast.Const(self._field_name(name), offset=self._pos(name), id=self.next_id())
        return ast.Call(ast.OPT_SELECT, (op, field), offset=self._pos(dot), id=self.next_id())

    def _r_index(self, t: Tree[Any]) -> ast.Expr:
        operand, bracket, index = t.children
        op = self._expr(operand)
        idx = self._expr(index)
        return ast.Call("_[_]", (op, idx), offset=self._pos(bracket), id=self.next_id())

    def _r_opt_index(self, t: Tree[Any]) -> ast.Expr:
        operand, bracket, _question, index = t.children
        op = self._expr(operand)
        idx = self._expr(index)
        return ast.Call(ast.OPT_INDEX, (op, idx), offset=self._pos(bracket), id=self.next_id())

    def _flatten(self, t: Tree[Any] | None) -> list[Tree[Any] | Token]:
        """The items of a (possibly left-recursive) comma-separated list rule, commas dropped."""
        items: list[Tree[Any] | Token] = []
        while t is not None:
            kind = _base(str(t.data))
            children = [c for c in t.children if not (isinstance(c, Token) and _base(c.type) == "COMMA")]
            if children and isinstance(children[0], Tree) and _base(str(children[0].data)) == kind:
                items[:0] = children[1:]
                t = children[0]
            else:
                items[:0] = children
                t = None
        return items

    def _args(self, exprlist: Tree[Any] | None) -> list[ast.Expr]:
        return [self._expr(c) for c in self._flatten(exprlist)]

    def _r_global_call(self, t: Tree[Any]) -> ast.Expr:
        children = list(t.children)
        exprlist = children.pop()
        paren = children.pop()
        name_tok = children[-1]
        name = self._ident_name(name_tok)
        args = self._args(exprlist)
        offset = self._pos(paren)
        if self.macros and len(children) == 1:
            expanded = self._expand_macro(name, None, args, offset)
            if expanded is not None:
                return expanded
        return ast.Call(name, tuple(args), offset=offset, id=self.next_id())

    def _r_member_call(self, t: Tree[Any]) -> ast.Expr:
        operand, _dot, name_tok, paren, exprlist = t.children
        target = self._expr(operand)
        name = str(name_tok)
        args = self._args(exprlist)
        offset = self._pos(paren)
        if self.macros and isinstance(target, ast.Ident) and target.name == "cel" and name in CEL_MACROS:
            return self._expand_cel(name, args, offset)
        if self.macros:
            expanded = self._expand_macro(name, target, args, offset)
            if expanded is not None:
                return expanded
        return ast.Call(name, tuple(args), target=target, offset=offset, id=self.next_id())

    def _r_list_lit(self, t: Tree[Any]) -> ast.Expr:
        bracket = t.children[0]
        listinit = t.children[1] if len(t.children) > 1 else None
        elems: list[ast.Expr] = []
        optional: list[int] = []
        for item in self._flatten(listinit if isinstance(listinit, Tree) else None):
            question, value = item.children if isinstance(item, Tree) else (None, item)
            if question is not None:
                optional.append(len(elems))
            elems.append(self._expr(value))
        return ast.CreateList(
            tuple(elems), optional_indices=tuple(optional), offset=self._pos(bracket), id=self.next_id()
        )

    def _r_map_lit(self, t: Tree[Any]) -> ast.Expr:
        brace = t.children[0]
        inits = t.children[1] if len(t.children) > 1 else None
        entries: list[ast.MapEntry] = []
        if isinstance(inits, Tree):
            for init in self._flatten(inits):
                if not isinstance(init, Tree):
                    continue
                question, k, v = init.children
                key = self._expr(k)
                value = self._expr(v)
                entries.append(
                    ast.MapEntry(
                        key, value, optional=question is not None, offset=self._pos(init), id=self.next_id()
                    )
                )
        return ast.CreateMap(tuple(entries), offset=self._pos(brace), id=self.next_id())

    def _field_inits(self, inits: Tree[Any] | None) -> tuple[ast.FieldInit, ...]:
        fields: list[ast.FieldInit] = []
        if inits is None:
            return ()
        for init in self._flatten(inits):
            if not isinstance(init, Tree):
                continue
            question, name_tok, value = init.children
            if question is not None:
                raise self._error("optional field initialisers need a message type with fields", question)
            val = self._expr(value)
            fields.append(
                ast.FieldInit(self._ident_name(name_tok), val, offset=self._pos(name_tok), id=self.next_id())
            )
        return tuple(fields)

    def _r_message(self, t: Tree[Any]) -> ast.Expr:
        children = list(t.children)
        inits = children.pop()
        brace = children.pop()
        name = self._ident_name(children[-1])
        if len(children) == 2:
            name = "." + name
        return ast.CreateMessage(name, self._field_inits(inits), offset=self._pos(brace), id=self.next_id())

    def _r_dotted_message(self, t: Tree[Any]) -> ast.Expr:
        operand, _dot, name_tok, brace, inits = t.children
        prefix = self._qualified_name(operand)
        if prefix is None:
            raise self._error("expected a type name before '{'", operand)
        name = f"{prefix}.{self._ident_name(name_tok)}"
        return ast.CreateMessage(name, self._field_inits(inits), offset=self._pos(brace), id=self.next_id())

    def _qualified_name(self, item: Tree[Any] | Token) -> str | None:
        if not isinstance(item, Tree):
            return None
        kind = _base(str(item.data))
        if kind == "ident":
            toks = [c for c in item.children if isinstance(c, Token)]
            name = self._ident_name(toks[-1])
            return "." + name if len(toks) == 2 else name
        if kind == "select":
            operand, _dot, field_name = item.children
            prefix = self._qualified_name(operand)
            tok: Any = field_name.children[0] if isinstance(field_name, Tree) else field_name
            if prefix is None or _base(tok.type) != "IDENT":
                return None
            return f"{prefix}.{self._ident_name(tok)}"
        return None

    # -- literals ------------------------------------------------------------------------------

    def _literal_token(self, tok: Any, *, negate: bool = False, start: int | None = None) -> ast.Const:
        kind = _base(tok.type)
        text = str(tok)
        offset = start if start is not None else self._pos(tok)
        value: ast.ConstValue
        if kind == "INT_LIT":
            n = int(text, 16) if text[:2] in ("0x", "0X") else int(text)
            if negate:
                n = -n
            if not INT64_MIN <= n <= INT64_MAX:
                raise self._error("integer literal out of range", tok)
            value = n
        elif kind == "UINT_LIT":
            body = text[:-1]
            n = int(body, 16) if body[:2] in ("0x", "0X") else int(body)
            if n > UINT64_MAX:
                raise self._error("unsigned integer literal out of range", tok)
            value = ast.UInt(n)
        elif kind == "FLOAT_LIT":
            f = float(text)
            value = -f if negate else f
        elif kind == "STRING_LIT":
            value = self._decode_string(tok)
        elif kind == "TRUE":
            value = True
        elif kind == "FALSE":
            value = False
        elif kind == "NULL":
            value = ast.Null()
        else:
            raise self._error(f"unexpected token {text!r}", tok)
        return ast.Const(value, offset=offset, id=self.next_id())

    def _decode_string(self, tok: Token) -> str | bytes:
        text = str(tok)
        i = 0
        raw = is_bytes = False
        while text[i] not in "\"'":
            if text[i] in "rR":
                raw = True
            else:
                is_bytes = True
            i += 1
        body = text[i:]
        quote = body[:3] if body[:3] in ('"""', "'''") else body[0]
        body = body[len(quote) : -len(quote)]
        if raw:
            return body.encode("utf-8") if is_bytes else body
        try:
            return decode_escapes(body, is_bytes)
        except ValueError as e:
            raise self._error(str(e), tok) from None

    # -- macros --------------------------------------------------------------------------------

    def _expand_macro(
        self, name: str, target: ast.Expr | None, args: list[ast.Expr], offset: int
    ) -> ast.Expr | None:
        if name not in MACRO_NAMES:
            return None
        if name == "has":
            if target is not None or len(args) != 1:
                return None
            arg = args[0]
            if not isinstance(arg, ast.Select) or arg.test_only:
                raise self._error("invalid argument to has() macro", offset)
            return ast.Select(arg.operand, arg.field, test_only=True, offset=offset, id=self.next_id())
        if target is None:
            return None
        if name in ("optMap", "optFlatMap"):
            if len(args) != 2:
                return None
            return self._optional_map(name, target, self._macro_var(name, args[0], offset), args[1], offset)
        if name == "sortBy":
            if len(args) != 2:
                return None
            return self._sort_by(target, self._macro_var(name, args[0], offset), args[1], offset)
        arity = _MACRO_ARITY[name]
        if len(args) in arity.one_var:
            var = self._macro_var(name, args[0], offset)
            return self._fold(name, target, var, "", args[1:], offset)
        if len(args) in arity.two_var:
            first = self._macro_var(name, args[0], offset)
            second = self._macro_var(name, args[1], offset)
            if first == second:
                raise self._error(f"duplicate variable name '{first}' in {name}() macro", args[1].offset)
            return self._fold(name, target, first, second, args[2:], offset)
        return None

    def _macro_var(self, name: str, var: ast.Expr, offset: int) -> str:
        """The variable a macro binds (a simple identifier), else a CelError at the argument."""
        if not isinstance(var, ast.Ident) or var.name.startswith("."):
            raise self._error(
                f"argument is not an identifier in {name}() macro", getattr(var, "offset", offset)
            )
        if var.name == ast.ACCUMULATOR:
            raise self._error(f"iteration variable overwrites the accumulator in {name}() macro", var.offset)
        return var.name

    def _fold(
        self, name: str, target: ast.Expr, var: str, var2: str, rest: list[ast.Expr], offset: int
    ) -> ast.Comprehension:
        """The comprehension of a one- (`var2` empty) or two-variable macro; `rest` are its expressions."""
        acc = ast.ACCUMULATOR

        def accu() -> ast.Ident:
            return ast.Ident(acc, offset=offset, id=self.next_id())

        def call(fn: str, *a: ast.Expr) -> ast.Call:
            return ast.Call(fn, tuple(a), offset=offset, id=self.next_id())

        def const(value: ast.ConstValue) -> ast.Const:
            return ast.Const(value, offset=offset, id=self.next_id())

        def appended(value: ast.Expr) -> ast.Call:
            return call("_+_", accu(), ast.CreateList((value,), offset=offset, id=self.next_id()))

        def filtered(step: ast.Expr) -> ast.Expr:
            """`step` guarded by the optional filter (the first of two expressions)."""
            return call("_?_:_", rest[0], step, accu()) if len(rest) == 2 else step

        macro = "exists_one" if name == "existsOne" else name
        result: ast.Expr = accu()
        if macro == "all":
            init: ast.Expr = const(True)
            cond: ast.Expr = call("@not_strictly_false", accu())
            step: ast.Expr = call("_&&_", accu(), rest[0])
        elif macro == "exists":
            init = const(False)
            cond = call("@not_strictly_false", call("!_", accu()))
            step = call("_||_", accu(), rest[0])
        elif macro == "exists_one":
            init = const(0)
            cond = const(True)
            step = call("_?_:_", rest[0], call("_+_", accu(), const(1)), accu())
            result = call("_==_", accu(), const(1))
        elif macro in ("map", "transformList"):
            init = ast.CreateList((), offset=offset, id=self.next_id())
            cond = const(True)
            step = filtered(appended(rest[-1]))
        elif macro == "filter":
            init = ast.CreateList((), offset=offset, id=self.next_id())
            cond = const(True)
            step = call("_?_:_", rest[0], appended(ast.Ident(var, offset=offset, id=self.next_id())), accu())
        elif macro == "transformMap":
            init = ast.CreateMap((), offset=offset, id=self.next_id())
            cond = const(True)
            step = filtered(
                call(ast.MAP_INSERT, accu(), ast.Ident(var, offset=offset, id=self.next_id()), rest[-1])
            )
        else:  # transformMapEntry
            init = ast.CreateMap((), offset=offset, id=self.next_id())
            cond = const(True)
            step = filtered(call(ast.MAP_INSERT, accu(), rest[-1]))
        return ast.Comprehension(
            iter_var=var,
            iter_var2=var2,
            iter_range=target,
            accu_var=acc,
            accu_init=init,
            loop_condition=cond,
            loop_step=step,
            result=result,
            macro=macro,
            offset=offset,
            id=self.next_id(),
        )

    def _bind(
        self, var: str, init: ast.Expr, body: ast.Expr, offset: int, macro: str = "cel.bind"
    ) -> ast.Comprehension:
        """`cel.bind(var, init, body)`: a comprehension over an empty range whose accumulator is `var`
        (macro `cel.block` for a block's slot, which the code generator evaluates lazily)."""
        return ast.Comprehension(
            iter_var=ast.UNUSED,
            iter_range=ast.CreateList((), offset=offset, id=self.next_id()),
            accu_var=var,
            accu_init=init,
            loop_condition=ast.Const(False, offset=offset, id=self.next_id()),
            loop_step=ast.Ident(var, offset=offset, id=self.next_id()),
            result=body,
            macro=macro,
            offset=offset,
            id=self.next_id(),
        )

    def _optional_map(self, name: str, target: ast.Expr, var: str, body: ast.Expr, offset: int) -> ast.Expr:
        """`o.optMap(v, e)` / `o.optFlatMap(v, e)`: `o.hasValue() ? <e with v = o.value()> : optional.none()`."""
        has_value = ast.Call("hasValue", (), target=target, offset=offset, id=self.next_id())
        value = ast.Call("value", (), target=target, offset=offset, id=self.next_id())
        mapped: ast.Expr = self._bind(var, value, body, offset)
        if name == "optMap":
            mapped = ast.Call("optional.of", (mapped,), offset=offset, id=self.next_id())
        none = ast.Call("optional.none", (), offset=offset, id=self.next_id())
        return ast.Call("_?_:_", (has_value, mapped, none), offset=offset, id=self.next_id())

    def _sort_by(self, target: ast.Expr, var: str, key: ast.Expr, offset: int) -> ast.Expr:
        """`l.sortBy(v, key)` (cel-go's lists extension): `@sortByAssociatedKeys(l, l.map(v, key))` with
        `l` evaluated once (bound to a hidden variable, as cel-go's expansion does)."""
        bound = "@__sortBy_input__"

        def ident() -> ast.Ident:
            return ast.Ident(bound, offset=offset, id=self.next_id())

        keys = self._fold("map", ident(), var, "", [key], offset)
        sort = ast.Call("@sortByAssociatedKeys", (ident(), keys), offset=offset, id=self.next_id())
        return self._bind(bound, target, sort, offset)

    def _expand_cel(self, name: str, args: list[ast.Expr], offset: int) -> ast.Expr:
        """`cel.bind`, `cel.block`, `cel.index`, `cel.iterVar`, `cel.accuVar` (bindings and block extensions)."""
        if name == "bind":
            if len(args) != 3:
                raise self._error("cel.bind() takes a variable, an initial value and an expression", offset)
            var = self._macro_var("cel.bind", args[0], offset)
            return self._bind(var, args[1], args[2], offset)
        if name == "block":
            if len(args) != 2 or not isinstance(args[0], ast.CreateList) or args[0].optional_indices:
                raise self._error("cel.block() takes a list of expressions and an expression", offset)
            slots = args[0].elements
            for i, expr in enumerate((*slots, args[1])):
                for node in nodes(expr):
                    if isinstance(node, ast.Ident) and node.name.startswith("@index"):
                        if int(node.name[len("@index") :]) >= i:
                            what = "its own or a later slot" if i < len(slots) else "a slot the block lacks"
                            raise self._error(f"cel.index({node.name[6:]}) refers to {what}", node.offset)
            body = args[1]
            for i in reversed(range(len(slots))):
                body = self._bind(f"@index{i}", args[0].elements[i], body, offset, macro="cel.block")
            return body
        numbers = [a.value for a in args if isinstance(a, ast.Const) and type(a.value) is int]
        if name == "index" and len(args) == 1 and len(numbers) == 1 and numbers[0] >= 0:
            return ast.Ident(f"@index{numbers[0]}", offset=offset, id=self.next_id())
        if name in ("iterVar", "accuVar") and len(args) == 2 and len(numbers) == 2 and min(numbers) >= 0:
            prefix = "@it" if name == "iterVar" else "@ac"
            return ast.Ident(f"{prefix}:{numbers[0]}:{numbers[1]}", offset=offset, id=self.next_id())
        raise self._error(f"cel.{name}() takes non-negative int literals", offset)


@dataclass(frozen=True)
class _Arity:
    """The argument counts of a receiver macro with one and with two iteration variables."""

    one_var: tuple[int, ...]
    two_var: tuple[int, ...]


_MACRO_ARITY = {
    "all": _Arity((2,), (3,)),
    "exists": _Arity((2,), (3,)),
    "exists_one": _Arity((2,), (3,)),
    "existsOne": _Arity((2,), (3,)),
    "map": _Arity((2, 3), ()),
    "filter": _Arity((2,), ()),
    "transformList": _Arity((), (3, 4)),
    "transformMap": _Arity((), (3, 4)),
    "transformMapEntry": _Arity((), (3, 4)),
}


_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}

_ESCAPE_RE = re.compile(r"\\(.)", re.DOTALL)


def decode_escapes(body: str, is_bytes: bool) -> str | bytes:
    """Decode CEL escape sequences of a (non-raw) string or bytes literal body."""
    out_b = bytearray()
    out_s: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            if is_bytes:
                out_b += c.encode("utf-8")
            else:
                out_s.append(c)
            i += 1
            continue
        if i + 1 >= n:
            raise ValueError("invalid escape sequence at end of string")
        e = body[i + 1]
        if e in _SIMPLE_ESCAPES:
            ch = _SIMPLE_ESCAPES[e]
            if is_bytes:
                out_b += ch.encode()
            else:
                out_s.append(ch)
            i += 2
            continue
        if e in "xX":
            digits = body[i + 2 : i + 4]
            width = 2
        elif e == "u":
            digits = body[i + 2 : i + 6]
            width = 4
        elif e == "U":
            digits = body[i + 2 : i + 10]
            width = 8
        elif e in "0123":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(d not in "01234567" for d in digits):
                raise ValueError("invalid octal escape sequence")
            code = int(digits, 8)
            if is_bytes:
                out_b.append(code)
            else:
                out_s.append(chr(code))
            i += 4
            continue
        else:
            raise ValueError(f"invalid escape sequence \\{e}")
        if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise ValueError(f"invalid escape sequence \\{e}")
        code = int(digits, 16)
        if is_bytes:
            if width != 2:
                raise ValueError(f"\\{e} escapes are not allowed in bytes literals")
            out_b.append(code)
        else:
            if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
                raise ValueError("invalid unicode code point in escape sequence")
            out_s.append(chr(code))
        i += 2 + width
    return bytes(out_b) if is_bytes else "".join(out_s)
