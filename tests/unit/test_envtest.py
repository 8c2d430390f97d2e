"""policyd.envtest.find_assets: the binaries come from KUBEBUILDER_ASSETS, or a one-line error says how."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyd.envtest import MissingAssetsError, find_assets


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
