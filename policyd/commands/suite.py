"""Policy test suites (`policyd test`): YAML cases checked against compiled policies.

A suite (schema: policyd/schemas/policytest.schema.json) names policy files (relative to the suite), nodes,
existing pods and PodDisruptionBudgets (full Kubernetes objects), and cases. A case gives the pod
under test (or several pods for a queue-order case) and what to expect: per-node filter results,
score order, chosen node, preemption victims, queue order. Evaluation uses the runtime's own pieces:
PodInfo/NodeInfo, cache snapshot, cluster functions, `framework.score_nodes`, `preemption.find_preemption`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from policyd import shipped
from policyd.compiler.profiles import compile_paths
from policyd.errors import PolicydError
from policyd.framework import CompiledPolicySet, CompiledProfile, FilterFailure
from policyd.scheduler.algorithm import NodeScore, score_nodes
from policyd.scheduler.cache import Cache
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.cluster.functions import cluster_functions_factory
from policyd.scheduler.cluster.objects import PodInfo, node_info, pod_info
from policyd.scheduler.pdb import budget_from_object
from policyd.scheduler.preemption import find_preemption
from policyd.scheduler.snapshot import Snapshot

PASS = "pass"


class SuiteError(PolicydError):
    """A suite file cannot be read, parsed, validated, or its policies compiled."""


@dataclass
class CaseResult:
    """The outcome of one case: name and the differences found (empty: passed)."""

    suite: str
    name: str
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no expectation differed."""
        return not self.problems


@dataclass
class _Outcome:
    """What the policies decided for one pod."""

    failures: dict[str, FilterFailure]
    scores: list[NodeScore]
    victims: list[str]
    node_order: list[str]


def _schema() -> dict[str, Any]:
    return shipped.schema("policytest")


def load_suite(path: Path) -> dict[str, Any]:
    """Read and validate a suite file; raises SuiteError."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"{path}: {exc}") from exc
    try:
        jsonschema.validate(data, _schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise SuiteError(f"{path}: {where}: {exc.message}") from exc
    return data  # type: ignore[no-any-return]


def _profile(
    policies: CompiledPolicySet, suite: Mapping[str, Any], pod: Mapping[str, Any]
) -> CompiledProfile:
    name = suite.get("profile")
    if name is None:
        wanted = (pod.get("spec") or {}).get("schedulerName")
        if wanted in policies.profiles:
            name = wanted
        elif len(policies.profiles) == 1:
            name = next(iter(policies.profiles))
        else:
            name = "policyd"
    if name not in policies.profiles:
        raise SuiteError(f"no profile {name!r} in the suite's policies (have {sorted(policies.profiles)})")
    return policies.profiles[str(name)]


def _snapshot(
    nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> tuple[Snapshot, list[PodInfo]]:
    cache = Cache(node_info, FakeClock())
    for obj in nodes:
        cache.add_node(obj)
    infos = [pod_info(obj) for obj in pods]
    for info in infos:
        cache.add_pod(info)
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    return snapshot, infos


def _evaluate(profile: CompiledProfile, suite: Mapping[str, Any], case: Mapping[str, Any]) -> _Outcome:
    nodes = [*suite.get("nodes", ()), *case.get("nodes", ())]
    pods = [*suite.get("pods", ()), *case.get("pods", ())]
    snapshot, existing = _snapshot(nodes, pods)
    pod = pod_info(case["pod"])
    cluster_functions = cluster_functions_factory()  # one index for the snapshot and its what-ifs
    cluster = cluster_functions(snapshot)
    evaluator = profile.evaluator(pod.cel, cluster)
    failures: dict[str, FilterFailure] = {}
    feasible = []
    for state in snapshot.nodes():
        failure = evaluator.filter(state.cel)
        if failure is None:
            feasible.append(state)
        else:
            failures[state.name] = failure
    scores: list[NodeScore] = []
    victims: list[str] = []
    if feasible:
        cluster.prescore(pod.cel, [n.cel for n in feasible])
        scores = score_nodes(profile, evaluator, feasible)
    else:
        budgets = [budget_from_object(b) for b in [*suite.get("pdbs", ()), *case.get("pdbs", ())]]
        outcome = find_preemption(
            profile,
            pod,
            snapshot,
            failures,
            lambda snap: profile.evaluator(pod.cel, cluster_functions(snap)),
            lambda _name: [],
            budgets,
            existing,
        )
        if outcome.candidate is not None:
            victims = [v.key for v in outcome.candidate.victims]
    return _Outcome(failures, scores, victims, [n.name for n in snapshot.nodes()])


def _check_filters(out: _Outcome, expected: Mapping[str, Any], problems: list[str]) -> None:
    for node, want in expected.items():
        if node not in out.node_order:
            problems.append(f"filter: no node {node!r} in the case")
            continue
        failure = out.failures.get(node)
        got = PASS if failure is None else list(failure.reasons)
        if want == PASS or got == PASS:
            if want != got:
                problems.append(f"filter {node}: expected {want!r}, got {got!r}")
            continue
        want_list = [want] if isinstance(want, str) else list(want)
        if sorted(want_list) != sorted(got):  # type: ignore[arg-type]
            problems.append(f"filter {node}: expected {want_list!r}, got {got!r}")


def _check_scores(out: _Outcome, groups: Sequence[Any], problems: list[str]) -> None:
    totals = {s.node: s.total for s in out.scores}
    if len(out.scores) == 1 and not totals:
        return
    flat: list[list[str]] = [[g] if isinstance(g, str) else list(g) for g in groups]
    for group in flat:
        for node in group:
            if node not in totals:
                problems.append(f"scoreOrder: {node} is not feasible (feasible: {sorted(totals)})")
                return
    for group in flat:
        if len({totals[n] for n in group}) != 1:
            problems.append(
                f"scoreOrder: expected equal scores for {group}, got {[totals[n] for n in group]}"
            )
    for higher, lower in zip(flat, flat[1:], strict=False):
        if not totals[higher[0]] > totals[lower[0]]:
            problems.append(
                f"scoreOrder: expected {higher[0]} ({totals[higher[0]]}) > {lower[0]} ({totals[lower[0]]})"
            )


def _chosen(out: _Outcome) -> list[str]:
    if not out.scores:
        return [n for n in out.node_order if n not in out.failures]
    best = max(s.total for s in out.scores)
    return [s.node for s in out.scores if s.total == best]


def _score_table(out: _Outcome) -> str:
    return ", ".join(f"{s.node}={s.total}" for s in sorted(out.scores, key=lambda s: -s.total))


def run_case(
    policies: CompiledPolicySet, suite: Mapping[str, Any], case: Mapping[str, Any], suite_name: str
) -> CaseResult:
    """Evaluate one case and compare with its expectations."""
    result = CaseResult(suite_name, str(case["name"]))
    expect = case.get("expect") or {}
    try:
        if "queue" in case:
            _check_queue(policies, suite, case, expect, result.problems)
            return result
        profile = _profile(policies, suite, case["pod"])
        out = _evaluate(profile, suite, case)
    except PolicydError as exc:
        result.problems.append(f"error: {exc}")
        return result
    if "filter" in expect:
        _check_filters(out, expect["filter"], result.problems)
    if "scoreOrder" in expect:
        _check_scores(out, expect["scoreOrder"], result.problems)
    if "node" in expect:
        chosen = _chosen(out)
        want = expect["node"]
        if want is None:
            if chosen:
                result.problems.append(f"node: expected unschedulable, feasible: {chosen}")
        elif chosen != [want]:
            detail = f" (scores: {_score_table(out)})" if out.scores else ""
            result.problems.append(f"node: expected {want}, got {chosen or 'none'}{detail}")
    if "victims" in expect and sorted(expect["victims"]) != sorted(out.victims):
        result.problems.append(f"victims: expected {sorted(expect['victims'])}, got {sorted(out.victims)}")
    return result


def _check_queue(
    policies: CompiledPolicySet,
    suite: Mapping[str, Any],
    case: Mapping[str, Any],
    expect: Mapping[str, Any],
    problems: list[str],
) -> None:
    infos = [pod_info(obj) for obj in case["queue"]]
    if not infos:
        return
    profile = _profile(policies, suite, case["queue"][0])
    order = sorted(range(len(infos)), key=lambda i: (profile.queue_key(infos[i].cel), i, infos[i].key))
    got = [infos[i].key for i in order]
    want = list(expect.get("queueOrder", []))
    if want and got != want:
        problems.append(f"queueOrder: expected {want}, got {got}")


def run_suite(path: Path) -> list[CaseResult]:
    """Load, compile and run every case of one suite file; raises SuiteError for unusable suites."""
    suite = load_suite(path)
    policy_paths = [str((path.parent / p).resolve()) for p in suite["policies"]]
    for p in policy_paths:
        if not Path(p).exists():
            raise SuiteError(f"{path}: policy file {p} does not exist")
    try:
        policies = compile_paths(policy_paths, generation=1)
    except PolicydError as exc:
        raise SuiteError(f"{path}: policies do not compile:\n{exc}") from exc
    return [run_case(policies, suite, case, str(path)) for case in suite["cases"]]


def suite_files(paths: Sequence[str]) -> list[Path]:
    """Expand directories to the *.yaml / *.yml files inside them (sorted); raises SuiteError."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml")))
        elif p.is_file():
            out.append(p)
        else:
            raise SuiteError(f"{raw}: no such file or directory")
    return out
