"""The policyd side: one pod evaluated on the state kube-scheduler saw, through `policyd simulate`'s path.

The state is what the API server holds right before the pod was created (nodes, bound pods, PDBs,
workloads and storage objects, as read back: the Priority and RuntimeClass admission already applied), loaded as a cluster file's objects
are (`cluster_objects`), scheduled by `run_simulation` with explanations on: the same code path as
`policyd simulate` / `policyd explain`. The pod's first attempt is what is compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policyd.backends.cluster_file import cluster_objects
from policyd.backends.simulated import SimulatedCluster
from policyd.commands.simulate import run_simulation
from policyd.compiler.profiles import compile_paths
from policyd.framework import CompiledPolicySet
from policyd.scheduler.attempts import Attempt
from tests.differential.scenario import Obj, pod_key

# one attempt is all that is compared; a second would run on a state kube-scheduler did not see
MAX_ATTEMPTS = 1


@dataclass(frozen=True)
class PolicydSide:
    """A compiled policy set (the harness's 1.20 variant) that evaluates pods."""

    policies: CompiledPolicySet

    @classmethod
    def load(cls, paths: Sequence[str]) -> PolicydSide:
        """Compile the policy files once."""
        return cls(compile_paths(list(paths), generation=1))

    def evaluate(self, state: Sequence[Obj], pod: Obj, seed: int = 0) -> Attempt:
        """The first attempt of `pod` (pending, as created) on `state`."""
        pending = _pending_copy(pod)
        objects = cluster_objects([*state, pending], source="differential state")
        cluster = SimulatedCluster(
            objects.nodes, objects.pods, objects.pdbs, workloads=objects.workloads, storage=objects.storage()
        )
        scheduler = run_simulation(self.policies, cluster, seed, True, MAX_ATTEMPTS)
        attempts = scheduler.attempts.for_pod(pod_key(pending))
        if not attempts:
            raise RuntimeError(f"policyd made no attempt for {pod_key(pending)}")
        return attempts[0]


def _pending_copy(pod: Obj) -> Obj:
    """The pod as created: no node, no status (kube-scheduler may have bound it since)."""
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"], "spec": spec}
