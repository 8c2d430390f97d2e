"""`policyd run --kubeconfig` of unusable files: one clear line, exit status 1, no traceback."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from policyd.cli import main

if TYPE_CHECKING:
    from policyd.commands.run import Runner

CONTEXTLESS = """apiVersion: v1
kind: Config
clusters:
- name: k
  cluster: {server: "https://127.0.0.1:1"}
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user: {token: x}
"""


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "no such file"),
        ("", "the file is empty"),
        (CONTEXTLESS, "no current-context set"),
        (
            CONTEXTLESS + "current-context: nope\n",
            "refers to context 'nope', which is not in its contexts list",
        ),
        (
            CONTEXTLESS.replace("{cluster: k,", "{cluster: gone,") + "current-context: c\n",
            "refers to cluster 'gone', which is not in its clusters list",
        ),
        ("{{{ not yaml", "not a usable kubeconfig"),
    ],
    ids=["missing", "empty", "context-less", "unknown-context", "unknown-cluster", "not-yaml"],
)
def test_unusable_kubeconfig_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, problem: str
) -> None:
    path = tmp_path / "kubeconfig"
    if text is not None:
        path.write_text(text)
    assert main(["run", "--kubeconfig", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"policyd run: error: kubeconfig {path}: ")
    assert problem in line
    assert "Traceback" not in captured.err


def test_a_directory_is_not_a_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--kubeconfig", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"policyd run: error: kubeconfig {tmp_path}: not a file\n"


def test_serving_flags_map_to_the_configuration() -> None:
    from policyd.cli import build_parser
    from policyd.commands.run import effective_config

    parser = build_parser()
    cfg = effective_config(
        parser.parse_args(
            [
                "run",
                "--secure-port=0",
                "--tls-cert-file=/c",
                "--tls-private-key-file=/k",
                "--authorization-always-allow-paths=/healthz,/debug/*",
                "--authorization-webhook-cache-unauthorized-ttl=500ms",
                "--authentication-token-webhook-cache-ttl=1m",
                "--authorization-kubeconfig=/authz",
            ]
        )
    )
    assert cfg.port == 0 and cfg.secure is not None
    assert (cfg.secure.cert_file, cfg.secure.key_file, cfg.secure.authorization_kubeconfig) == (
        "/c",
        "/k",
        "/authz",
    )
    assert cfg.secure.always_allow_paths == ("/healthz", "/debug/*")
    assert (cfg.secure.deny_cache_ttl, cfg.secure.token_cache_ttl) == (0.5, 60.0)
    plain = effective_config(parser.parse_args(["run", "--port=0"]))
    assert plain.port == 0 and plain.secure is None


def test_plain_port_refuses_secure_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--port=0", "--client-ca-file=/ca", "--kubeconfig=/nonexistent"]) == 1
    assert (
        "--port serves plain HTTP, which has no --client-ca-file: use --secure-port"
        in capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--port=0", "--secure-port=0"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_unusable_certificate_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(CONTEXTLESS + "current-context: c\n")
    code = main(
        [
            "run",
            f"--kubeconfig={kubeconfig}",
            f"--tls-cert-file={tmp_path / 'missing.crt'}",
            f"--tls-private-key-file={tmp_path / 'missing.key'}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"--tls-cert-file {tmp_path / 'missing.crt'}: cannot read" in err


def _runner(tmp_path: Path) -> Runner:
    """A Runner of a kubeconfig naming no reachable server, without leader election, on any port."""
    from policyd.commands.run import Runner
    from policyd.service import config as configuration

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(CONTEXTLESS + "current-context: c\n")
    cfg = configuration.from_dict(
        {
            "leaderElection": {"leaderElect": False},
            "serving": {"port": 0, "insecure": True},
            "clientConnection": {"kubeconfig": str(kubeconfig)},
        }
    )
    return Runner(cfg)


def test_not_ready_before_policies_and_caches(tmp_path: Path) -> None:
    """/readyz fails from the moment the server could answer until start() wired everything."""
    runner = _runner(tmp_path)
    try:
        failed = dict((name, reason) for name, reason in runner.server.readyz.run() if reason)
        assert failed == {"informer-sync": "caches not synced", "policy": "policies not loaded"}
    finally:
        runner.client.close()


def test_a_failing_scheduling_loop_ends_the_process_rather_than_holding_the_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception out of the scheduling loop (a bug, data no check foresaw) would leave a leader
    that renews its lease and schedules nothing: it is logged and made fatal, as a panic in
    kube-scheduler's cycle ends the process, so that `run` shuts down, releases the lease and exits 1."""
    runner = _runner(tmp_path)

    class Synced:
        def wait_for_sync(self, timeout: float) -> bool:
            return True

    class Failing:
        def run(self, stop: object) -> None:
            raise OverflowError("Python int too large to convert to C long")

    try:
        runner.backend, runner.scheduler = Synced(), Failing()  # type: ignore[assignment]
        runner.start_scheduling()
        assert runner.sched_thread is not None
        runner.sched_thread.join(5)
        assert runner.stop.is_set()
        assert runner.fatal == [
            "scheduling loop failed: OverflowError: Python int too large to convert to C long"
        ]
        assert "scheduling loop failed" in caplog.text and "Traceback" in caplog.text
    finally:
        runner.client.close()
