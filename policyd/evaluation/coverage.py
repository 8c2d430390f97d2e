"""Coverage of policies by a test suite: which rules and which branches the evaluations exercised.

Instrumented generated code (`policyd.compiler.codegen.compile_policy(..., coverage=collector)`)
registers a probe per filter and score rule and per branch condition when it is generated, and calls
the probe's recorder whenever it runs; the profile compiler (`policyd.compiler.profiles`) does the same
for the sections a policy writes itself: each queue key, preemption's `enabled` and `victims`, and each
permit's `group` and `minMember` (kube-scheduler's defaults that a policy leaves out are not counted):

- a **rule** (in reports, any of these items: kind `filter`, `score`, `queue`, `preemption` or
  `permit`) is covered when it was evaluated at least once (on some node, for some pod): its verdict
  (filters), raw score (scores) or value (sections) was computed, an evaluation error included;
- a **branch condition** is the condition of a ternary `c ? a : b` or an operand of a chain of `&&` or
  `||` (`a && b && c` has the three conditions `a`, `b`, `c`); it has two outcomes, true and false,
  and each counts as covered when the condition evaluated to it at least once (an error is neither).

Probes are identified by where they are written, so suites that load the same policy file add up.
`CoverageCollector.report()` summarises per policy file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

RuleKind = Literal["filter", "score", "queue", "preemption", "permit"]
BranchPoint = Literal["?:", "&&", "||"]


@dataclass(frozen=True)
class RuleProbe:
    """A filter or score rule, or a section expression (queue key, preemption, permit), where it is written."""

    file: str
    line: int
    column: int
    policy: str
    kind: RuleKind
    name: str


@dataclass(frozen=True)
class BranchProbe:
    """A branch condition (ternary condition or `&&`/`||` operand), where it is written."""

    file: str
    line: int
    column: int
    policy: str
    owner: str  # what the condition is part of, e.g. "filter fits", "let free", "match"
    point: BranchPoint
    text: str  # the condition's source text (shortened)


@dataclass(frozen=True)
class RuleCoverage:
    """One rule and how often it was evaluated."""

    probe: RuleProbe
    evaluations: int

    @property
    def covered(self) -> bool:
        """True when the rule was evaluated at least once."""
        return self.evaluations > 0


@dataclass(frozen=True)
class BranchCoverage:
    """One branch condition and how often it was true and false."""

    probe: BranchProbe
    true: int
    false: int

    @property
    def outcomes_covered(self) -> int:
        """How many of the two outcomes (true, false) were seen."""
        return (self.true > 0) + (self.false > 0)

    @property
    def missing(self) -> tuple[str, ...]:
        """The outcomes never seen ("true", "false")."""
        return tuple(name for name, n in (("true", self.true), ("false", self.false)) if n == 0)


@dataclass(frozen=True)
class FileCoverage:
    """Coverage of one policy file: its rules and branch conditions, in source order."""

    file: str
    rules: tuple[RuleCoverage, ...]
    branches: tuple[BranchCoverage, ...]

    @property
    def rules_covered(self) -> int:
        """Rules evaluated at least once."""
        return sum(1 for r in self.rules if r.covered)

    @property
    def outcomes_total(self) -> int:
        """Branch outcomes (two per condition)."""
        return 2 * len(self.branches)

    @property
    def outcomes_covered(self) -> int:
        """Branch outcomes seen."""
        return sum(b.outcomes_covered for b in self.branches)


def percent(covered: int, total: int) -> float:
    """`covered` of `total` in percent (100 when there is nothing to cover)."""
    return 100.0 if total == 0 else 100.0 * covered / total


@dataclass(frozen=True)
class CoverageReport:
    """Coverage per policy file (sorted by file) and in total."""

    files: tuple[FileCoverage, ...]

    @property
    def rules_total(self) -> int:
        """Rules in every file."""
        return sum(len(f.rules) for f in self.files)

    @property
    def rules_covered(self) -> int:
        """Rules evaluated at least once, in every file."""
        return sum(f.rules_covered for f in self.files)

    @property
    def outcomes_total(self) -> int:
        """Branch outcomes in every file."""
        return sum(f.outcomes_total for f in self.files)

    @property
    def outcomes_covered(self) -> int:
        """Branch outcomes seen, in every file."""
        return sum(f.outcomes_covered for f in self.files)

    @property
    def total_percent(self) -> float:
        """Rules and branch outcomes covered, as one percentage of all of them."""
        return percent(self.rules_covered + self.outcomes_covered, self.rules_total + self.outcomes_total)


class CoverageCollector:
    """Probes registered by instrumented code and what they recorded (one lock for registration)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[RuleProbe, list[int]] = {}
        self._branches: dict[BranchProbe, list[int]] = {}

    def rule(self, probe: RuleProbe) -> Callable[[], None]:
        """Register a rule; returns what the generated code calls each time it evaluates the rule."""
        with self._lock:
            counts = self._rules.setdefault(probe, [0])

        def evaluated() -> None:
            counts[0] += 1

        return evaluated

    def branch(self, probe: BranchProbe) -> Callable[[Any], Any]:
        """Register a branch condition; returns `record(value) -> value`, called with each of its values."""
        with self._lock:
            counts = self._branches.setdefault(probe, [0, 0])

        def record(value: Any) -> Any:
            if value is True:
                counts[0] += 1
            elif value is False:
                counts[1] += 1
            return value

        return record

    def report(self) -> CoverageReport:
        """What was covered so far, per file."""
        with self._lock:
            rules = [RuleCoverage(p, c[0]) for p, c in self._rules.items()]
            branches = [BranchCoverage(p, c[0], c[1]) for p, c in self._branches.items()]
        files = sorted({r.probe.file for r in rules} | {b.probe.file for b in branches})

        def where(probe: RuleProbe | BranchProbe) -> tuple[int, int]:
            return probe.line, probe.column

        return CoverageReport(
            tuple(
                FileCoverage(
                    file,
                    tuple(sorted((r for r in rules if r.probe.file == file), key=lambda r: where(r.probe))),
                    tuple(
                        sorted((b for b in branches if b.probe.file == file), key=lambda b: where(b.probe))
                    ),
                )
                for file in files
            )
        )
