"""CEL conformance harness: compiles cel-spec's protos at test time and counts pass/skip/fail."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conformance.cel_spec import PROTO_DIR

STATS: dict[str, int] = {"passed": 0, "failed": 0, "skipped": 0}


def compile_protos(out_dir: Path) -> ModuleType:
    """Compile every cel-spec proto into `out_dir` with grpc_tools.protoc; return the simple_pb2 module."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    protos = [str(p.relative_to(PROTO_DIR)) for p in sorted(PROTO_DIR.rglob("*.proto"))]
    rc = protoc.main(["protoc", f"-I{PROTO_DIR}", f"-I{well_known}", f"--python_out={out_dir}", *protos])
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")
    for d in out_dir.rglob("*"):
        if d.is_dir() and not (d / "__init__.py").exists():
            (d / "__init__.py").write_text("")
    sys.path.insert(0, str(out_dir))
    return importlib.import_module("cel.expr.conformance.test.simple_pb2")


@pytest.fixture(scope="session")
def simple_pb2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The compiled `cel.expr.conformance.test.simple_pb2` module."""
    out = tmp_path_factory.mktemp("cel_proto_gen")
    yield compile_protos(out)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the conformance pass rate at the end of the run."""
    total = STATS["passed"] + STATS["failed"]
    if total == 0 and STATS["skipped"] == 0:
        return
    rate = 100.0 * STATS["passed"] / total if total else 0.0
    terminalreporter.write_line(
        f"CEL conformance: {STATS['passed']}/{total} in-scope tests passed ({rate:.1f}%), "
        f"{STATS['skipped']} skipped by rule (TestAllTypes / proto type environment)"
    )
