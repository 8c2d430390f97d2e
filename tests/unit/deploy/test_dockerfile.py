"""deploy/Dockerfile installs only the checkout's wheel on the Debian base; deploy/ reads policies from the package or a ConfigMap."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from policyd import shipped

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        out.append((keyword.upper(), rest.strip()))
        pending = ""
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each stage (from one FROM to the next); global ARGs before the first FROM are left out."""
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions(text):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, args))
    return result


def test_instructions_join_continuations_and_skip_comments() -> None:
    text = "# c\nFROM a AS b\nRUN x \\\n  y\n\nCOPY --from=b /d /d\n"
    assert instructions(text) == [("FROM", "a AS b"), ("RUN", "x  y"), ("COPY", "--from=b /d /d")]


def test_image_installs_the_wheel_from_the_context_and_copies_no_package_files_by_hand() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "site-packages" not in text and "schemas" not in text
    (final,) = stages(text)
    assert final[0] == ("FROM", "${BASE}"), "one stage, on the mmdebstrap base scripts/image.sh imports"
    assert not [args for keyword, args in final if keyword in ("COPY", "ADD")], "the context is bind-mounted"
    (run,) = [args for keyword, args in final if keyword == "RUN"]
    assert run.startswith("--mount=type=bind,source=.,target=/context ")
    assert "--no-index" in run and '--find-links /context/wheels "policyd==${VERSION}"' in run
    assert "compileall" in run and "--invalidation-mode unchecked-hash" in run
    assert ("USER", "65532:65532") in final and ("ENTRYPOINT", '["policyd"]') in final
    env = " ".join(args for keyword, args in final if keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env


def test_image_user_is_the_deployments_run_as_user() -> None:
    deployment = yaml.safe_load((DEPLOY / "deployment.yaml").read_text())
    run_as = deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    users = [args for keyword, args in instructions((DEPLOY / "Dockerfile").read_text()) if keyword == "USER"]
    assert users == [f"{run_as}:{run_as}"]


def test_manifests_take_policies_from_a_config_map_not_a_path_in_the_image() -> None:
    config_map = yaml.safe_load((DEPLOY / "config.yaml").read_text())
    settings = yaml.safe_load(config_map["data"]["policyd.yaml"])
    sources = [s for profile in settings["profiles"] for s in profile["policySources"]]
    assert sources == [{"configMap": "policyd-system/policyd-policies"}]
    policies = yaml.safe_load((DEPLOY / "policies-configmap.yaml").read_text())
    assert policies["metadata"] == {"name": "policyd-policies", "namespace": "policyd-system"}
    assert "default.policy" in policies["data"]
    for path in [DEPLOY / "Dockerfile", *DEPLOY.glob("*.yaml")]:
        assert not re.search(r"(^|[\s\"'=:\[])/policies\b", path.read_text()), f"{path.name} names /policies"


def test_policies_config_map_carries_the_shipped_policies() -> None:
    """deploy/policies-configmap.yaml is deploy/make-configmap.sh's output for the current policies."""
    policies = yaml.safe_load((DEPLOY / "policies-configmap.yaml").read_text())
    shipped_dir = shipped.policies_dir()
    files = sorted(p for p in shipped_dir.iterdir() if p.suffix in (".policy", ".yaml", ".yml"))
    assert sorted(policies["data"]) == [p.name for p in files]
    for path in files:
        assert policies["data"][path.name] == path.read_text(), (
            f"{path.name} changed: deploy/make-configmap.sh > deploy/policies-configmap.yaml"
        )
