"""Kubernetes' JSONPatch library: `jsonpatch.escapeKey` (k8s.io/apiserver/pkg/cel/library/jsonpatch.go)."""

from __future__ import annotations

import pytest

from policyd.cel.program import CelCompileError, compile_expression
from tests.unit.cel.library_cases import ENV, ev


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '"/metadata/labels/" + jsonpatch.escapeKey("k8s.io/my~label")',
            "/metadata/labels/k8s.io~1my~0label",
        ),
        ('jsonpatch.escapeKey("plain")', "plain"),
        ('jsonpatch.escapeKey("")', ""),
        ('jsonpatch.escapeKey("~1")', "~01"),  # one pass: the ~ of an escape is escaped, not read back
        ('jsonpatch.escapeKey("//~~")', "~1~1~0~0"),
        ('jsonpatch.escapeKey("zürich/1")', "zürich~11"),
    ],
)
def test_escape_key(text: str, expected: str) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    "text", ["jsonpatch.escapeKey(1)", '"a".escapeKey()', 'jsonpatch.escapeKey("a", "b")']
)
def test_escape_key_takes_one_string(text: str) -> None:
    with pytest.raises(CelCompileError):
        compile_expression(text, ENV)
