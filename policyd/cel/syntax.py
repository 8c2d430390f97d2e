"""The CEL syntax tree (mirrors cel.expr.Expr in cel-spec's syntax.proto).

Every node carries `offset`: the 0-based character offset of the node in the expression text it was
parsed from. Callers that embed an expression in a larger file (a `.policy` or YAML file) map offsets
back to file line and column with `policyd.policy.source.SourceMap`.

Macros (`has`, `all`, `exists`, `exists_one`, `map`, `filter`) are expanded by the parser into
`Comprehension` nodes (and `Select(test_only=True)` for `has`), as cel-go does; `macro` records the
original macro name so the checker and cost estimator can report it.

The two-variable macros (`all`, `exists`, `existsOne` with three arguments, `transformList`,
`transformMap`, `transformMapEntry`) expand to comprehensions with a second iteration variable
(`iter_var2`: the value, while `iter_var` is the list index or the map key). `cel.bind(x, init, e)`,
`cel.block([...], e)` and the optional macros `optMap`/`optFlatMap` expand to comprehensions over an
empty range whose accumulator is the bound variable (macro `cel.bind`; `cel.block` for a block's
slots `@index<N>`, evaluated lazily), as cel-go does.

Operators are `Call`s with cel-spec's internal function names: `_+_`, `_-_`, `_*_`, `_/_`, `_%_`,
`-_` (negate), `!_`, `_==_`, `_!=_`, `_<_`, `_<=_`, `_>_`, `_>=_`, `_&&_`, `_||_`, `_?_:_`, `_[_]`,
`@in`, `@not_strictly_false` (used by comprehension loop conditions of `all`/`exists`), `_?._`
(optional field selection `a.?b`, the field name a string constant), `_[?_]` (optional index `a[?k]`)
and `cel.@mapInsert` (the accumulation step of `transformMap`/`transformMapEntry`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Null:
    """The CEL null literal value."""


@dataclass(frozen=True)
class UInt:
    """A CEL uint literal value (kept distinct from int in the tree)."""

    value: int


@dataclass(frozen=True, eq=False)
class Node:
    """Base of every syntax node; `offset` is the position in the expression text."""

    offset: int = field(default=0, kw_only=True)
    # unique id per node in one parse, assigned by the parser (used by checker/codegen side tables)
    id: int = field(default=0, kw_only=True)


ConstValue = None | bool | int | UInt | float | str | bytes | Null


@dataclass(frozen=True, eq=False)
class Const(Node):
    """A literal: bool, int (Python int), UInt, float, str, bytes or Null()."""

    value: ConstValue


@dataclass(frozen=True, eq=False)
class Ident(Node):
    """A (possibly dotted, resolved later) identifier; a leading '.' makes it absolute."""

    name: str


@dataclass(frozen=True, eq=False)
class Select(Node):
    """`operand.field`; with test_only it is the expansion of `has(operand.field)`."""

    operand: Expr
    field: str
    test_only: bool = False


@dataclass(frozen=True, eq=False)
class Call(Node):
    """A function or operator call; `target` is set for receiver-style calls `t.f(args)`."""

    function: str
    args: tuple[Expr, ...]
    target: Expr | None = None


@dataclass(frozen=True, eq=False)
class CreateList(Node):
    """`[e1, e2, ...]`; the elements at `optional_indices` were written `?e` (added only when present)."""

    elements: tuple[Expr, ...]
    optional_indices: tuple[int, ...] = ()


@dataclass(frozen=True, eq=False)
class MapEntry(Node):
    """One `key: value` entry of a map literal; `optional` for `?key: value` (added only when present)."""

    key: Expr
    value: Expr
    optional: bool = False


@dataclass(frozen=True, eq=False)
class CreateMap(Node):
    """`{k1: v1, ...}`."""

    entries: tuple[MapEntry, ...]


@dataclass(frozen=True, eq=False)
class FieldInit(Node):
    """One `field: value` initialiser of a message literal."""

    field: str
    value: Expr


@dataclass(frozen=True, eq=False)
class CreateMessage(Node):
    """`TypeName{field: value, ...}` (message construction)."""

    type_name: str
    fields: tuple[FieldInit, ...]


@dataclass(frozen=True, eq=False)
class Comprehension(Node):
    """The fold every macro expands to (cel-spec Expr.Comprehension); `iter_var2` is set by the
    two-variable macros (then `iter_var` is the list index or map key and `iter_var2` the value)."""

    iter_var: str
    iter_range: Expr
    accu_var: str
    accu_init: Expr
    loop_condition: Expr
    loop_step: Expr
    result: Expr
    macro: str = ""
    iter_var2: str = ""


Expr = Const | Ident | Select | Call | CreateList | CreateMap | CreateMessage | Comprehension

ACCUMULATOR = "@result"
# the iteration variable of a comprehension that binds a name (`cel.bind`, `optMap`): never referenced
UNUSED = "#unused"
# the internal function of the two-variable `transformMap`/`transformMapEntry` steps
MAP_INSERT = "cel.@mapInsert"
OPT_SELECT = "_?._"
OPT_INDEX = "_[?_]"

_PLAIN_IDENT = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*\Z")


def qualified_name(e: Expr) -> str | None:
    """`a.b.c` for a chain of plain field selections on an identifier, else None."""
    if isinstance(e, Ident):
        return e.name
    if isinstance(e, Select) and not e.test_only and _PLAIN_IDENT.match(e.field):
        prefix = qualified_name(e.operand)
        return None if prefix is None else f"{prefix}.{e.field}"
    return None
