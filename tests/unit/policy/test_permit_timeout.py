"""A permit timeout is a constant: lint evaluates it and names file, line and column; so does a load.
A constant minMember is evaluated too: below 1 it is an error."""

from __future__ import annotations

import pytest

from policyd.compiler.profiles import compile_sources
from policyd.errors import PolicyError
from policyd.policy.loader import load_texts

PERMIT = 'policy g {{\n  permit gang {{\n    group = pod.labels["g"]\n    minMember = 2\n    timeout = {}\n  }}\n}}\n'


@pytest.mark.parametrize(
    "timeout,column,message",
    [
        # the literal itself (Kubernetes' validators), before the timeout is evaluated
        ('duration("banana")', 24, "invalid duration argument: invalid duration 'banana'"),
        ('duration("-5s")', 15, "permit 'gang': timeout: must not be negative"),
        (
            'duration(pod.annotations["t"])',
            24,
            "a permit timeout is a constant, evaluated once when the policy is loaded: it cannot read 'pod'",
        ),
    ],
)
def test_bad_timeouts_are_lint_errors_at_their_place(timeout: str, column: int, message: str) -> None:
    texts = {"/p/g.policy": PERMIT.format(timeout)}
    errors = [(d.span.line, d.span.column, d.message) for d in load_texts(texts).errors]
    assert errors == [(5, column, message)]
    with pytest.raises(PolicyError) as info:
        compile_sources(texts, generation=1)
    assert [str(d.span) for d in info.value.errors] == [f"/p/g.policy:5:{column}"]


def test_a_constant_timeout_reaches_the_permit() -> None:
    compiled = compile_sources({"/p/g.policy": PERMIT.format('duration("90s")')}, generation=1)
    assert compiled.profiles["policyd"].permits[0].timeout_seconds == 90.0


MIN_MEMBER = 'policy g {{\n  permit gang {{\n    group = pod.labels["g"]\n    minMember = {}\n  }}\n}}\n'


@pytest.mark.parametrize(
    "min_member,message",
    [
        ("0", "permit 'gang': minMember: 0 is below 1 (the group's pods would never wait for each other)"),
        ("-3", "permit 'gang': minMember: -3 is below 1 (the group's pods would never wait for each other)"),
        ("4 / 0", "permit 'gang': minMember: division by zero"),
    ],
)
def test_a_constant_min_member_below_one_is_a_lint_error(min_member: str, message: str) -> None:
    texts = {"/p/g.policy": MIN_MEMBER.format(min_member)}
    errors = [(d.span.line, d.span.column, d.message) for d in load_texts(texts).errors]
    assert errors == [(4, 17, message)]


@pytest.mark.parametrize("min_member", ["1", "3 - 1", 'int(pod.labels["size"])', "pod.priority - 10"])
def test_a_positive_or_pod_dependent_min_member_is_accepted(min_member: str) -> None:
    assert not load_texts({"/p/g.policy": MIN_MEMBER.format(min_member)}).errors
