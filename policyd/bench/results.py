"""What every benchmark run records beside its figures: the machine, and the result files it writes."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_OUT = "bench-results"  # relative to the working directory


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": model or platform.processor(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) of `values` by nearest rank; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def write_result_files(
    out_dir: str, prefix: str, document: dict[str, Any], markdown: str
) -> tuple[Path, Path]:
    """Write `<out_dir>/<prefix>-<time>.json` (the document) and `.md` (the table); returns both paths."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path = path / f"{prefix}-{stamp}.json"
    md_path = path / f"{prefix}-{stamp}.md"
    json_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    return json_path, md_path
