"""The package's import graph (every `import` in the source, function bodies included) has no cycle."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import policyd

ROOT = Path(policyd.__file__).parent
# subpackages whose modules must not import each other in a cycle (the lead widens this to all)
ACYCLIC_MODULES = ("policyd.cel", "policyd.policy", "policyd.compiler")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = ("policyd", *path.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the policyd modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _subpackage(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and (ROOT / parts[1]).is_dir():
        return ".".join(parts[:2])
    return "policyd"


def test_no_cycle_between_subpackages() -> None:
    graph: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        for target in imported:
            if _subpackage(module) != _subpackage(target):
                graph.setdefault(_subpackage(module), set()).add(_subpackage(target))
    assert cycles(graph) == []


def test_no_cycle_between_front_end_and_compiler_modules() -> None:
    found = cycles(import_graph())
    assert [c for c in found if any(m.startswith(ACYCLIC_MODULES) for m in c)] == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
