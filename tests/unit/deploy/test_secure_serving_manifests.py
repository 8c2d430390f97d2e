"""deploy/ serves as kube-scheduler does: HTTPS probes, review permissions, a metrics reader role."""

from __future__ import annotations

from pathlib import Path

import yaml

from policyd.commands.run import ACCESS_REVIEW_PERMISSION, TOKEN_REVIEW_PERMISSION

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_probes_use_https_on_the_secure_port() -> None:
    (deployment,) = docs("deployment.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["scheme"] == "HTTPS" and get["path"] in ("/livez", "/readyz")
        assert ports[get["port"]] == 10259


def test_cluster_role_may_create_the_reviews_delegated_auth_makes() -> None:
    role = next(d for d in docs("clusterrole.yaml") if d["kind"] == "ClusterRole")
    granted = {
        (v, g, r)
        for rule in role["rules"]
        for v in rule["verbs"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert {TOKEN_REVIEW_PERMISSION, ACCESS_REVIEW_PERMISSION} <= granted


def test_metrics_reader_grants_get_on_metrics_only() -> None:
    role, binding = docs("metrics-reader.yaml")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
