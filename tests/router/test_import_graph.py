"""router/'s import graph has no circle of more than two files (issue 42).

Every import of every module under router/ counts: at module level, under
``if TYPE_CHECKING:``, inside a function. Read from the source (the AST), not
from what a run imports, so a type-only import is as much an edge as any.
``uv run pytest tests/router/test_import_graph.py`` reruns it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(package: str) -> dict[str, Path]:
    modules = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports (any import in its AST)."""
    modules = _modules(package)

    def resolve(name: str) -> str | None:
        while name:
            if name in modules:
                return name
            name = name.rpartition(".")[0]
        return None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".") if is_package else module.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join([*here, base] if base else here)
                targets = [resolve(f"{base}.{a.name}") or resolve(base) for a in node.names]
            graph[module] |= {t for t in targets if t is not None and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_router_has_no_import_circle_of_more_than_two_files():
    big = [c for c in circles(import_graph("router")) if len(c) > 2]
    assert not big, f"import circles in router/: {big}"


def test_the_connection_imports_no_command_and_no_request_loop():
    """h11's shape: the connection is a state machine with its output; the
    request loop (router.dispatch) and the commands drive it, never the
    other way."""
    imported = import_graph("router")["router.connection"]
    assert not {m for m in imported if m.startswith("router.commands")}
    assert not imported & {"router.dispatch", "router.pubsub", "router.node", "router.client"}


def test_commands_see_the_client_through_its_protocol():
    """No command module imports the connection class (they type against
    router.context.CommandClient)."""
    graph = import_graph("router")
    importers = [m for m, imported in graph.items() if "router.connection" in imported]
    assert not [m for m in importers if m.startswith("router.commands")], importers


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert sorted(circles(graph)) == [["a", "b", "c"], ["e", "f"]]
