"""Hot reload from files with the simulated cluster: edits, broken edits, fixes, deletes, renames."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from policyd.backends.simulated import SimulatedCluster
from policyd.errors import PolicyError
from policyd.framework import CompiledPolicySet
from policyd.scheduler.clock import FakeClock
from policyd.scheduler.metrics import SchedulerMetrics
from policyd.scheduler.scheduler import Scheduler, SchedulerOptions
from policyd.service.reload import ConfigMapSource, FileSource, PolicyReloader, content_hash
from tests.builders import make_node, make_pod

ZONE_POLICY = """policy zone {{
  filter Zone {{
    expr = node.labels["zone"] == "{zone}"
    reason = "node(s) are not in zone {zone}"
  }}
}}
"""


class Harness:
    """A scheduler on a two-zone simulated cluster, its policies reloaded from `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.metrics = SchedulerMetrics()
        self.cluster = SimulatedCluster(
            nodes=[
                make_node("node-a", cpu="4", labels={"zone": "a"}),
                make_node("node-b", cpu="4", labels={"zone": "b"}),
            ]
        )
        self.swapped: list[CompiledPolicySet] = []
        self.reloader = PolicyReloader(
            [FileSource([str(directory)])], self._swap, metrics=self.metrics, debounce=0.05
        )
        initial = self.reloader.load_initial()
        self.scheduler = Scheduler(
            initial, self.cluster, clock=FakeClock(), options=SchedulerOptions(adopt_unknown_schedulers=True)
        )
        self.cluster.start(self.scheduler)
        self.scheduler.run_until_settled()

    def _swap(self, policies: CompiledPolicySet) -> None:
        self.swapped.append(policies)
        if hasattr(self, "scheduler"):
            self.scheduler.set_policies(policies)

    def schedule(self, name: str) -> str | None:
        """Create a pending pod, schedule until settled; the node it landed on."""
        self.cluster.add_pod(make_pod(name, cpu="100m"))
        self.scheduler.run_until_settled()
        return self.cluster.node_of(f"default/{name}")

    def generation_of(self, name: str) -> int:
        """The policy generation that decided the pod's last attempt."""
        return self.scheduler.attempts.for_pod(f"default/{name}")[-1].generation

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def write(path: Path, text: str) -> None:
    """Save like an editor: write a temporary file, then rename it over the target."""
    tmp = path.with_name("." + path.name + ".swp")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    write(tmp_path / "zone.policy", ZONE_POLICY.format(zone="a"))
    return Harness(tmp_path)


def test_edit_takes_effect_on_the_next_pod(harness: Harness) -> None:
    assert harness.schedule("p1") == "node-a"
    assert harness.generation_of("p1") == 1
    write(harness.directory / "zone.policy", ZONE_POLICY.format(zone="b"))
    outcome = harness.reloader.reload_now()
    assert outcome.ok and outcome.changed and outcome.generation == 2
    assert harness.schedule("p2") == "node-b"
    assert harness.generation_of("p2") == 2
    assert harness.metric("policyd_policy_generation") == 2


def test_broken_edit_is_rejected_and_the_old_policy_keeps_deciding(harness: Harness) -> None:
    write(harness.directory / "zone.policy", ZONE_POLICY.format(zone="b").replace("==", "=== "))
    outcome = harness.reloader.reload_now()
    assert not outcome.ok
    first = outcome.diagnostics[0]
    assert first.span.file.endswith("zone.policy") and first.span.line == 3
    assert "zone.policy:3:" in outcome.error_text
    assert harness.schedule("p1") == "node-a"
    assert harness.generation_of("p1") == 1
    assert harness.metric("policyd_policy_last_reload_success") == 0
    assert harness.metric("policyd_policy_reload_total", result="error") == 1
    ready, detail = harness.reloader.readiness()
    assert ready and "last reload failed" in detail

    write(harness.directory / "zone.policy", ZONE_POLICY.format(zone="b"))
    fixed = harness.reloader.reload_now()
    assert fixed.ok and fixed.generation == 2
    assert harness.schedule("p2") == "node-b"
    assert harness.metric("policyd_policy_last_reload_success") == 1


def test_type_error_is_rejected_like_a_syntax_error(harness: Harness) -> None:
    write(harness.directory / "zone.policy", ZONE_POLICY.format(zone="a").replace('["zone"]', ".zonee + 1"))
    outcome = harness.reloader.reload_now()
    assert not outcome.ok and outcome.diagnostics[0].span.line == 3
    assert harness.reloader.current is not None and harness.reloader.current.generation == 1


def test_unchanged_content_is_not_a_new_generation(harness: Harness) -> None:
    outcome = harness.reloader.reload_now()
    assert outcome.ok and not outcome.changed and outcome.generation == 1
    assert len(harness.swapped) == 1


def test_rename_and_delete(harness: Harness) -> None:
    os.replace(harness.directory / "zone.policy", harness.directory / "renamed.policy")
    renamed = harness.reloader.reload_now()
    assert renamed.ok and renamed.changed
    assert harness.schedule("p1") == "node-a"
    # a second policy file joins the set: filters AND
    write(
        harness.directory / "extra.policy",
        ZONE_POLICY.format(zone="b").replace("policy zone", "policy extra"),
    )
    both = harness.reloader.reload_now()
    assert both.ok
    assert harness.schedule("p2") is None  # zone a AND zone b: nothing fits
    os.remove(harness.directory / "extra.policy")
    assert harness.reloader.reload_now().ok
    # deleting every policy file is an error: the last good set stays
    os.remove(harness.directory / "renamed.policy")
    empty = harness.reloader.reload_now()
    assert not empty.ok and empty.error_text.startswith("<policies>: error: no policy files in ")
    assert harness.schedule("p3") == "node-a"


def test_removing_a_profile_is_an_error_unless_allowed(tmp_path: Path) -> None:
    write(tmp_path / "zone.policy", ZONE_POLICY.format(zone="a"))
    h = Harness(tmp_path)
    moved = ZONE_POLICY.format(zone="a").replace("policy zone {", 'policy zone {\n  profiles = ["other"]')
    write(tmp_path / "zone.policy", moved)
    outcome = h.reloader.reload_now()
    assert not outcome.ok and "no policy for profile(s) policyd" in outcome.error_text
    h.reloader.allow_profile_removal = True
    assert h.reloader.reload_now().ok


def test_watchdog_picks_up_an_editor_save(harness: Harness) -> None:
    harness.reloader.start()
    try:
        write(harness.directory / "zone.policy", ZONE_POLICY.format(zone="b"))
        deadline = time.monotonic() + 10
        while harness.reloader.status.generation < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert harness.reloader.status.generation == 2
    finally:
        harness.reloader.stop()
    assert harness.schedule("p1") == "node-b"


def test_configmap_source_reads_policy_keys_and_reports_missing_maps() -> None:
    source = ConfigMapSource(["policyd/policies"])
    assert not source.update("other", "cm", {"a.policy": "x"})
    with pytest.raises(PolicyError) as missing:
        source.read()
    # no line and column: the problem is the whole source
    assert str(missing.value) == "configmap policyd/policies: error: not found"
    assert source.update("policyd", "policies", {"zone.policy": ZONE_POLICY.format(zone="a"), "README": "x"})
    assert not source.update(
        "policyd", "policies", {"zone.policy": ZONE_POLICY.format(zone="a"), "README": "x"}
    )
    texts = source.read()
    assert list(texts) == ["configmap://policyd/policies/zone.policy"]
    swapped: list[CompiledPolicySet] = []
    reloader = PolicyReloader([source], swapped.append)
    assert reloader.load_initial().content_hash
    assert reloader.status.content_hash == content_hash(texts)
    source.update("policyd", "policies", {"zone.policy": "policy broken {"})
    bad = reloader.reload_now()
    assert not bad.ok and "configmap://policyd/policies/zone.policy:1:" in bad.error_text
    assert len(swapped) == 1


def test_a_missing_policy_path_is_named_whole_even_when_it_holds_a_colon(tmp_path: Path) -> None:
    missing = tmp_path / "team: a" / "gone.policy"
    with pytest.raises(PolicyError) as caught:
        FileSource([str(missing)]).read()
    [problem] = caught.value.diagnostics
    assert (problem.span.file, problem.message) == (str(missing), "no such file or directory")
    assert str(caught.value) == f"{missing}: error: no such file or directory"
