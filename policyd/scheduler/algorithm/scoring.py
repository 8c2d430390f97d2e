"""Scores of the feasible nodes: raw per rule, normalised across the nodes, weighted, summed.

Normalisation uses kube-scheduler's integer arithmetic (docs/DESIGN.md "Normalisation"): divisions
truncate toward zero as Go's do. Matrices are int64 while every weighted total fits; raw scores too
large for that are held as Python integers (numpy object arrays), with the same arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from policyd.framework import MAX_NODE_SCORE, Normalize, RuleRef, ScoreRule

ScoreArray = npt.NDArray[Any]  # int64, or object (Python ints) beyond int64 arithmetic
IntpArray = npt.NDArray[np.intp]

# weighted, normalised totals must stay below this for int64 arithmetic
INT_SAFE = 2**62


@dataclass(frozen=True)
class RuleScore:
    """One score rule's contribution on one node."""

    rule: RuleRef
    raw: int
    normalized: int
    weighted: int
    error: str | None = None  # why the rule's evaluation failed (it scored 0)


@dataclass(frozen=True)
class NodeScore:
    """The total score of one feasible node and its per-rule parts (when explained)."""

    node: str
    total: int
    rules: tuple[RuleScore, ...] = ()


def int64_bound(rules: Sequence[ScoreRule]) -> int:
    """The largest |raw score| whose normalised, weighted sum over `rules` fits in int64."""
    return INT_SAFE // (MAX_NODE_SCORE * max(1, sum(abs(r.weight) for r in rules)))


def normalize_alike(value: int, mode: Normalize) -> int:
    """`normalize` of a column whose raw scores all equal `value` (its max and its min), one value
    for the column: max gives 100 (0 for 0), reverse the other way round, minmax 0, reverse-minmax
    100, none the value itself."""
    top = MAX_NODE_SCORE
    if mode == "none":
        return value
    if mode == "max":
        return 0 if value == 0 else top
    if mode == "reverse":
        return top if value == 0 else 0
    if mode == "minmax":
        return 0
    if mode == "reverse-minmax":
        return top
    raise ValueError(f"unknown normalisation {mode!r}")


def _go_div(a: ScoreArray, b: int) -> ScoreArray:
    """Element-wise integer division truncating toward zero, as Go does (b != 0)."""
    q = np.abs(a) // abs(b)
    return np.where((a >= 0) == (b >= 0), q, -q)


def normalize(raw: ScoreArray, mode: Normalize, bounds: tuple[int, int] | None = None) -> ScoreArray:
    """Normalise one rule's raw scores over the feasible nodes (integer arithmetic); `bounds` are
    their (max, min) when known."""
    if mode == "none" or raw.size == 0:
        return raw
    hi, lo = (int(raw.max()), int(raw.min())) if bounds is None else bounds
    top = MAX_NODE_SCORE
    if mode == "max" or mode == "reverse":
        if hi == 0:
            return np.zeros_like(raw) if mode == "max" else np.full_like(raw, top)
        # no negative score: flooring is Go's truncation
        scaled = raw * top // hi if lo >= 0 else _go_div(raw * top, hi)
        return scaled if mode == "max" else top - scaled
    minmax = np.zeros_like(raw) if hi == lo else (raw - lo) * top // (hi - lo)
    if mode == "minmax":
        return minmax
    if mode == "reverse-minmax":
        return top - minmax
    raise ValueError(f"unknown normalisation {mode!r}")


def weigh(
    raw: ScoreArray, rules: Sequence[ScoreRule], keep: bool = False
) -> tuple[ScoreArray, ScoreArray | None]:
    """Weighted totals of a raw score matrix (one column per rule), and the normalised matrix when
    `keep`."""
    total = np.zeros(raw.shape[0], dtype=raw.dtype)
    columns = []
    by_rule = np.ascontiguousarray(raw.T)  # rule-major: fast reductions and columns
    # every column's bounds at once (a rule's normalisation needs its max and min)
    bounds = (
        list(zip(by_rule.max(axis=1).tolist(), by_rule.min(axis=1).tolist(), strict=True))
        if raw.size
        else None
    )
    offset = 0  # the weighted sum of the columns whose raw scores are all equal (normalised alike)
    for j, rule in enumerate(rules):
        if bounds is not None and bounds[j][0] == bounds[j][1] and not keep:
            # normalisation maps each raw score alone, given the bounds: one value stands for all
            offset += normalize_alike(int(bounds[j][0]), rule.normalize) * rule.weight
            continue
        column = normalize(by_rule[j], rule.normalize, bounds[j] if bounds is not None else None)
        if rule.weight == 1:
            total += column
        elif rule.weight:
            total += column * rule.weight
        if keep:
            columns.append(column)
    if offset:
        total += offset
    if not keep:
        return total, None
    return total, np.column_stack(columns) if columns else np.zeros((raw.shape[0], 0), dtype=raw.dtype)


@dataclass(frozen=True)
class ScoreTable:
    """The scores of the feasible nodes of one cycle, in search order.

    `names` are the snapshot's node names by row (an immutable tuple, shared), `rows` the feasible
    rows. `raw` and `normalized` (one column per score rule) are kept when the cycle is explained, and
    `errors`: per feasible row, per rule, why its evaluation failed, or None.
    """

    names: Sequence[str] = ()
    rows: IntpArray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    totals: ScoreArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rules: tuple[ScoreRule, ...] = ()
    raw: ScoreArray | None = None
    normalized: ScoreArray | None = None
    errors: Sequence[Sequence[str | None]] | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def node(self, i: int) -> str:
        """The name of the `i`-th scored node."""
        return self.names[int(self.rows[i])]

    def by_node(self) -> Mapping[str, int]:
        """Total score by node name."""
        return {self.node(i): int(t) for i, t in enumerate(self.totals.tolist())}

    def node_scores(self) -> list[NodeScore]:
        """One `NodeScore` per scored node (with per-rule parts when they were kept)."""
        out = []
        for i in range(len(self.rows)):
            parts: tuple[RuleScore, ...] = ()
            if self.raw is not None and self.normalized is not None:
                parts = tuple(
                    RuleScore(
                        rule.rule,
                        int(self.raw[i, j]),
                        int(self.normalized[i, j]),
                        int(self.normalized[i, j]) * rule.weight,
                        self.errors[i][j] if self.errors is not None else None,
                    )
                    for j, rule in enumerate(self.rules)
                )
            out.append(NodeScore(self.node(i), int(self.totals[i]), parts))
        return out


NO_SCORES = ScoreTable()  # a cycle that scored no node
