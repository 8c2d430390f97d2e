"""The CEL environments of policy expressions: which variables each part of a policy may read.

| where                              | variables                                  | result type            |
|------------------------------------|--------------------------------------------|------------------------|
| `match`                            | pod, cluster                               | bool                   |
| `let`                              | pod, node, cluster, earlier lets           | any                    |
| filter `expr` / `reason`           | pod, node, cluster, lets                   | bool / string or list(string) |
| score `expr`                       | pod, node, cluster, lets                   | int, uint or double    |
| queue `order` keys                 | pod                                        | orderable              |
| preemption `enabled`               | pod                                        | bool                   |
| preemption `victims`               | pod, victim                                | bool                   |
| permit `group`/`minMember`           | pod                                        | string / int           |
| permit `timeout`                     | none (a constant, evaluated at load)       | duration               |
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import Enum

from policyd.cel.env import CelEnv, FunctionDecl
from policyd.cel.program import library_functions
from policyd.cel.types import (
    BOOL,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    STRING,
    TIMESTAMP,
    UINT,
    CelType,
    DynType,
    ErrorType,
    ListType,
)
from policyd.policy.cluster_decls import CLUSTER_TYPE, cluster_functions
from policyd.policy.k8s_types import SIZE_HINTS, policy_variables

# Per-expression cost budget. Kubernetes allows 1,000,000 cost units per CEL expression in
# ValidatingAdmissionPolicy (`PerCallLimit`); policy expressions run per node on the hot path, so the
# same order of magnitude is the limit here (an `all()` over node.pods nested in another over
# node.pods is already 110 * 110 * a few).
COST_LIMIT = 1_000_000


class Context(Enum):
    """Where in a policy an expression is written."""

    MATCH = "match"
    LET = "let"
    FILTER = "filter"
    REASON = "reason"
    UNRESOLVABLE = "filter unresolvable"
    SCORE = "score"
    QUEUE = "queue order"
    PREEMPT_ENABLED = "preemption enabled"
    VICTIMS = "preemption victims"
    PERMIT_GROUP = "permit group"
    PERMIT_MIN_MEMBER = "permit minMember"
    PERMIT_TIMEOUT = "permit timeout"


# variables (besides lets) each context may read
CONTEXT_VARIABLES: Mapping[Context, tuple[str, ...]] = {
    Context.MATCH: ("pod", "cluster"),
    Context.LET: ("pod", "node", "cluster"),
    Context.FILTER: ("pod", "node", "cluster"),
    Context.REASON: ("pod", "node", "cluster"),
    Context.UNRESOLVABLE: ("pod", "node", "cluster"),
    Context.SCORE: ("pod", "node", "cluster"),
    Context.QUEUE: ("pod",),
    Context.PREEMPT_ENABLED: ("pod",),
    Context.VICTIMS: ("pod", "victim"),
    Context.PERMIT_GROUP: ("pod",),
    Context.PERMIT_MIN_MEMBER: ("pod",),
    Context.PERMIT_TIMEOUT: (),
}
LET_CONTEXTS = frozenset({Context.LET, Context.FILTER, Context.REASON, Context.UNRESOLVABLE, Context.SCORE})

ORDERABLE = (INT, UINT, DOUBLE, STRING, BOOL, TIMESTAMP, DURATION)


def _expected(t: CelType, allowed: tuple[CelType, ...]) -> bool:
    return isinstance(t, DynType | ErrorType) or t in allowed


def result_problem(context: Context, t: CelType) -> str | None:
    """Why a result type is wrong for `context`, or None when it is acceptable."""
    if context in (
        Context.MATCH,
        Context.FILTER,
        Context.UNRESOLVABLE,
        Context.PREEMPT_ENABLED,
        Context.VICTIMS,
    ):
        return None if _expected(t, (BOOL,)) else f"must be bool, got {t}"
    if context is Context.SCORE:
        return (
            None if _expected(t, (INT, UINT, DOUBLE)) else f"must be numeric (int, uint or double), got {t}"
        )
    if context is Context.REASON:
        if _expected(t, (STRING,)) or (isinstance(t, ListType) and _expected(t.elem, (STRING,))):
            return None
        return f"must be string or list(string), got {t}"
    if context is Context.QUEUE:
        return (
            None
            if _expected(t, ORDERABLE)
            else f"must be orderable (int, uint, double, string, bool, timestamp, duration), got {t}"
        )
    if context is Context.PERMIT_GROUP:
        return None if _expected(t, (STRING,)) else f"must be string, got {t}"
    if context is Context.PERMIT_MIN_MEMBER:
        return None if _expected(t, (INT,)) else f"must be int, got {t}"
    if context is Context.PERMIT_TIMEOUT:
        return None if _expected(t, (DURATION,)) else f"must be duration, got {t}"
    return None


@functools.cache
def _variables() -> dict[str, CelType]:
    variables: dict[str, CelType] = {"pod": DYN, "node": DYN, "victim": DYN, "cluster": DYN}
    variables.update(policy_variables())
    variables["cluster"] = CLUSTER_TYPE
    return variables


@functools.cache
def _functions() -> dict[str, FunctionDecl]:
    functions = library_functions()
    functions.update(cluster_functions())
    return functions


def policy_env(context: Context, lets: Mapping[str, CelType] | None = None) -> CelEnv:
    """The CEL environment of an expression written in `context`, with the lets visible there."""
    all_vars = _variables()
    variables = {name: all_vars[name] for name in CONTEXT_VARIABLES[context]}
    if lets and context in LET_CONTEXTS:
        variables.update(lets)
    return CelEnv(
        variables=variables,
        functions=_functions(),
        cost_limit=COST_LIMIT,
        size_hints=SIZE_HINTS,
        kubernetes_validators=True,
    )


def variable_names(context: Context) -> tuple[str, ...]:
    """The non-let variables `context` may read."""
    return CONTEXT_VARIABLES[context]


def policy_variable_types() -> Mapping[str, CelType]:
    """Declared types of pod, node, victim and cluster."""
    return dict(_variables())
