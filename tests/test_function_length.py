"""No function of the product grows past :data:`MAX_LINES` lines (issue 50).

A function is counted from its ``def`` line to its last line (``end_lineno -
lineno``, nested functions inside it included), read from the AST of every
module of the product's packages. :data:`MAX_LINES` is the longest left when
the long ones were split (``spark/stats_run.py`` ``run_spark``); a longer
function is split into helpers named by what they do, or listed in
:data:`EXCEPTIONS` with the reason it stays whole.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the product's packages (bench/ and tests/ are harnesses, not the product)
PACKAGES = ("bloomcast", "router", "cluster_bus", "spark", "bloom", "netutil")

MAX_LINES = 91

#: "path:qualified name" -> why it stays longer than MAX_LINES
EXCEPTIONS = {
    "router/dispatch.py:process": (
        "the request loop: one frame per read on the hot path, where every helper "
        "call is paid per request (bench.hot_path_cg counts it); its steps are "
        "commented in line"
    ),
}


def long_functions(source: str, max_lines: int) -> dict[str, int]:
    """Qualified name (``Class.method``, ``outer.inner``) -> lines, of every
    function in ``source`` longer than ``max_lines``."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (child.end_lineno or child.lineno) - child.lineno
                if lines > max_lines:
                    found[prefix + child.name] = lines
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(source), "")
    return found


def product_long_functions(max_lines: int) -> dict[str, int]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for name, lines in long_functions(path.read_text(), max_lines).items():
                found[f"{relative}:{name}"] = lines
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    over = {k: n for k, n in product_long_functions(MAX_LINES).items() if k not in EXCEPTIONS}
    assert not over, (
        f"functions over {MAX_LINES} lines (split them into helpers named by what "
        f"they do, or list one in EXCEPTIONS with its reason): {over}"
    )


def test_each_exception_is_still_long() -> None:
    """An exception that was split leaves the list (it would hide a regrowth)."""
    found = product_long_functions(MAX_LINES)
    assert not [k for k in EXCEPTIONS if k not in found]


def test_a_long_function_is_found() -> None:
    """The walk finds a long method and a long nested function, not a short one."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES + 1))
    source = textwrap.dedent(
        """\
        class Bus:
            def start(self):
        {body}

        def outer():
            async def inner():
        {body}

        def short():
            return 1
        """
    ).format(body=body)
    assert long_functions(source, MAX_LINES) == {
        "Bus.start": MAX_LINES + 1,
        "outer": MAX_LINES + 2,
        "outer.inner": MAX_LINES + 1,
    }
