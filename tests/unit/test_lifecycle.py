"""Lifecycle logs are shown at the default log level (WARNING on the root logger), as kube-scheduler's:
policy set loaded (profiles and rule counts) or rejected (with the error), leader elected or lost."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from policyd import lifecycle
from policyd.service.reload import FileSource, PolicyReloader

POLICY = """policy p {
  filter Fit { expr = node.free["cpu"] >= pod.requests["cpu"] }
  score Free { expr = node.free["cpu"] weight = 1 }
}
"""


@pytest.fixture
def default_level(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The root logger at policyd's default level; caplog's handler takes everything that reaches it."""
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.WARNING)
    caplog.handler.setLevel(logging.NOTSET)
    try:
        yield caplog
    finally:
        root.setLevel(before)


def lifecycle_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == lifecycle.LOGGER_NAME]


def test_policy_set_loaded_then_rejected_at_the_default_level(
    tmp_path: Path, default_level: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "p.policy"
    path.write_text(POLICY)
    reloader = PolicyReloader([FileSource([str(path)])], lambda _set: None)
    reloader.load_initial()
    (loaded,) = lifecycle_lines(default_level)
    assert loaded.startswith("policy set loaded generation=1 ")
    assert "profiles=1 rules=2 policyd(filters=1 scores=1 permits=0)" in loaded
    assert str(path) in loaded
    # other INFO records stay hidden at the default level
    assert not [
        r for r in default_level.records if r.levelno < logging.WARNING and r.name != lifecycle.LOGGER_NAME
    ]

    path.write_text("policy p { filter F { expr = node.nope( } }")
    assert not reloader.reload_now().ok
    rejected = lifecycle_lines(default_level)[1]
    assert rejected.startswith("policy set rejected; keeping generation=1 errors=1")
    assert "p.policy:1:" in rejected


def test_leader_elected_and_lost_are_logged(default_level: pytest.LogCaptureFixture) -> None:
    lifecycle.leader_elected("kube-system/policyd", "host_1")
    lifecycle.leader_lost("kube-system/policyd", "host_1", "failed to renew")
    assert lifecycle_lines(default_level) == [
        "leader elected lease=kube-system/policyd identity=host_1",
        "leader lost lease=kube-system/policyd identity=host_1 reason=failed to renew",
    ]
