"""The analysed grammars are kept in the user's cache directory between processes, and a missing,
broken or unwritable cache only costs the time to build them again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lark import Lark

from policyd.cel.parser import parser_cache


def _policyd(cache_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    return subprocess.run(
        [sys.executable, "-m", "policyd", *args], capture_output=True, text=True, env=env, check=False
    )


def test_the_file_is_in_the_users_cache_directory_and_named_by_the_grammar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = parser_cache("cel", 'start: A\nA: "a"\n')
    assert isinstance(first, str) and Path(first).parent == tmp_path / "policyd"
    assert Path(first).name.startswith("cel-") and first.endswith(".lark")
    assert parser_cache("cel", 'start: A\nA: "a"\n') == first
    assert parser_cache("cel", 'start: A\nA: "b"\n') != first


def test_no_cache_directory_means_no_cache_and_the_parser_still_works(no_cache_directory: Path) -> None:
    assert parser_cache("cel", 'start: A\nA: "a"\n') is False
    done = _policyd(no_cache_directory, "eval", "'abc'.size()")
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr


def test_a_second_process_loads_the_tables_the_first_wrote(tmp_path: Path) -> None:
    done = _policyd(tmp_path, "eval", "[1, 2].map(x, x * 3)")
    assert done.returncode == 0 and done.stdout.strip() == "[3, 6]", done.stderr
    (kept,) = (tmp_path / "policyd").glob("cel-*.lark")
    written = kept.stat().st_mtime_ns
    again = _policyd(tmp_path, "eval", "[1, 2].map(x, x * 3)")
    assert again.returncode == 0 and again.stdout.strip() == "[3, 6]", again.stderr
    assert kept.stat().st_mtime_ns == written  # loaded, not built and written again


def test_a_broken_file_is_built_again_and_errors_keep_their_place(tmp_path: Path) -> None:
    policy = tmp_path / "p.policy"
    policy.write_text("policy p {\n  filter F { expr = node.ready && }\n}\n")
    assert _policyd(tmp_path, "lint", str(policy)).returncode == 1
    (kept,) = (tmp_path / "policyd").glob("policy-*.lark")
    kept.write_bytes(kept.read_bytes()[:100])  # another process half-way through writing it
    done = _policyd(tmp_path, "lint", str(policy))
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert f"{policy}:2:35: error:" in done.stdout, done.stdout
    assert kept.stat().st_size > 100  # written again whole
    cached = _policyd(tmp_path, "lint", str(policy))
    assert cached.stdout == done.stdout  # the loaded tables report the same error at the same place


def test_a_grammar_imported_from_two_directories_keeps_a_file_for_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two checkouts or installations used in turn: each loads its own tables, neither rewrites the
    other's (Lark rebuilds a cache file whose import paths differ from the parser's)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    grammar = "%import shared.WORD\nstart: WORD\n"
    checkouts = [tmp_path / "a", tmp_path / "b"]
    for directory in checkouts:
        directory.mkdir()
        (directory / "shared.lark").write_text("WORD: /[a-z]+/\n")

    def build(directory: Path) -> tuple[Lark, Path]:
        imports = [str(directory)]
        cache = parser_cache("shared", grammar, imports)
        assert isinstance(cache, str)
        return Lark(grammar, parser="lalr", import_paths=imports, cache=cache), Path(cache)

    _, first = build(checkouts[0])
    _, second = build(checkouts[1])
    assert first != second and first.exists() and second.exists()
    written = first.stat().st_mtime_ns, second.stat().st_mtime_ns
    again, _ = build(checkouts[0])
    build(checkouts[1])
    assert (first.stat().st_mtime_ns, second.stat().st_mtime_ns) == written  # loaded, not rebuilt
    assert str(again.parse("abc").children[0]) == "abc"
