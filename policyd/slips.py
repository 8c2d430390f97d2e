"""Slips of a name: the known name a misspelt one was meant to be, behind every "did you mean" of
policyd (a cluster file's kinds and fields, a policy document's kind, a rule named by `disable`, a
field, variable or function in a CEL expression)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's ratio from which a longer name is a slip of a known one even when more than one letter
# moved (`alocatble`), where another name that shares a part (`selector`, `nodeSelector`) is not
SLIP_RATIO = 0.8


def near_name(name: str, known: Iterable[str], ratio: float | None = SLIP_RATIO) -> str | None:
    """The name of `known` that `name` is a slip of, or None: the same name in another case, then one
    letter left out, added or changed or two neighbours swapped (`nmae`; of two such, the closer),
    then, unless `ratio` is None, the closest name at `difflib`'s `ratio` or above."""
    names = list(known)
    lowered = name.lower()
    for candidate in names:
        if candidate.lower() == lowered:
            return candidate
    slips = [candidate for candidate in names if len(candidate) >= 3 and _one_slip(name, candidate)]
    if slips:  # `nod` is a slip of `pod` and of `node`: the one sharing more letters
        return max(slips, key=lambda candidate: difflib.SequenceMatcher(None, name, candidate).ratio())
    if ratio is None:
        return None
    close = difflib.get_close_matches(name, names, n=1, cutoff=ratio)
    return close[0] if close else None


def did_you_mean(near: str | None) -> str:
    """` (did you mean 'near'?)`, to end a message naming an unknown name (`''` without a slip)."""
    return f" (did you mean {near!r}?)" if near is not None else ""


def _one_slip(a: str, b: str) -> bool:
    """True when `a` and `b` differ by one inserted, deleted or replaced letter, or two swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):
        return a[i:] == b[i + 1 :]
    swapped = i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2 :] == b[i + 2 :]
    return swapped or a[i + 1 :] == b[i + 1 :]
