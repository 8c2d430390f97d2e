"""Creating review objects (TokenReview, SubjectAccessReview) on the API server for delegated auth.

`ReviewClient` is the one call delegated authentication and authorization make; `KubeClient`
satisfies it. A failure to get an answer (unreachable, 5xx, forbidden to create reviews) is a
`ReviewFailed`: the request it was for is refused, and the answer is never cached.
"""

from __future__ import annotations

from typing import Any, Protocol

from policyd.backends.kube.client import ApiError
from policyd.errors import PolicydError


class ReviewClient(Protocol):
    """Sends one request to the API server and returns the decoded JSON answer."""

    def request(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]:
        """POST/GET `path`; raises `ApiError` on a non-2xx answer."""
        ...


class ReviewFailed(PolicydError):
    """The API server gave no review answer."""


def create_review(
    client: ReviewClient, group_version: str, plural: str, spec: dict[str, Any]
) -> dict[str, Any]:
    """Create a `plural` review with `spec` under /apis/`group_version`; returns its status."""
    kind = {"tokenreviews": "TokenReview", "subjectaccessreviews": "SubjectAccessReview"}[plural]
    body = {"apiVersion": group_version, "kind": kind, "spec": spec}
    try:
        answer = client.request("POST", f"/apis/{group_version}/{plural}", body=body)
    except ApiError as err:
        raise ReviewFailed(f"{kind} failed: {err}") from err
    status = answer.get("status")
    return status if isinstance(status, dict) else {}
