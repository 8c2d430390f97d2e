"""The CEL static type checker: identifier resolution, field selection and overload resolution.

`check(ast, env)` follows cel-spec's language definition and cel-go's checker. It never raises on a
type error: every problem becomes a `CheckIssue(message, offset)` and the failed subtree gets type
`ERROR`, which unifies with everything so one mistake is reported once.

Positions: issues carry the offending node's offset. The parser gives a `Select` node the offset of
its '.', so an unknown field is reported at `offset + 1`, the first character of the field name
(`has(x.f)` nodes carry the macro's offset and are reported there).

Side tables in the result are keyed by syntax-node id: `types`, `overloads` (candidate overload ids
per `Call`) and `references` (the fully qualified name an `Ident`/`Select` resolved to; for a
receiver-style call `a.b.f(x)` that resolved to the namespaced function `a.b.f`, the `Call` id maps to
that function name and the target is not evaluated).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from policyd.cel import syntax as ast
from policyd.cel.env import CelEnv, CheckIssue, CheckResult, FunctionDecl, Overload
from policyd.cel.library_types import LIBRARY_TYPES
from policyd.cel.optional import optional_of, optional_param
from policyd.cel.parser import MACRO_NAMES
from policyd.cel.runtime import to_duration, to_timestamp
from policyd.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    DURATION,
    DYN,
    ERROR,
    INT,
    NULL,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    CelType,
    DynType,
    ErrorType,
    ListType,
    MapType,
    ObjectType,
    OpaqueType,
    TypeParam,
    TypeType,
    list_of,
    map_of,
)
from policyd.cel.values import OPTIONAL_TYPE_NAME
from policyd.cel.walk import children, nodes
from policyd.errors import CelEvalError
from policyd.slips import near_name

# Internal placeholder for the element type of an empty list/map literal: unifies with anything and
# yields to the other side when merged, so `[].map(x, x * 2)` is list(int). Reported as dyn.
_FREE = TypeParam("*free*")

# Type names usable as values (their type is type(T)).
TYPE_NAMES: Mapping[str, CelType] = {
    "int": INT,
    "uint": UINT,
    "double": DOUBLE,
    "bool": BOOL,
    "string": STRING,
    "bytes": BYTES,
    "list": list_of(DYN),
    "map": map_of(DYN, DYN),
    "null_type": NULL,
    "type": TYPE,
    "google.protobuf.Timestamp": TIMESTAMP,
    "google.protobuf.Duration": DURATION,
    OPTIONAL_TYPE_NAME: optional_of(DYN),
    **LIBRARY_TYPES,
}

# Well-known protobuf messages that may be constructed with `Name{...}`, and the CEL type of the result.
MESSAGE_TYPES: Mapping[str, CelType] = {
    "google.protobuf.BoolValue": DYN,
    "google.protobuf.BytesValue": DYN,
    "google.protobuf.DoubleValue": DYN,
    "google.protobuf.FloatValue": DYN,
    "google.protobuf.Int32Value": DYN,
    "google.protobuf.Int64Value": DYN,
    "google.protobuf.UInt32Value": DYN,
    "google.protobuf.UInt64Value": DYN,
    "google.protobuf.StringValue": DYN,
    "google.protobuf.Value": DYN,
    "google.protobuf.Any": DYN,
    "google.protobuf.Struct": map_of(STRING, DYN),
    "google.protobuf.ListValue": list_of(DYN),
    "google.protobuf.Timestamp": TIMESTAMP,
    "google.protobuf.Duration": DURATION,
}

# Protobuf enum constants that well-known messages use; CEL reads enum values as ints.
ENUM_CONSTANTS: Mapping[str, int] = {"google.protobuf.NullValue.NULL_VALUE": 0}

# Operators the checker types itself (their ids are cel-spec's standard overload ids).
_LOGICAL = {"_&&_": "logical_and", "_||_": "logical_or"}
_NOT_STRICTLY_FALSE = "@not_strictly_false"
_CONDITIONAL = "_?_:_"

# Variable whose every use is recorded as the read "cluster" (its methods are index lookups).
CLUSTER_VARIABLE = "cluster"


def check(expr: ast.Expr, env: CelEnv) -> CheckResult:
    """Type-check a parsed CEL expression against `env`; type errors become issues, never raises."""
    checker = _Checker(env)
    root = checker.visit(expr)
    if env.kubernetes_validators and not checker.issues:
        checker.issues.extend(kubernetes_validator_issues(expr, checker.types))
    return CheckResult(
        type=_finalize(root),
        types={k: _finalize(v) for k, v in checker.types.items()},
        overloads=dict(checker.overloads),
        references=dict(checker.references),
        reads=frozenset(checker.reads),
        issues=tuple(checker.issues),
    )


# calls whose list and map literal arguments may mix types (cel-go's HomogeneousAggregateLiteralExemptFunctions)
HOMOGENEOUS_EXEMPT_FUNCTIONS = frozenset({"format"})
# conversions whose literal argument (a string, or Unix seconds / nanoseconds) must convert (cel-go's
# ValidateDuration/TimestampLiterals evaluate the call on its literal)
_LITERAL_CONVERSIONS: dict[str, Callable[[str | int], object]] = {
    "duration": to_duration,
    "timestamp": to_timestamp,
}


def kubernetes_validator_issues(expr: ast.Expr, types: Mapping[int, CelType]) -> list[CheckIssue]:
    """The issues of the validators Kubernetes' base environment adds to type checking, in source order:
    mixed literals (`homogeneous_literal_issues`) and `duration`/`timestamp` of a string or int literal
    that does not convert (`invalid duration argument`, at the literal, as cel-go reports it, and why)."""
    issues = homogeneous_literal_issues(expr, types)
    for node in nodes(expr):
        if isinstance(node, ast.Call) and node.target is None and node.function in _LITERAL_CONVERSIONS:
            arg = node.args[0] if len(node.args) == 1 else None
            if not isinstance(arg, ast.Const):
                continue
            value = arg.value
            if type(value) is str or type(value) is int:
                try:
                    _LITERAL_CONVERSIONS[node.function](value)
                except CelEvalError as e:
                    issues.append(CheckIssue(f"invalid {node.function} argument: {e}", arg.offset))
    return sorted(issues, key=lambda issue: issue.offset)


def homogeneous_literal_issues(expr: ast.Expr, types: Mapping[int, CelType]) -> list[CheckIssue]:
    """cel-go's homogeneous aggregate literal validator: in each list literal the first element whose
    type is not the others', in each map literal every key and value whose type is not the others'
    (`expected type 'int' but found 'string'`); literals inside a `format` call's arguments (through
    nested literals only) are exempt. `types`: the checker's types of the nodes, before finalizing."""
    issues: list[CheckIssue] = []

    def mismatch(expected: CelType, found: CelType, at: ast.Expr) -> None:
        issues.append(
            CheckIssue(f"expected type '{format_type(expected)}' but found '{format_type(found)}'", at.offset)
        )

    def element(node: ast.Expr, optional: bool) -> CelType:
        t = types.get(node.id, DYN)
        if optional and not isinstance(t, DynType):
            t = optional_param(t) or t
        return t

    def agree(so_far: CelType | None, t: CelType, node: ast.Expr) -> CelType:
        if so_far is None:
            return t
        if not _equivalent(so_far, t):
            mismatch(so_far, t, node)
            return so_far
        return _merge(so_far, t)

    stack: list[tuple[ast.Expr, bool]] = [(expr, False)]
    while stack:
        e, exempt = stack.pop()
        if isinstance(e, ast.CreateList):
            if not exempt:
                elem: CelType | None = None
                for i, item in enumerate(e.elements):
                    found = len(issues)
                    elem = agree(elem, element(item, i in e.optional_indices), item)
                    if len(issues) > found:
                        break  # a list reports its first odd element only
            stack.extend((item, exempt) for item in e.elements)
        elif isinstance(e, ast.CreateMap):
            if not exempt:
                key: CelType | None = None
                value: CelType | None = None
                for entry in e.entries:
                    key = agree(key, element(entry.key, False), entry.key)
                    value = agree(value, element(entry.value, entry.optional), entry.value)
            stack.extend((x, exempt) for entry in e.entries for x in (entry.key, entry.value))
        else:
            inside = isinstance(e, ast.Call) and e.function in HOMOGENEOUS_EXEMPT_FUNCTIONS
            stack.extend((child, inside) for child in children(e))
    return sorted(issues, key=lambda issue: issue.offset)


def _equivalent(a: CelType, b: CelType) -> bool:
    """cel-go's Type.IsEquivalentType, an empty literal's placeholder standing for the type it is bound to."""
    if _is_free(a) or _is_free(b) or isinstance(a, ErrorType) or isinstance(b, ErrorType):
        return True
    if isinstance(a, ListType) and isinstance(b, ListType):
        return _equivalent(a.elem, b.elem)
    if isinstance(a, MapType) and isinstance(b, MapType):
        return _equivalent(a.key, b.key) and _equivalent(a.value, b.value)
    if isinstance(a, OpaqueType) and isinstance(b, OpaqueType):
        return (
            a.name == b.name
            and len(a.params) == len(b.params)
            and all(_equivalent(x, y) for x, y in zip(a.params, b.params, strict=True))
        )
    if isinstance(a, TypeType) and isinstance(b, TypeType):
        return a.of is None or b.of is None or _equivalent(a.of, b.of)
    return a == b


def container_candidates(name: str, container: str) -> list[str]:
    """Names `name` may denote inside `container` (most qualified first); a leading '.' is absolute."""
    if name.startswith("."):
        return [name[1:]]
    out: list[str] = []
    parts = container.split(".") if container else []
    for i in range(len(parts), 0, -1):
        out.append(".".join(parts[:i]) + "." + name)
    out.append(name)
    return out


def format_type(t: CelType) -> str:
    """A type as CEL writes it in messages."""
    return str(_finalize(t))


# -- type algebra -------------------------------------------------------------------------------


def _is_free(t: CelType) -> bool:
    return isinstance(t, TypeParam) and t.name == _FREE.name


def _unify(param: CelType, arg: CelType, subst: dict[str, CelType]) -> bool:
    """True when `arg` may stand where `param` is expected; binds type parameters of `param`."""
    if isinstance(param, ErrorType) or isinstance(arg, ErrorType):
        return True
    if isinstance(param, TypeParam) and not _is_free(param):
        bound = subst.get(param.name)
        if bound is None:
            subst[param.name] = arg
            return True
        if _unify(bound, arg, {}) and _unify(arg, bound, {}):
            subst[param.name] = _merge(bound, arg)
            return True
        return False
    if isinstance(arg, TypeParam) or _is_free(param):
        return True
    if isinstance(param, DynType) or isinstance(arg, DynType):
        _bind_all(param, subst)
        return True
    if isinstance(param, ListType) and isinstance(arg, ListType):
        return _unify(param.elem, arg.elem, subst)
    if isinstance(param, MapType) and isinstance(arg, MapType):
        return _unify(param.key, arg.key, subst) and _unify(param.value, arg.value, subst)
    if isinstance(param, TypeType) and isinstance(arg, TypeType):
        # every type value is a `type`; parameters inside bind only when the denoted types agree
        if param.of is not None and arg.of is not None:
            trial = dict(subst)
            if _unify(param.of, arg.of, trial):
                subst.update(trial)
        return True
    if isinstance(param, OpaqueType) and isinstance(arg, OpaqueType):
        return (
            param.name == arg.name
            and len(param.params) == len(arg.params)
            and all(_unify(p, a, subst) for p, a in zip(param.params, arg.params, strict=True))
        )
    if isinstance(param, ObjectType | OpaqueType) and arg == NULL:
        return True
    if param == NULL and isinstance(arg, ObjectType | OpaqueType):
        return True
    return param == arg


def _bind_all(t: CelType, subst: dict[str, CelType]) -> None:
    """Bind the unbound type parameters in `t` to dyn (the other side of a unification was dyn)."""
    for p in _params(t):
        subst.setdefault(p, DYN)


def _params(t: CelType) -> Iterator[str]:
    if isinstance(t, TypeParam) and not _is_free(t):
        yield t.name
    elif isinstance(t, ListType):
        yield from _params(t.elem)
    elif isinstance(t, MapType):
        yield from _params(t.key)
        yield from _params(t.value)
    elif isinstance(t, TypeType) and t.of is not None:
        yield from _params(t.of)
    elif isinstance(t, OpaqueType):
        for p in t.params:
            yield from _params(p)


def _merge(a: CelType, b: CelType) -> CelType:
    """The combination of two compatible types: dyn wins, the placeholder of empty literals yields."""
    if _is_free(a) or isinstance(a, ErrorType):
        return b
    if _is_free(b) or isinstance(b, ErrorType):
        return a
    if isinstance(a, DynType) or isinstance(b, DynType):
        return DYN
    if isinstance(a, ListType) and isinstance(b, ListType):
        return ListType(_merge(a.elem, b.elem))
    if isinstance(a, MapType) and isinstance(b, MapType):
        return MapType(_merge(a.key, b.key), _merge(a.value, b.value))
    if isinstance(a, OpaqueType) and isinstance(b, OpaqueType) and a.name == b.name:
        if len(a.params) == len(b.params):
            return OpaqueType(a.name, tuple(_merge(x, y) for x, y in zip(a.params, b.params, strict=True)))
    if isinstance(a, TypeType) and isinstance(b, TypeType):
        if a.of is None or b.of is None or not (_unify(a.of, b.of, {}) and _unify(b.of, a.of, {})):
            return TYPE
        return TypeType(_merge(a.of, b.of))
    if a == NULL:
        return b
    return a


def _join(a: CelType | None, b: CelType) -> CelType:
    """The common type of two values in one literal (or two overloads' results): their merge, or dyn when they differ."""
    if a is None:
        return b
    if _unify(a, b, {}) and _unify(b, a, {}):
        return _merge(a, b)
    return DYN


def _substitute(t: CelType, subst: Mapping[str, CelType], unbound: CelType = DYN) -> CelType:
    """Replace type parameters by their bindings; unbound ones become `unbound` (dyn)."""
    if isinstance(t, TypeParam):
        return t if _is_free(t) else subst.get(t.name, unbound)
    if isinstance(t, ListType):
        return ListType(_substitute(t.elem, subst, unbound))
    if isinstance(t, MapType):
        return MapType(_substitute(t.key, subst, unbound), _substitute(t.value, subst, unbound))
    if isinstance(t, TypeType) and t.of is not None:
        return TypeType(_substitute(t.of, subst, unbound))
    if isinstance(t, OpaqueType) and t.params:
        return OpaqueType(t.name, tuple(_substitute(p, subst, unbound) for p in t.params))
    return t


def _finalize(t: CelType) -> CelType:
    """Replace the empty-literal placeholder by dyn (no internal type escapes the checker)."""
    if _is_free(t):
        return DYN
    if isinstance(t, ListType):
        return ListType(_finalize(t.elem))
    if isinstance(t, MapType):
        return MapType(_finalize(t.key), _finalize(t.value))
    if isinstance(t, TypeType) and t.of is not None:
        return TypeType(_finalize(t.of))
    if isinstance(t, OpaqueType) and t.params:
        return OpaqueType(t.name, tuple(_finalize(p) for p in t.params))
    return t


def _const_type(value: ast.ConstValue) -> CelType:
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, ast.UInt):
        return UINT
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, bytes):
        return BYTES
    return NULL


# -- the checker ----------------------------------------------------------------------------------


class _Checker:
    """One pass over one expression; fills the side tables of a CheckResult."""

    def __init__(self, env: CelEnv) -> None:
        self.env = env
        self.types: dict[int, CelType] = {}
        self.overloads: dict[int, tuple[str, ...]] = {}
        self.references: dict[int, str] = {}
        self.reads: set[str] = set()
        self.issues: list[CheckIssue] = []
        self._scopes: list[dict[str, CelType]] = []
        # python id() of nodes that denote a declared variable as a whole -> variable name
        self._var_nodes: dict[int, str] = {}

    # -- helpers -----------------------------------------------------------------------------------

    def _issue(self, message: str, offset: int, near: str | None = None) -> CelType:
        self.issues.append(CheckIssue(message, offset, near))
        return ERROR

    def _local(self, name: str) -> CelType | None:
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        return None

    def _root_is_local(self, qualified: str) -> bool:
        return not qualified.startswith(".") and self._local(qualified.split(".", 1)[0]) is not None

    def _resolve_ident(self, name: str) -> tuple[str, CelType, bool] | None:
        """(qualified name, type, is a declared variable) for an identifier or dotted name."""
        for candidate in container_candidates(name, self.env.container):
            t = self.env.variables.get(candidate)
            if t is not None:
                return candidate, t, True
            denoted = TYPE_NAMES.get(candidate)
            if denoted is not None:
                return candidate, TypeType(denoted), False
            if candidate in ENUM_CONSTANTS:
                return candidate, INT, False
        return None

    def _resolve_function(self, name: str) -> FunctionDecl | None:
        for candidate in container_candidates(name, self.env.container):
            decl = self.env.functions.get(candidate)
            if decl is not None:
                return decl
        return None

    def _read(self, variable: str, field: str | None = None) -> None:
        if variable == CLUSTER_VARIABLE or field is None:
            self.reads.add(variable)
        else:
            self.reads.add(f"{variable}.{field}")

    def _undeclared(self, name: str, offset: int, known: Iterable[str] = ()) -> CelType:
        message = f"undeclared reference to '{name}' (in container '{self.env.container}')"
        return self._issue(message, offset, near_name(name, known))

    def _names_in_scope(self) -> Iterator[str]:
        """The variables an identifier may name here: the comprehensions' and the declared ones."""
        for scope in self._scopes:
            yield from scope
        yield from self.env.variables

    def _function_names(self) -> Iterator[str]:
        """The functions and macros a call may name."""
        yield from self.env.functions
        yield from MACRO_NAMES

    # -- dispatch ----------------------------------------------------------------------------------

    def visit(self, e: ast.Expr, selected: bool = False) -> CelType:
        """Check `e`, record and return its type; `selected`: `e` is the operand of a selection."""
        if isinstance(e, ast.Const):
            t = _const_type(e.value)
        elif isinstance(e, ast.Ident):
            t = self._ident(e, selected)
        elif isinstance(e, ast.Select):
            t = self._select(e, selected)
        elif isinstance(e, ast.Call):
            t = self._call(e)
        elif isinstance(e, ast.CreateList):
            t = self._create_list(e)
        elif isinstance(e, ast.CreateMap):
            t = self._create_map(e)
        elif isinstance(e, ast.CreateMessage):
            t = self._create_message(e)
        elif isinstance(e, ast.Comprehension):
            t = self._comprehension(e)
        else:  # pragma: no cover - the Expr union is closed
            t = self._issue(f"unsupported expression {type(e).__name__}", getattr(e, "offset", 0))
        self.types[e.id] = t
        return t

    # -- identifiers and selection -----------------------------------------------------------------

    def _named(self, e: ast.Expr, name: str, selected: bool) -> CelType | None:
        """Resolve `name` (the whole of `e`) as a variable or type name; None when it is neither."""
        resolved = self._resolve_ident(name)
        if resolved is None:
            return None
        qualified, t, is_variable = resolved
        self.references[e.id] = qualified
        if is_variable:
            self._var_nodes[id(e)] = qualified
            if not selected:
                self._read(qualified)
        return t

    def _ident(self, e: ast.Ident, selected: bool) -> CelType:
        if not e.name.startswith("."):
            local = self._local(e.name)
            if local is not None:
                return local
        t = self._named(e, e.name, selected)
        if t is None:
            return self._undeclared(e.name.lstrip("."), e.offset, self._names_in_scope())
        return t

    def _select(self, e: ast.Select, selected: bool) -> CelType:
        if not e.test_only:
            qualified = ast.qualified_name(e)
            if qualified is not None and not self._root_is_local(qualified):
                t = self._named(e, qualified, selected)
                if t is not None:
                    return t
        operand = self.visit(e.operand, selected=True)
        variable = self._var_nodes.get(id(e.operand))
        if variable is not None:
            self._read(variable, e.field)
        field_offset = e.offset if e.test_only else e.offset + 1
        inner = optional_param(operand)
        if inner is not None:
            # selection on an optional is optional selection: `o.f` is `o.?f`
            result = self._field_type(inner, e.field, field_offset, e.test_only)
            if isinstance(result, ErrorType):
                return ERROR
            return BOOL if e.test_only else optional_of(result)
        result = self._field_type(operand, e.field, field_offset, e.test_only)
        if isinstance(result, ErrorType):
            return ERROR
        return BOOL if e.test_only else result

    def _field_type(self, operand: CelType, field: str, field_offset: int, test_only: bool) -> CelType:
        """The type of `<operand>.field` (ERROR, with an issue, when the operand has no such field)."""
        if isinstance(operand, ErrorType):
            return ERROR
        if isinstance(operand, DynType) or isinstance(operand, TypeParam):
            return DYN
        if isinstance(operand, ObjectType):
            field_type = operand.field_type(field)
            if field_type is None:
                message = f"undefined field '{field}' on type '{operand}'"
                return self._issue(message, field_offset, near_name(field, operand.fields))
            return field_type
        if isinstance(operand, MapType):
            if not _unify(operand.key, STRING, {}):
                return self._issue(
                    f"field selection on a map with key type '{format_type(operand.key)}' (keys must be strings)",
                    field_offset,
                )
            return operand.value
        what = "presence test" if test_only else "field selection"
        return self._issue(f"type '{format_type(operand)}' does not support {what}", field_offset)

    # -- calls ----------------------------------------------------------------------------------------

    def _call(self, e: ast.Call) -> CelType:
        fn = e.function
        if e.target is None and fn == _CONDITIONAL and len(e.args) == 3:
            return self._conditional(e)
        if e.target is None and (fn in _LOGICAL or fn == _NOT_STRICTLY_FALSE):
            return self._logical(e)
        if e.target is None and fn == ast.OPT_SELECT and len(e.args) == 2:
            return self._optional_select(e)
        if e.target is None and fn == ast.OPT_INDEX and len(e.args) == 2:
            return self._optional_index(e)
        if e.target is not None:
            prefix = ast.qualified_name(e.target)
            if prefix is not None and not self._root_is_local(prefix):
                decl = self._resolve_function(f"{prefix}.{fn}")
                if decl is not None:
                    self.references[e.id] = decl.name
                    arg_types = [self.visit(a) for a in e.args]
                    return self._resolve_overload(e, decl, arg_types, member=False)
            target_type = self.visit(e.target)
            arg_types = [target_type] + [self.visit(a) for a in e.args]
            decl = self.env.functions.get(fn)
            if decl is None:
                return self._undeclared(fn, e.offset, self._function_names())
            return self._resolve_overload(e, decl, arg_types, member=True)
        arg_types = self._call_args(e)
        decl = self._resolve_function(fn)
        if decl is None:
            return self._undeclared(fn.lstrip("."), e.offset, self._function_names())
        if decl.name != fn:
            self.references[e.id] = decl.name
        return self._resolve_overload(e, decl, arg_types, member=False)

    def _call_args(self, e: ast.Call) -> list[CelType]:
        """Check call arguments; `v["k"]` on a declared variable reads the path `v.k`."""
        if e.function == "_[_]" and len(e.args) == 2:
            base, index = e.args
            t = self.visit(base, selected=True)
            variable = self._var_nodes.get(id(base))
            if variable is not None:
                key = index.value if isinstance(index, ast.Const) else None
                self._read(variable, key if isinstance(key, str) else None)
            return [t, self.visit(index)]
        return [self.visit(a) for a in e.args]

    def _resolve_overload(
        self, e: ast.Call, decl: FunctionDecl, args: list[CelType], member: bool
    ) -> CelType:
        if any(isinstance(a, ErrorType) for a in args):
            return ERROR
        matched: list[Overload] = []
        result: CelType | None = None
        for overload in decl.overloads:
            if overload.member != member or len(overload.params) != len(args):
                continue
            subst: dict[str, CelType] = {}
            if all(_unify(p, a, subst) for p, a in zip(overload.params, args, strict=True)):
                matched.append(overload)
                # a result parameter no argument binds (`optional.none()`) stays free, like `[]`'s element
                r = _substitute(overload.result, subst, _FREE)
                result = r if result is None else (result if result == r else _join(result, r))
        if not matched or result is None:
            return self._issue(
                f"found no matching overload for '{decl.name}' applied to '{_signature(args, member)}'",
                e.offset,
            )
        self.overloads[e.id] = tuple(o.id for o in matched)
        self._check_literals(e, matched, member)
        return result

    def _optional_select(self, e: ast.Call) -> CelType:
        """`operand.?field`: optional(type of the field), on a map, an object, dyn or an optional of one."""
        operand = self.visit(e.args[0], selected=True)
        field = e.args[1]
        self.types[field.id] = STRING
        if not isinstance(field, ast.Const) or not isinstance(field.value, str):
            return self._issue("optional selection needs a field name", e.offset)
        variable = self._var_nodes.get(id(e.args[0]))
        if variable is not None:
            self._read(variable, field.value)
        inner = optional_param(operand)
        result = self._field_type(operand if inner is None else inner, field.value, e.offset + 2, False)
        if isinstance(result, ErrorType):
            return ERROR
        self.overloads[e.id] = ("select_optional_field",)
        return optional_of(result)

    def _optional_index(self, e: ast.Call) -> CelType:
        """`operand[?key]`: optional(element type) of a list (int key) or a map (key type), or of an optional."""
        operand, key = (self.visit(a) for a in e.args)
        if isinstance(operand, ErrorType) or isinstance(key, ErrorType):
            return ERROR
        inner = optional_param(operand)
        container = operand if inner is None else inner
        if isinstance(container, ListType) and _unify(INT, key, {}):
            result: CelType = container.elem
        elif isinstance(container, MapType) and _unify(container.key, key, {}):
            result = container.value
        elif isinstance(container, DynType | TypeParam):
            result = DYN
        else:
            return self._issue(
                f"found no matching overload for '_[?_]' applied to '{_signature([operand, key], False)}'",
                e.offset,
            )
        self.overloads[e.id] = ("index_optional",)
        return optional_of(result)

    def _optional_element(self, t: CelType, what: str, offset: int) -> CelType:
        """T of an optional element `?e` of type optional(T) (dyn for dyn); an issue for anything else."""
        if isinstance(t, ErrorType):
            return ERROR
        if isinstance(t, DynType):
            return DYN
        inner = optional_param(t)
        if inner is None:
            return self._issue(f"{what} must be optional, found '{format_type(t)}'", offset)
        return inner

    def _check_literals(self, e: ast.Call, overloads: list[Overload], member: bool) -> None:
        """Report the first literal argument an overload's `literal_checks` rejects."""
        nodes = ([e.target] if member and e.target is not None else []) + list(e.args)
        for overload in overloads:
            for position, literal_check in overload.literal_checks:
                node = nodes[position] if position < len(nodes) else None
                message = literal_check(node.value) if isinstance(node, ast.Const) else None
                if message is not None:
                    self._issue(message, node.offset if node is not None else e.offset)
                    return

    def _conditional(self, e: ast.Call) -> CelType:
        cond, if_true, if_false = (self.visit(a) for a in e.args)
        if not _unify(BOOL, cond, {}):
            return self._issue(
                f"found no matching overload for '_?_:_' applied to '{_signature([cond, if_true, if_false], False)}'",
                e.offset,
            )
        if isinstance(if_true, ErrorType) or isinstance(if_false, ErrorType):
            return ERROR
        # `_?_:_` is (bool, A, A) -> A: both branches of one type (or dyn), as in cel-go; unlike a
        # list or map literal, a ternary of two types is no dyn value but an error
        if not (_unify(if_true, if_false, {}) and _unify(if_false, if_true, {})):
            return self._issue(
                f"found no matching overload for '_?_:_' applied to '{_signature([cond, if_true, if_false], False)}'",
                e.offset,
            )
        self.overloads[e.id] = ("conditional",)
        return _merge(if_true, if_false)

    def _logical(self, e: ast.Call) -> CelType:
        args = [self.visit(a) for a in e.args]
        expected = 1 if e.function == _NOT_STRICTLY_FALSE else 2
        if len(args) != expected or not all(_unify(BOOL, a, {}) for a in args):
            if any(isinstance(a, ErrorType) for a in args):
                return ERROR
            return self._issue(
                f"found no matching overload for '{e.function}' applied to '{_signature(args, False)}'",
                e.offset,
            )
        self.overloads[e.id] = (_LOGICAL.get(e.function, "not_strictly_false"),)
        return BOOL

    # -- literals -----------------------------------------------------------------------------------

    def _create_list(self, e: ast.CreateList) -> CelType:
        elem: CelType | None = None
        for i, item in enumerate(e.elements):
            t = self.visit(item)
            if i in e.optional_indices:
                t = self._optional_element(t, "an optional list element (?e)", item.offset)
            elem = _join(elem, t)
        return ListType(_FREE if elem is None else elem)

    def _create_map(self, e: ast.CreateMap) -> CelType:
        key: CelType | None = None
        value: CelType | None = None
        for entry in e.entries:
            key = _join(key, self.visit(entry.key))
            t = self.visit(entry.value)
            if entry.optional:
                t = self._optional_element(
                    t, "the value of an optional map entry (?k: v)", entry.value.offset
                )
            value = _join(value, t)
            self.types[entry.id] = value
        return MapType(_FREE if key is None else key, _FREE if value is None else value)

    def _create_message(self, e: ast.CreateMessage) -> CelType:
        for f in e.fields:
            self.types[f.id] = self.visit(f.value)
        for candidate in container_candidates(e.type_name, self.env.container):
            t = MESSAGE_TYPES.get(candidate)
            if t is not None:
                self.references[e.id] = candidate
                return t
        return self._undeclared(e.type_name.lstrip("."), e.offset)

    # -- comprehensions ------------------------------------------------------------------------------

    def _comprehension(self, e: ast.Comprehension) -> CelType:
        range_type = self.visit(e.iter_range)
        # the iteration variables: the element (or key); with two, the index (or key) and the value
        if isinstance(range_type, ListType):
            iter_type, iter_type2 = (INT, range_type.elem) if e.iter_var2 else (range_type.elem, DYN)
        elif isinstance(range_type, MapType):
            iter_type, iter_type2 = range_type.key, range_type.value
        elif isinstance(range_type, DynType | ErrorType | TypeParam):
            iter_type, iter_type2 = DYN, DYN
        else:
            self._issue(
                f"expression of type '{format_type(range_type)}' cannot be the range of a comprehension "
                "(must be list, map, or dynamic)",
                e.iter_range.offset,
            )
            iter_type = iter_type2 = ERROR
        accu_type = self.visit(e.accu_init)
        self._scopes.append({e.accu_var: accu_type})
        self._scopes.append({e.iter_var: iter_type, **({e.iter_var2: iter_type2} if e.iter_var2 else {})})
        cond = self.visit(e.loop_condition)
        if not _unify(BOOL, cond, {}):
            self._issue(f"comprehension loop condition must be bool, found '{format_type(cond)}'", e.offset)
        step = self.visit(e.loop_step)
        self._scopes.pop()
        if _unify(accu_type, step, {}) and _unify(step, accu_type, {}):
            accu_type = _merge(accu_type, step)
        elif not isinstance(step, ErrorType):
            self._issue(
                f"comprehension step of type '{format_type(step)}' does not match its accumulator "
                f"'{format_type(accu_type)}'",
                e.offset,
            )
        self._scopes[-1][e.accu_var] = accu_type
        result = self.visit(e.result)
        self._scopes.pop()
        return result


def _signature(args: list[CelType], member: bool) -> str:
    names = [format_type(a) for a in args]
    if member and names:
        return f"{names[0]}.({', '.join(names[1:])})"
    return f"({', '.join(names)})"
