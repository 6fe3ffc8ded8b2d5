"""The import graph, read from the source (issue 42, issue 50).

Every import of every module counts: at module level, under
``if TYPE_CHECKING:``, inside a function. Read from the AST, not from what a
run imports, so a type-only or a lazy import is as much an edge as any.

Between packages (docs/architecture.md §2): dependencies go one way, down
:data:`ALLOWED`, and a package is entered only through the modules listed
there for its importer (its front doors). Inside ``router/``: no import
circle of more than two files. ``uv run pytest tests/test_import_graph.py``
reruns it.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the product's packages, top to bottom: ``bloomcast`` (the entry points,
#: where a node is wired) -> ``router`` -> ``cluster_bus`` / ``spark`` (side
#: by side: neither imports the other) -> ``bloom`` -> ``netutil`` (what
#: several share: listeners, TLS, address checks, the rate-limited log).
#: ``bench`` is a harness like ``tests/``: it may import any module and no
#: product module imports it.
PACKAGES = ("bloomcast", "router", "cluster_bus", "spark", "bloom", "netutil", "bench")

NETUTIL = frozenset(
    {
        "netutil.acceptor",
        "netutil.addresses",
        "netutil.dataplane",
        "netutil.tls",
        "netutil.rate_limited_log",
    }
)

#: (importing package, imported package) -> the imported package's front
#: doors for it; a pair not here is an upward or side import, refused
ALLOWED: dict[tuple[str, str], frozenset[str]] = {
    # the entry points wire a node: its router, its bus, its traffic tap
    ("bloomcast", "router"): frozenset(
        {
            "router",
            "router.acl.aclfile",
            "router.allocator",
            "router.client_log",
            "router.collector",
            "router.config",
            "router.config_file",
            "router.dataplane",
            "router.fdlimit",
            "router.glob",
            "router.info",
            "router.node",
            "router.protected",
            "router.stats",
            "router.tls",
        }
    ),
    ("bloomcast", "cluster_bus"): frozenset(
        {"cluster_bus.api", "cluster_bus.bus", "cluster_bus.nodes_file"}
    ),
    ("bloomcast", "spark"): frozenset(
        {"spark.tap", "spark.spool_service", "spark.sinks", "spark.stats_command", "spark.decay"}
    ),
    ("bloomcast", "bloom"): frozenset({"bloom"}),
    ("bloomcast", "netutil"): NETUTIL,
    # the router reaches the bus through its seam, the slot arithmetic and
    # the plane switch; the traffic events through their interface
    ("router", "cluster_bus"): frozenset(
        {"cluster_bus.api", "cluster_bus.slots", "cluster_bus.dataplane"}
    ),
    ("router", "spark"): frozenset({"spark.events", "spark.decay"}),
    ("router", "netutil"): NETUTIL,
    ("cluster_bus", "bloom"): frozenset({"bloom"}),
    ("cluster_bus", "netutil"): NETUTIL,
    ("spark", "netutil"): NETUTIL,
    ("bloom", "netutil"): frozenset({"netutil.dataplane"}),
}

#: packages that may import any module of the product (a harness, not a layer)
HARNESSES = frozenset({"bench"})


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def import_graph(
    package: str, root: Path = ROOT, packages: tuple[str, ...] = PACKAGES
) -> dict[str, set[str]]:
    """module of ``package`` -> the modules of ``packages`` it imports (any
    import in its AST; ``from p import name`` counts as ``p.name`` when that
    is a module, else as ``p``)."""
    modules = _modules(root, packages)

    def resolve(name: str) -> str | None:
        while name:
            if name in modules:
                return name
            name = name.rpartition(".")[0]
        return None

    def bound(package: str) -> set[str]:
        """The names a package's ``__init__`` binds by import (``from bloom
        import crc64`` is then the package's function, not its module)."""
        path = modules.get(package)
        if path is None or path.name != "__init__.py":
            return set()
        tree = ast.parse(path.read_text(), str(path))
        return {
            (a.asname or a.name).split(".")[0]
            for n in tree.body
            if isinstance(n, ast.Import | ast.ImportFrom)
            for a in n.names
        }

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if module.split(".")[0] != package:
            continue
        graph[module] = set()
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
                names = bound(base)
                targets = [
                    resolve(base)
                    if a.name in names
                    else resolve(f"{base}.{a.name}") or resolve(base)
                    for a in node.names
                ]
            graph[module] |= {t for t in targets if t is not None and t != module}
    return graph


def wrong_imports(
    root: Path = ROOT,
    packages: tuple[str, ...] = PACKAGES,
    allowed: dict[tuple[str, str], frozenset[str]] = ALLOWED,
    harnesses: frozenset[str] = HARNESSES,
) -> list[str]:
    """Every import from one package into another that :data:`ALLOWED` does
    not list: ``"importer -> imported (why)"``."""
    wrong = []
    for package in packages:
        for module, imported in sorted(import_graph(package, root, packages).items()):
            for target in sorted(imported):
                other = target.split(".")[0]
                if other == package or package in harnesses:
                    continue
                doors = allowed.get((package, other))
                if doors is None:
                    wrong.append(
                        f"{module} -> {target} (upward or side: {package} may not import {other})"
                    )
                elif target not in doors:
                    wrong.append(
                        f"{module} -> {target} (not a front door of {other} for {package})"
                    )
    return wrong


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
    big = [c for c in circles(import_graph("router", packages=("router",))) if len(c) > 2]
    assert not big, f"import circles in router/: {big}"


def test_the_connection_imports_no_command_and_no_request_loop():
    """h11's shape: the connection is a state machine with its output; the
    request loop (router.dispatch) and the commands drive it, never the
    other way."""
    imported = import_graph("router", packages=("router",))["router.connection"]
    assert not {m for m in imported if m.startswith("router.commands")}
    assert not imported & {"router.dispatch", "router.pubsub", "router.node", "router.client"}


def test_commands_see_the_client_through_its_protocol():
    """No command module imports the connection class (they type against
    router.context.CommandClient)."""
    graph = import_graph("router", packages=("router",))
    importers = [m for m, imported in graph.items() if "router.connection" in imported]
    assert not [m for m in importers if m.startswith("router.commands")], importers


def test_the_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert sorted(circles(graph)) == [["a", "b", "c"], ["e", "f"]]


def test_packages_import_downward_through_their_front_doors():
    wrong = wrong_imports()
    assert not wrong, (
        "imports across packages that docs/architecture.md §2 does not allow:\n" + "\n".join(wrong)
    )


def test_every_allowed_door_is_a_module_that_exists():
    """A door that names no module (a module moved, the table not) would let
    nothing through and hide the mistake."""
    modules = _modules(ROOT, PACKAGES)
    missing = sorted(d for doors in ALLOWED.values() for d in doors if d not in modules)
    assert not missing, missing


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checker_finds_upward_side_and_internal_imports(tmp_path: Path):
    """The checker on a synthetic tree: one allowed import and four wrong
    ones, hidden the ways the real tree could hide them (type-only, inside a
    function, relative)."""
    _tree(
        tmp_path,
        {
            "router/__init__.py": "",
            "router/node.py": "from cluster_bus.api import ClusterLink\n",
            "cluster_bus/__init__.py": "",
            "cluster_bus/api.py": "",
            "cluster_bus/bus.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from router.node import Node
                """,
            "cluster_bus/mesh.py": """\
                def later():
                    import spark.tap
                """,
            "spark/__init__.py": "",
            "spark/tap.py": "from cluster_bus import bus\n",
            "netutil/__init__.py": "",
            "netutil/tls.py": "from ..cluster_bus import api\n",
        },
    )
    wrong = wrong_imports(tmp_path, ("router", "cluster_bus", "spark", "netutil"))
    assert [w.split(" (")[0] for w in wrong] == [
        "cluster_bus.bus -> router.node",
        "cluster_bus.mesh -> spark.tap",
        "spark.tap -> cluster_bus.bus",
        "netutil.tls -> cluster_bus.api",
    ]
    # and a router import of the bus's internals, not its seam
    (tmp_path / "router/node.py").write_text("from cluster_bus.bus import ClusterBus\n")
    assert wrong_imports(tmp_path, ("router", "cluster_bus"))[0].startswith(
        "router.node -> cluster_bus.bus (not a front door of cluster_bus for router)"
    )
