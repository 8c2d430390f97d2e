"""`policyd lint --config`: the set a reload would load, ConfigMaps from manifests; exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from policyd.cli import main

GOOD = """\
policy zone {
  filter InZone {
    expr = node.labels["zone"] == "a"
    reason = "wrong zone"
  }
}
"""
BROKEN = GOOD.replace("node.labels", "node.lables")


def write_config(tmp: Path, sources: list[dict[str, str]], name: str = "policyd") -> str:
    path = tmp / "policyd.yaml"
    doc = {"profiles": [{"schedulerName": name, "policySources": sources}]}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def write_configmap(tmp: Path, ns: str, name: str, data: dict[str, str], file: str = "cm.yaml") -> str:
    path = tmp / file
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns, "name": name}, "data": data}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_config_with_good_files_and_configmap_is_clean(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "a.policy").write_text(GOOD)
    other = GOOD.replace("policy zone", "policy zone2")
    cfg = write_config(tmp_path, [{"path": str(tmp_path / "pol")}, {"configMap": "ops/policies"}])
    cm = write_configmap(tmp_path, "ops", "policies", {"z.policy": other, "README": "not a policy"})
    assert main(["lint", "--config", cfg, "--configmap-file", f"ops/policies={cm}"]) == 0


def test_broken_configmap_key_is_reported_with_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, [{"configMap": "ops/policies"}])
    cm = write_configmap(tmp_path, "ops", "policies", {"zone.policy": BROKEN})
    assert main(["lint", "--config", cfg, "--configmap-file", f"ops/policies={cm}"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^configmap://ops/policies/zone\.policy:3:\d+: error: .*lables", out, re.MULTILINE)


def test_set_level_errors_across_sources_are_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file and a ConfigMap each fine alone, but the same policy name twice in the loaded set."""
    (tmp_path / "a.policy").write_text(GOOD)
    cfg = write_config(tmp_path, [{"path": str(tmp_path / "a.policy")}, {"configMap": "ops/policies"}])
    cm = write_configmap(tmp_path, "ops", "policies", {"zone.policy": GOOD})
    assert main(["lint", str(tmp_path / "a.policy")]) == 0
    assert main(["lint", "--config", cfg, "--configmap-file", f"ops/policies={cm}"]) == 1
    assert "zone" in capsys.readouterr().out


def test_a_missing_policy_path_is_the_one_error_not_also_the_profile_it_leaves_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, [{"path": str(tmp_path / "nope.policy")}])
    assert main(["lint", "--config", cfg]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"policyd lint: {tmp_path / 'nope.policy'}: no such file or directory\n"
    assert captured.out == ""


def test_a_configured_profile_without_policy_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.policy").write_text(GOOD)
    cfg = write_config(tmp_path, [{"path": str(tmp_path / "a.policy")}], name="batch")
    assert main(["lint", "--config", cfg]) == 1
    out = capsys.readouterr().out
    assert f"{cfg}: error: no policy declares profile(s) batch" in out  # no line: the config as a whole
    assert main(["lint", "--config", cfg, "--format", "json"]) == 1
    (found,) = json.loads(capsys.readouterr().out)
    assert (found["file"], found["line"], found["column"]) == (cfg, None, None)


def test_configmap_without_manifest_or_kubeconfig_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, [{"configMap": "ops/policies"}])
    assert main(["lint", "--config", cfg]) == 2
    assert "--configmap-file ops/policies=FILE" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argument",
    ["ops/other={cm}", "ops-policies={cm}", "ops/policies={tmp}/missing.yaml", "ops/policies={tmp}/cfg"],
)
def test_bad_configmap_file_arguments_exit_2(tmp_path: Path, argument: str) -> None:
    cfg = write_config(tmp_path, [{"configMap": "ops/policies"}])
    cm = write_configmap(tmp_path, "ops", "policies", {"zone.policy": GOOD})
    (tmp_path / "cfg").write_text("kind: Deployment\n")
    arg = argument.format(cm=cm, tmp=tmp_path)
    assert main(["lint", "--config", cfg, "--configmap-file", arg]) == 2


def test_manifest_of_another_configmap_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, [{"configMap": "ops/policies"}])
    cm = write_configmap(tmp_path, "ops", "elsewhere", {"zone.policy": GOOD})
    assert main(["lint", "--config", cfg, "--configmap-file", f"ops/policies={cm}"]) == 2
    assert "not ops/policies" in capsys.readouterr().err


def test_missing_policy_path_is_an_io_error(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, [{"path": str(tmp_path / "nowhere")}])
    assert main(["lint", "--config", cfg]) == 2


def test_paths_and_config_together_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "a.policy").write_text(GOOD)
    cfg = write_config(tmp_path, [{"path": str(tmp_path / "a.policy")}])
    assert main(["lint", "--config", cfg, str(tmp_path / "a.policy")]) == 2


def test_config_lint_agrees_with_a_reload(tmp_path: Path) -> None:
    """Whatever lint --config accepts, the reloader accepts; whatever it rejects, the reloader rejects."""
    from policyd.compiler.profiles import compile_sources
    from policyd.service.reload import ConfigMapSource, PolicyReloader

    cfg = write_config(tmp_path, [{"configMap": "ops/policies"}])
    for text, code in ((GOOD, 0), (BROKEN, 1)):
        cm = write_configmap(tmp_path, "ops", "policies", {"zone.policy": text})
        source = ConfigMapSource(["ops/policies"])
        source.update("ops", "policies", {"zone.policy": text})
        reloader = PolicyReloader(
            [source], lambda _new: None, compile_fn=lambda t, g: compile_sources(t, generation=g)
        )
        assert reloader.reload_now().ok == (code == 0)
        assert main(["lint", "--config", cfg, "--configmap-file", f"ops/policies={cm}"]) == code


def test_lint_config_composes_each_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A policy extending a policy its profile does not load is an error at the `extends`; the shipped
    default is the one base found without being listed."""
    (tmp_path / "base.policy").write_text('policy base {\n  profiles = ["policyd"]\n}\n')
    (tmp_path / "binpack.policy").write_text(
        'policy binpack extends base, default {\n  profiles = ["packed"]\n  disable default/ImageLocality\n}\n'
    )
    doc = {
        "profiles": [
            {"schedulerName": "packed", "policySources": [{"path": str(tmp_path / "binpack.policy")}]},
            {"schedulerName": "policyd", "policySources": [{"path": str(tmp_path / "base.policy")}]},
        ]
    }
    (tmp_path / "policyd.yaml").write_text(yaml.safe_dump(doc))
    assert main(["lint", "--config", str(tmp_path / "policyd.yaml")]) == 1
    out = capsys.readouterr().out
    assert (
        f"{tmp_path / 'binpack.policy'}:1:24: error: policy 'binpack' extends 'base', which is not loaded for profile 'packed'"
        in out
    )
    assert "'default'" not in out
    doc["profiles"][0]["policySources"].insert(0, {"path": str(tmp_path / "base.policy")})
    (tmp_path / "policyd.yaml").write_text(yaml.safe_dump(doc))
    assert main(["lint", "--config", str(tmp_path / "policyd.yaml")]) == 0
