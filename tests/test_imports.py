"""The import graph of `vcebench/`, `methods/` and `metrics/` has no circles.

What counts as an arrow from module A to module B: any `import B` or `from B import ...` in A's
source, at module level or inside a function, class or `if TYPE_CHECKING:` block (a lazy import
that runs "up" is still a circle in the design, it only postpones the failure). `from P import
name` points at the submodule `P.name` when that is a module, else at the package `P` (its
`__init__.py`). Importing a submodule also runs its parent packages' `__init__.py`; that implicit
arrow is not counted, or every package with re-exports would be a circle of one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("vcebench", "methods", "metrics")


def module_files() -> dict[str, Path]:
    files = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join(parts)] = path
    return files


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the three packages it imports (anywhere in its source)."""
    files = module_files()
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, is_package, node)
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in files else source)
            for target in targets:
                # `import a.b.c` binds `a` but runs a.b.c: point at the deepest module we have
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
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
                    found.append(sorted(component))
    return found


def test_graph_sees_imports():
    graph = import_graph()
    assert "vcebench.core.io" in graph["vcebench.models.checkpoints"]  # `from ..io import ...` (relative)
    assert "vcebench.models.ddpm" in graph["vcebench.models.recipes"]  # inside a function
    assert "vcebench.steps.evaluate" in graph["vcebench.steps.tune"]
    assert len(graph) > 50


def test_no_import_circles():
    circles = cycles(import_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_commands_are_imported_only_by_the_cli():
    """The CLI verbs (``vcebench.steps``) sit on top: no module of ``vcebench/``, ``methods/`` or
    ``metrics/`` outside them imports one (the CLI registers them; a verb may use another verb)."""
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith("vcebench.steps") or module == "vcebench.cli":
            continue
        up = sorted(t for t in targets if t.startswith("vcebench.steps"))
        assert not up, f"{module} imports {up}"


def test_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
