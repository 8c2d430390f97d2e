"""CEL conformance harness: compiles cel-spec's protos at test time and counts pass/skip/fail."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conformance.cel_spec import MIN_PASS_RATE, PROTO_DIR, FileResult

# suite file stem -> its outcome, filled by the `conformance_results` fixture, printed at the end
RESULTS: dict[str, FileResult] = {}


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
    # every generated module is imported so that `Any` values naming TestAllTypes parse
    for module in sorted(out_dir.rglob("*_pb2.py")):
        importlib.import_module(".".join(module.relative_to(out_dir).with_suffix("").parts))
    return importlib.import_module("cel.expr.conformance.test.simple_pb2")


@pytest.fixture(scope="session")
def simple_pb2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The compiled `cel.expr.conformance.test.simple_pb2` module."""
    out = tmp_path_factory.mktemp("cel_proto_gen")
    yield compile_protos(out)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the per-file conformance table (passed / in scope / skipped / pass rate) at the end of the run."""
    if not RESULTS:
        return
    write = terminalreporter.write_line
    write("")
    write("CEL conformance (cel-spec simple suite; skipped: needs protobuf messages or proto types)")
    write(f"{'file':<16} {'passed':>7} {'in scope':>9} {'skipped':>8} {'rate':>7}")
    passed = in_scope = skipped = 0
    for name in sorted(RESULTS):
        r = RESULTS[name]
        passed, in_scope, skipped = passed + r.passed, in_scope + r.in_scope, skipped + r.skipped
        rate = f"{100 * r.rate:.1f}%" if r.in_scope else "-"
        note = ""
        if r.in_scope and r.rate < MIN_PASS_RATE:
            note = f"  below {MIN_PASS_RATE:.0%}"
        write(f"{name:<16} {r.passed:>7} {r.in_scope:>9} {r.skipped:>8} {rate:>7}{note}")
    total_rate = f"{100 * passed / in_scope:.1f}%" if in_scope else "-"
    write(f"{'total':<16} {passed:>7} {in_scope:>9} {skipped:>8} {total_rate:>7}")
