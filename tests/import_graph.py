"""The import graph of installed packages, read from their source with ``ast``: every ``import``
and ``from ... import`` (inside functions and ``if TYPE_CHECKING:`` blocks too), relative imports
resolved. Used by ``tests/test_layers.py`` to check the layer rules; nothing is imported."""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # a module of the graph, or an outside module's full dotted name
    line: int
    in_function: bool
    type_only: bool  # under ``if TYPE_CHECKING:``

    @property
    def at_import_time(self) -> bool:
        """Whether importing the importer runs this import."""
        return not self.in_function and not self.type_only


def find_modules(packages: Iterable[str], roots: dict[str, Path] | None = None) -> dict[str, Module]:
    """Every module of ``packages`` by dotted name. A package's folder comes from ``roots``, else
    from where it is installed; subfolders without ``__init__.py`` (data, C sources) are skipped."""
    out: dict[str, Module] = {}
    for package in packages:
        root = (roots or {}).get(package)
        if root is None:
            spec = importlib.util.find_spec(package)
            assert spec is not None and spec.submodule_search_locations, package
            root = Path(list(spec.submodule_search_locations)[0])
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root)
            if not all((root / Path(*rel.parts[:i])).joinpath("__init__.py").is_file()
                       for i in range(len(rel.parts))):
                continue
            parts = list(rel.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join([package, *parts])
            out.setdefault(name, Module(name, path, is_package))
    return out


def imports_of(module: Module, modules: dict[str, Module]) -> list[Import]:
    """The imports in one module's source."""
    tree = ast.parse(module.path.read_text(encoding="utf-8"), str(module.path))
    found: list[Import] = []

    def target_of(base: str, name: str | None) -> str:
        if name is not None and f"{base}.{name}" in modules:
            return f"{base}.{name}"  # ``from package import submodule``
        return base

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(module.name, alias.name, child.lineno, in_function, type_only))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = module.name if module.is_package else module.name.rpartition(".")[0]
                    for _ in range(child.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                for t in dict.fromkeys(target_of(base, a.name) for a in child.names):
                    found.append(Import(module.name, t, child.lineno, in_function, type_only))
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            checking = type_only or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            visit(child, inside, checking)

    visit(tree, False, False)
    return found


def owner(target: str, modules: dict[str, Module]) -> str | None:
    """The graph's module an import reaches (``a.b.c`` where only ``a.b`` is a module: ``a.b``),
    or None for an outside module."""
    name = target
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def all_imports(modules: dict[str, Module]) -> list[Import]:
    return [i for m in modules.values() for i in imports_of(m, modules)]


def graph(modules: dict[str, Module], imports: list[Import]) -> dict[str, set[str]]:
    """Module -> the graph's modules it imports (anywhere in its source)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for i in imports:
        reached = owner(i.target, modules)
        if reached is not None and reached != i.importer:
            edges[i.importer].add(reached)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def in_layer(name: str, layer: str) -> bool:
    return name == layer or name.startswith(layer + ".")


def layer_violations(imports: list[Import], modules: dict[str, Module],
                     rules: dict[str, tuple[str, ...]]) -> list[str]:
    """Imports that break a rule ``{importer layer: forbidden layers}``, as readable lines."""
    out = []
    for i in imports:
        reached = owner(i.target, modules) or i.target
        for layer, forbidden in rules.items():
            if in_layer(i.importer, layer) and any(in_layer(reached, f) for f in forbidden):
                out.append(f"{modules[i.importer].path}:{i.line}: {i.importer} imports {reached}")
    return out


def import_time_closure(start: str, modules: dict[str, Module], imports: list[Import]) -> dict[str, str]:
    """Everything importing ``start`` imports (parent packages included), each with the chain of
    modules that leads to it: ``{name: "a -> b -> name"}``; outside modules by their top name."""
    by_importer: dict[str, list[Import]] = {}
    for i in imports:
        if i.at_import_time:
            by_importer.setdefault(i.importer, []).append(i)
    seen: dict[str, str] = {start: start}
    todo = [start]
    while todo:
        name = todo.pop()
        parent = name.rpartition(".")[0]
        nexts = [parent] if parent in modules else []
        for i in by_importer.get(name, []):
            reached = owner(i.target, modules)
            nexts.append(reached if reached is not None else i.target.split(".")[0])
        for n in nexts:
            if n not in seen:
                seen[n] = f"{seen[name]} -> {n}"
                if n in modules:
                    todo.append(n)
    return seen
