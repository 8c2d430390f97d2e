"""`policyd run --kubeconfig` of unusable files: one clear line, exit status 1, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from policyd.cli import main

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
