"""CEL environments: declared variables and function overloads, and the checker's result shape."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policyd.cel.types import CelType


@dataclass(frozen=True)
class Overload:
    """One signature of a function; for member overloads `params[0]` is the receiver type.

    `impl` is the Python callable generated code calls for this overload (positional arguments,
    receiver first). It must raise `CelEvalError` for CEL runtime errors.
    """

    id: str
    params: tuple[CelType, ...]
    result: CelType
    member: bool = False
    impl: Callable[..., Any] | None = None
    # estimated cost of one call, as a function of argument size estimates (None: cost 1)
    cost: Callable[..., int] | None = None
    # check-time validation of literal arguments: (position, receiver first; check), where
    # `check(value)` returns why the literal is invalid (a malformed regex, IP address) or None
    literal_checks: tuple[tuple[int, Callable[[Any], str | None]], ...] = ()


def member_overload(
    oid: str, params: tuple[CelType, ...], result: CelType, impl: Callable[..., Any]
) -> Overload:
    """A member overload (`params[0]` the receiver type) implemented by `impl`."""
    return Overload(oid, params, result, member=True, impl=impl)


@dataclass(frozen=True)
class FunctionDecl:
    """A function name with its overloads."""

    name: str
    overloads: tuple[Overload, ...]


@dataclass(frozen=True)
class CelEnv:
    """What an expression may refer to, and how it is compiled."""

    variables: Mapping[str, CelType] = field(default_factory=dict)
    functions: Mapping[str, FunctionDecl] = field(default_factory=dict)
    container: str = ""
    macros: bool = True
    # maximum estimated cost; None: no limit
    cost_limit: int | None = None
    # declared sizes of list/map variables for cost estimation, e.g. {"node.pods": 110}
    size_hints: Mapping[str, int] = field(default_factory=dict)
    # the validators of Kubernetes' base environment (cel-go's HomogeneousAggregateLiterals and
    # ValidateDuration/TimestampLiterals): list and map literals do not mix types, and a literal
    # `duration(...)`/`timestamp(...)` must convert; cel-spec's conformance suite expects neither
    kubernetes_validators: bool = False

    def extend(self, **changes: Any) -> CelEnv:
        """A copy with some fields replaced (variables/functions are merged, not replaced)."""
        variables = dict(self.variables)
        variables.update(changes.pop("variables", {}))
        functions = dict(self.functions)
        functions.update(changes.pop("functions", {}))
        return CelEnv(
            variables=variables,
            functions=functions,
            container=changes.pop("container", self.container),
            macros=changes.pop("macros", self.macros),
            cost_limit=changes.pop("cost_limit", self.cost_limit),
            size_hints=changes.pop("size_hints", self.size_hints),
            kubernetes_validators=changes.pop("kubernetes_validators", self.kubernetes_validators),
        )


@dataclass(frozen=True)
class CheckIssue:
    """A type error: message and offset in the expression text; `near`: for an unknown name, the
    known one it is a slip of (a "did you mean"), left out of the message, which is cel-go's."""

    message: str
    offset: int
    near: str | None = None


@dataclass(frozen=True)
class CheckResult:
    """The checker's output for one expression."""

    type: CelType
    # syntax-node id -> checked type
    types: Mapping[int, CelType]
    # Call node id -> overload ids that may apply (one when resolved statically)
    overloads: Mapping[int, tuple[str, ...]]
    # Ident/Select node id -> fully qualified name it resolved to (container resolution, enums)
    references: Mapping[int, str]
    # field paths read, e.g. "node.labels", "pod.requests", "cluster"
    reads: frozenset[str]
    issues: tuple[CheckIssue, ...] = ()
