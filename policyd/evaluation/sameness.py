"""Whether two CEL values are the same value of the same types (Python's `==` alone takes 1, 1.0 and
true as equal): the test that keeps a result computed from one pod's values for another pod's."""

from __future__ import annotations

import pickle
from typing import Any


class Unset:
    """Marks group values never computed (equal to nothing)."""


def same_values(a: Any, b: Any, b_text: bytes | None = None) -> bool:
    """Equal CEL values of equal types (Python's `==` alone takes 1, 1.0 and True as equal).

    `b_text` is `values_text(b)` when the caller kept it. Among `==`-equal values their pickles tell
    the types apart: equal pickles load as equal objects of the same types. A differing pickle of
    equal values (dicts in another order, one object shared where the other has two) only costs a
    reuse, and so does a value that cannot be pickled (unless it is the very object).
    """
    if a is b:
        return True
    if isinstance(a, Unset) or isinstance(b, Unset):
        return False
    try:
        if a != b:
            return False
    except Exception:  # noqa: BLE001 - values that cannot be compared are not the same
        return False
    a_text = values_text(a)
    return a_text is not None and a_text == (values_text(b) if b_text is None else b_text)


def values_text(value: Any) -> bytes | None:
    """`value` pickled, kept for `same_values` (None when it cannot be; several times cheaper than
    its `repr`, which told the types apart before)."""
    try:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - such a value is only ever the same as itself
        return None
