"""The package's import layers (issue 14.1): every module imports only from its own layer or those below it,
function-level imports included, and no two modules import each other, directly or in a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import storeval

ROOT = Path(storeval.__file__).parent

# Lowest first; a module may import its own layer and the layers before it.
LAYERS: list[set[str]] = [
    {"storeval", "errors", "units", "fields", "redact", "histogram", "interrupts", "safeyaml", "outputs", "stats",
     "plugins", "lazy", "validation"},
    {"core", "traces"},  # traces: the trace model and its parsers, plain data like core
    {"drivers"},
    {"probes"},
    {"workloads"},
    {"environment", "store", "clean"},
    {"peers"},  # peer tools' results read into the store, and cells as their command lines
    {"analysis"},
    {"engine"},
    {"spec", "preflight", "testbed"},
    {"plan", "report", "faults", "systems", "degraded"},
    {"runner"},
    {"app"},  # the use cases: run, report, compare, import, export, clean, testbed (typed requests)
    {"cli", "__main__"},  # parses arguments into the use cases' requests and prints what comes back
]


def _unit(module: str) -> str:
    """``storeval.engine.local`` → ``engine``; ``storeval.units`` → ``units``; ``storeval`` → ``storeval``."""
    parts = module.split(".")
    if len(parts) == 1 or not ((ROOT / parts[1]).is_dir() or (ROOT / f"{parts[1]}.py").exists()):
        return "storeval"  # the package itself, or a name it defines (``from . import __version__``)
    return parts[1]


def _layer(module: str) -> int:
    unit = _unit(module)
    for i, names in enumerate(LAYERS):
        if unit in names:
            return i
    raise AssertionError(f"{module} is in no layer: add {unit!r} to LAYERS")


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported storeval module, line, at module level) for every import in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem] if node.module else [f"{stem}.{a.name}" for a in node.names]
        for name in names:
            if name == "storeval" or name.startswith("storeval."):
                found.append((name, node.lineno, id(node) in top))
    return found


def test_no_module_imports_a_layer_above_its_own():
    upward = []
    for module, path in _modules().items():
        mine = _layer(module)
        for name, line, _ in _imports(module, path):
            if _layer(name) > mine:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name} ({_unit(name)} is above "
                              f"{_unit(module)})")
    assert upward == []


def test_no_import_cycle_between_modules():
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        graph[module] = set()
        for name, _, at_top in _imports(module, path):
            if not at_top:
                continue
            while name not in modules and "." in name:  # ``from pkg.mod import name``: the module is pkg.mod
                name = name.rpartition(".")[0]
            if name != module and name in modules:
                graph[module].add(name)
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" → ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    # a package's __init__ importing its own modules (and they importing a sibling through it) is no cycle
    real = [c for c in cycles if not all(part.count(".") <= 1 and c.split(" → ")[0].rpartition(".")[0] in
                                         (part, part.rpartition(".")[0]) for part in c.split(" → "))]
    assert real == []


def test_the_model_imports_nothing_but_the_base_layer():
    for module, path in _modules().items():
        if _unit(module) == "core":
            assert {_unit(name) for name, _, _ in _imports(module, path)} <= LAYERS[0] | {"core"}, module
