"""The import graph of the `policyd` package: no cycle between files or subpackages, and the layering holds.

Every module under policyd/ is parsed with `ast` (nothing is imported). An edge A -> B means module A
contains an import of module B anywhere: at module level, inside functions, and under
`if TYPE_CHECKING:` (a type-only import still ties A's meaning to B; a cycle through one is a design
cycle even when Python tolerates it). `from pkg import name` is an edge to `pkg.name` when that is a
module, else to `pkg` (its `__init__`); relative imports are resolved against the importing module.

Subpackages are the units directly under `policyd` (`policyd.cel`, `policyd.scheduler`, ...; nested
packages belong to theirs), each top-level module (`policyd.errors`, ...) is a unit of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import policyd

PACKAGE = "policyd"
ROOT = Path(policyd.__file__).resolve().parent

Graph = Mapping[str, frozenset[str]]

# Which units may import which (the intended layering; short and true). A unit not listed as a key
# is unconstrained here; the no-cycle tests hold for every unit.
LOWER_LEVEL = frozenset(
    {"policyd.errors", "policyd.quantity", "policyd.user_cache", "policyd.slips", "policyd.yaml_loading"}
)
MAY_ONLY_IMPORT: dict[str, frozenset[str]] = {
    # CEL is a language of its own: it knows nothing of policies, Kubernetes scheduling or policyd
    "policyd.cel": LOWER_LEVEL,
    "policyd.errors": frozenset(),
    "policyd.user_cache": frozenset(),  # where derived tables are kept: a leaf every layer may use
    "policyd.slips": frozenset(),  # the name a misspelt one was meant to be: a leaf every layer may use
    "policyd.yaml_loading": frozenset(),  # YAML loaders failing only with positioned YAML errors: a leaf
    "policyd.quantity": LOWER_LEVEL,
    "policyd.framework": LOWER_LEVEL,
    # the run-time side of compiled policies (evaluators, plans' execution, columns): the compiler
    # imports it, never the other way round
    "policyd.evaluation": LOWER_LEVEL | {"policyd.cel", "policyd.framework"},
}
NEVER_IMPORTS: dict[str, frozenset[str]] = {
    # the policy front end comes before everything that consumes a policy
    "policyd.policy": frozenset(
        {"policyd.compiler", "policyd.evaluation", "policyd.scheduler", "policyd.backends", "policyd.service"}
    ),
    # the scheduler runs compiled profiles through the plugin interface (policyd.framework) and
    # may use the run-time side (policyd.evaluation), never the compiler
    "policyd.scheduler": frozenset({"policyd.compiler", "policyd.backends", "policyd.service"}),
    "policyd.compiler": frozenset({"policyd.scheduler", "policyd.backends", "policyd.service"}),
    "policyd.backends": frozenset({"policyd.service"}),
}
# only the CLI dispatches to the commands
COMMANDS_IMPORTERS = frozenset({"policyd.cli", "policyd.__main__", "policyd.commands"})
# nested packages below the rest of their subpackage: (package, the subpackage it must not import)
BELOW_THEIR_SUBPACKAGE = (("policyd.scheduler.cluster", "policyd.scheduler"),)


# ---------------------------------------------------------------------------------------------
# Building the graph


def module_name(path: Path, root: Path = ROOT, package: str = PACKAGE) -> str:
    """The dotted name of the module in file `path` under package directory `root`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of a (possibly relative) `from` import's module."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def imports_of(source: str, module: str, is_package: bool, modules: Iterable[str]) -> set[str]:
    """The modules of `modules` that `source` (module `module`) imports, anywhere in the file."""
    known = set(modules)
    out: set[str] = set()

    def add(name: str) -> None:
        # `import a.b.c` of a name that is not a module (an attribute): the nearest enclosing module
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in known else base)
    return out


def file_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, frozenset[str]]:
    """Module -> the package's modules it imports."""
    paths = sorted(root.rglob("*.py"))
    names = {path: module_name(path, root, package) for path in paths}
    modules = set(names.values())
    return {
        name: frozenset(
            imports_of(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", modules)
        )
        for path, name in names.items()
    }


def unit_of(module: str, package: str = PACKAGE) -> str:
    """The subpackage (or top-level module) directly under `package` that `module` belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else package


def unit_graph(files: Graph, package: str = PACKAGE) -> dict[str, frozenset[str]]:
    """Subpackage -> the subpackages its modules import (self-imports dropped)."""
    out: dict[str, set[str]] = {}
    for module, targets in files.items():
        unit = unit_of(module, package)
        edges = out.setdefault(unit, set())
        edges.update(unit_of(t, package) for t in targets)
        edges.discard(unit)
    return {unit: frozenset(edges) for unit, edges in out.items()}


# ---------------------------------------------------------------------------------------------
# Cycles


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph` (iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycle_in(graph: Graph, component: list[str]) -> list[str]:
    """One cycle through the first node of a strongly connected `component`, as a closed path."""
    members = set(component)
    start = component[0]
    # breadth-first from start's successors back to start, inside the component
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child not in members or child in parents:
                    continue
                parents[child] = node
                if child == start:
                    path = [start]
                    step = parents[start]
                    while step != start:
                        path.append(step)
                        step = parents[step]
                    path.append(start)
                    return list(reversed(path))
                following.append(child)
        frontier = following
    return [start]


def cycles(graph: Graph) -> list[list[str]]:
    """One closed path per cycle-carrying strongly connected component of `graph`."""
    out = []
    for component in strongly_connected(graph):
        if len(component) > 1 or component[0] in graph.get(component[0], ()):
            out.append(cycle_in(graph, component))
    return out


def describe(found: list[list[str]]) -> str:
    """The cycles, one per line: a -> b -> a."""
    return "\n".join(" -> ".join(path) for path in found)


# ---------------------------------------------------------------------------------------------
# The checker itself


def test_the_checker_finds_a_cycle_in_a_synthetic_graph() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a", "d"}), "d": frozenset()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert describe(cycles(graph)) == "a -> b -> c -> a"
    assert cycles({"a": frozenset({"a"})}) == [["a", "a"]]
    assert cycles({"a": frozenset({"b"}), "b": frozenset({"c"})}) == []
    two = {"a": frozenset({"b"}), "b": frozenset({"a"}), "x": frozenset({"y"}), "y": frozenset({"x"})}
    assert sorted(map(tuple, cycles(two))) == [("a", "b", "a"), ("x", "y", "x")]


def test_the_checker_reads_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import b\n",
        "c.py": "def f():\n    import pkg.sub.b\n    return pkg\n",
        "d.py": "from . import a\nfrom .sub.b import name\nimport os.path\n",
        "sub/__init__.py": "",
        "sub/b.py": "from .. import c\nfrom ..d import thing\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = file_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.c"] == {"pkg.sub.b"}
    assert graph["pkg.d"] == {"pkg.a", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c", "pkg.d"}
    assert describe(cycles(graph)) == "pkg.a -> pkg.sub.b -> pkg.d -> pkg.a"
    units = unit_graph(graph, "pkg")
    assert units["pkg.sub"] == {"pkg.c", "pkg.d"}
    assert describe(cycles(units)) == "pkg.a -> pkg.sub -> pkg.d -> pkg.a"


# ---------------------------------------------------------------------------------------------
# The package


def test_no_import_cycle_between_files() -> None:
    found = cycles(file_graph())
    assert not found, "import cycles between modules:\n" + describe(found)


def test_no_import_cycle_between_subpackages() -> None:
    found = cycles(unit_graph(file_graph()))
    assert not found, "import cycles between subpackages:\n" + describe(found)


def test_layering() -> None:
    units = unit_graph(file_graph())
    assert {
        "policyd.cel",
        "policyd.policy",
        "policyd.compiler",
        "policyd.evaluation",
        "policyd.scheduler",
    } <= set(units)
    wrong = []
    for unit, allowed in MAY_ONLY_IMPORT.items():
        wrong += [f"{unit} -> {t} (may only import {sorted(allowed)})" for t in sorted(units[unit] - allowed)]
    for unit, forbidden in NEVER_IMPORTS.items():
        wrong += [f"{unit} -> {t}" for t in sorted(units[unit] & forbidden)]
    for unit, targets in sorted(units.items()):
        if "policyd.commands" in targets and unit not in COMMANDS_IMPORTERS:
            wrong.append(f"{unit} -> policyd.commands (only the CLI runs commands)")
    files = file_graph()
    for package, outer in BELOW_THEIR_SUBPACKAGE:
        for module, targets in sorted(files.items()):
            if module == package or module.startswith(package + "."):
                wrong += [
                    f"{module} -> {t}"
                    for t in sorted(targets)
                    if (t == outer or t.startswith(outer + "."))
                    and not (t == package or t.startswith(package + "."))
                ]
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)
