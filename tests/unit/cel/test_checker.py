"""The CEL type checker: resolution, selection, overloads, literals, comprehensions, reads."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from policyd.cel import syntax as ast
from policyd.cel.checker import check, container_candidates
from policyd.cel.env import CelEnv, CheckResult, FunctionDecl, Overload
from policyd.cel.parser import parse_cel
from policyd.cel.program import standard_env
from policyd.cel.stdlib import standard_functions
from policyd.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    ERROR,
    INT,
    NULL,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    CelType,
    ObjectType,
    TypeParam,
    TypeType,
    list_of,
    map_of,
)
from tests.conformance.cel_spec import PROTO_DIR, sample_files

A = TypeParam("A")
B = TypeParam("B")


def _fn(name: str, *overloads: tuple[str, tuple[CelType, ...], CelType] | Overload) -> FunctionDecl:
    ovs = tuple(o if isinstance(o, Overload) else Overload(o[0], o[1], o[2]) for o in overloads)
    return FunctionDecl(name, ovs)


def _member(oid: str, params: tuple[CelType, ...], result: CelType) -> Overload:
    return Overload(oid, params, result, member=True)


def mini_stdlib() -> dict[str, FunctionDecl]:
    """The standard library plus a namespaced function."""
    fns = dict(standard_functions())
    fns["team.quota"] = _fn("team.quota", ("team_quota_string", (STRING,), INT))
    return fns


TOLERATION = ObjectType("Toleration", {"key": STRING, "effect": STRING})
POD = ObjectType(
    "Pod",
    {
        "name": STRING,
        "priority": INT,
        "requests": map_of(STRING, INT),
        "labels": map_of(STRING, STRING),
        "tolerations": list_of(TOLERATION),
    },
)
NODE = ObjectType(
    "Node",
    {
        "name": STRING,
        "free": map_of(STRING, INT),
        "labels": map_of(STRING, STRING),
        "pods": list_of(POD),
    },
)


def env(**changes: object) -> CelEnv:
    base = CelEnv(
        variables={"pod": POD, "node": NODE, "x": INT, "cluster": DYN, "a.b": map_of(STRING, INT)},
        functions=mini_stdlib(),
    )
    return base.extend(**changes)


def run(text: str, e: CelEnv | None = None) -> CheckResult:
    return check(parse_cel(text), e or env())


def type_of(text: str, e: CelEnv | None = None) -> CelType:
    r = run(text, e)
    assert r.issues == (), r.issues
    return r.type


def messages(text: str, e: CelEnv | None = None) -> list[str]:
    return [i.message for i in run(text, e).issues]


# -- literals and operators --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", INT),
        ("1u", UINT),
        ("1.5", DOUBLE),
        ("'s'", STRING),
        ("true", BOOL),
        ("null", NULL),
        ("1 + 2", INT),
        ("'a' + 'b'", STRING),
        ("[1, 2]", list_of(INT)),
        ("[1, 'a']", list_of(DYN)),
        ("[]", list_of(DYN)),
        ("{'a': 1}", map_of(STRING, INT)),
        ("{'a': 1, 2: 'x'}", map_of(DYN, DYN)),
        ("[1] + []", list_of(INT)),
        ("[[], [1]]", list_of(list_of(INT))),
        ("true ? 1 : 2", INT),
        ("true ? 1 : dyn('a')", DYN),
        ("true ? [] : [1]", list_of(INT)),
        ("1 == 1", BOOL),
        ("[1] == [1]", BOOL),
        ("dyn(1) == 1.0", BOOL),
        ("[1, 2][0]", INT),
        ("{'a': 1}['a']", INT),
        ("2 in [1, 2]", BOOL),
        ("'a' in {'a': 1}", BOOL),
        ("size([1])", INT),
        ("[1].size()", INT),
        ("'abc'.contains('b')", BOOL),
        ("1 > 2.0", BOOL),
    ],
)
def test_expression_types(text: str, expected: CelType) -> None:
    assert type_of(text) == expected


def test_no_matching_overload_names_the_argument_types() -> None:
    r = run("1 + 1.0")
    assert [i.message for i in r.issues] == [
        "found no matching overload for '_+_' applied to '(int, double)'"
    ]
    assert r.issues[0].offset == 2
    assert r.type == ERROR


def test_member_no_matching_overload_formats_receiver() -> None:
    assert messages("1.contains('a')") == [
        "found no matching overload for 'contains' applied to 'int.(string)'"
    ]


def test_heterogeneous_equality_follows_declarations() -> None:
    assert messages("1 == 1.0") == ["found no matching overload for '_==_' applied to '(int, double)'"]
    hetero = dict(mini_stdlib())
    hetero["_==_"] = _fn("_==_", ("equals", (A, B), BOOL))
    assert type_of("1 == 1.0", env(functions=hetero)) == BOOL


def test_errors_do_not_cascade() -> None:
    assert messages("(y + 1) * 2 == 'a'") == ["undeclared reference to 'y' (in container '')"]


def test_overloads_are_recorded_per_call() -> None:
    e = parse_cel("1 + 2")
    r = check(e, env())
    assert r.overloads[e.id] == ("add_int64",)
    dyn_call = parse_cel("dyn(1) + 2")
    r = check(dyn_call, env())
    assert set(r.overloads[dyn_call.id]) == {"add_int64"}
    both = parse_cel("dyn(1) + dyn(2)")
    r = check(both, env())
    assert set(r.overloads[both.id]) == {o.id for o in standard_functions()["_+_"].overloads}
    assert r.type == DYN


def test_type_param_binding_flows_to_result() -> None:
    assert type_of("[[1]][0]") == list_of(INT)
    assert type_of("{'a': [1.0]}['a']") == list_of(DOUBLE)
    assert messages("[1] + ['a']") == [
        "found no matching overload for '_+_' applied to '(list(int), list(string))'"
    ]


def test_logical_and_ternary_conditions_must_be_bool() -> None:
    assert type_of("true && x > 1") == BOOL
    assert messages("1 && true") == ["found no matching overload for '_&&_' applied to '(int, bool)'"]
    assert messages("'a' ? 1 : 2") == [
        "found no matching overload for '_?_:_' applied to '(string, int, int)'"
    ]
    assert type_of("dyn(1) || false") == BOOL


@pytest.mark.parametrize(
    ("text", "signature"),
    [
        ("true ? 1 : 'a'", "(bool, int, string)"),
        ("true ? 0 : 1.5", "(bool, int, double)"),
        ("false ? ['a'] : [1]", "(bool, list(string), list(int))"),
        ("false ? 'a' : null", "(bool, string, null_type)"),
    ],
)
def test_ternary_branches_must_have_one_type(text: str, signature: str) -> None:
    """`_?_:_` is (bool, A, A) -> A (cel-spec, cel-go): a score `c ? "x" : 1` was checked as dyn and passed lint."""
    assert messages(text) == [f"found no matching overload for '_?_:_' applied to '{signature}'"]


# -- identifiers ------------------------------------------------------------------------------------


def test_undeclared_reference_mentions_container() -> None:
    r = run("1 + y", env(container="policyd.io"))
    assert [i.message for i in r.issues] == ["undeclared reference to 'y' (in container 'policyd.io')"]
    assert r.issues[0].offset == 4


def test_container_candidates_order() -> None:
    assert container_candidates("x", "a.b.c") == ["a.b.c.x", "a.b.x", "a.x", "x"]
    assert container_candidates(".x", "a.b") == ["x"]
    assert container_candidates("x", "") == ["x"]


def test_container_resolution_prefers_most_qualified() -> None:
    e = env(variables={"a.b.x": STRING, "a.x": DOUBLE}, container="a.b.c")
    expr = parse_cel("x")
    r = check(expr, e)
    assert r.type == STRING and r.references[expr.id] == "a.b.x"
    assert type_of(".a.x", e) == DOUBLE
    assert type_of("x", env(container="a.b.c")) == INT


def test_qualified_variable_names_and_functions() -> None:
    assert type_of("a.b['k']") == INT
    assert type_of("a.b.k") == INT
    r = run("a.b.k")
    assert r.reads == {"a.b.k"}
    call = parse_cel("team.quota('x')")
    r = check(call, env())
    assert r.type == INT and r.issues == ()
    assert r.references[call.id] == "team.quota"
    assert r.overloads[call.id] == ("team_quota_string",)


@pytest.mark.parametrize(
    ("text", "of"),
    [("int", INT), ("uint", UINT), ("string", STRING), ("null_type", NULL), ("type", TYPE)],
)
def test_type_names_are_values(text: str, of: CelType) -> None:
    assert type_of(text) == TypeType(of)


def test_type_values_compare() -> None:
    assert type_of("type(1) == int") == BOOL
    assert type_of("type(type(1)) == type(type(1u))") == BOOL
    assert type_of("google.protobuf.Timestamp") == TypeType(TIMESTAMP)
    assert type_of("google.protobuf.Duration") == TypeType(DURATION)
    assert type_of("type(duration('1s')) == google.protobuf.Duration") == BOOL


def test_local_variables_shadow_declarations() -> None:
    assert type_of("['a'].all(x, x.startsWith('a'))") == BOOL
    assert type_of("[1].map(x, [x].map(x, 'a'))") == list_of(list_of(STRING))


# -- field selection -----------------------------------------------------------------------------------


def test_object_fields_and_unknown_field_offset() -> None:
    assert type_of("node.free") == map_of(STRING, INT)
    assert type_of("node.free.cpu") == INT
    r = run("node.fre.cpu > 1")
    assert [i.message for i in r.issues] == ["undefined field 'fre' on type 'Node'"]
    assert r.issues[0].offset == 5  # the 'f' of 'fre'


@pytest.mark.parametrize(
    ("text", "message", "near"),
    [
        ("node.fre.cpu > 1", "undefined field 'fre' on type 'Node'", "free"),
        ("pod.nmae", "undefined field 'nmae' on type 'Pod'", "name"),
        ("pod.frobnicate", "undefined field 'frobnicate' on type 'Pod'", None),
        ("[1].all(item, itme > 0)", "undeclared reference to 'itme' (in container '')", "item"),
        ("nod.name", "undeclared reference to 'nod' (in container '')", "node"),
        ("node.pods.exist(p, true)", "undeclared reference to 'exist' (in container '')", "exists"),
        ("sizee(node.pods)", "undeclared reference to 'sizee' (in container '')", "size"),
        ("frobnicate(1)", "undeclared reference to 'frobnicate' (in container '')", None),
    ],
)
def test_an_unknown_name_names_the_known_one_it_is_a_slip_of(
    text: str, message: str, near: str | None
) -> None:
    """The message stays cel-go's; the slip is beside it, for the policy checker's "did you mean"."""
    issues = run(text).issues
    assert [(i.message, i.near) for i in issues if i.message == message] == [(message, near)]


def test_selection_on_other_types() -> None:
    assert type_of("dyn(x).anything.goes") == DYN
    assert messages("x.y") == ["type 'int' does not support field selection"]
    assert messages("{1: 2}.a") == ["field selection on a map with key type 'int' (keys must be strings)"]


def test_has_macro() -> None:
    assert type_of("has(node.free.cpu)") == BOOL
    assert type_of("has(pod.name)") == BOOL
    assert messages("has(pod.nme)") == ["undefined field 'nme' on type 'Pod'"]
    assert messages("has(x.y)") == ["type 'int' does not support presence test"]


# -- comprehensions -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2].all(e, e > 0)", BOOL),
        ("[1, 2].exists_one(e, e > 0)", BOOL),
        ("[1, 2].map(e, e * 2)", list_of(INT)),
        ("[1, 2].map(e, e > 1, 'x')", list_of(STRING)),
        ("[1, 2].filter(e, e > 1)", list_of(INT)),
        ("{'a': 1}.map(k, k)", list_of(STRING)),
        ("{'a': 1, 1: 2}.exists(k, k == 2)", BOOL),
        ("dyn([1]).map(e, e)", list_of(DYN)),
        ("node.pods.filter(p, p.priority > 0).map(p, p.name)", list_of(STRING)),
        ("node.pods.all(p, p.tolerations.exists(t, t.key == 'k'))", BOOL),
        ("['s'].filter(s, ['a'].all(a, true))", list_of(STRING)),
    ],
)
def test_macro_types(text: str, expected: CelType) -> None:
    assert type_of(text) == expected


def test_comprehension_range_must_be_iterable() -> None:
    r = run("x.all(e, true)")
    assert [i.message for i in r.issues] == [
        "expression of type 'int' cannot be the range of a comprehension (must be list, map, or dynamic)"
    ]


def test_comprehension_body_errors_reported_once() -> None:
    assert messages("node.pods.all(p, p.prio > 0)") == ["undefined field 'prio' on type 'Pod'"]


def test_hand_built_comprehension_scopes() -> None:
    # fold over [1, 2] with an accumulator of type double
    comp = ast.Comprehension(
        iter_var="i",
        iter_range=ast.CreateList((ast.Const(1, id=2), ast.Const(2, id=3)), id=1),
        accu_var="acc",
        accu_init=ast.Const(0.0, id=4),
        loop_condition=ast.Const(True, id=5),
        loop_step=ast.Ident("acc", id=6),
        result=ast.Call("_>_", (ast.Ident("acc", id=8), ast.Const(1.0, id=9)), id=7),
        id=10,
    )
    r = check(comp, env())
    assert r.issues == ()
    assert r.type == BOOL
    assert r.types[6] == DOUBLE
    bad_result = ast.Comprehension(
        iter_var="i",
        iter_range=ast.CreateList((), id=1),
        accu_var="acc",
        accu_init=ast.Const(0, id=2),
        loop_condition=ast.Const(True, id=3),
        loop_step=ast.Ident("acc", id=4),
        result=ast.Ident("i", id=5),  # the iteration variable is out of scope in the result
        id=6,
    )
    assert [i.message for i in check(bad_result, env()).issues] == [
        "undeclared reference to 'i' (in container '')"
    ]


# -- reads -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reads"),
    [
        ("node.free.cpu > 1", {"node.free"}),
        ("pod.requests['cpu'] > 1", {"pod.requests"}),
        ("size(node.pods) > 0 && pod.priority > 0", {"node.pods", "pod.priority"}),
        ("size([node]) > 0", {"node"}),
        ("m['k'].size() > 0", {"m.k"}),
        ("m[pod.name].size() > 0", {"m", "pod.name"}),
        ("has(node.labels.zone)", {"node.labels"}),
        ("cluster.count(pod) > 0", {"cluster", "pod"}),
        ("dyn(cluster).foo.bar", {"cluster"}),
        ("node.pods.exists(p, p.priority > pod.priority)", {"node.pods", "pod.priority"}),
        ("[1].all(node, node > 0)", set()),
        ("x + 1 > 0", {"x"}),
    ],
)
def test_reads(text: str, reads: set[str]) -> None:
    functions = dict(mini_stdlib())
    functions["count"] = _fn("count", _member("cluster_count", (DYN, POD), INT))
    r = run(text, env(functions=functions, variables={"m": map_of(STRING, list_of(INT))}))
    assert r.issues == ()
    assert r.reads == reads


def test_types_side_table_covers_nodes() -> None:
    e = parse_cel("node.free['cpu'] + 1")
    r = check(e, env())
    assert r.types[e.id] == INT
    assert isinstance(e, ast.Call)
    index = e.args[0]
    assert r.types[index.id] == INT
    assert isinstance(index, ast.Call)
    assert r.types[index.args[0].id] == map_of(STRING, INT)


# -- the CEL conformance suite: every valid program type-checks -------------------------------------


def _conformance_pool() -> tuple[descriptor_pool.DescriptorPool, type[Message]]:
    """Compile cel-spec's protos into a private descriptor pool (no global registration)."""
    import grpc_tools
    from grpc_tools import protoc

    proto_root = PROTO_DIR
    include = Path(grpc_tools.__file__).parent / "_proto"
    files = [str(p.relative_to(proto_root)) for p in proto_root.rglob("*.proto")]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cel.pb"
        args = [
            "protoc",
            f"-I{proto_root}",
            f"-I{include}",
            "--include_imports",
            f"--descriptor_set_out={out}",
        ]
        assert protoc.main([*args, *files]) == 0
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    test_file = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("cel.expr.conformance.test.SimpleTestFile")
    )
    return pool, test_file


_PRIMITIVES = {1: BOOL, 2: INT, 3: UINT, 4: DOUBLE, 5: STRING, 6: BYTES}


def _decl_type(t: Any) -> CelType | None:
    """The CelType of a cel.expr.Type, or None when it needs protobuf message types."""
    kind = t.WhichOneof("type_kind")
    if kind == "primitive":
        return _PRIMITIVES.get(t.primitive)
    if kind == "dyn":
        return DYN
    if kind == "null":
        return NULL
    if kind == "list_type":
        elem = _decl_type(t.list_type.elem_type)
        return None if elem is None else list_of(elem)
    if kind == "map_type":
        k, v = _decl_type(t.map_type.key_type), _decl_type(t.map_type.value_type)
        return None if k is None or v is None else map_of(k, v)
    return None


def _conformance_cases() -> list[Any]:
    pool, test_file = _conformance_pool()
    cases = []
    for path in sample_files():
        parsed = text_format.Parse(path.read_text(encoding="utf-8"), test_file(), descriptor_pool=pool)
        for section in parsed.section:
            for t in section.test:
                if t.disable_check or t.WhichOneof("result_matcher") not in (None, "value"):
                    continue
                if "TestAllTypes" in t.expr or t.value.WhichOneof("kind") == "object_value":
                    continue
                declared = {d.name: _decl_type(d.ident.type) for d in t.type_env}
                if any(v is None for v in declared.values()):
                    continue
                variables: dict[str, CelType] = {name: DYN for name in t.bindings}
                variables.update({k: v for k, v in declared.items() if v is not None})
                case = (t.expr, variables, t.container, not t.disable_macros)
                cases.append(pytest.param(*case, id=f"{path.stem}/{section.name}/{t.name}"))
    return cases


CONFORMANCE_CASES = _conformance_cases()


def test_conformance_selection_is_not_empty() -> None:
    assert len(CONFORMANCE_CASES) > 400


@pytest.mark.parametrize(("text", "variables", "container", "macros"), CONFORMANCE_CASES)
def test_conformance_programs_type_check(
    text: str, variables: dict[str, CelType], container: str, macros: bool
) -> None:
    e = CelEnv(variables=variables, functions=standard_functions(), container=container)
    r = check(parse_cel(text, macros=macros), e)
    assert r.issues == ()
    assert r.type != ERROR


# -- robustness: the checker never raises, and issues point inside the text ----------------------------

_ATOMS = [
    "x",
    "y",
    "1",
    "1u",
    "2.5",
    "'s'",
    "b'b'",
    "null",
    "true",
    "pod",
    "node",
    "int",
    "[]",
    "{}",
    "[1, 'a']",
]
_SUFFIXES = [".free", ".pods", ".name", ".fre", "['k']", "[0]", ".size()", ".contains('a')"]
_BINOPS = [" + ", " - ", " * ", " == ", " != ", " < ", " && ", " || ", " in "]


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 0) -> str:
    text = draw(st.sampled_from(_ATOMS))
    for suffix in draw(st.lists(st.sampled_from(_SUFFIXES), max_size=2)):
        text += suffix
    if depth < 2:
        choice = draw(st.integers(0, 4))
        if choice == 1:
            text = f"({text}{draw(st.sampled_from(_BINOPS))}{draw(_expressions(depth + 1))})"
        elif choice == 2:
            text = f"{text}.all(e, {draw(_expressions(depth + 1))})"
        elif choice == 3:
            text = f"{text}.map(e, {draw(_expressions(depth + 1))})"
        elif choice == 4:
            text = f"({text} ? {draw(_expressions(depth + 1))} : {draw(_expressions(depth + 1))})"
    return text


@settings(max_examples=300, deadline=None)
@given(_expressions())
def test_checker_never_raises(text: str) -> None:
    r = check(parse_cel(text), env())
    assert all(0 <= i.offset < len(text) for i in r.issues)
    if not r.issues:
        assert r.type != ERROR


# -- homogeneous aggregate literals (Kubernetes' base environment) --------------------------------

HOMOGENEOUS = standard_env({"d": DYN, "n": INT}).extend(kubernetes_validators=True)


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("[1, 'a']", "expected type 'int' but found 'string'", 5),
        ("3 in [1, 2, '3']", "expected type 'int' but found 'string'", 13),  # cel-go's own example
        ("[1, 2.0]", "expected type 'int' but found 'double'", 5),
        ("[null, 1]", "expected type 'null_type' but found 'int'", 8),
        ("[1, dyn(2)]", "expected type 'int' but found 'dyn'", 8),  # a call is at its '(' as in cel-go
        ("[d, 1]", "expected type 'dyn' but found 'int'", 5),
        ("{'a': 1, 'b': 'x'}", "expected type 'int' but found 'string'", 15),
        ("{1: 'a', 'b': 'c'}", "expected type 'int' but found 'string'", 10),
        ("[[], ['a'], [1]]", "expected type 'list(string)' but found 'list(int)'", 13),
        ("[?optional.of(1), 'x']", "expected type 'int' but found 'string'", 19),
        ("[1].map(x, [x, 'a'])", "expected type 'int' but found 'string'", 16),
        ("'%s'.format([[1].map(y, [1, 'a'])]) == ''", "expected type 'int' but found 'string'", 29),
    ],
)
def test_homogeneous_literals_reject_mixed_types(text: str, message: str, column: int) -> None:
    result = check(parse_cel(text), HOMOGENEOUS)
    assert [issue.message for issue in result.issues] == [message]
    assert result.issues[0].offset == column - 1


@pytest.mark.parametrize(
    "text",
    [
        "[1, 2, 3]",
        "[n, 1]",
        "[[], [1]]",  # the empty list's element type is the other's
        "{'a': [], 'b': [1]}",
        "[?optional.of(1), 2]",
        "'%s %d'.format(['a', 1])",  # format's arguments are exempt, nested literals too
        "'%s'.format([[1, 'a'], {'k': 1, 'v': 'x'}])",
    ],
)
def test_homogeneous_literals_accept(text: str) -> None:
    assert check(parse_cel(text), HOMOGENEOUS).issues == ()


def test_mixed_literals_are_allowed_without_the_option() -> None:
    plain = CelEnv(functions=standard_functions())
    assert check(parse_cel("[1, 'a', 2.0, null]"), plain).issues == ()


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("duration('1x') > duration('1s')", "invalid duration argument", 10),
        ("timestamp('yesterday') < timestamp('2024-01-01T00:00:00Z')", "invalid timestamp argument", 11),
    ],
)
def test_kubernetes_validators_reject_literals_that_do_not_convert(
    text: str, message: str, column: int
) -> None:
    result = check(parse_cel(text), HOMOGENEOUS)
    assert [(issue.message.partition(":")[0], issue.offset + 1) for issue in result.issues] == [
        (message, column)
    ]
    assert "'1x'" in result.issues[0].message or "'yesterday'" in result.issues[0].message


def test_kubernetes_validators_reject_unix_seconds_out_of_the_timestamp_range() -> None:
    result = check(parse_cel("timestamp(-62135596801) < timestamp(253402300799)"), HOMOGENEOUS)
    assert [(issue.message, issue.offset + 1) for issue in result.issues] == [
        ("invalid timestamp argument: timestamp out of range", 11)
    ]


def test_conversions_of_good_literals_and_of_non_literals_pass_the_validators() -> None:
    text = "duration('1h30m') < duration(string(n) + 's') && timestamp('2024-01-01T00:00:00Z') < timestamp(n)"
    assert check(parse_cel(text), HOMOGENEOUS).issues == ()
    assert check(parse_cel("duration('1x') > duration('1s')"), standard_env()).issues == ()
