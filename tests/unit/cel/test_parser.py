"""Tests of the CEL grammar and AST builder."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lark import Lark, Tree

from policyd.cel import syntax as ast
from policyd.cel.parser import GRAMMAR_DIR, CelTreeBuilder, parse_cel
from policyd.cel.program import compile_expression, standard_env
from policyd.errors import CelError


def _ids(node: object, out: list[int]) -> list[int]:
    if isinstance(node, ast.Node):
        out.append(node.id)
        for value in vars(node).values():
            if isinstance(value, tuple):
                for v in value:
                    _ids(v, out)
            else:
                _ids(value, out)
    return out


def test_precedence_mul_over_add() -> None:
    e = parse_cel("1 + 2 * 3")
    assert isinstance(e, ast.Call) and e.function == "_+_"
    assert isinstance(e.args[1], ast.Call) and e.args[1].function == "_*_"


def test_relations_and_logic_precedence() -> None:
    e = parse_cel("a < b && c || d in e")
    assert isinstance(e, ast.Call) and e.function == "_||_"
    left, right = e.args
    assert isinstance(left, ast.Call) and left.function == "_&&_"
    assert isinstance(right, ast.Call) and right.function == "@in"


def test_ternary_is_right_associative() -> None:
    e = parse_cel("a ? b : c ? d : f")
    assert isinstance(e, ast.Call) and e.function == "_?_:_"
    assert isinstance(e.args[2], ast.Call) and e.args[2].function == "_?_:_"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("0x1F", 31),
        ("-9223372036854775808", -(2**63)),
        ("1u", ast.UInt(1)),
        ("0xFFu", ast.UInt(255)),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("1.5e-2", 0.015),
        ('"a\\nb"', "a\nb"),
        ("'\\x41\\101\\u00e9\\U0001F600'", "AA\u00e9\U0001f600"),
        ('r"a\\nb"', "a\\nb"),
        ('"""x\ny"""', "x\ny"),
        ("'''it's'''", "it's"),
        ('b"\\xff\\000"', b"\xff\x00"),
        ('b"é"', "é".encode()),
        ('rb"\\x"', b"\\x"),
        ("true", True),
        ("null", ast.Null()),
    ],
)
def test_literals(text: str, value: object) -> None:
    e = parse_cel(text)
    assert isinstance(e, ast.Const)
    assert e.value == value and type(e.value) is type(value)


@pytest.mark.parametrize(
    "text",
    [
        "1 +",
        "if",
        "9223372036854775808",
        "18446744073709551616u",
        '"\\q"',
        'b"\\u0041"',
        "f(1,)",
        "(",
        "a.b(",
        "1 = 2",
    ],
)
def test_syntax_errors(text: str) -> None:
    with pytest.raises(CelError):
        parse_cel(text)


@pytest.mark.parametrize("text", ["x inlist", "1 in[1] && 2 inx", "a innode.labels"])
def test_in_is_a_word_not_a_prefix(text: str) -> None:
    """`a innode.labels` parsed as `a in node.labels`; in cel-go `innode` is one identifier."""
    with pytest.raises(CelError, match="syntax error: unexpected 'in"):
        parse_cel(text)


def test_error_position() -> None:
    with pytest.raises(CelError) as info:
        parse_cel("a &&\n  b +")
    assert info.value.line == 2
    assert info.value.offset == len("a &&\n  b +")


def test_macros_expand_to_comprehensions() -> None:
    e = parse_cel("[1, 2].all(x, x > 0)")
    assert isinstance(e, ast.Comprehension)
    assert e.macro == "all" and e.iter_var == "x" and e.accu_var == ast.ACCUMULATOR
    assert isinstance(e.loop_condition, ast.Call) and e.loop_condition.function == "@not_strictly_false"
    h = parse_cel("has(a.b)")
    assert isinstance(h, ast.Select) and h.test_only and h.field == "b"
    m = parse_cel("l.map(x, x > 1, x * 2)")
    assert isinstance(m, ast.Comprehension) and m.macro == "map"


def test_macros_disabled() -> None:
    e = parse_cel("[1].all(x, x > 0)", macros=False)
    assert isinstance(e, ast.Call) and e.function == "all" and e.target is not None


def test_bad_macro_argument() -> None:
    with pytest.raises(CelError):
        parse_cel("has(a)")
    with pytest.raises(CelError):
        parse_cel("[1].all(1, true)")


def test_message_literal_and_leading_dot() -> None:
    e = parse_cel("a.b.C{f: 1, g: 'x',}")
    assert isinstance(e, ast.CreateMessage) and e.type_name == "a.b.C"
    assert [f.field for f in e.fields] == ["f", "g"]
    i = parse_cel(".x")
    assert isinstance(i, ast.Ident) and i.name == ".x"


def test_trailing_commas() -> None:
    lst = parse_cel("[1, 2,]")
    assert isinstance(lst, ast.CreateList) and len(lst.elements) == 2
    m = parse_cel("{'a': 1, 'b': 2,}")
    assert isinstance(m, ast.CreateMap) and len(m.entries) == 2


def test_node_ids_unique() -> None:
    e = parse_cel("[1, 2, 3].map(x, x * 2).filter(y, y > 2).size() + {'a': 1}['a']")
    ids = _ids(e, [])
    assert len(ids) == len(set(ids)) and 0 not in ids


def test_embedding_in_another_grammar() -> None:
    grammar = r"""
    start: item+
    item: NAME "=" cel_expr ";"
    NAME: /[a-z]+/
    %import cel.expr -> cel_expr
    %import common.WS
    %ignore WS
    """
    parser = Lark(grammar, parser="lalr", propagate_positions=True, import_paths=[GRAMMAR_DIR])
    text = "aa = 1 + 2;\nbb = x.exists(v, v > 3);"
    tree = parser.parse(text)
    builder = CelTreeBuilder()
    exprs = [builder.build(item.children[1]) for item in tree.children if isinstance(item, Tree)]
    first, second = exprs
    assert isinstance(first, ast.Call) and first.offset == text.index("+")
    assert isinstance(second, ast.Comprehension) and second.iter_range.offset == text.index("x.")
    ids = _ids(first, []) + _ids(second, [])
    assert len(ids) == len(set(ids))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_int_literals_roundtrip(n: int) -> None:
    e = parse_cel(str(n))
    assert isinstance(e, ast.Const) and e.value == n


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_string_literals_roundtrip(s: str) -> None:
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    e = parse_cel(f'"{escaped}"')
    assert isinstance(e, ast.Const) and e.value == s


def test_reserved_words_are_field_names_after_a_dot_but_not_identifiers() -> None:
    tree = parse_cel("pod.namespace")
    assert isinstance(tree, ast.Select) and tree.field == "namespace"
    call = parse_cel("x.package()")
    assert isinstance(call, ast.Call) and call.function == "package"
    with pytest.raises(CelError, match="reserved identifier: namespace"):
        parse_cel("namespace")


def test_backquoted_field_names_select_any_text() -> None:
    e = parse_cel("m.`content-type`")
    assert isinstance(e, ast.Select) and e.field == "content-type"
    assert ast.qualified_name(e) is None  # never resolved as a dotted name
    has = parse_cel("has(m.`a.b/c d`)")
    assert isinstance(has, ast.Select) and has.test_only and has.field == "a.b/c d"
    assert compile_expression("{'a-b': 1}.`a-b`", standard_env()).evaluate({}) == 1


@pytest.mark.parametrize("text", ["m.`a`b`", "m.``", "`a`", "m.`a+b`"])
def test_backquotes_outside_field_names_are_syntax_errors(text: str) -> None:
    with pytest.raises(CelError, match="syntax error"):
        parse_cel(text)
