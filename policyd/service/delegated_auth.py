"""The access filter of the secure port: delegated authentication, then delegated authorization.

What kube-apiserver's filter chain answers, and in its words: a rejected bearer token or a failed
TokenReview is 401 Unauthorized (on every path, as kube-scheduler); a request the authorizer does not
allow is 403 `forbidden: User "system:anonymous" cannot get path "/metrics"`; a SubjectAccessReview
that cannot be made is 500. Bodies are `v1.Status` JSON. The verb is the lower-cased HTTP method.
"""

from __future__ import annotations

import json
import logging

from policyd.service.authentication import AuthenticationFailed, DelegatedAuthenticator, Subject
from policyd.service.authorization import DelegatedAuthorizer
from policyd.service.reviews import ReviewFailed

log = logging.getLogger(__name__)

STATUS_CONTENT_TYPE = "application/json"


def status_reply(code: int, reason: str, message: str) -> tuple[int, str, bytes]:
    """A `v1.Status` failure answer: (status, content type, body)."""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if code == 403:
        status["details"] = {}
    return code, STATUS_CONTENT_TYPE, (json.dumps(status) + "\n").encode()


class DelegatedAccess:
    """Admits a request when its requester is authenticated and authorized (`http.AccessControl`)."""

    def __init__(self, authenticator: DelegatedAuthenticator, authorizer: DelegatedAuthorizer) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer

    def admit(
        self, method: str, path: str, authorization: str, peer_subject: Subject | None
    ) -> tuple[int, str, bytes] | None:
        """None to serve the request; otherwise the refusal to send."""
        try:
            user = self.authenticator.authenticate(authorization, peer_subject)
        except AuthenticationFailed as err:
            log.info("request unauthenticated path=%s reason=%s", path, err)
            return status_reply(401, "Unauthorized", "Unauthorized")
        verb = method.lower()
        try:
            decision = self.authorizer.authorize(user, verb, path)
        except ReviewFailed as err:
            log.warning("authorization failed user=%s path=%s error=%s", user.name, path, err)
            return status_reply(500, "InternalError", f"Internal error occurred: {err}")
        if decision.allowed:
            return None
        message = f"forbidden: User {json.dumps(user.name)} cannot {verb} path {json.dumps(path)}"
        if decision.reason:
            message += f": {decision.reason}"
        log.info("request forbidden user=%s verb=%s path=%s", user.name, verb, path)
        return status_reply(403, "Forbidden", message)
