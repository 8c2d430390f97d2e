"""Cost estimates of the library functions: every overload has one, and they grow with their operands."""

from __future__ import annotations

import pytest

from policyd.cel.checker import check
from policyd.cel.cost import DEFAULT_LIST_SIZE, estimate
from policyd.cel.ext.library import extension_libraries
from policyd.cel.k8s import k8s_libraries
from policyd.cel.library_costs import CONSTANT_FUNCTIONS
from policyd.cel.parser import parse_cel
from policyd.cel.program import CelCompileError, compile_expression, library_functions, standard_env
from policyd.cel.types import INT, STRING, list_of

ENV = standard_env(
    {"xs": list_of(INT), "ys": list_of(INT), "s": STRING, "names": list_of(STRING)},
    size_hints={"xs": 10, "ys": 20, "s": 40, "names": 30},
)


def cost(text: str) -> int:
    expr = parse_cel(text)
    result = check(expr, ENV)
    assert result.issues == ()
    return estimate(expr, result, ENV)


def test_every_library_overload_has_a_cost_decision() -> None:
    functions = library_functions()
    undecided = [
        o.id
        for library in (*extension_libraries(), *k8s_libraries())
        for name, decl in library.items()
        for o in functions[name].overloads
        if o.id in {x.id for x in decl.overloads} and o.cost is None and name not in CONSTANT_FUNCTIONS
    ]
    assert undecided == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s.lowerAscii()", 1 + 4),  # identifier + ceil(40 * 0.1)
        ("s.reverse()", 1 + 4),
        ("strings.quote(s)", 1 + 4),
        ("jsonpatch.escapeKey(s)", 1 + 4),
        ("xs.reverse()", 1 + 10),
        ("xs.distinct()", 1 + 100),
        ("xs.sort()", 1 + 10 * 4),
        ("sets.contains(xs, ys)", 2 + 200),
        ("sets.intersects(xs, ys)", 2 + 200),
        ("math.greatest(xs)", 1 + 10),
        ("math.greatest(1, 2, 3)", 3),
        ("names.join(',')", 1 + 30),
        ("s.find('[a-z]+')", 1 + 5 * 2),  # ceil(41 * 0.1) * ceil(6 * 0.25)
        ("lists.range(3)", DEFAULT_LIST_SIZE),
        ("ip(s).family()", 1 + 4 + 1),
        ("format.dns1123Label().validate(s)", 1 + 1 + 5 * 15),
    ],
)
def test_library_call_costs(text: str, expected: int) -> None:
    assert cost(text) == expected


def test_quadratic_functions_trip_the_cost_limit() -> None:
    limited = ENV.extend(cost_limit=1_000)
    compile_expression("xs.distinct()", limited)
    with pytest.raises(CelCompileError, match="exceeds the limit"):
        compile_expression("xs.map(x, sets.contains(ys, xs.distinct()))", limited)
