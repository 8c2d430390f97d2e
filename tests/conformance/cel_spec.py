"""The vendored CEL conformance data (cel-spec, Apache-2.0; provenance in cel-spec/README.md).

`SAMPLE` names the files of the simple suite that the conformance test runs today; the whole suite is
vendored in `cel-spec/suite/` so that more files can be added to the run without reaching outside the
repository.
"""

from __future__ import annotations

from pathlib import Path

CEL_SPEC = Path(__file__).resolve().parent / "cel-spec"
PROTO_DIR = CEL_SPEC / "proto"
SUITE_DIR = CEL_SPEC / "suite"
SAMPLE = (
    "basic",
    "comparisons",
    "conversions",
    "integer_math",
    "lists",
    "logic",
    "macros",
    "string",
)


def sample_files() -> list[Path]:
    """The suite files of `SAMPLE`, in order (a missing one is an error, never a skip)."""
    files = [SUITE_DIR / f"{name}.textproto" for name in SAMPLE]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"vendored CEL conformance files missing: {', '.join(missing)}")
    return files
