"""selectHost: the highest total wins; equal totals are broken by one uniform random draw.

kube-scheduler samples a reservoir over the tied nodes, which gives the same distribution; one draw
among the ties (none when there is a single best node) keeps seeded runs reproducible.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import numpy.typing as npt


def select_host(totals: npt.NDArray[Any], rng: random.Random) -> int:
    """The index of the highest total; ties broken uniformly at random (one draw among them)."""
    if totals.size == 0:
        raise ValueError("no nodes to select from")
    top = np.flatnonzero(totals == totals.max())
    return int(top[0]) if top.size == 1 else int(top[rng.randrange(int(top.size))])
