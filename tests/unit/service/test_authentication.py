"""Delegated authentication: bearer tokens by TokenReview (cached), client certificates, anonymous."""

from __future__ import annotations

from typing import Any

import pytest

from policyd.scheduler.clock import FakeClock
from policyd.service.authentication import (
    ANONYMOUS,
    AuthenticationFailed,
    DelegatedAuthenticator,
    UserInfo,
    bearer_token,
    certificate_user,
)


def token_answer(spec: dict[str, object]) -> dict[str, object]:
    if spec["token"] == "good":
        user = {
            "username": "alice",
            "uid": "u1",
            "groups": ["g", "system:authenticated"],
            "extra": {"k": ["v"]},
        }
        return {"authenticated": True, "user": user}
    return {"authenticated": False, "error": "token expired"}


def test_bearer_header_parsing_follows_kube() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc") == ""  # an empty token after the first space
    assert bearer_token("  Bearer abc extra") == "abc"
    assert bearer_token("Basic dXNlcg==") == ""
    assert bearer_token("") == "" and bearer_token("Bearer") == ""


def test_no_credentials_is_anonymous_without_a_review(make_reviews: Any) -> None:
    reviews = make_reviews(token_answer)
    user = DelegatedAuthenticator(reviews).authenticate("", None)
    assert user == ANONYMOUS == UserInfo("system:anonymous", groups=("system:unauthenticated",))
    assert DelegatedAuthenticator(reviews).authenticate("Basic x", None) == ANONYMOUS
    assert reviews.sent == []


def test_token_review_user_and_cache_for_ttl(make_reviews: Any) -> None:
    clock = FakeClock()
    reviews = make_reviews(token_answer)
    authn = DelegatedAuthenticator(reviews, cache_ttl=10, clock=clock)
    user = authn.authenticate("Bearer good", None)
    assert user == UserInfo("alice", "u1", ("g", "system:authenticated"), (("k", ("v",)),))
    path, body = reviews.sent[0]
    assert path == "/apis/authentication.k8s.io/v1/tokenreviews"
    assert body["kind"] == "TokenReview" and body["spec"] == {"token": "good"}
    clock.advance(9.9)
    assert authn.authenticate("Bearer good", None) == user
    assert len(reviews.sent) == 1
    clock.advance(0.2)
    authn.authenticate("Bearer good", None)
    assert len(reviews.sent) == 2


def test_rejected_token_is_401_and_cached_too(make_reviews: Any) -> None:
    clock = FakeClock()
    reviews = make_reviews(token_answer)
    authn = DelegatedAuthenticator(reviews, cache_ttl=10, clock=clock)
    for _ in range(3):
        with pytest.raises(AuthenticationFailed, match="token expired"):
            authn.authenticate("Bearer bad", None)
    assert len(reviews.sent) == 1


def test_failed_review_is_401_and_not_cached(make_reviews: Any) -> None:
    reviews = make_reviews(token_answer)
    reviews.down = True
    authn = DelegatedAuthenticator(reviews)
    with pytest.raises(AuthenticationFailed, match="TokenReview failed"):
        authn.authenticate("Bearer good", None)
    reviews.down = False
    assert authn.authenticate("Bearer good", None).name == "alice"


def test_client_certificate_wins_over_a_token(make_reviews: Any) -> None:
    subject = ((("organizationName", "ops"),), (("organizationName", "dev"),), (("commonName", "bob"),))
    assert certificate_user(subject) == UserInfo("bob", groups=("ops", "dev", "system:authenticated"))
    assert certificate_user(((("organizationName", "ops"),),)) is None
    reviews = make_reviews(token_answer)
    assert DelegatedAuthenticator(reviews).authenticate("Bearer good", subject).name == "bob"
    assert reviews.sent == []
