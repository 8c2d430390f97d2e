"""Figures of an end-to-end benchmark run: scheduler histograms, per-run results, the comparison table.

Latency quantiles come from each scheduler's own Prometheus histograms, scraped before and after the
measured pods: the difference of the two scrapes holds exactly the measured phase's attempts, and a
quantile is interpolated inside its bucket as PromQL's `histogram_quantile` does (so it is only as
fine as the buckets: kube-scheduler's and policyd's are both 0.001 s x 2^i, 15 buckets).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from policyd.bench.results import machine, write_result_files

KUBE_SCHEDULER = "kube-scheduler"
POLICYD = "policyd"


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: cumulative counts per upper bound (ascending, `inf` last)."""

    buckets: tuple[tuple[float, float], ...] = ()
    count: float = 0.0
    total: float = 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made since `earlier` (a scrape of the same histogram)."""
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets),
            self.count - earlier.count,
            self.total - earlier.total,
        )

    def quantile(self, q: float) -> float:
        """The `q` quantile (0..1), interpolated inside its bucket as PromQL's histogram_quantile; nan if empty."""
        if not self.buckets or self.count <= 0:
            return math.nan
        rank = q * self.buckets[-1][1]
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower  # beyond the last finite bound: report that bound
                if cumulative == below:
                    return le
                return lower + (le - lower) * (rank - below) / (cumulative - below)
            lower, below = le, cumulative
        return lower


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LE = re.compile(r'(?:^|,)\s*le="([^"]*)"')


def parse_histogram(text: str, name: str, labels: Mapping[str, str] | None = None) -> Histogram | None:
    """The histogram `name` from Prometheus text, summed over its label sets (those matching `labels`)."""
    buckets: dict[float, float] = {}
    count = total = 0.0
    found = False
    wanted = [f'{k}="{v}"' for k, v in (labels or {}).items()]
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        metric, label_text, value = m.group(1), m.group(2) or "", m.group(3)
        if any(w not in label_text for w in wanted):
            continue
        if metric == name + "_bucket":
            le = _LE.search(label_text)
            if le is None:
                continue
            bound = float(le.group(1))  # "+Inf" parses as inf
            buckets[bound] = buckets.get(bound, 0.0) + float(value)
            found = True
        elif metric == name + "_count":
            count += float(value)
            found = True
        elif metric == name + "_sum":
            total += float(value)
    if not found:
        return None
    return Histogram(tuple(sorted(buckets.items())), count, total)


def first_histogram(text: str, names: Sequence[str]) -> tuple[str, Histogram]:
    """The first of `names` present in `text` (an empty histogram named after the first when none is)."""
    for name in names:
        hist = parse_histogram(text, name)
        if hist is not None:
            return name, hist
    return names[0], Histogram()


def histogram_delta(after: str | None, before: str | None, names: Sequence[str]) -> tuple[str, Histogram]:
    """The first of `names` present in the `after` scrape, minus its value in `before` (name, histogram)."""
    if after is None:
        return names[0], Histogram()
    name, hist = first_histogram(after, names)
    if before is not None:
        earlier = parse_histogram(before, name)
        if earlier is not None:
            hist = hist.minus(earlier)
    return name, hist


# ---- results -------------------------------------------------------------------------------------


@dataclass
class E2EResult:
    """One (workload, scheduler) run."""

    workload: str
    scheduler: str
    scale: float
    node_scale: float
    nodes: int
    measured_pods: int
    scheduled: int
    seconds: float
    pods_per_second: float
    attempt_p50_ms: float
    attempt_p99_ms: float
    algorithm_p50_ms: float
    algorithm_p99_ms: float
    peak_rss_mib: float
    qps: float
    burst: int
    attempt_metric: str = ""
    attempts: int = 0
    create_pods_per_second: float = 0.0
    setup_seconds: float = 0.0
    machine: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (one entry of the result file)."""
        return asdict(self)


def ratios(results: Sequence[E2EResult]) -> dict[str, float]:
    """policyd pods/s divided by kube-scheduler pods/s, per workload having both."""
    by: dict[tuple[str, str], E2EResult] = {(r.workload, r.scheduler): r for r in results}
    out: dict[str, float] = {}
    for (wl, sched), r in by.items():
        base = by.get((wl, KUBE_SCHEDULER))
        if sched == POLICYD and base is not None and base.pods_per_second > 0:
            out[wl] = round(r.pods_per_second / base.pods_per_second, 2)
    return out


MARKDOWN_HEADER = (
    "| workload | scheduler | nodes | measured pods | scheduled | QPS/burst | pods/s | ratio | "
    "attempt p50 ms | attempt p99 ms | algorithm p50 ms | algorithm p99 ms | peak RSS MiB |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def markdown_row(r: E2EResult, ratio: float | None = None) -> str:
    """One markdown table row; `ratio` (policyd / kube-scheduler pods/s) on policyd rows."""
    ratio_text = f"{ratio:.2f}x" if ratio is not None else ""
    return (
        f"| {r.workload} | {r.scheduler} | {r.nodes} | {r.measured_pods} | {r.scheduled} | "
        f"{r.qps:g}/{r.burst} | {r.pods_per_second:.1f} | {ratio_text} | {_ms(r.attempt_p50_ms)} | "
        f"{_ms(r.attempt_p99_ms)} | {_ms(r.algorithm_p50_ms)} | {_ms(r.algorithm_p99_ms)} | "
        f"{r.peak_rss_mib:.0f} |\n"
    )


def markdown_table(results: Sequence[E2EResult]) -> str:
    """The result table with the policyd / kube-scheduler ratio on policyd rows."""
    rs = ratios(results)
    rows = [markdown_row(r, rs.get(r.workload) if r.scheduler == POLICYD else None) for r in results]
    return MARKDOWN_HEADER + "".join(rows)


def write_results(results: Sequence[E2EResult], out_dir: str) -> tuple[Path, Path]:
    """Write `<out>/e2e-<time>.json` and `.md`; returns both paths."""
    document = {
        "machine": machine(),
        "ratios": ratios(results),
        "results": [_json_safe(r.to_json()) for r in results],
    }
    return write_result_files(out_dir, "e2e", document, markdown_table(results))


def _json_safe(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in doc.items()}
