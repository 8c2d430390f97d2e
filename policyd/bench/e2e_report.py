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


EVENT_WRITE_VERBS = frozenset({"POST", "PUT", "PATCH"})
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def event_writes(metrics_text: str) -> int:
    """Event creates and updates the API server answered with 2xx, from its own /metrics
    (`apiserver_request_total`, resource `events` of the core and events.k8s.io groups)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{") or 'resource="events"' not in line:
            continue
        sample = _SAMPLE.match(line)
        if sample is None or sample.group(1) != "apiserver_request_total":
            continue
        labels = dict(_LABEL.findall(sample.group(2) or ""))
        if labels.get("verb") in EVENT_WRITE_VERBS and labels.get("code", "").startswith("2"):
            total += float(sample.group(3))
    return int(total)


# ---- results -------------------------------------------------------------------------------------


@dataclass
class E2EResult:
    """One (workload, scheduler) run in one round."""

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
    attempt_p90_ms: float
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
    round: int = 1
    pods_per_second_from_release: float = 0.0  # bound / (last bind - release of the measured pods)
    first_bind_seconds: float = 0.0  # from the release to the first measured pod seen bound
    creation: str = ""  # how the measured pods reached the scheduler (`CREATION_METHODS`)
    # Event writes the API server accepted from the release to the last measured bind (nan: not read)
    events_by_last_bind: float = math.nan
    # pods seen deleted (on the watch) from the release to the last measured bind, and of them those
    # seen deleted after the first measured bind: preemption victims the API server was still finishing
    # while the scheduler bound (nan: not read)
    deleted_by_last_bind: float = math.nan
    deleted_after_first_bind: float = math.nan
    # CPU seconds (user + system) each process used from the release until the last measured pod was
    # seen bound: the scheduler, and the API server and etcd it made work (nan: not read)
    scheduler_cpu_seconds: float = math.nan
    apiserver_cpu_seconds: float = math.nan
    etcd_cpu_seconds: float = math.nan
    machine: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (one entry of the result file)."""
        return asdict(self)


# E2EResult.creation, in words
CREATION_METHODS = {
    "paused": "the measured pods were created while the scheduler process was stopped (SIGSTOP) and "
    "released at once (SIGCONT)",
}

# the figures summarised over rounds by their median
MEDIAN_FIELDS = (
    "pods_per_second",
    "pods_per_second_from_release",
    "first_bind_seconds",
    "attempt_p50_ms",
    "attempt_p90_ms",
    "attempt_p99_ms",
    "algorithm_p50_ms",
    "algorithm_p99_ms",
    "peak_rss_mib",
    "create_pods_per_second",
    "events_by_last_bind",
    "deleted_by_last_bind",
    "deleted_after_first_bind",
    "scheduler_cpu_seconds",
    "apiserver_cpu_seconds",
    "etcd_cpu_seconds",
)


@dataclass(frozen=True)
class E2EMedian:
    """One (workload, scheduler) over its rounds: the median of each figure (`MEDIAN_FIELDS`)."""

    workload: str
    scheduler: str
    nodes: int
    measured_pods: int
    scheduled: int  # the fewest bound in any round
    rounds: int
    qps: float
    burst: int
    pods_per_second: float
    pods_per_second_from_release: float
    first_bind_seconds: float
    attempt_p50_ms: float
    attempt_p90_ms: float
    attempt_p99_ms: float
    algorithm_p50_ms: float
    algorithm_p99_ms: float
    peak_rss_mib: float
    create_pods_per_second: float  # with the scheduler stopped meanwhile: not a bound on pods/s
    events_by_last_bind: float
    deleted_by_last_bind: float
    deleted_after_first_bind: float
    scheduler_cpu_seconds: float
    apiserver_cpu_seconds: float
    etcd_cpu_seconds: float

    def to_json(self) -> dict[str, Any]:
        """The JSON form (one entry of the result file's `medians`)."""
        return asdict(self)


def median(values: Sequence[float]) -> float:
    """The median of `values`, nan ones left out (the mean of the middle two for an even count); nan if none."""
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return math.nan
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def medians(results: Sequence[E2EResult]) -> list[E2EMedian]:
    """Per (workload, scheduler), in order of first appearance: the medians over its rounds."""
    groups: dict[tuple[str, str], list[E2EResult]] = {}
    for r in results:
        groups.setdefault((r.workload, r.scheduler), []).append(r)
    out = []
    for (wl, scheduler), runs in groups.items():
        docs = [r.to_json() for r in runs]
        figures = {name: round(median([float(d[name]) for d in docs]), 2) for name in MEDIAN_FIELDS}
        out.append(
            E2EMedian(
                workload=wl,
                scheduler=scheduler,
                nodes=runs[0].nodes,
                measured_pods=runs[0].measured_pods,
                scheduled=min(r.scheduled for r in runs),
                rounds=len(runs),
                qps=runs[0].qps,
                burst=runs[0].burst,
                **figures,
            )
        )
    return out


def ratios(summary: Sequence[E2EMedian], figure: str = "pods_per_second") -> dict[str, float]:
    """policyd's median `figure` (a pods/s field) divided by kube-scheduler's, per workload having both."""
    by = {(m.workload, m.scheduler): m for m in summary}
    out: dict[str, float] = {}
    for (wl, sched), m in by.items():
        base = by.get((wl, KUBE_SCHEDULER))
        if sched == POLICYD and base is not None and getattr(base, figure) > 0:
            out[wl] = round(getattr(m, figure) / getattr(base, figure), 2)
    return out


def paired_ratios(results: Sequence[E2EResult], figure: str = "pods_per_second") -> dict[str, float]:
    """Per workload run by both schedulers in the same rounds: the median over those rounds of
    policyd's `figure` divided by kube-scheduler's in the same round. The rounds are pairs run back
    to back, so this follows the machine's drift between rounds, which the ratio of the medians
    (`ratios`) does not."""
    by_round: dict[tuple[str, int], dict[str, float]] = {}
    for r in results:
        by_round.setdefault((r.workload, r.round), {})[r.scheduler] = float(getattr(r, figure))
    per_workload: dict[str, list[float]] = {}
    for (wl, _), figures in by_round.items():
        base, ours = figures.get(KUBE_SCHEDULER), figures.get(POLICYD)
        if base is not None and ours is not None and base > 0:
            per_workload.setdefault(wl, []).append(ours / base)
    return {wl: round(median(values), 2) for wl, values in per_workload.items()}


def budgets(results: Sequence[E2EResult]) -> str:
    """The client budgets the runs gave the schedulers, in words."""
    pairs = sorted({(r.qps, r.burst) for r in results})
    same = "each scheduler's client: " if len(pairs) == 1 else "client budgets differ between runs: "
    return same + ", ".join(f"QPS {qps:g}, burst {burst}" for qps, burst in pairs)


def creation(results: Sequence[E2EResult]) -> str:
    """How the runs made the measured pods available, in words."""
    methods = sorted({r.creation for r in results})
    return "; ".join(CREATION_METHODS.get(m, m or "created while the scheduler ran") for m in methods)


MARKDOWN_HEADER = (
    "| workload | scheduler | nodes | measured pods | rounds | pods/s | ratio | paired ratio | "
    "pods/s from release | first bind s | attempt p50 ms | attempt p90 ms | attempt p99 ms | "
    "algorithm p50 ms | peak RSS MiB | pods created/s | Events by last bind | pods deleted by last bind | "
    "of them after first bind | scheduler CPU s | kube-apiserver CPU s | etcd CPU s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def markdown_row(m: E2EMedian, ratio: float | None = None, paired: float | None = None) -> str:
    """One markdown table row of medians; on policyd rows `ratio` (policyd / kube-scheduler median
    pods/s) and `paired` (the median of the rounds' own ratios)."""
    ratio_text = f"{ratio:.2f}x" if ratio is not None else ""
    paired_text = f"{paired:.2f}x" if paired is not None else ""
    return (
        f"| {m.workload} | {m.scheduler} | {m.nodes} | {m.measured_pods} | {m.rounds} | "
        f"{m.pods_per_second:.1f} | {ratio_text} | {paired_text} | {m.pods_per_second_from_release:.1f} | "
        f"{m.first_bind_seconds:.2f} | {_ms(m.attempt_p50_ms)} | {_ms(m.attempt_p90_ms)} | "
        f"{_ms(m.attempt_p99_ms)} | {_ms(m.algorithm_p50_ms)} | {m.peak_rss_mib:.0f} | "
        f"{m.create_pods_per_second:.1f} | {_count(m.events_by_last_bind)} | "
        f"{_count(m.deleted_by_last_bind)} | {_count(m.deleted_after_first_bind)} | "
        f"{_seconds(m.scheduler_cpu_seconds)} | {_seconds(m.apiserver_cpu_seconds)} | "
        f"{_seconds(m.etcd_cpu_seconds)} |\n"
    )


def _count(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def markdown_table(results: Sequence[E2EResult]) -> str:
    """The medians over rounds with the policyd / kube-scheduler ratio on policyd rows, under the budgets."""
    summary = medians(results)
    rs, paired = ratios(summary), paired_ratios(results)
    rows = [
        markdown_row(m, rs.get(m.workload), paired.get(m.workload))
        if m.scheduler == POLICYD
        else markdown_row(m)
        for m in summary
    ]
    intro = (
        f"Medians over rounds; {budgets(results)}; {creation(results)}. pods/s: between the first and "
        "the last measured pod seen bound; ratio: policyd's median / kube-scheduler's; paired ratio: "
        "the median of each round's policyd / kube-scheduler; from release: measured pods bound / "
        "(last bind - release); "
        "Events by last bind: Event writes the API server accepted between the release and the last "
        "measured bind (apiserver_request_total); pods deleted by last bind: pods seen deleted on a "
        "watch between the release and the last measured bind (preemption victims), and of them after "
        "first bind: those the API server finished deleting while the measured pods were being bound; "
        "CPU s: the CPU time (user + system) each process used between the release and the last "
        "measured bind.\n\n"
    )
    return intro + MARKDOWN_HEADER + "".join(rows)


def run_line(r: E2EResult) -> str:
    """One run's figures on one line (progress while the benchmark runs)."""
    return (
        f"round {r.round} {r.workload} [{r.scheduler}]: {r.scheduled}/{r.measured_pods} bound, "
        f"{r.pods_per_second:.1f} pods/s ({r.pods_per_second_from_release:.1f} from release, first bind "
        f"after {r.first_bind_seconds:.2f} s), attempt p50/p90/p99 {_ms(r.attempt_p50_ms)}/"
        f"{_ms(r.attempt_p90_ms)}/{_ms(r.attempt_p99_ms)} ms, peak RSS {r.peak_rss_mib:.0f} MiB, "
        f"{_count(r.events_by_last_bind)} Events written by the last bind, "
        f"{_count(r.deleted_by_last_bind)} pods deleted by then ({_count(r.deleted_after_first_bind)} "
        f"after the first bind), CPU s scheduler/kube-apiserver/etcd {_seconds(r.scheduler_cpu_seconds)}/"
        f"{_seconds(r.apiserver_cpu_seconds)}/{_seconds(r.etcd_cpu_seconds)}"
    )


def write_results(results: Sequence[E2EResult], out_dir: str) -> tuple[Path, Path]:
    """Write `<out>/e2e-<time>.json` (medians, ratios, every round's figures) and `.md` (the medians table)."""
    summary = medians(results)
    document = {
        "machine": machine(),
        "budgets": budgets(results),
        "creation": creation(results),
        "ratios": ratios(summary),
        "ratios_from_release": ratios(summary, "pods_per_second_from_release"),
        "paired_ratios": paired_ratios(results),
        "medians": [_json_safe(m.to_json()) for m in summary],
        "results": [_json_safe(r.to_json()) for r in results],
    }
    return write_result_files(out_dir, "e2e", document, markdown_table(results))


def _json_safe(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in doc.items()}
