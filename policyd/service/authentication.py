"""Delegated authentication of serving requests, as kube-scheduler's `--authentication-kubeconfig` does.

A request is authenticated by the first of: a client certificate verified against `--client-ca-file`
(user = CommonName, groups = Organizations), then a bearer token the API server vouches for in a
TokenReview. A request with neither is `system:anonymous` in `system:unauthenticated` and goes on to
authorization. A bearer token the API server rejects, or a TokenReview that cannot be made, fails the
request (401). TokenReview answers are cached by the token's SHA-256 for `cache_ttl` seconds (10 s,
kube's `--authentication-token-webhook-cache-ttl`), rejected tokens too.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from policyd.errors import PolicydError
from policyd.scheduler.clock import Clock
from policyd.service.expiring_cache import ExpiringCache
from policyd.service.reviews import ReviewClient, ReviewFailed, create_review

log = logging.getLogger(__name__)

ANONYMOUS_USER = "system:anonymous"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
AUTHENTICATED_GROUP = "system:authenticated"
DEFAULT_CACHE_TTL = 10.0
AUTHENTICATION_API = "authentication.k8s.io/v1"

# getpeercert()'s form of a subject: relative distinguished names, each a tuple of (attribute, value)
Subject = tuple[tuple[tuple[str, str], ...], ...]


@dataclass(frozen=True)
class UserInfo:
    """Who made a request: what a SubjectAccessReview is asked about."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = UserInfo(ANONYMOUS_USER, groups=(UNAUTHENTICATED_GROUP,))


class AuthenticationFailed(PolicydError):
    """Credentials were presented and not accepted (answered 401 Unauthorized)."""


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` header ("" when there is none)."""
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return ""
    return parts[1]


def certificate_user(subject: Subject) -> UserInfo | None:
    """The user a verified client certificate names (None without a CommonName)."""
    attributes = [pair for rdn in subject for pair in rdn]
    names = [value for key, value in attributes if key == "commonName"]
    if not names or not names[0]:
        return None
    groups = tuple(value for key, value in attributes if key == "organizationName")
    return _with_authenticated_group(UserInfo(names[0], groups=groups))


def _with_authenticated_group(user: UserInfo) -> UserInfo:
    if AUTHENTICATED_GROUP in user.groups:
        return user
    return UserInfo(user.name, user.uid, (*user.groups, AUTHENTICATED_GROUP), user.extra)


def _user_from_status(status: dict[str, object]) -> UserInfo:
    user = status.get("user")
    info = user if isinstance(user, dict) else {}
    extra = info.get("extra") or {}
    return _with_authenticated_group(
        UserInfo(
            name=str(info.get("username", "")),
            uid=str(info.get("uid", "")),
            groups=tuple(str(g) for g in info.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )
    )


class DelegatedAuthenticator:
    """Client certificates, then bearer tokens checked by TokenReview; anonymous otherwise."""

    def __init__(
        self, client: ReviewClient, cache_ttl: float = DEFAULT_CACHE_TTL, clock: Clock | None = None
    ) -> None:
        self._client = client
        self._ttl = cache_ttl
        # sha256(token) -> the user, or the reason the API server gave for rejecting the token
        self._cache: ExpiringCache[str, UserInfo | str] = ExpiringCache(clock)

    def authenticate(self, authorization: str, peer_subject: Subject | None) -> UserInfo:
        """The requester; raises AuthenticationFailed for a rejected token or a failed TokenReview."""
        if peer_subject is not None:
            user = certificate_user(peer_subject)
            if user is not None:
                return user
        token = bearer_token(authorization)
        if not token:
            return ANONYMOUS
        key = hashlib.sha256(token.encode()).hexdigest()
        answer = self._cache.get(key)
        if answer is None:
            answer = self._review(token)
            self._cache.put(key, answer, self._ttl)
        if isinstance(answer, str):
            raise AuthenticationFailed(answer)
        return answer

    def _review(self, token: str) -> UserInfo | str:
        try:
            status = create_review(self._client, AUTHENTICATION_API, "tokenreviews", {"token": token})
        except ReviewFailed as err:
            log.warning("token review failed error=%s", err)
            raise AuthenticationFailed(str(err)) from err
        if not status.get("authenticated"):
            return str(status.get("error") or "invalid bearer token")
        return _user_from_status(status)
