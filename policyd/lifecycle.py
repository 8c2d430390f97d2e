"""The lifecycle log: a process's milestones, shown at the default log level as kube-scheduler's are.

`policyd run` logs at WARNING by default; the records of the `policyd.lifecycle` logger are INFO and
always shown (the logger's own level is INFO, and propagation to the root handler does not consult the
root logger's level): start with the version and the effective configuration, leader elected or lost,
a policy set loaded (generation, profiles and rule counts) or rejected (with its error).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from policyd.framework import CompiledPolicySet

LOGGER_NAME = "policyd.lifecycle"
log = logging.getLogger(LOGGER_NAME)
log.setLevel(logging.INFO)


def starting(version: str, settings: Iterable[tuple[str, object]]) -> None:
    """The process starts: its version and the configuration it runs with."""
    fields = " ".join(f"{key}={value}" for key, value in settings)
    log.info("starting policyd version=%s %s", version, fields)


def serving(url: str) -> None:
    """The probes and /metrics are served at `url` (kube-scheduler: "Serving securely on ...")."""
    log.info("serving probes and metrics on %s", url)


def leader_elected(lease: str, identity: str) -> None:
    """This instance acquired the lease and schedules."""
    log.info("leader elected lease=%s identity=%s", lease, identity)


def leader_lost(lease: str, identity: str, reason: str) -> None:
    """This instance lost the lease (it stops scheduling)."""
    log.error("leader lost lease=%s identity=%s reason=%s", lease, identity, reason)


def policy_set_loaded(policies: CompiledPolicySet, sources: str) -> None:
    """A policy set was compiled and is now in use: its profiles and rule counts."""
    profiles = policies.profiles.values()
    per_profile = ",".join(
        f"{p.scheduler_name}(filters={len(p.filters)} scores={len(p.scores)} permits={len(p.permits)})"
        for p in profiles
    )
    log.info(
        "policy set loaded generation=%d hash=%s profiles=%d rules=%d %s sources=%r",
        policies.generation,
        policies.content_hash[:12],
        len(policies.profiles),
        sum(len(p.filters) + len(p.scores) + len(p.permits) for p in profiles),
        per_profile,
        sources,
    )


def policy_set_rejected(generation_kept: int, errors: int, text: str) -> None:
    """A policy set failed to load; the one in use (if any) is kept."""
    log.error("policy set rejected; keeping generation=%d errors=%d\n%s", generation_kept, errors, text)
