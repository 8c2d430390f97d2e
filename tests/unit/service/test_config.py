"""policyd.yaml: defaults, merging, schema errors naming the failing path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policyd import shipped
from policyd.errors import ConfigError
from policyd.service import config


def test_defaults_are_valid_and_typed() -> None:
    cfg = config.load(None)
    assert cfg.scheduler_names == ("policyd",)
    assert cfg.profiles[0].sources == (config.PolicySourceRef(path=str(shipped.default_policy())),)
    assert (cfg.qps, cfg.burst, cfg.bind_parallelism) == (50.0, 100, 64)
    le = cfg.leader_election
    assert (le.lease_duration, le.renew_deadline, le.retry_period) == (15.0, 10.0, 2.0)
    assert (le.namespace, le.name, le.leader_elect) == ("kube-system", "policyd", True)
    assert (cfg.bind_address, cfg.port) == ("127.0.0.1", 10259)


def test_write_defaults_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "policyd.yaml"
    config.write_defaults(path)
    assert yaml.safe_load(path.read_text()) == config.defaults()
    assert config.load(path).raw == config.defaults()


def test_file_overrides_defaults_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "profiles": [
                    {"schedulerName": "gpu", "policySources": [{"configMap": "kube-system/gpu-policies"}]},
                    {"schedulerName": "batch"},
                ],
                "policySources": [{"path": "/etc/policyd"}],
                "leaderElection": {"leaseDurationSeconds": 30, "renewDeadlineSeconds": 20},
                "serving": {"port": 0},
            }
        )
    )
    cfg = config.load(path)
    assert cfg.scheduler_names == ("gpu", "batch")
    assert cfg.profiles[0].sources[0].config_map_ref == ("kube-system", "gpu-policies")
    assert cfg.profiles[1].sources == (config.PolicySourceRef(path="/etc/policyd"),)
    assert cfg.leader_election.lease_duration == 30 and cfg.leader_election.retry_period == 2
    assert cfg.port == 0 and cfg.bind_address == "127.0.0.1"
    assert [str(s) for s in cfg.config_map_sources()] == ["configmap:kube-system/gpu-policies"]


def test_shared_sources_without_profiles_apply_to_default_profile() -> None:
    cfg = config.from_dict({"policySources": [{"path": "/p"}]})
    assert cfg.profiles == (config.Profile("policyd", (config.PolicySourceRef(path="/p"),)),)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"profiles": [{"schedulerName": "Bad Name"}]}, "$.profiles[0].schedulerName"),
        (
            {"profiles": [{"schedulerName": "a", "policySources": [{"configMap": "noslash"}]}]},
            "$.profiles[0].policySources[0].configMap",
        ),
        ({"bindParallelism": 0}, "$.bindParallelism"),
        ({"clientConnection": {"qps": "fast"}}, "$.clientConnection.qps"),
        ({"serving": {"prot": 1}}, "$.serving"),
        ({"percentageOfNodesToScore": 101}, "$.percentageOfNodesToScore"),
    ],
)
def test_schema_errors_name_the_path(doc: dict, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.from_dict(doc, "policyd.yaml")
    assert str(info.value).startswith(f"policyd.yaml: {path}: ")


def test_semantic_errors() -> None:
    with pytest.raises(ConfigError, match=r"\$\.profiles\[1\]\.schedulerName: duplicate"):
        config.from_dict({"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]})
    with pytest.raises(ConfigError, match=r"\$\.leaderElection"):
        config.from_dict({"leaderElection": {"renewDeadlineSeconds": 20}})
    with pytest.raises(ConfigError, match=r"\$\.backoff\.initialSeconds"):
        config.from_dict({"backoff": {"initialSeconds": 20}})


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles: [\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+:\d+: invalid YAML"):
        config.load(bad)
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n")
    with pytest.raises(ConfigError, match=r"\$: expected a mapping"):
        config.load(top)


def test_errors_in_a_file_name_the_line_and_column_of_the_value(tmp_path: Path) -> None:
    path = tmp_path / "policyd.yaml"
    text = (
        "profiles:\n"
        "- schedulerName: policyd\n"
        "- schedulerName: other\n"
        "backoff:\n"
        "  initialSeconds: 1\n"
        "clientConnection:\n"
        "  qps: 5\n"
    )
    cases = [
        ("initialSeconds: 1", "initialSeconds: 20", "5:19: $.backoff.initialSeconds: must not exceed"),
        ("other", "policyd", "3:18: $.profiles[1].schedulerName: duplicate scheduler name 'policyd'"),
        ("policyd", "Bad", "2:18: $.profiles[0].schedulerName: 'Bad' does not match"),
        ("initialSeconds: 1", "initialSeconds: -1", "5:19: $.backoff.initialSeconds: -1 is less than"),
        # an unknown key: the key itself
        ("initialSeconds: 1", "initialSecond: 1", "5:3: $.backoff: Additional properties are not allowed"),
        ("qps: 5\n", "qps: 5\n  qpss: 3\n", "8:3: $.clientConnection: Additional properties"),
    ]
    for old, new, expected in cases:
        path.write_text(text.replace(old, new))
        with pytest.raises(ConfigError) as raised:
            config.load(path)
        assert str(raised.value).startswith(f"{path}:{expected}"), (str(raised.value), expected)
    # a setting that is not written: the nearest enclosing value that is
    path.write_text("leaderElection:\n  renewDeadlineSeconds: 20\n")
    with pytest.raises(ConfigError, match=r"policyd.yaml:2:3: \$\.leaderElection: need"):
        config.load(path)


def test_positions_do_not_depend_on_what_the_files_path_holds(tmp_path: Path) -> None:
    """The problems are kept by JSON path, not read back from the message: a directory whose name
    holds a line break or reads like a message changes nothing."""
    folder = tmp_path / "two\nlines: $.profiles[0]: y"
    folder.mkdir()
    path = folder / "policyd.yaml"
    path.write_text("profiles:\n- schedulerName: a\n- schedulerName: a\n")
    with pytest.raises(ConfigError) as raised:
        config.load(path)
    assert str(raised.value) == f"{path}:3:18: $.profiles[1].schedulerName: duplicate scheduler name 'a'"


def test_allow_profile_removal_defaults_off_and_can_be_set(tmp_path: Path) -> None:
    assert config.load(None).allow_profile_removal is False
    path = tmp_path / "policyd.yaml"
    path.write_text("allowProfileRemoval: true\n")
    assert config.load(path).allow_profile_removal is True
    path.write_text("allowProfileRemoval: 'yes'\n")
    with pytest.raises(ConfigError, match="allowProfileRemoval"):
        config.load(path)


def test_each_profile_holds_only_its_own_sources(tmp_path: Path) -> None:
    from policyd.service.config import from_dict

    a, b = tmp_path / "a", tmp_path / "b.policy"
    cfg = from_dict(
        {
            "profiles": [
                {"schedulerName": "one", "policySources": [{"path": str(a)}, {"configMap": "ops/pol"}]},
                {"schedulerName": "two", "policySources": [{"path": str(b)}]},
            ]
        }
    )
    names = [
        str(a / "x.policy"),
        str(b),
        "configmap://ops/pol/k.policy",
        "configmap://ops/polx/k.policy",
        str(tmp_path / "ab"),
    ]
    assert cfg.scopes(names) == {
        "one": frozenset({str(a / "x.policy"), "configmap://ops/pol/k.policy"}),
        "two": frozenset({str(b)}),
    }


def test_serving_is_https_with_delegated_auth_by_default() -> None:
    secure = config.load(None).secure
    assert secure is not None
    assert (secure.cert_file, secure.key_file, secure.client_ca_file) == ("", "", "")
    assert secure.always_allow_paths == ("/healthz", "/readyz", "/livez")
    assert (secure.token_cache_ttl, secure.allow_cache_ttl, secure.deny_cache_ttl) == (10.0, 10.0, 10.0)
    cfg = config.from_dict(
        {
            "serving": {
                "tls": {"certFile": "/c", "privateKeyFile": "/k"},
                "authorization": {"alwaysAllowPaths": ["/healthz"], "denyCacheTTLSeconds": 2},
            }
        }
    )
    assert cfg.secure is not None and cfg.secure.always_allow_paths == ("/healthz",)
    assert (cfg.secure.cert_file, cfg.secure.deny_cache_ttl, cfg.secure.allow_cache_ttl) == ("/c", 2.0, 10.0)
    assert config.from_dict({"serving": {"insecure": True, "port": 0}}).secure is None


@pytest.mark.parametrize(
    ("serving", "message"),
    [
        ({"tls": {"certFile": "/c"}}, "$.serving.tls: certFile and privateKeyFile go together"),
        (
            {"authorization": {"alwaysAllowPaths": ["/a*b"]}},
            "$.serving.authorization.alwaysAllowPaths[0]: only a trailing * is allowed",
        ),
        (
            {"insecure": True, "tls": {"clientCAFile": "/ca"}, "authentication": {"kubeconfig": "/kc"}},
            "$.serving.insecure: plain HTTP has no TLS or authentication; "
            "remove serving.tls.clientCAFile, serving.authentication.kubeconfig",
        ),
        ({"authentication": {"cacheTTLSeconds": -1}}, "$.serving.authentication.cacheTTLSeconds"),
    ],
)
def test_serving_errors_name_the_setting(serving: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.from_dict({"serving": serving}, "policyd.yaml")
    assert str(info.value).startswith(f"policyd.yaml: {message}")
