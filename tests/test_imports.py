"""The import graph of `vcebench/`, `methods/` and `metrics/` has no circles and runs down the layers.

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

# The architecture, lowest layer first (docs/architecture.md): a module imports only modules of its own
# layer or of a lower one. Within a layer any arrow is allowed as long as there is no circle.
LAYERS = [
    ("vcebench.core",),  # plumbing: errors, io, rng, frechet, merge, torch runtime
    ("vcebench.registry",),  # the catalogue: specs, built-ins, roles (the public plug-in API)
    ("vcebench.config",),  # load and check the config, tasks, CPU kernels
    ("vcebench.data", "vcebench.models", "metrics", "methods"),  # datasets, networks, the plug-in families
    ("vcebench.protocol",),  # noise rule, tuning rule, one job's settings, parity
    ("vcebench.costs",),  # FLOPs, timing, memory, cost columns, stand-ins
    ("vcebench.paper", "vcebench.report"),  # paper reproduction; tables, figures, seeds, regression
    ("vcebench.steps",),  # what one CLI verb does, as a library
    ("vcebench.workflow",),  # the helpers the Snakefile calls
    ("vcebench.cli",),  # argparse and printing
]


# Inside vcebench.models, by duty (docs/architecture.md), lowest first: a module imports only modules of its
# own floor or a lower one. The face (base, checkpoints) is the ground; what ships and how training runs come
# next; the two kinds of networks trained here; the authors' released formats (which reuse them); the top
# resolves a task's networks and names each role's trainer.
MODEL_LAYERS = [
    ("vcebench.models.base", "vcebench.models.checkpoints", "vcebench.models.shipping"),
    ("vcebench.models.training",),
    ("vcebench.models.synthetic", "vcebench.models.generative"),
    ("vcebench.models.released",),
    ("vcebench.models.task_models", "vcebench.models.recipes", "vcebench.models.accelerate", "vcebench.models"),
]


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
    assert "vcebench.models.generative.ddpm" in graph["vcebench.models.recipes"]  # inside a function
    assert "vcebench.steps.evaluate" in graph["vcebench.steps.tune"]  # a step may use another step
    assert len(graph) > 50


def test_no_import_circles():
    circles = cycles(import_graph())
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def layer_of(module: str) -> int | None:
    """The index in LAYERS of ``module``'s package (``None``: the bare ``vcebench`` package, or no layer)."""
    for i, layer in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in layer):
            return i
    return None


def test_every_module_has_a_layer():
    loose = sorted(m for m in import_graph() if m != "vcebench" and layer_of(m) is None)
    assert not loose, f"modules outside LAYERS: {loose}"


def test_vcebench_top_level_is_the_layers():
    """No loose module beside the layer packages: only ``__init__.py`` and ``workflow.py``."""
    top = sorted(p.name for p in (ROOT / "vcebench").glob("*.py"))
    assert top == ["__init__.py", "workflow.py"]
    packages = {p.name for p in (ROOT / "vcebench").iterdir() if (p / "__init__.py").exists()}
    assert packages == {p.split(".")[1] for layer in LAYERS for p in layer if p.startswith("vcebench.")} - {"workflow"}


def test_imports_run_down_the_layers():
    """Every import (lazy ones inside functions and ``TYPE_CHECKING`` blocks too) points to a module of the
    same or a lower layer; the CLI verbs (``vcebench.cli``) sit on top, and no step imports the CLI."""
    graph = import_graph()
    up = [f"{m} (layer {layer_of(m)}) -> {t} (layer {layer_of(t)})" for m, targets in sorted(graph.items())
          for t in sorted(targets) if t != "vcebench" and (layer_of(t) or 0) > (layer_of(m) or 0)]
    assert not up, "imports against the layer order:\n" + "\n".join(up)


def test_layer_checker_sees_an_upward_import():
    assert layer_of("vcebench.core.io") == 0 and layer_of("vcebench.cli") == len(LAYERS) - 1
    assert layer_of("methods.fire") == layer_of("vcebench.models.base") < layer_of("vcebench.protocol.noise")
    assert layer_of("vcebench") is None and layer_of("vcebench.workflowx") is None


def _bound_names(path: Path) -> set[str]:
    """Names a package's ``__init__.py`` binds at module level (definitions, assignments, imports)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in targets) and isinstance(node.value,
                                                                                                 ast.Dict):
                # names a PEP 562 ``__getattr__`` imports on first use (vcebench/models/__init__.py)
                names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return names


def test_imports_resolve():
    """Every import of the three packages names a module or a name that exists: a moved module's old path
    would otherwise fall back to its package in the graph and hide an arrow."""
    files = module_files()
    sources = [(m, p) for m, p in files.items()]
    sources += [(f"tests.{p.stem}", p) for p in sorted((ROOT / "tests").glob("*.py"))]
    missing = []
    for module, path in sources:
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PACKAGES and alias.name not in files:
                        missing.append(f"{module}: import {alias.name}")
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                if module.startswith("tests.") and node.level:
                    continue
                source = _absolute(module, is_package, node)
                if source not in files:
                    missing.append(f"{module}: from {source} import ...")
                    continue
                if files[source].name != "__init__.py":
                    continue
                bound = _bound_names(files[source])
                for alias in node.names:
                    if alias.name != "*" and f"{source}.{alias.name}" not in files and alias.name not in bound:
                        missing.append(f"{module}: from {source} import {alias.name}")
    assert not missing, "imports of modules or names that do not exist:\n" + "\n".join(missing)


def test_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def import_style_errors(module: str, source: str) -> list[str]:
    """One import style: inside a top-level package (vcebench, methods, metrics) imports are relative
    (``from ..core.io import ...``), across packages absolute (``from vcebench.registry import ...``)."""
    own = module.split(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
        out += [f"{module}: `{n}` absolute inside its own package (write it relative)" for n in names
                if n and n.split(".")[0] == own]
    return out


def test_one_import_style():
    errors = [e for m, p in module_files().items() for e in import_style_errors(m, p.read_text())]
    assert not errors, "\n".join(errors)


def test_import_style_checker_sees_an_absolute_import_inside_its_package():
    assert import_style_errors("vcebench.steps.x", "from vcebench.core import io\nfrom methods import base\n") == [
        "vcebench.steps.x: `vcebench.core` absolute inside its own package (write it relative)"]
    assert import_style_errors("methods.x", "import methods.base\nfrom .base import A\n") == [
        "methods.x: `methods.base` absolute inside its own package (write it relative)"]


def model_floor(module: str) -> int | None:
    """The index in MODEL_LAYERS of a ``vcebench.models`` module (``None`` outside vcebench.models)."""
    best = None
    for i, floor in enumerate(MODEL_LAYERS):
        for p in floor:
            if module == p or (p != "vcebench.models" and module.startswith(p + ".")):
                best = i
    return best


def test_models_folder_is_the_duty_folders():
    """Only the face files and the duty folders sit directly in vcebench/models/."""
    top = sorted(p.stem for p in (ROOT / "vcebench/models").glob("*.py"))
    assert top == ["__init__", "accelerate", "base", "checkpoints", "recipes", "task_models"]
    folders = sorted(p.name for p in (ROOT / "vcebench/models").iterdir() if (p / "__init__.py").exists())
    assert folders == ["generative", "released", "shipping", "synthetic", "training"]
    loose = sorted(m for m in module_files() if m.startswith("vcebench.models") and model_floor(m) is None)
    assert not loose, f"vcebench.models modules outside MODEL_LAYERS: {loose}"


def upward_model_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} (floor {model_floor(m)}) -> {t} (floor {model_floor(t)})" for m, targets in sorted(graph.items())
            for t in sorted(targets) if model_floor(m) is not None and model_floor(t) is not None
            and model_floor(t) > model_floor(m)]


def test_models_imports_run_down_the_duty_floors():
    up = upward_model_imports(import_graph())
    assert not up, "imports inside vcebench.models against MODEL_LAYERS:\n" + "\n".join(up)


def test_model_floor_checker_sees_a_planted_upward_import():
    """A trainer that imported the task loader (what oracle.py once did) is reported."""
    graph = import_graph()
    graph["vcebench.models.synthetic.oracle"] = graph["vcebench.models.synthetic.oracle"] | {
        "vcebench.models.task_models"}
    graph["vcebench.models.generative.ddpm"] = graph["vcebench.models.generative.ddpm"] | {
        "vcebench.models.released.guided_unet"}
    up = upward_model_imports(graph)
    assert any(u.startswith("vcebench.models.synthetic.oracle (floor 2) -> vcebench.models.task_models") for u in up)
    assert any(u.startswith("vcebench.models.generative.ddpm (floor 2) -> vcebench.models.released") for u in up)


# What a module of vcebench.cli may import: argparse and printing over the steps, the config and the plumbing
# (and the role names its choices list); the standard library beside them. Anything else it needs is a step's.
CLI_ALLOWED = ("vcebench.cli", "vcebench.steps", "vcebench.config", "vcebench.core", "vcebench.registry.roles")
# (module, function) still reading a library directly: none (issue 49 moved the last, `report regression` and
# `report tolerances`, into steps/report.py); an entry here is exempt for itself only
CLI_PENDING: set[tuple[str, str]] = set()


def cli_imports() -> dict[str, list[tuple[str, str | None]]]:
    """Module of vcebench.cli -> (imported module, the top-level function or class holding the import, None at
    module level), every import of its source, relative ones made absolute."""
    out = {}
    for module, path in module_files().items():
        if not (module == "vcebench.cli" or module.startswith("vcebench.cli.")):
            continue
        is_package = path.name == "__init__.py"
        out[module] = []
        for stmt in ast.parse(path.read_text(), str(path)).body:
            where = stmt.name if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else None
            for node in ast.walk(stmt):
                if isinstance(node, ast.Import):
                    out[module] += [(alias.name, where) for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    out[module].append((_absolute(module, is_package, node), where))
    return out


def cli_import_errors(imports: dict[str, list[tuple[str, str | None]]]) -> list[str]:
    """The imports of ``imports`` (:func:`cli_imports`) outside the standard library and CLI_ALLOWED, less the
    (module, function) pairs of CLI_PENDING."""
    import sys

    def allowed(target: str) -> bool:
        return (target.split(".")[0] in sys.stdlib_module_names
                or any(target == p or target.startswith(p + ".") for p in CLI_ALLOWED))

    return [f"{m}{'.' + w if w else ''} imports {t}" for m, pairs in sorted(imports.items())
            for t, w in pairs if not allowed(t) and (m, w) not in CLI_PENDING]


def test_the_cli_is_argparse_and_printing():
    """Every module of vcebench.cli imports only vcebench.steps, vcebench.config, vcebench.core and
    vcebench.registry.roles (and the standard library): the verbs' library halves live in vcebench/steps/."""
    imports = cli_imports()
    assert {"vcebench.cli", "vcebench.cli.report", "vcebench.cli.profile", "vcebench.cli.data"} <= set(imports)
    assert ("vcebench.steps.paper", "run_paper") in imports["vcebench.cli.report"]  # a lazy, relative import
    errors = cli_import_errors(imports)
    assert not errors, "CLI modules importing past the steps:\n" + "\n".join(errors)


def test_cli_import_checker_sees_a_planted_import():
    """A fake graph: a library, a third-party package, the registry's face and a plug-in family imported
    by a CLI verb are reported; a pending function is exempt only for itself."""
    fake = {"vcebench.cli.x": [("argparse", None), ("__future__", None), ("vcebench.steps.report", "run_a"),
                               ("vcebench.config.tasks", "run_a"), ("vcebench.core.io", None),
                               ("vcebench.registry.roles", None), ("vcebench.cli", None),
                               ("vcebench.report", "run_a"), ("torch", "run_a"), ("vcebench.registry", None),
                               ("metrics.fid", "run_b"), ("vcebench.workflow", None)],
            "vcebench.cli.report": [("vcebench.report", "run_regression"), ("vcebench.report.seeds", "run_paper")]}
    global CLI_PENDING
    kept, CLI_PENDING = CLI_PENDING, {("vcebench.cli.report", "run_regression")}
    try:
        errors = cli_import_errors(fake)
    finally:
        CLI_PENDING = kept
    assert errors == [
        "vcebench.cli.report.run_paper imports vcebench.report.seeds",
        "vcebench.cli.x.run_a imports vcebench.report", "vcebench.cli.x.run_a imports torch",
        "vcebench.cli.x imports vcebench.registry", "vcebench.cli.x.run_b imports metrics.fid",
        "vcebench.cli.x imports vcebench.workflow"]
