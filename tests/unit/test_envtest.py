"""policyd.envtest: the binaries come from KUBEBUILDER_ASSETS, or a one-line error says how; the
processes it starts die with the process that started them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from policyd.envtest import MissingAssetsError, find_assets

# a parent that starts `sleep` as envtest starts etcd and kube-apiserver, prints its pid and waits
PARENT = """
import subprocess, sys, time
from policyd.envtest import die_with_parent
child = subprocess.Popen(["sleep", "60"], start_new_session=True, preexec_fn=die_with_parent)
print(child.pid, flush=True)
time.sleep(60)
"""


def binaries(directory: Path, *names: str, executable: bool = True) -> Path:
    for name in names:
        path = directory / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755 if executable else 0o644)
    return directory


def test_assets_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries(tmp_path, "kube-apiserver", "etcd")))
    assert find_assets() == tmp_path
    with pytest.raises(MissingAssetsError, match="kube-scheduler"):
        find_assets(("kube-apiserver", "etcd", "kube-scheduler"))


@pytest.mark.parametrize("setting", ["unset", "not executable", "missing etcd"])
def test_missing_assets_are_one_line_naming_the_variable(
    setting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if setting == "unset":
        monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    elif setting == "not executable":
        monkeypatch.setenv(
            "KUBEBUILDER_ASSETS", str(binaries(tmp_path, "kube-apiserver", "etcd", executable=False))
        )
    else:
        monkeypatch.setenv("KUBEBUILDER_ASSETS", str(binaries(tmp_path, "kube-apiserver")))
    with pytest.raises(MissingAssetsError) as caught:
        find_assets()
    message = str(caught.value)
    assert "\n" not in message
    assert "KUBEBUILDER_ASSETS" in message and "scripts/envtest.sh" in message


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is gone
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_started_process_dies_when_its_starter_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert _alive(child)
        parent.kill()  # SIGKILL: no cleanup runs
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if _alive(child):
            os.kill(child, 9)
