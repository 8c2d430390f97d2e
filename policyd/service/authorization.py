"""Delegated authorization of serving requests, as kube-scheduler's `--authorization-kubeconfig` does.

In order: a path in `always_allow_paths` is allowed for anyone (kube-scheduler's default: /healthz,
/readyz, /livez, so probes need no credentials; an entry ending in `*` is a prefix); a member of
`system:masters` is allowed; otherwise a SubjectAccessReview asks the API server whether the user may
`<verb>` the non-resource path (RBAC `nonResourceURLs`). Answers are cached for `allow_ttl` /
`deny_ttl` seconds (10 s each, kube's `--authorization-webhook-cache-(un)authorized-ttl`). A review
that cannot be made raises `ReviewFailed` (answered 500) and is not cached.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from policyd.scheduler.clock import Clock
from policyd.service.authentication import UserInfo
from policyd.service.expiring_cache import ExpiringCache
from policyd.service.reviews import ReviewClient, create_review

log = logging.getLogger(__name__)

DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
ALWAYS_ALLOW_GROUPS = ("system:masters",)
DEFAULT_ALLOW_TTL = 10.0
DEFAULT_DENY_TTL = 10.0
AUTHORIZATION_API = "authorization.k8s.io/v1"


@dataclass(frozen=True)
class Decision:
    """Whether a request may go on, and the authorizer's reason (shown in a 403)."""

    allowed: bool
    reason: str = ""


def always_allow_path_problem(path: str) -> str:
    """Why `path` cannot be an always-allowed path ("" when it can)."""
    if "*" in path[:-1]:
        return f"only a trailing * is allowed in {path!r}"
    return ""


class PathRule:
    """Always-allowed paths: exact paths, and prefixes written with a trailing `*` (a leading / optional)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._exact: set[str] = set()
        self._prefixes: list[str] = []
        for entry in paths:
            entry = entry.lstrip("/")
            if entry.endswith("*"):
                self._prefixes.append(entry[:-1])
            else:
                self._exact.add(entry)

    def allows(self, path: str) -> bool:
        """True when `path` is always allowed."""
        path = path.lstrip("/")
        return path in self._exact or any(path.startswith(p) for p in self._prefixes)


class DelegatedAuthorizer:
    """Always-allowed paths and groups, then a cached SubjectAccessReview."""

    def __init__(
        self,
        client: ReviewClient,
        always_allow_paths: Iterable[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
        allow_ttl: float = DEFAULT_ALLOW_TTL,
        deny_ttl: float = DEFAULT_DENY_TTL,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._paths = PathRule(always_allow_paths)
        self._allow_ttl = allow_ttl
        self._deny_ttl = deny_ttl
        self._cache: ExpiringCache[tuple[UserInfo, str, str], Decision] = ExpiringCache(clock)

    def always_allowed(self, path: str) -> bool:
        """True when `path` needs no authorization."""
        return self._paths.allows(path)

    def authorize(self, user: UserInfo, verb: str, path: str) -> Decision:
        """May `user` `verb` the non-resource `path`? Raises ReviewFailed when the API server gives no answer."""
        if self._paths.allows(path):
            return Decision(True)
        if any(group in ALWAYS_ALLOW_GROUPS for group in user.groups):
            return Decision(True)
        key = (user, verb, path)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._review(user, verb, path)
            self._cache.put(key, decision, self._allow_ttl if decision.allowed else self._deny_ttl)
        return decision

    def _review(self, user: UserInfo, verb: str, path: str) -> Decision:
        spec = {
            "user": user.name,
            "uid": user.uid,
            "groups": list(user.groups),
            "extra": {k: list(v) for k, v in user.extra},
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        status = create_review(self._client, AUTHORIZATION_API, "subjectaccessreviews", spec)
        if status.get("evaluationError"):
            log.info("access review evaluation error user=%s error=%s", user.name, status["evaluationError"])
        return Decision(bool(status.get("allowed")), str(status.get("reason") or ""))
