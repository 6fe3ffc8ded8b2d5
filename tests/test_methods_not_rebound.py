"""Methods are methods (issue 50): no class of router/, cluster_bus/ or
bloom/ assigns ``self.<name>`` where ``<name>`` is a method of that class
(an instance attribute hides the method: the method below never runs and a
reader, or a tool, follows the wrong one)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("router", "cluster_bus", "bloom")


def _self_name(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    if any(ast.unparse(d) in ("staticmethod", "classmethod") for d in func.decorator_list):
        return None
    params = func.args.posonlyargs + func.args.args
    return params[0].arg if params else None


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    found: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        found = [node.target]
    while found:
        target = found.pop()
        if isinstance(target, ast.Tuple | ast.List):
            found.extend(target.elts)
        elif isinstance(target, ast.Starred):
            found.append(target.value)
        else:
            yield target


def _is_property(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    # a property's setter runs on `self.<name> = ...`: that is its use, not a rebinding
    return any(
        ast.unparse(d) == "property" or ast.unparse(d).endswith((".setter", ".deleter"))
        for d in func.decorator_list
    )


def rebindings(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: Class.name`` for every ``self.<name> = ...`` (any method)
    where ``<name>`` is a method (not a property) of that class."""
    found: list[str] = []
    for cls in ast.walk(ast.parse(source, filename)):
        if not isinstance(cls, ast.ClassDef):
            continue
        funcs = [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        methods = {f.name for f in funcs if not _is_property(f)}
        for func in funcs:
            me = _self_name(func)
            if me is None:
                continue
            for node in ast.walk(func):
                for target in _targets(node):
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == me
                        and target.attr in methods
                    ):
                        found.append(f"{filename}:{target.lineno}: {cls.name}.{target.attr}")
    return found


def test_no_method_is_rebound_on_its_instance():
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += rebindings(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_the_check_finds_a_rebound_method():
    source = """
class Bus:
    def __init__(self, forwarding):
        self.forwarding = forwarding
        self.forward_publish = forwarding.forward
        self.a, self.received = 1, forwarding.received

    @property
    def size(self):
        return 0

    @size.setter
    def size(self, value):
        self.size_ = value

    def resize(self):
        self.size = 2

    def forward_publish(self, channel):
        return self.forwarding.forward(channel)

    def received(self, msgs):
        pass
"""
    assert rebindings(source, "bus.py") == [
        "bus.py:5: Bus.forward_publish",
        "bus.py:6: Bus.received",
    ]
