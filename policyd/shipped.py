"""What the package ships beside its code: JSON schemas, the policies and the example cluster.

Everything here resolves inside the installed package (`importlib.resources`), never against the
working directory or a source checkout.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

SCHEMAS = ("policy", "policytest", "config", "cluster")


@cache
def schema(name: str) -> dict[str, Any]:
    """The JSON Schema `<name>.schema.json` shipped in `policyd/schemas` (policy, policytest, config, cluster)."""
    if name not in SCHEMAS:
        raise ValueError(f"no shipped schema {name!r} (one of {', '.join(SCHEMAS)})")
    text = resources.files("policyd").joinpath("schemas", f"{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def _file(*parts: str) -> Path:
    """A shipped file as a filesystem path (packages are installed as directories, not zips)."""
    return Path(str(resources.files("policyd").joinpath(*parts)))


def default_policy() -> Path:
    """`policies/default.policy`: kube-scheduler's default plugins as policy."""
    return _file("policies", "default.policy")


def policies_dir() -> Path:
    """The shipped policies: default.policy, examples/ and their test suites in tests/."""
    return _file("policies")


def example_cluster() -> Path:
    """`examples/cluster.yaml`: the cluster `policyd simulate` schedules when given none."""
    return _file("examples", "cluster.yaml")
