"""deploy/kustomization.yaml names every manifest of deploy/, and `kubectl kustomize deploy/` renders exactly them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def manifests() -> list[dict[str, Any]]:
    """Every object of the files the kustomization lists, in its order."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return [
        doc for name in kustomization["resources"] for doc in yaml.safe_load_all((DEPLOY / name).read_text())
    ]


def test_kustomization_lists_every_manifest_once_namespace_first() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    resources = kustomization["resources"]
    on_disk = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(resources) == on_disk and len(set(resources)) == len(resources)
    kinds = [doc["kind"] for doc in manifests()]
    assert kinds[0] == "Namespace" and kinds[-1] == "Deployment"
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"} <= set(
        kinds
    )


def test_kubectl_kustomize_renders_the_files() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize deploy/` cannot be checked")
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, check=True)
    rendered = list(yaml.safe_load_all(out.stdout))

    def key(doc: dict[str, Any]) -> tuple[str, str, str]:
        return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]

    assert sorted(rendered, key=key) == sorted(manifests(), key=key)
