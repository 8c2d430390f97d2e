"""Policy test suites (`policyd test`): YAML cases checked against what the scheduler does.

A suite (schema: policyd/schemas/policytest.schema.json) names policy files (relative to the suite), nodes,
existing pods and PodDisruptionBudgets (full Kubernetes objects), and cases. A case gives the pod
under test (or several pods for a queue-order case) and what to expect: per-node filter results,
score order, chosen node, preemption victims, queue order. Each case runs the real `Scheduler` on the
simulated back-end (as `policyd simulate` does, seed 0, explain mode on) for the pod's first
scheduling cycle: filter results, scores and the chosen node come from that cycle, victims from its
preemption, queue order from the scheduling queue.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from policyd import yaml_loading
from policyd.backends.cluster_file import cluster_objects
from policyd.backends.kube_fields import FieldProblem, field_problems
from policyd.backends.simulated import SimulatedCluster
from policyd.backends.validation import field_path, object_name, violations
from policyd.commands.simulate import run_simulation
from policyd.compiler.profiles import compile_paths
from policyd.errors import Diagnostic, PolicydError
from policyd.evaluation.coverage import CoverageCollector
from policyd.framework import CompiledPolicySet, CompiledProfile, FilterFailure
from policyd.policy.documents import POLICY_KIND, SUITE_KIND, check_document, kinds_of
from policyd.policy.source import SourceFile
from policyd.policy.yaml_schema import SchemaDocument, documents
from policyd.scheduler.algorithm.scoring import ScoreTable
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.cluster.objects import pod_info
from policyd.scheduler.queue import QueueConfig, SchedulingQueue

log = logging.getLogger(__name__)

PASS = "pass"
SEED = 0  # the seed of `policyd simulate`'s default: equal scores are drawn alike
# the lists of Kubernetes objects in a suite and in its cases, and the kind each holds
OBJECT_LISTS = {"nodes": "Node", "pods": "Pod", "pdbs": "PodDisruptionBudget", "queue": "Pod"}
_FIELD_PART = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


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
class CaseOutcome:
    """What the scheduler decided for the case's pod in its first cycle."""

    failures: Mapping[str, FilterFailure]
    scores: ScoreTable
    chosen: str | None
    victims: list[str]
    nominated_node: str | None
    node_order: Sequence[str]


@dataclass(frozen=True)
class CaseCluster:
    """The cluster of one case: the suite's objects, the case's, then the pod under test."""

    nodes: list[Mapping[str, Any]]
    pods: list[Mapping[str, Any]]
    pdbs: list[Mapping[str, Any]]
    pod_key: str
    # PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes, CSIDrivers (with `kind`)
    storage: list[Mapping[str, Any]] = field(default_factory=list)

    def objects(self) -> list[Mapping[str, Any]]:
        """Every object, as a cluster file lists them."""
        return [*self.nodes, *self.storage, *self.pdbs, *self.pods]


def load_suite(path: Path) -> dict[str, Any]:
    """Read and validate a suite file; raises SuiteError (schema errors name file, line and column).

    The check is `policyd lint`'s (`policyd.policy.documents.check_document`): every schema error is
    reported at the YAML node it concerns.
    """
    try:
        text = path.read_text(encoding="utf-8")
        diagnostics = check_document(str(path), text)
    except OSError as exc:
        raise SuiteError(f"{path}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    errors = [d for d in diagnostics if d.severity == "error"]
    if not errors:
        checked = object_diagnostics(str(path), text)
        errors = [d for d in checked if d.severity == "error"]
        for warning in (d for d in checked if d.severity != "error"):
            log.warning("test suite: %s", warning.format())
    if errors:
        raise SuiteError("\n".join(d.format() for d in errors))
    # valid YAML: check_document read it
    found = [d for d in yaml_loading.safe_load_all(text) if d is not None]
    kinds = [d.get("kind") if isinstance(d, dict) else None for d in found]
    if kinds != [SUITE_KIND]:
        raise SuiteError(f"{path}: a suite file holds one {SUITE_KIND} document (found kinds {kinds})")
    return found[0]  # type: ignore[no-any-return]


def object_diagnostics(path: str, text: str) -> list[Diagnostic]:
    """The nodes, pods, PodDisruptionBudgets and storage objects of the suites in `text` (a file that
    passed `check_document`) checked as `policyd simulate` checks a cluster file's objects
    (`policyd.backends.validation`, `policyd.backends.kube_fields`): a typo such as `conatiners` or
    `nodeSelectr`, a value of the wrong shape, a bad quantity or a toleration that cannot be is an
    error at the field it concerns, not a case that fails for no visible reason; a field unknown to
    the installed client and no slip of a known one is a warning."""
    source = SourceFile(path, text)
    diagnostics: list[Diagnostic] = []
    for root, data in documents(source, diagnostics):
        if not isinstance(data, dict) or data.get("kind") != SUITE_KIND:
            continue
        doc = SchemaDocument(source, root, diagnostics)
        for where, obj, kind in [*_suite_objects(data), *_storage_objects(data)]:
            typed = {**obj, "kind": obj.get("kind") or kind}
            reported = set()
            for found in violations(typed, path):
                reported.add(found.field)
                node = _field_node(doc.root, [*where, *_field_parts(found.field)])
                doc.error_at(node, f"{found.obj}: {found.field}: {found.message}", "object")
            for problem in field_problems(typed):
                if field_path(problem.path) not in reported:
                    _field_problem(doc, where, typed, problem)
        _duplicates(doc, data)
    return diagnostics


def _field_problem(
    doc: SchemaDocument, where: list[str | int], obj: Mapping[str, Any], problem: FieldProblem
) -> None:
    """Report a field of a suite's object that its kind does not have, or a value of another shape
    than its field's type, at its key."""
    value, key = doc.node_at([*where, *problem.path])
    node = key if key is not None else value
    field = f"{object_name(obj)}: {field_path(problem.path)}"
    if problem.is_error:
        doc.error_at(node, f"{field}: {problem.message}", "object")
    else:
        doc.diagnostics.append(
            doc.source.diagnostic(
                "warning",
                f"{field}: {problem.message}",
                node.start_mark.index,
                node.end_mark.index,
                "unknown-field",
            )
        )


def _storage_objects(suite: Mapping[str, Any]) -> Iterator[tuple[list[str | int], Mapping[str, Any], str]]:
    """(path in the document, object, its kind) of the storage objects of the suite and its cases."""
    for where, holder in _holders(suite):
        items = holder.get("storage")
        for j, obj in enumerate(items if isinstance(items, list) else ()):
            if isinstance(obj, Mapping):
                yield [*where, "storage", j], obj, str(obj.get("kind"))


def _holders(suite: Mapping[str, Any]) -> Iterator[tuple[list[str | int], Mapping[str, Any]]]:
    """(path in the document, mapping) of the suite and of each of its cases: what holds objects."""
    yield [], suite
    for i, case in enumerate(suite.get("cases") or ()):
        if isinstance(case, Mapping):
            yield ["cases", i], case


def _duplicates(doc: SchemaDocument, suite: Mapping[str, Any]) -> None:
    """A node, pod or PodDisruptionBudget named twice in one case's cluster (the suite's objects and
    the case's): an error at the case's one (or the later of the suite's), naming the other, as a
    cluster file's duplicate is; the scheduler would hold only one of them. A queue case's pods are a
    cluster of their own."""
    shared: dict[tuple[str, str], yaml.Node] = {}
    per_holder: dict[tuple[str | int, ...], dict[tuple[str, str], yaml.Node]] = {}
    for where, obj, kind in _suite_objects(suite):
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            continue  # the schema or the object checks report it
        key = (
            kind,
            meta["name"] if kind == "Node" else f"{meta.get('namespace') or 'default'}/{meta['name']}",
        )
        holder = tuple(where[:2]) if where[0] == "cases" else ()
        if where[-2:-1] == ["queue"]:
            holder = (*holder, "queue")
        seen = per_holder.setdefault(holder, {} if holder and holder[-1] == "queue" else dict(shared))
        node = _field_node(doc.root, [*where, "metadata", "name"])
        first = seen.get(key)
        if first is not None:
            at = f"{first.start_mark.line + 1}:{first.start_mark.column + 1}"
            doc.error_at(node, f"duplicate {kind} {key[1]} (also at {at})", "duplicate-object")
            continue
        seen[key] = node
        if not holder:
            shared[key] = node


def _suite_objects(suite: Mapping[str, Any]) -> Iterator[tuple[list[str | int], Mapping[str, Any], str]]:
    """(path in the document, object, the kind its list holds) of every object of the suite and its cases."""
    for where, holder in _holders(suite):
        for name, kind in OBJECT_LISTS.items():
            items = holder.get(name)
            for j, obj in enumerate(items if isinstance(items, list) else ()):
                if isinstance(obj, Mapping):
                    yield [*where, name, j], obj, kind
        if isinstance(holder.get("pod"), Mapping):
            yield [*where, "pod"], holder["pod"], "Pod"


def _field_parts(field_path: str) -> list[str | int]:
    """`spec.containers[0].name` -> ["spec", "containers", 0, "name"] (`<object>`: none)."""
    if field_path == "<object>":
        return []
    return [int(index) if index else key for index, key in _FIELD_PART.findall(field_path)]


def _field_node(node: yaml.Node, parts: Sequence[str | int]) -> yaml.Node:
    """The YAML node at `parts`, or the deepest one that exists; a key may hold dots (`nvidia.com/gpu`
    is one key, not three), so the longest run of parts that names a key is taken."""
    i = 0
    while i < len(parts):
        part = parts[i]
        if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node, i = node.value[part], i + 1
            continue
        if not isinstance(node, yaml.MappingNode) or not isinstance(part, str):
            return node
        values = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        for end in range(len(parts), i, -1):
            run = parts[i:end]
            if all(isinstance(p, str) for p in run) and ".".join(map(str, run)) in values:
                node, i = values[".".join(map(str, run))], end
                break
        else:
            return node
    return node


def case_profile(
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


def case_cluster(suite: Mapping[str, Any], case: Mapping[str, Any]) -> CaseCluster:
    """The cluster a case is scheduled in (the pod under test last)."""
    pod = case["pod"]
    meta = pod.get("metadata") or {}
    return CaseCluster(
        nodes=[*suite.get("nodes", ()), *case.get("nodes", ())],
        pods=[*suite.get("pods", ()), *case.get("pods", ()), pod],
        pdbs=[*suite.get("pdbs", ()), *case.get("pdbs", ())],
        storage=[*suite.get("storage", ()), *case.get("storage", ())],
        pod_key=f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}",
    )


def first_cycle(profile: CompiledProfile, policies: CompiledPolicySet, cluster: CaseCluster) -> CaseOutcome:
    """Run the scheduler with `profile` only until the case's pod had its first cycle."""
    only = CompiledPolicySet(
        policies.generation, policies.content_hash, {profile.scheduler_name: profile}, policies.sources
    )
    # API defaulting, as a cluster file's; the suite's loader checked their fields and warned at them
    storage = cluster_objects(cluster.storage, "storage", check_fields=False).storage()
    backend = SimulatedCluster(cluster.nodes, cluster.pods, cluster.pdbs, storage=storage)
    scheduler = run_simulation(only, backend, SEED, explain=True, max_attempts=1)
    attempts = scheduler.attempts.for_pod(cluster.pod_key)
    if not attempts:
        raise SuiteError(f"pod {cluster.pod_key} was not scheduled by profile {profile.scheduler_name!r}")
    first = attempts[0]
    return CaseOutcome(
        first.failures,
        first.scores,
        first.chosen,
        list(first.victims),
        first.nominated_node,
        first.node_names,
    )


def _check_filters(out: CaseOutcome, expected: Mapping[str, Any], problems: list[str]) -> None:
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


def _check_scores(out: CaseOutcome, groups: Sequence[Any], problems: list[str]) -> None:
    totals = out.scores.by_node()
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


def _score_table(out: CaseOutcome) -> str:
    totals = out.scores.by_node()
    return ", ".join(f"{node}={total}" for node, total in sorted(totals.items(), key=lambda kv: -kv[1]))


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
        profile = case_profile(policies, suite, case["pod"])
        out = first_cycle(profile, policies, case_cluster(suite, case))
    except PolicydError as exc:
        result.problems.append(f"error: {exc}")
        return result
    if "filter" in expect:
        _check_filters(out, expect["filter"], result.problems)
    if "scoreOrder" in expect:
        _check_scores(out, expect["scoreOrder"], result.problems)
    if "node" in expect:
        want = expect["node"]
        if want is None:
            if out.chosen is not None:
                result.problems.append(f"node: expected unschedulable, got {out.chosen}")
        elif out.chosen != want:
            detail = f" (scores: {_score_table(out)})" if len(out.scores) else ""
            result.problems.append(f"node: expected {want}, got {out.chosen or 'none'}{detail}")
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
    profile = case_profile(policies, suite, case["queue"][0])
    clock = FakeClock()
    queue = SchedulingQueue(clock, QueueConfig())
    for info in infos:  # the pods arrive in the order the case lists them
        queue.add(info, profile)
        clock.advance(1.0)
    got = []
    while (queued := queue.pop()) is not None:
        got.append(queued.key)
    want = list(expect.get("queueOrder", []))
    if want and got != want:
        problems.append(f"queueOrder: expected {want}, got {got}")


def policy_paths(path: Path, suite: Mapping[str, Any]) -> list[str]:
    """The suite's policy files, resolved against the suite's directory; raises SuiteError."""
    paths = [str((path.parent / p).resolve()) for p in suite["policies"]]
    for p in paths:
        if not Path(p).exists():
            raise SuiteError(f"{path}: policy file {p} does not exist")
    return paths


def run_suite(path: Path, coverage: CoverageCollector | None = None) -> list[CaseResult]:
    """Load, compile and run every case of one suite file (probes report to `coverage`); raises SuiteError."""
    suite = load_suite(path)
    paths = policy_paths(path, suite)
    try:
        policies = compile_paths(paths, generation=1, coverage=coverage)
    except PolicydError as exc:
        raise SuiteError(f"{path}: policies do not compile:\n{exc}") from exc
    return [run_case(policies, suite, case, str(path)) for case in suite["cases"]]


def suite_files(paths: Sequence[str]) -> list[Path]:
    """Expand directories to the *.yaml / *.yml files inside them (sorted), leaving out the policy
    files among them (YAML policies beside their suites, as `policies/` holds them); a file named
    itself is always a suite. Raises SuiteError."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml"))
            out.extend(q for q in found if not _policy_file(q))
        elif p.is_file():
            out.append(p)
        else:
            raise SuiteError(f"{raw}: no such file or directory")
    return out


def _policy_file(path: Path) -> bool:
    """True for a YAML file of policies and nothing else (a suite or a broken file is not one)."""
    try:
        kinds = kinds_of(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return False  # reported when it is run as a suite
    return kinds == {POLICY_KIND}
