"""Slips of a name: the known name a misspelt one was meant to be, behind every "did you mean" of
policyd (a cluster file's fields, a policy document's kind, a rule named by `disable`, a field or a
function in a CEL expression)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

# difflib's ratio at which a name is a slip of a known one: one letter left out, added, changed or two
# swapped in a name of 8 letters or more (`nodeNme`, `nodeNmae`, `requsts`), not another name that
# shares a part (`labels` for `tolerations`)
SLIP_RATIO = 0.8


def near_name(name: str, known: Iterable[str], ratio: float = SLIP_RATIO) -> str | None:
    """The name of `known` that `name` is a slip of (another case, a letter left out, added, changed
    or two swapped), or None."""
    names = list(known)
    lowered = name.lower()
    for candidate in names:
        if candidate.lower() == lowered:
            return candidate
    close = difflib.get_close_matches(name, names, n=1, cutoff=ratio)
    return close[0] if close else None


def did_you_mean(near: str | None) -> str:
    """` (did you mean 'near'?)`, to end a message naming an unknown name (`''` without a slip)."""
    return f" (did you mean {near!r}?)" if near is not None else ""
