"""The knobs of one Scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field

from policyd.scheduler.binder import DEFAULT_BIND_WORKERS
from policyd.scheduler.cache import DEFAULT_ASSUMED_TTL
from policyd.scheduler.queue import QueueConfig


@dataclass(frozen=True)
class SchedulerOptions:
    """Knobs of one Scheduler."""

    # schedule pods whose schedulerName matches no profile with the default profile (simulate: True)
    adopt_unknown_schedulers: bool = False
    percentage_of_nodes_to_score: int = 0  # 0: kube-scheduler's adaptive formula
    queue: QueueConfig = field(default_factory=QueueConfig)
    bind_workers: int = DEFAULT_BIND_WORKERS
    seed: int | None = None
    explain: bool = False  # record every filter rule's verdict on every node (filter_all)
    assumed_ttl: float = DEFAULT_ASSUMED_TTL
    max_attempts: int = 0  # 0: retry forever; else a pod failing that often is given up (simulate)
    # reuse node verdicts and raw scores between equivalent pods (algorithm.reuse.GroupCache); False: every
    # node is evaluated per pod (same results, slower; tests compare the two)
    reuse_node_results: bool = True
    # bounds of the attempt log (None: keep everything, as simulate and explain do)
    attempt_log_pods: int | None = 10000
    attempt_log_detailed: int | None = 1000
