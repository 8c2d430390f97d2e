"""The user's cache directory: XDG_CACHE_HOME, else ~/.cache; none where there is no home to use."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from policyd.user_cache import cache_directory


def test_the_directory_is_made_under_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_directory() == str(tmp_path / "xdg" / "policyd")
    assert (tmp_path / "xdg" / "policyd").is_dir()


def test_else_under_the_home_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_directory() == str(tmp_path / ".cache" / "policyd")


def test_no_home_to_expand_means_no_directory_rather_than_one_in_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container user without a passwd entry and no HOME: `~` stays `~`; a folder named `~` in the
    working directory would be made without the check."""
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)
    assert cache_directory() is None
    assert list(tmp_path.iterdir()) == []
