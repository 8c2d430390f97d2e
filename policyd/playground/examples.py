"""The shipped policies and example cluster, as the page's example menus list them."""

from __future__ import annotations

from typing import Any

from policyd import shipped
from policyd.playground.session import BASE_POLICY_NAME
from policyd.policy.loader import POLICY_SUFFIXES


def shipped_examples() -> dict[str, Any]:
    """`GET /api/examples`: policies (default.policy, then examples/ by name) and clusters, with their text.

    A policy other than default.policy is marked `withDefault`: the examples extend it.
    """
    root = shipped.policies_dir()
    files = [root / BASE_POLICY_NAME, *sorted((root / "examples").iterdir())]
    policies = [
        {
            "name": path.name,
            "text": path.read_text(encoding="utf-8"),
            "withDefault": path.name != BASE_POLICY_NAME,
        }
        for path in files
        if path.is_file() and path.name.endswith(POLICY_SUFFIXES)
    ]
    cluster = shipped.example_cluster()
    clusters = [{"name": cluster.name, "text": cluster.read_text(encoding="utf-8")}]
    return {"policies": policies, "clusters": clusters}
