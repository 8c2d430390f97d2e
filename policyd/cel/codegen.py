"""CEL AST (+ optional CheckResult) -> Python source, `compile()`d once and called many times.

Safety: literals enter generated code only through `repr()` of str/bytes/int/float values (or as
named helper constants); CEL identifiers never become Python identifiers verbatim - variables are
mangled to `v_<name>` parameters, iteration variables to numbered locals, and every function is
called through a helper name chosen by the generator. No policy text can become Python code.

Two entry points:

`generate_function(ast, check, env) -> GeneratedFunction`
    The source of one function `def _cel(v_pod, v_node, ...)` (params in `.params` order) plus its
    globals; `.compile()` returns the callable. The function raises `CelEvalError` on CEL errors.

`expression_source(ast, check, env, names, prefix) -> GeneratedExpression`
    For embedding several expressions in ONE function the policy compiler writes itself:
    - `names` maps CEL variable names to Python expressions supplied by the caller, e.g.
      `{"pod": "v_pod", "node": "v_node", "gpus": "_let_gpus()"}`; a `let` variable is registered
      this way (a local, or a lazy getter call). Names not in `names` are mangled `v_<name>`.
    - the result has `.expr` (one Python expression), `.prelude` (statement lines - nested `def`s
      for comprehensions and error-absorbing `&&`/`||` - to place, in order, in the enclosing
      function body before `.expr` is evaluated; they close over the same local names) and
      `.globals` (helper name -> object, to merge into the globals of the compiled module).
    - helper names start with `prefix` (default `_c`), so expressions generated with different
      prefixes never collide; give each expression its own prefix (`_c1_`, `_c2_`, ...).
    - `probes` maps syntax node ids (`Node.id`) to functions `probe(value) -> value` called with the
      node's value each time it is evaluated (coverage instrumentation; off by default).
    - evaluating `.expr` may raise any exception in `cel_runtime.EVAL_ERRORS`; wrap it as
      `try: ... except EVAL_ERRORS as e: raise as_eval_error(e)` (both in `cel_runtime`) or treat
      those as a failed evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policyd.cel import comprehension as comp
from policyd.cel import optional as opt
from policyd.cel import runtime as rt
from policyd.cel import syntax as ast
from policyd.cel.checker import ENUM_CONSTANTS, container_candidates
from policyd.cel.env import CelEnv, CheckResult, FunctionDecl, Overload
from policyd.cel.stdlib import DYNAMIC_IMPLS, TYPE_VALUES, standard_functions
from policyd.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    INT,
    STRING,
    UINT,
    CelType,
    DynType,
    ErrorType,
    ListType,
    MapType,
    ObjectType,
    zero_value,
)
from policyd.cel.values import OPTIONAL_TYPE_NAME, UInt
from policyd.errors import CelError, CelEvalError

_SIMPLE_ZERO = (int, float, str, bytes, bool, type(None))
# tree levels after which an expression's text is moved into a function of its own (`gen`)
HOIST_LEVELS = 24
# Python blocks (of 100 allowed) below which an error-absorbing `&&`/`||` nests its operands'
# functions in its own (`_logic`)
NEST_LIMIT = 40


@dataclass
class GeneratedExpression:
    """One CEL expression as a Python expression plus the statements and globals it needs."""

    expr: str
    prelude: list[str]
    globals: dict[str, Any]
    params: tuple[str, ...]


@dataclass
class GeneratedFunction:
    """A complete generated function: source, globals and parameter order."""

    source: str
    globals: dict[str, Any]
    params: tuple[str, ...]
    name: str = "_cel"

    def compile(self) -> Callable[..., Any]:
        """Compile the source once and return the function."""
        namespace: dict[str, Any] = {"__builtins__": {}}
        namespace.update(self.globals)
        code = compile(self.source, "<cel>", "exec")
        exec(code, namespace)  # noqa: S102 - generated from the AST only; literals via repr()
        fn: Callable[..., Any] = namespace[self.name]
        return fn


def mangle(name: str) -> str:
    """The Python parameter name of CEL variable `name`."""
    out = name.replace("_", "__").replace(".", "_d")
    return f"v_{out}" if "." in name else f"v_{name}"


@dataclass
class _Scope:
    """CEL local names (iteration variables, accumulators) -> Python local names."""

    locals: dict[str, str] = field(default_factory=dict)


class _Generator:
    def __init__(
        self,
        check: CheckResult | None,
        env: CelEnv,
        names: Mapping[str, str],
        prefix: str,
        probes: Mapping[int, Callable[[Any], Any]] | None = None,
    ) -> None:
        self.check = check
        self.probes = probes or {}
        self.env = env
        self.names = dict(names)
        self.prefix = prefix
        self.globals: dict[str, Any] = {}
        self.params: list[str] = []
        self._counter = 0
        self._height = 0  # levels of the expression text being generated (see `gen`)
        self.functions: dict[str, FunctionDecl] = dict(standard_functions())
        self.functions.update(env.functions)
        self._add_global("CelEvalError", CelEvalError)
        self._add_global("ERRS", rt.EVAL_ERRORS)

    # -- bookkeeping ---------------------------------------------------------------------------

    def _fresh(self, kind: str) -> str:
        self._counter += 1
        return f"{self.prefix}{kind}{self._counter}"

    def _add_global(self, name: str, value: Any) -> str:
        full = f"{self.prefix}{name}"
        self.globals[full] = value
        return full

    def _helper(self, fn: Callable[..., Any]) -> str:
        name = getattr(fn, "__name__", "fn").strip("_") or "fn"
        key = f"rt_{name}"
        existing = self.globals.get(f"{self.prefix}{key}")
        if existing is not None and existing is not fn:
            key = f"rt_{name}_{id(fn)}"
        return self._add_global(key, fn)

    def _type(self, e: ast.Expr) -> CelType | None:
        if self.check is None:
            return None
        return self.check.types.get(e.id)

    def _const_text(self, value: Any) -> str:
        if value is None or isinstance(value, ast.Null):
            return "None"
        if isinstance(value, bool):
            return "True" if value else "False"
        if isinstance(value, ast.UInt):
            return f"{self._add_global('UInt', UInt)}({value.value!r})"
        if isinstance(value, UInt):
            return f"{self._add_global('UInt', UInt)}({int(value)!r})"
        if isinstance(value, float):
            if math.isnan(value) or math.isinf(value):
                return self._add_global(f"float_{self._fresh('k')}", value)
            return repr(value)
        if isinstance(value, int | str | bytes):
            return repr(value)
        return self._add_global(self._fresh("k"), value)

    def _error(self, message: str, e: ast.Expr) -> CelError:
        return CelError(message, e.offset)

    # -- identifiers ---------------------------------------------------------------------------

    def _variable(self, name: str) -> str:
        if name in self.names:
            return self.names[name]
        py = mangle(name)
        if name not in self.params:
            self.params.append(name)
        return py

    def _resolve_name(self, qualified: str, scope: _Scope) -> str | None:
        """Python text for a (possibly qualified) CEL name: a local, a variable or a type."""
        root = qualified.split(".", 1)[0]
        if root in scope.locals and not qualified.startswith("."):
            return scope.locals[root] if root == qualified else None
        for cand in container_candidates(qualified, self.env.container):
            if cand in self.env.variables or cand in self.names:
                return self._variable(cand)
            if cand in TYPE_VALUES:
                return self._const_text(TYPE_VALUES[cand])
            if cand == OPTIONAL_TYPE_NAME:
                return self._const_text(opt.OPTIONAL_TYPE_VALUE)
            if cand in ENUM_CONSTANTS:
                return repr(ENUM_CONSTANTS[cand])
        return None

    def _ident(self, e: ast.Ident, scope: _Scope) -> str:
        if e.name in scope.locals:
            return scope.locals[e.name]
        if self.check is not None and e.id in self.check.references:
            ref = self.check.references[e.id]
            text = self._resolve_name("." + ref, scope)
            if text is not None:
                return text
        text = self._resolve_name(e.name, scope)
        if text is None:
            if self.check is None:
                return f"{self._helper(rt.undeclared)}({e.name!r})"
            raise self._error(f"undeclared reference to '{e.name}'", e)
        return text

    # -- expressions ---------------------------------------------------------------------------

    def gen(self, e: ast.Expr, scope: _Scope, prelude: list[str], indent: str) -> str:
        """Python expression text for `e`; statements it needs are appended to `prelude`.

        Python's parser refuses expressions nested more than 200 brackets deep, and each level of
        the tree may add a few: a text `HOIST_LEVELS` levels deep is moved into a function of its own
        in `prelude`, called in its place (evaluated where and when it was, in the same scope)."""
        outer = self._height
        self._height = 0
        text = self._gen(e, scope, prelude, indent)
        probe = self.probes.get(e.id)
        if probe is not None:
            text = f"{self._add_global(f'probe{e.id}', probe)}({text})"
        height = self._height + 1
        if height >= HOIST_LEVELS:
            name = self._fresh("h")
            prelude.extend([f"{indent}def {name}():", f"{indent}    return {text}"])
            text, height = f"{name}()", 1
        self._height = max(outer, height)
        return text

    def _gen(self, e: ast.Expr, scope: _Scope, prelude: list[str], indent: str) -> str:
        if isinstance(e, ast.Const):
            return self._const_text(e.value)
        if isinstance(e, ast.Ident):
            return self._ident(e, scope)
        if isinstance(e, ast.Select):
            return self._select(e, scope, prelude, indent)
        if isinstance(e, ast.Call):
            return self._call(e, scope, prelude, indent)
        if isinstance(e, ast.CreateList):
            items = [self.gen(x, scope, prelude, indent) for x in e.elements]
            if e.optional_indices:
                return f"{self._helper(opt.build_list)}([{', '.join(items)}], {e.optional_indices!r})"
            return "[" + ", ".join(items) + "]"
        if isinstance(e, ast.CreateMap) and any(en.optional for en in e.entries):
            triples = [
                f"({self.gen(en.key, scope, prelude, indent)}, {self.gen(en.value, scope, prelude, indent)}, "
                f"{en.optional!r})"
                for en in e.entries
            ]
            return f"{self._helper(opt.build_map)}([{', '.join(triples)}])"
        if isinstance(e, ast.CreateMap):
            keys = [en.key for en in e.entries]
            simple = all(isinstance(k, ast.Const) and isinstance(k.value, str) for k in keys)
            if simple and len({k.value for k in keys if isinstance(k, ast.Const)}) == len(keys):
                parts = [
                    f"{self.gen(en.key, scope, prelude, indent)}: {self.gen(en.value, scope, prelude, indent)}"
                    for en in e.entries
                ]
                return "{" + ", ".join(parts) + "}"
            pairs = [
                f"({self.gen(en.key, scope, prelude, indent)}, {self.gen(en.value, scope, prelude, indent)})"
                for en in e.entries
            ]
            return f"{self._helper(rt.make_map)}([{', '.join(pairs)}])"
        if isinstance(e, ast.CreateMessage):
            name = next(
                (c for c in container_candidates(e.type_name, self.env.container) if c in rt.MESSAGE_TYPES),
                e.type_name.lstrip("."),
            )
            if name not in rt.MESSAGE_TYPES:
                raise self._error(f"unknown message type '{e.type_name}'", e)
            fields = ", ".join(f"{f.field!r}: {self.gen(f.value, scope, prelude, indent)}" for f in e.fields)
            return f"{self._helper(rt.make_message)}({name!r}, {{{fields}}})"
        if isinstance(e, ast.Comprehension):
            return self._comprehension(e, scope, prelude, indent)
        raise self._error(f"unsupported expression {type(e).__name__}", e)  # pragma: no cover

    def _select(self, e: ast.Select, scope: _Scope, prelude: list[str], indent: str) -> str:
        if not e.test_only:
            ref = self.check.references.get(e.id) if self.check is not None else None
            if ref is not None:
                text = self._resolve_name("." + ref, scope)
                if text is not None:
                    return text
            q = ast.qualified_name(e)
            if q is not None and "." in q:
                root = q.split(".", 1)[0]
                if root not in scope.locals and self._resolve_name(root, scope) is None:
                    text = self._resolve_name(q, scope)
                    if text is not None:
                        return text
                    # a qualified name whose prefix is a declared variable: fall through
                    if not self._has_declared_prefix(q):
                        raise self._error(f"undeclared reference to '{q}'", e)
        operand = self.gen(e.operand, scope, prelude, indent)
        field_text = repr(e.field)
        ot = self._type(e.operand)
        if e.test_only:
            if isinstance(ot, ObjectType | MapType):
                return f"({field_text} in {operand})"
            return f"{self._helper(rt.has)}({operand}, {field_text})"
        if isinstance(ot, ObjectType):
            ft = ot.field_type(e.field)
            if ft is not None:
                zero = zero_value(ft)
                ztext = repr(zero) if type(zero) in _SIMPLE_ZERO else self._add_global(self._fresh("z"), zero)
                return f"{operand}.get({field_text}, {ztext})"
        if isinstance(ot, MapType):
            return f"{operand}[{field_text}]"
        return f"{self._helper(rt.select)}({operand}, {field_text})"

    def _has_declared_prefix(self, q: str) -> bool:
        parts = q.split(".")
        for i in range(len(parts) - 1, 0, -1):
            for cand in container_candidates(".".join(parts[:i]), self.env.container):
                if cand in self.env.variables or cand in self.names:
                    return True
        return False

    # -- calls ---------------------------------------------------------------------------------

    def _call(self, e: ast.Call, scope: _Scope, prelude: list[str], indent: str) -> str:
        fn = e.function
        if fn == "_&&_" or fn == "_||_":
            return self._logic(e, scope, prelude, indent)
        if fn == "_?_:_":
            c, a, b = (self.gen(x, scope, prelude, indent) for x in e.args)
            if self._type(e.args[0]) != BOOL:
                c = f"{self._helper(rt.require_bool)}({c})"
            return f"({a} if {c} else {b})"
        if fn == "@not_strictly_false":
            return self._not_strictly_false(e.args[0], scope, prelude, indent)
        if e.target is None and fn in (ast.OPT_SELECT, ast.OPT_INDEX) and len(e.args) == 2:
            helper = rt.optional_select if fn == ast.OPT_SELECT else rt.optional_index
            a, b = (self.gen(x, scope, prelude, indent) for x in e.args)
            return f"{self._helper(helper)}({a}, {b})"
        if e.target is not None and self.check is not None and e.id in self.check.references:
            # receiver-style call of a namespaced function: `a.b.f(x)` -> `a.b.f(x)`
            fn = self.check.references[e.id]
            args = [self.gen(x, scope, prelude, indent) for x in e.args]
            return self._emit_call(e, fn, args, member=False, arg_nodes=list(e.args))
        arg_nodes = ([e.target] if e.target is not None else []) + list(e.args)
        args = [self.gen(x, scope, prelude, indent) for x in arg_nodes]
        fast = self._fast_operator(e, fn, args, arg_nodes)
        if fast is not None:
            return fast
        return self._emit_call(e, fn, args, member=e.target is not None, arg_nodes=arg_nodes)

    def _fast_operator(self, e: ast.Call, fn: str, args: list[str], nodes: list[ast.Expr]) -> str | None:
        if self.check is None or len(args) != 2:
            if fn == "!_" and self._type(nodes[0]) == BOOL:
                return f"(not {args[0]})"
            return None
        ta, tb = self._type(nodes[0]), self._type(nodes[1])
        a, b = args
        same = ta == tb and ta in (INT, UINT, DOUBLE, STRING, BOOL, BYTES)
        if fn in ("_==_", "_!=_") and same:
            return f"({a} {'==' if fn == '_==_' else '!='} {b})"
        cmp = {"_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">="}.get(fn)
        if cmp is not None and (same or (ta in (INT, UINT) and tb in (INT, UINT))):
            return f"({a} {cmp} {b})"
        if fn == "_+_" and ta == tb and ta in (DOUBLE, STRING, BYTES):
            return f"({a} + {b})"
        if fn in ("_-_", "_*_") and ta == tb == DOUBLE:
            return f"({a} {fn[1]} {b})"
        if fn == "@in" and isinstance(tb, MapType) and ta == STRING:
            return f"({a} in {b})"
        if fn == "_[_]" and isinstance(ta, MapType) and tb == STRING:
            return f"{a}[{b}]"
        return None

    def _emit_call(
        self, e: ast.Call, fn: str, args: list[str], *, member: bool, arg_nodes: list[ast.Expr]
    ) -> str:
        overload = self._resolved_overload(e, fn)
        if overload is not None and any(self._is_dynamic(self._type(a)) for a in arg_nodes):
            overload = None
        if overload is not None and overload.impl is not None:
            name = self._add_global(f"o_{_safe(overload.id)}", overload.impl)
            return f"{name}({', '.join(args)})"
        if fn in standard_functions():
            impl = DYNAMIC_IMPLS.get((fn, member))
            if impl is None:
                raise self._error(f"undeclared reference to '{fn}'", e)
            return f"{self._helper(impl)}({', '.join(args)})"
        decl = None
        for cand in container_candidates(fn, self.env.container):
            decl = self.functions.get(cand)
            if decl is not None:
                break
        if decl is None:
            if self.check is None:
                return f"{self._helper(rt.undeclared)}({fn!r})"
            raise self._error(f"undeclared reference to '{fn}'", e)
        candidates = tuple(o for o in decl.overloads if o.member == member and len(o.params) == len(args))
        if not candidates:
            raise self._error(f"found no matching overload for '{fn}'", e)
        if len(candidates) == 1 and candidates[0].impl is not None and self.check is not None:
            name = self._add_global(f"o_{_safe(candidates[0].id)}", candidates[0].impl)
            return f"{name}({', '.join(args)})"
        dispatcher = rt.Dispatcher(fn, candidates)
        name = self._add_global(f"d_{_safe(fn)}_{'m' if member else 'g'}{len(args)}", dispatcher)
        return f"{name}({', '.join(args)})"

    def _is_dynamic(self, t: CelType | None) -> bool:
        """True when a checked type leaves the runtime type open (dyn, unknown)."""
        return t is None or isinstance(t, DynType | ErrorType)

    def _resolved_overload(self, e: ast.Call, fn: str) -> Overload | None:
        if self.check is None:
            return None
        ids = self.check.overloads.get(e.id)
        if not ids or len(ids) != 1:
            return None
        decl = self.functions.get(fn)
        if decl is None:
            return None
        for o in decl.overloads:
            if o.id == ids[0]:
                return o
        return None

    # -- logic with error absorption ---------------------------------------------------------

    def _safe_expr(self, e: ast.Expr) -> bool:
        """True when evaluating `e` can raise no error (so `&&`/`||` need no try)."""
        if isinstance(e, ast.Const):
            return True
        if isinstance(e, ast.Ident):
            # a `cel.block` slot is a thunk whose first use evaluates (and may fail)
            return self.check is not None and not e.name.startswith("@index")
        if isinstance(e, ast.Select):
            ot = self._type(e.operand)
            return isinstance(ot, ObjectType) and self._safe_expr(e.operand)
        if isinstance(e, ast.Call) and e.target is None:
            if e.function in ("_==_", "_!=_") and len(e.args) == 2:
                return all(self._safe_expr(a) for a in e.args)
            if e.function in ("_&&_", "_||_", "!_"):
                return all(self._safe_expr(a) and self._type(a) == BOOL for a in e.args)
        return False

    def _logic(self, e: ast.Call, scope: _Scope, prelude: list[str], indent: str) -> str:
        is_and = e.function == "_&&_"
        left, right = e.args
        if (
            self._safe_expr(left)
            and self._safe_expr(right)
            and self._type(left) == BOOL
            and self._type(right) == BOOL
        ):
            a = self.gen(left, scope, prelude, indent)
            b = self.gen(right, scope, prelude, indent)
            return f"({a} {'and' if is_and else 'or'} {b})"
        name = self._fresh("l")
        inner = indent + "    "
        # the operands' own functions are made inside this one, so only when it runs; deep down they
        # go beside it (same scope), or a mix of `&&` and `||` would nest Python blocks as deep as
        # the expression
        body, at = ([], inner) if len(indent) < NEST_LIMIT * 4 else (prelude, indent)
        a = self.gen(left, scope, body, at)
        b = self.gen(right, scope, body, at)
        short = "False" if is_and else "True"
        other = "True" if is_and else "False"
        errs = f"{self.prefix}ERRS"
        logic_fn = self._helper(rt.logic_result)
        lines = [
            f"{indent}def {name}():",
            *(body if body is not prelude else ()),
            f"{inner}try:",
            f"{inner}    a = {a}",
            f"{inner}except {errs} as ea:",
            f"{inner}    try:",
            f"{inner}        b = {b}",
            f"{inner}    except {errs}:",
            f"{inner}        raise ea from None",
            f"{inner}    if b is {short}:",
            f"{inner}        return {short}",
            f"{inner}    raise",
            f"{inner}if a is {short}:",
            f"{inner}    return {short}",
            f"{inner}b = {b}",
            f"{inner}if a is {other} and (b is True or b is False):",
            f"{inner}    return b",
            f"{inner}return {logic_fn}({e.function!r}, a, b)",
        ]
        prelude.extend(lines)
        return f"{name}()"

    def _not_strictly_false(self, arg: ast.Expr, scope: _Scope, prelude: list[str], indent: str) -> str:
        name = self._fresh("n")
        inner = indent + "    "
        body, at = ([], inner) if len(indent) < NEST_LIMIT * 4 else (prelude, indent)
        a = self.gen(arg, scope, body, at)
        prelude.extend(
            [
                f"{indent}def {name}():",
                *(body if body is not prelude else ()),
                f"{inner}try:",
                f"{inner}    return ({a}) is not False",
                f"{inner}except {self.prefix}ERRS:",
                f"{inner}    return True",
            ]
        )
        return f"{name}()"

    # -- comprehensions ----------------------------------------------------------------------

    def _comprehension(self, e: ast.Comprehension, scope: _Scope, prelude: list[str], indent: str) -> str:
        if e.macro in ("cel.bind", "cel.block"):
            return self._bind(e, scope, prelude, indent)
        rng = self.gen(e.iter_range, scope, prelude, indent)
        name = self._fresh("c")
        var = self._fresh("x")
        acc = self._fresh("a")
        inner = _Scope(dict(scope.locals))
        inner.locals[e.iter_var] = var
        body: list[str] = []
        ind = indent + "    "
        loop = ind + "    "
        if e.iter_var2:
            # two variables: (index, element) of a list or (key, value) of a map
            var2 = self._fresh("y")
            inner.locals[e.iter_var2] = var2
            it = f"{self._helper(comp.pairs)}({rng})"
            target = f"{var}, {var2}"
        else:
            it = f"{self._helper(rt.iterate)}({rng})"
            target = var
        errs = f"{self.prefix}ERRS"
        predicate = self._macro_predicate(e)
        lines = [f"{indent}def {name}():"]
        if e.macro in ("all", "exists") and predicate is not None:
            p = self.gen(predicate, inner, body, loop)
            short = "False" if e.macro == "all" else "True"
            lines += [
                f"{ind}err = None",
                f"{ind}for {target} in {it}:",
                *body,
                f"{loop}try:",
                f"{loop}    p = {p}",
                f"{loop}except {errs} as ex:",
                f"{loop}    err = ex",
                f"{loop}    continue",
                f"{loop}if p is {short}:",
                f"{loop}    return {short}",
                f"{loop}if p is not True and p is not False:",
                f"{loop}    err = {self._helper(rt.no_overload)}({e.macro!r}, p)",
                f"{ind}if err is not None:",
                f"{ind}    raise err",
                f"{ind}return {'True' if e.macro == 'all' else 'False'}",
            ]
        elif e.macro == "exists_one" and predicate is not None:
            p = self.gen(predicate, inner, body, loop)
            lines += [
                f"{ind}n = 0",
                f"{ind}for {target} in {it}:",
                *body,
                f"{loop}p = {p}",
                f"{loop}if p is True:",
                f"{loop}    n += 1",
                f"{loop}elif p is not False:",
                f"{loop}    raise {self._helper(rt.no_overload)}('exists_one', p)",
                f"{ind}return n == 1",
            ]
        elif e.macro in ("map", "filter", "transformList") and predicate is not None:
            value = self._macro_value(e)
            lines += [f"{ind}out = []", f"{ind}for {target} in {it}:"]
            vbody: list[str] = []
            if isinstance(predicate, ast.Const) and predicate.value is True:
                v = self.gen(value, inner, vbody, loop) if value is not None else var
                lines += [*vbody, f"{loop}out.append({v})"]
            else:
                c = self.gen(predicate, inner, body, loop)
                v = self.gen(value, inner, vbody, loop + "    ") if value is not None else var
                lines += [
                    *body,
                    f"{loop}if {self._helper(rt.require_bool)}({c}):",
                    *vbody,
                    f"{loop}    out.append({v})",
                ]
            lines += [f"{ind}return out"]
        else:
            inner.locals[e.accu_var] = acc
            init_body: list[str] = []
            init = self.gen(e.accu_init, scope, init_body, ind)
            cond_body: list[str] = []
            cond_text = self.gen(e.loop_condition, inner, cond_body, loop)
            step_body: list[str] = []
            step = self.gen(e.loop_step, inner, step_body, loop)
            res_scope = _Scope(dict(scope.locals))
            res_scope.locals[e.accu_var] = acc
            res_body: list[str] = []
            res = self.gen(e.result, res_scope, res_body, ind)
            lines += [
                *init_body,
                f"{ind}{acc} = {init}",
                f"{ind}for {target} in {it}:",
                *cond_body,
                f"{loop}if {cond_text} is not True:",
                f"{loop}    break",
                *step_body,
                f"{loop}{acc} = {step}",
                *res_body,
                f"{ind}return {res}",
            ]
        prelude.extend(lines)
        return f"{name}()"

    def _bind(self, e: ast.Comprehension, scope: _Scope, prelude: list[str], indent: str) -> str:
        """`cel.bind(x, init, body)`: `x = init`, then `body`, in a nested function. A `cel.block` slot
        is evaluated lazily and once (cel-go): `x` is a memoising thunk, so an unused slot's error
        never surfaces."""
        name = self._fresh("b")
        acc = self._fresh("a")
        ind = indent + "    "
        inner = _Scope(dict(scope.locals))
        lines = [f"{indent}def {name}():"]
        init_body: list[str] = []
        if e.macro == "cel.block":
            cell = self._fresh("m")
            init = self.gen(e.accu_init, scope, init_body, ind + "    ")
            lines += [
                f"{ind}{cell} = []",
                f"{ind}def {acc}():",
                *init_body,
                f"{ind}    if not {cell}:",
                f"{ind}        {cell}.append({init})",
                f"{ind}    return {cell}[0]",
            ]
            inner.locals[e.accu_var] = f"{acc}()"
        else:
            init = self.gen(e.accu_init, scope, init_body, ind)
            lines += [*init_body, f"{ind}{acc} = {init}"]
            inner.locals[e.accu_var] = acc
        res_body: list[str] = []
        res = self.gen(e.result, inner, res_body, ind)
        prelude.extend([*lines, *res_body, f"{ind}return {res}"])
        return f"{name}()"

    def _macro_predicate(self, e: ast.Comprehension) -> Any:
        """The user predicate of a recognised macro expansion (None when the shape is unknown)."""
        step = e.loop_step
        acc = e.accu_var
        if e.macro in ("all", "exists"):
            if (
                isinstance(step, ast.Call)
                and step.function in ("_&&_", "_||_")
                and _is_ident(step.args[0], acc)
            ):
                return step.args[1]
            return None
        if e.macro == "exists_one":
            if isinstance(step, ast.Call) and step.function == "_?_:_":
                return step.args[0]
            return None
        if e.macro in ("map", "transformList"):
            if isinstance(step, ast.Call) and step.function == "_?_:_":
                return step.args[0]
            if isinstance(step, ast.Call) and step.function == "_+_" and _is_ident(step.args[0], acc):
                return ast.Const(True, offset=e.offset)
            return None
        if e.macro == "filter":
            if isinstance(step, ast.Call) and step.function == "_?_:_":
                return step.args[0]
        return None

    def _macro_value(self, e: ast.Comprehension) -> ast.Expr | None:
        step = e.loop_step
        if isinstance(step, ast.Call) and step.function == "_?_:_":
            step = step.args[1]
        if isinstance(step, ast.Call) and step.function == "_+_":
            lst = step.args[1]
            if isinstance(lst, ast.CreateList) and len(lst.elements) == 1:
                if e.macro == "filter":
                    return None
                return lst.elements[0]
        return None


def _is_ident(e: ast.Expr, name: str) -> bool:
    return isinstance(e, ast.Ident) and e.name == name


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


def expression_source(
    expr: ast.Expr,
    check: CheckResult | None,
    env: CelEnv,
    names: Mapping[str, str] | None = None,
    prefix: str = "_c",
    probes: Mapping[int, Callable[[Any], Any]] | None = None,
) -> GeneratedExpression:
    """One CEL expression as an embeddable Python expression (see the module docstring)."""
    gen = _Generator(check, env, names or {}, prefix, probes)
    prelude: list[str] = []
    text = gen.gen(expr, _Scope(), prelude, "")
    return GeneratedExpression(text, prelude, gen.globals, tuple(gen.params))


def generate_function(
    expr: ast.Expr,
    check: CheckResult | None,
    env: CelEnv,
    params: tuple[str, ...] | None = None,
    probes: Mapping[int, Callable[[Any], Any]] | None = None,
) -> GeneratedFunction:
    """The source of `def _cel(<params>)` evaluating `expr`; params default to the variables read
    (`probes` as for `expression_source`)."""
    gen = _Generator(check, env, {}, "_c", probes)
    if params:
        for p in params:
            gen._variable(p)
    prelude: list[str] = []
    text = gen.gen(expr, _Scope(), prelude, "    ")
    names = ", ".join(mangle(p) for p in gen.params)
    lines = [
        f"def _cel({names}):",
        *prelude,
        "    try:",
        f"        return {text}",
        "    except _cCelEvalError:",
        "        raise",
        "    except _cERRS as e:",
        "        raise _cas_eval_error(e) from None",
    ]
    gen.globals["_cas_eval_error"] = rt.as_eval_error
    return GeneratedFunction("\n".join(lines) + "\n", gen.globals, tuple(gen.params))


__all__ = [
    "GeneratedExpression",
    "GeneratedFunction",
    "container_candidates",
    "expression_source",
    "generate_function",
    "mangle",
    "MapType",
    "ListType",
]
