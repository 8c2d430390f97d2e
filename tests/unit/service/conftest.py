"""Fixtures of the service tests: a recording stand-in for the API server's review endpoints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from policyd.backends.kube.client import ApiError


class Reviews:
    """Answers TokenReviews / SubjectAccessReviews with `answer(spec)` and records every request."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.answer = answer
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.down = False

    def request(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]:
        """Record the review and answer it (ApiError while `down`)."""
        assert method == "POST"
        self.sent.append((path, body))
        if self.down:
            raise ApiError(503, "create", path, "service unavailable")
        return {"status": self.answer(body["spec"])}


ReviewsFactory = Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Reviews]


@pytest.fixture
def make_reviews() -> ReviewsFactory:
    """Reviews answered by a function of the review's spec (pure decision logic, no API server)."""
    return Reviews
