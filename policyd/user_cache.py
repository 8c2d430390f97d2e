"""The user's cache directory for what policyd derives once and keeps between processes."""

from __future__ import annotations

import os

__all__ = ["cache_directory"]


def cache_directory() -> str | None:
    """`$XDG_CACHE_HOME/policyd`, else `~/.cache/policyd`, made when missing; None where it cannot be
    made (a read-only file system): callers then derive what they would have read."""
    home = os.path.expanduser("~")
    if not os.environ.get("XDG_CACHE_HOME") and not os.path.isabs(home):
        return None  # no HOME and a user without a passwd entry: "~" would be a folder of the cwd
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    directory = os.path.join(base, "policyd")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    return directory
