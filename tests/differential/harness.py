"""Run scenarios on both sides, compare pod by pod, keep what disagrees as regression cases."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from policyd import shipped
from policyd.scheduler.attempts import Attempt, explain_table
from tests.differential.compare import Comparison, compare
from tests.differential.kube_side import KubeCycle, KubeSide
from tests.differential.policyd_side import PolicydSide
from tests.differential.report import AgreementTable, pod_features
from tests.differential.scenario import Obj, Scenario

HERE = Path(__file__).resolve().parent
VARIANT_POLICY = HERE / "policies" / "kube-1.20.policy"
# the variant is a layer over default.policy (`extends default`): both are loaded
VARIANT_POLICIES = (str(shipped.default_policy()), str(VARIANT_POLICY))
REGRESSIONS = HERE / "regressions"

log = logging.getLogger(__name__)


@dataclass
class ScenarioResult:
    """The comparisons of one scenario's pods, in feeding order."""

    scenario: Scenario
    comparisons: list[Comparison] = field(default_factory=list)
    # for each disagreeing pod: both sides in full (kube-scheduler's cycle, policyd's explain table)
    details: list[str] = field(default_factory=list)

    @property
    def disagreements(self) -> list[str]:
        """Every disagreement, as text."""
        return [str(d) for c in self.comparisons for d in c.disagreements]

    @property
    def unexplained(self) -> int:
        """How many disagreements no documented difference explains."""
        return sum(len(c.unexplained) for c in self.comparisons)


@dataclass
class Harness:
    """Both sides, started once, and the table they fill."""

    kube: KubeSide
    policyd: PolicydSide
    table: AgreementTable = field(default_factory=AgreementTable)

    def run(self, scenario: Scenario) -> ScenarioResult:
        """Feed one scenario's pending pods one at a time; compare each on the state it met."""
        result = ScenarioResult(scenario)
        self.kube.setup(scenario)
        try:
            for pod in scenario.pending:
                state = self.kube.state(scenario)
                created, cycle = self.kube.schedule(scenario, pod)
                attempt = self.policyd.evaluate(state, created)
                comparison = compare(cycle, attempt, created, state)
                result.comparisons.append(comparison)
                if comparison.disagreements:
                    result.details.append(_detail(state, cycle, attempt))
                self.table.add(pod_features(scenario, pod, comparison), comparison)
        finally:
            self.kube.teardown(scenario)
        self.table.scenarios += 1
        return result


def _detail(state: Sequence[Obj], cycle: KubeCycle, attempt: Attempt) -> str:
    placed = sorted(
        f"{o['metadata']['name']}->{o['spec']['nodeName']}"
        for o in state
        if o["kind"] == "Pod" and o["spec"].get("nodeName")
    )
    lines = [
        f"== {cycle.pod}",
        f"bound before: {', '.join(placed) or '<none>'}",
        f"kube-scheduler: probe {cycle.probe_message!r}; chosen {cycle.chosen}; message {cycle.message!r}; "
        f"nominated {cycle.nominated}; victims {sorted(cycle.victims)}",
        *(f"  {plugin}: {scores}" for plugin, scores in sorted(cycle.scores.items())),
        explain_table(attempt),
    ]
    return "\n".join(lines)


def regression_case(result: ScenarioResult) -> Scenario:
    """The scenario cut after its last disagreeing pod, with the disagreements as its note."""
    last = max(i for i, c in enumerate(result.comparisons) if c.unexplained)
    s = result.scenario
    note = "found: " + "; ".join(result.disagreements)
    return Scenario(s.name, s.nodes, s.existing, s.pdbs, s.pending[: last + 1], note)


def run_all(
    harness: Harness,
    scenarios: Sequence[Scenario],
    record: Path | None,
    say: Callable[[str], None],
    details: Path | None = None,
) -> list[ScenarioResult]:
    """Run every scenario; write each disagreeing one into `record` and both sides' detail into `details`."""
    results = []
    for scenario in scenarios:
        result = harness.run(scenario)
        results.append(result)
        status = (
            "agree"
            if not result.disagreements
            else f"{len(result.disagreements)} disagreements, {result.unexplained} unexplained"
        )
        say(f"{scenario.name}: {len(result.comparisons)} pods, {status}")
        for text in result.disagreements:
            say(f"  {text}")
        if record is not None and result.unexplained:
            record.mkdir(parents=True, exist_ok=True)
            (record / f"{scenario.name}.yaml").write_text(regression_case(result).to_yaml(), encoding="utf-8")
        if details is not None and result.details:
            details.mkdir(parents=True, exist_ok=True)
            (details / f"{scenario.name}.txt").write_text(
                "\n\n".join(result.details) + "\n", encoding="utf-8"
            )
    return results
