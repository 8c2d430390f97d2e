"""Where the project's shared material lives: `shared/` beside the repository (as CI checks it out).

`POLICYD_SHARED` overrides it. A missing directory is an error, never a reason to skip.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POLICYD_SHARED") or REPO.parent / "shared")
CEL_SPEC = SHARED / "cel-spec"

if not (CEL_SPEC / "testdata").is_dir():
    raise RuntimeError(
        f"CEL conformance data not found at {CEL_SPEC} (set POLICYD_SHARED to the shared/ directory)"
    )
