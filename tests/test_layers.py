"""The package's layers, read from the source: no import circle, the two front doors (gRPC service
and proxy) side by side over ``budgeter.sessions`` without importing each other, and nothing
outside ``budgeter.sessions`` reaching for one of its private names.

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: a circle that
only type checking closes is still a circle a reader has to untangle."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import budgeter

ROOT = Path(budgeter.__file__).parent


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name.startswith("budgeter.v1"):
            continue  # generated stubs
        out[name] = ast.parse(path.read_text(encoding="utf-8"))
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    """The module an imported name lives in (``budgeter.a.b.c`` -> ``budgeter.a.b`` when ``c`` is
    not a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(tree: ast.Module) -> list[tuple[str, str | None]]:
    """(module, imported name or None) for every import of a budgeter module in ``tree``."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.startswith("budgeter")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("budgeter"):
            out += [(node.module, a.name) for a in node.names]
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, tree in MODULES.items():
        for module, imported in _imports(tree):
            full = f"{module}.{imported}" if imported else module
            target = _target(full) if full in MODULES else _target(module)
            if target and target != name and not name.startswith(target + "."):  # a package's own __init__
                graph[name].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(MODULES):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle():
    graph = {name: {t for t in targets if not name.startswith(t + ".") and not t.startswith(name + ".")}
             for name, targets in _graph().items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_front_doors_do_not_import_each_other():
    graph = _graph()
    crossing = [(a, b) for a, targets in graph.items() for b in targets
                if (a.startswith("budgeter.proxy") and b.startswith("budgeter.service"))
                or (a.startswith("budgeter.service") and b.startswith("budgeter.proxy"))]
    assert crossing == []


def test_nothing_outside_sessions_uses_a_private_name_of_it():
    reached = []
    for name, tree in MODULES.items():
        if name.startswith("budgeter.sessions"):
            continue
        for module, imported in _imports(tree):
            if module.startswith("budgeter.sessions") and imported and imported.startswith("_"):
                reached.append(f"{name}: {module}.{imported}")
    # attribute access on objects the session layer hands out: sessions.X._private
    for name, tree in MODULES.items():
        if not name.startswith(("budgeter.proxy", "budgeter.service", "budgeter.cli")):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr in {"sessions", "replica", "live", "engine", "profiles", "guards"}):
                reached.append(f"{name}:{node.lineno}: .{node.value.attr}.{node.attr}")
    assert reached == []
