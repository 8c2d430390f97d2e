"""Delegated authorization: always-allowed paths and groups, SubjectAccessReview, allow/deny caching."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.scheduler.clock import FakeClock
from policyd.service.authentication import ANONYMOUS, UserInfo
from policyd.service.authorization import (
    Decision,
    DelegatedAuthorizer,
    PathRule,
    always_allow_path_problem,
)
from policyd.service.reviews import ReviewFailed

READER = UserInfo("reader", "u2", ("system:authenticated",), (("scopes", ("a", "b")),))


def sar_answer(spec: dict[str, object]) -> dict[str, object]:
    if spec["user"] == "reader":
        return {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "r"'}
    return {"allowed": False, "reason": ""}


def test_path_rule_exact_and_trailing_star_prefix() -> None:
    rule = PathRule(["/healthz", "livez", "/debug/*"])
    assert rule.allows("/healthz") and rule.allows("/livez")
    assert not rule.allows("/healthz/ping") and not rule.allows("/metrics")
    assert rule.allows("/debug/pprof") and rule.allows("/debug/")
    assert always_allow_path_problem("/a/*") == ""
    assert "trailing" in always_allow_path_problem("/a*/b")


def test_always_allowed_paths_and_masters_need_no_review(make_reviews: Any) -> None:
    reviews = make_reviews(sar_answer)
    authz = DelegatedAuthorizer(reviews)
    for path in ("/healthz", "/readyz", "/livez"):
        assert authz.authorize(ANONYMOUS, "get", path).allowed
    admin = UserInfo("admin", groups=("system:masters", "system:authenticated"))
    assert authz.authorize(admin, "get", "/metrics").allowed
    assert reviews.sent == []


def test_subject_access_review_request_and_decisions(make_reviews: Any) -> None:
    reviews = make_reviews(sar_answer)
    authz = DelegatedAuthorizer(reviews)
    assert authz.authorize(READER, "get", "/metrics") == Decision(
        True, 'RBAC: allowed by ClusterRoleBinding "r"'
    )
    path, body = reviews.sent[0]
    assert path == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    assert body["kind"] == "SubjectAccessReview"
    assert body["spec"] == {
        "user": "reader",
        "uid": "u2",
        "groups": ["system:authenticated"],
        "extra": {"scopes": ["a", "b"]},
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    assert authz.authorize(ANONYMOUS, "get", "/metrics") == Decision(False, "")
    assert not authz.authorize(ANONYMOUS, "get", "/healthz/ping").allowed  # exact paths only


def test_allow_and_deny_answers_cached_for_their_own_ttl(make_reviews: Any) -> None:
    clock = FakeClock()
    reviews = make_reviews(sar_answer)
    authz = DelegatedAuthorizer(reviews, allow_ttl=10, deny_ttl=2, clock=clock)
    authz.authorize(READER, "get", "/metrics")
    authz.authorize(ANONYMOUS, "get", "/metrics")
    clock.advance(1.5)
    authz.authorize(READER, "get", "/metrics")
    authz.authorize(ANONYMOUS, "get", "/metrics")
    assert len(reviews.sent) == 2
    clock.advance(1)  # the denial expired, the grant did not
    authz.authorize(READER, "get", "/metrics")
    authz.authorize(ANONYMOUS, "get", "/metrics")
    assert [body["spec"]["user"] for _, body in reviews.sent] == [
        "reader",
        "system:anonymous",
        "system:anonymous",
    ]
    authz.authorize(READER, "get", "/configz")  # another path is another question
    assert len(reviews.sent) == 4


def test_failed_review_raises_and_is_not_cached(make_reviews: Any) -> None:
    reviews = make_reviews(sar_answer)
    reviews.down = True
    authz = DelegatedAuthorizer(reviews)
    with pytest.raises(ReviewFailed, match="SubjectAccessReview failed"):
        authz.authorize(READER, "get", "/metrics")
    reviews.down = False
    assert authz.authorize(READER, "get", "/metrics").allowed
