"""Filter rules that read the node only through labels looked up by key, decided once per class of nodes.

A rule such as the spread filter reads `node.labels[c.topologyKey]` and nothing else of the node
(`lowering.reads_labels_by_key` says so at compile time). For one pod, every node with the same
values (or the same absences) under the keys the rule looks up gets the same verdict. `decide` groups
the rows by their values under a set of keys, runs the rule's generated verdict function once per
group, on one member whose labels note the keys looked up, and gives that verdict to the whole group.

When a member looked up a key outside the grouping keys, the groups are made again with that key
added: which key is looked up may depend on an earlier value (`a in node.labels ? node.labels[b] :
node.labels[c]`). A verdict is kept only when its evaluation read grouping keys alone. Every member
of its group has the same values under those keys, so it would have read the same values, taken the
same path and reached the same verdict. The keys found are the next pod's first guess. Over every
row (a rule's verdict column renewed when its pod-only values move), the classes are kept with the
guess while no node's labels change (`NodeColumns.label_generation`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

BoolArray = npt.NDArray[np.bool_]
IntpArray = npt.NDArray[np.intp]

MAX_CLASSES = 12  # more groups than this: the plan over the columns costs less
MAX_ROUNDS = 4  # regroupings before giving up (each adds keys a member looked up)
SKIP_AFTER_MANY = 32  # evaluations left to the plan after the nodes fell into too many classes
_SPAN = 2**62  # joint codes stay below this


class ReadLabels(dict[Any, Any]):
    """A node's labels that note every key looked up; `whole` when used in any other way (iterated,
    sized) or looked up by a key that cannot be noted."""

    __slots__ = ("read", "whole")

    def __init__(self, labels: Mapping[Any, Any]) -> None:
        super().__init__(labels)
        self.read: set[Any] = set()
        self.whole = False

    def _note(self, key: Any) -> None:
        try:
            self.read.add(key)
        except TypeError:  # unhashable: the lookup fails alike, but the key cannot group nodes
            self.whole = True

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return super().__contains__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)

    def __iter__(self) -> Iterator[Any]:
        self.whole = True
        return super().__iter__()

    def __len__(self) -> int:
        self.whole = True
        return super().__len__()

    def keys(self) -> Any:
        self.whole = True
        return super().keys()

    def values(self) -> Any:
        self.whole = True
        return super().values()

    def items(self) -> Any:
        self.whole = True
        return super().items()


def classes(columns: Any, rows: IntpArray, keys: Sequence[Any]) -> tuple[IntpArray, IntpArray] | None:
    """The class of each row (rows alike under every key of `keys`) and one row position per class;
    None when the joint codes would not fit in int64. A key no node has is alike on every row."""
    joint: npt.NDArray[np.int64] | None = None
    span = 1
    for key in keys:
        cat = columns.labels.get(key) if type(key) is str else None
        if cat is None:
            continue
        size = len(cat.values) + 1
        codes = cat.codes[rows].astype(np.int64) + 1  # absent (-1) is a value of its own
        if joint is None:
            joint = codes
        else:
            if span * size >= _SPAN:
                return None
            joint = joint * size + codes
        span *= size
    if joint is None:
        return np.zeros(len(rows), dtype=np.intp), np.zeros(1, dtype=np.intp)
    _, first, inverse = np.unique(joint, return_index=True, return_inverse=True)
    return inverse.reshape(-1).astype(np.intp), first.astype(np.intp)


class Guess:
    """What one rule's last evaluations learnt: the keys it looked up (the next pod's first guess),
    how many evaluations to leave to the plan after its nodes fell into too many classes, and the
    classes of every row under the keys (with the label generation they were made at)."""

    __slots__ = ("keys", "skip", "every")

    def __init__(self) -> None:
        self.keys: tuple[Any, ...] = ()
        self.skip = 0
        self.every: tuple[int, tuple[Any, ...], tuple[IntpArray, IntpArray] | None] | None = None


def _grouped(
    columns: Any, rows: IntpArray | None, keys: tuple[Any, ...], guess: Guess
) -> tuple[IntpArray, IntpArray] | None:
    """`classes` of `rows`, or of every row (None; kept in `guess` while no label changes)."""
    if rows is not None:
        return classes(columns, rows, keys)
    every = guess.every
    generation = columns.label_generation
    if every is None or every[0] != generation or every[1] != keys:
        every = guess.every = (generation, keys, classes(columns, np.arange(len(columns)), keys))
    return every[2]


def decide(
    verdict: Callable[[Mapping[str, Any]], bool | None], columns: Any, rows: IntpArray, guess: Guess
) -> tuple[BoolArray, BoolArray] | None:
    """(passed, unsure) per row of `rows` by `verdict(node)` (True, False or None: unsure) run once
    per class of rows alike under the keys the rule looks up (starting from `guess`, which learns
    them); None when there are too many classes or the labels were used other than by key (the plan
    decides then)."""
    decided = decide_classes(verdict, columns, rows, guess)
    if decided is None:
        return None
    inverse, results = decided
    passed = np.fromiter((r is True for r in results), dtype=bool, count=len(results))
    unsure = np.fromiter((r is None for r in results), dtype=bool, count=len(results))
    return passed[inverse], unsure[inverse]


def decide_classes(
    verdict: Callable[[Mapping[str, Any]], bool | None], columns: Any, rows: IntpArray | None, guess: Guess
) -> tuple[IntpArray, list[bool | None]] | None:
    """The class of each row of `rows` (None: every row) and `verdict(node)` per class (True, False
    or None: unsure), as `decide`."""
    if guess.skip:
        guess.skip -= 1
        return None
    cels = columns.cels
    keys = guess.keys
    for _ in range(MAX_ROUNDS):
        grouped = _grouped(columns, rows, keys, guess)
        if grouped is None:
            return None
        inverse, members = grouped
        if len(members) > MAX_CLASSES:  # a key like the hostname: per class costs more than the plan
            guess.keys, guess.skip = keys, SKIP_AFTER_MANY
            return None
        known = set(keys)
        found: list[Any] = []
        results: list[Any] = []
        for position in members.tolist():
            node = cels[position if rows is None else int(rows[position])]
            labels = ReadLabels(node.get("labels") or {})
            view = dict(node)
            view["labels"] = labels
            result = verdict(view)
            if labels.whole:
                return None
            if result is not None:  # an unsure class goes to the per-node function whatever it read
                for key in labels.read - known:
                    known.add(key)
                    found.append(key)
            results.append(result)
        if found:
            keys = (*keys, *found)
            continue
        guess.keys = keys
        return inverse, results
    return None
