"""Drift between a pure-Python mode module and its ``.pxd`` (issue 50).

Two mistakes compile without a word from Cython and show only on the
compiled plane:

- a field a ``cdef class`` assigns in its ``.py`` (``self.x = ...``, ``+=``,
  an annotated assignment, a tuple target, in any method) but that its
  ``.pxd`` does not declare: a C struct has no room for it, so the compiled
  object raises AttributeError where the pure-Python data plane worked (unless the
  class declares ``cdef dict __dict__``, which gives its instances a dict
  for such names, Cython >= 3.0);
- a ``@cython.locals(name=...)`` name that is no parameter or local of its
  function any more (renamed in the ``.py``): the typing is dropped and the
  function runs on Python objects (``warn.unused`` says "Unused entry", a
  warning only).

:func:`check` takes the module list (:data:`netutil.dataplane.MODULES`,
the one ``setup.py`` builds), reads each pure-Python mode source and the
``.pxd`` named after its compiled module (parsed with Cython's own parser),
and returns one line per drift.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from Cython.Compiler import ExprNodes, Nodes
from Cython.Compiler.TreeFragment import parse_from_strings

from netutil.dataplane import MODULES

FuncNode = ast.FunctionDef | ast.AsyncFunctionDef


# -- the .pxd side (Cython's parser) -----------------------------------------------------


@dataclass
class PxdClass:
    name: str
    bases: list[str]
    fields: set[str] = field(default_factory=set)
    #: method -> its @cython.locals names
    locals: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Pxd:
    classes: dict[str, PxdClass] = field(default_factory=dict)
    #: module function -> its @cython.locals names
    locals: dict[str, list[str]] = field(default_factory=dict)


def _is(node: Any, kind: type) -> bool:
    """isinstance, without narrowing: Cython's node classes declare their
    attributes at run time only."""
    return isinstance(node, kind)


def _declarator_name(node: Any) -> str:
    while not hasattr(node, "name"):
        node = node.base
    return str(node.name)


def _cython_locals(decorators: list[Any] | None) -> list[str] | None:
    """The names of a ``@cython.locals(...)`` among ``decorators``, if any."""
    for dec in decorators or []:
        call: Any = dec.decorator
        func: Any = getattr(call, "function", None)
        obj: Any = getattr(func, "obj", None)
        if not (
            _is(func, ExprNodes.AttributeNode)
            and func.attribute == "locals"
            and _is(obj, ExprNodes.NameNode)
            and obj.name == "cython"
        ):
            continue
        if _is(call, ExprNodes.GeneralCallNode):
            kwargs = call.keyword_args
            return [str(item.key.value) for item in kwargs.key_value_pairs] if kwargs else []
        return []
    return None


def _declarations(body: Any) -> Iterator[Any]:
    stats = body.stats if isinstance(body, Nodes.StatListNode) else [body]
    for stat in stats:
        if isinstance(stat, Nodes.StatListNode):
            yield from _declarations(stat)
        elif isinstance(stat, Nodes.CVarDefNode):
            yield stat


def parse_pxd(path: Path, module: str) -> Pxd:
    tree: Any = parse_from_strings(module, path.read_text(), level="module_pxd")
    pxd = Pxd()
    stats = tree.body.stats if isinstance(tree.body, Nodes.StatListNode) else [tree.body]
    stat: Any
    for stat in stats:
        if _is(stat, Nodes.CClassDefNode):
            bases = [b.name for b in stat.bases.args if _is(b, ExprNodes.NameNode)]
            cls = pxd.classes[stat.class_name] = PxdClass(stat.class_name, bases)
            for decl in _declarations(stat.body) if stat.body else []:
                names = _function_locals(decl, cls.locals)
                if names is None:  # fields
                    cls.fields.update(_declarator_name(d) for d in decl.declarators)
        elif _is(stat, Nodes.CVarDefNode):
            _function_locals(stat, pxd.locals)
    return pxd


def _function_locals(decl: Any, into: dict[str, list[str]]) -> list[str] | None:
    """A function's declaration: its @cython.locals names go ``into``; None
    for a declaration of variables."""
    funcs = [d for d in decl.declarators if isinstance(d, Nodes.CFuncDeclaratorNode)]
    if not funcs:
        return None
    names = _cython_locals(decl.decorators) or []
    for func in funcs:
        into[_declarator_name(func)] = names
    return names


# -- the .py side (Python's ast) ---------------------------------------------------------


def _is_cclass(cls: ast.ClassDef) -> bool:
    return any(
        isinstance(d, ast.Attribute) and d.attr == "cclass" and ast.unparse(d.value) == "cython"
        for d in cls.decorator_list
    )


def _py_locals(func: FuncNode) -> list[str] | None:
    for dec in func.decorator_list:
        if (
            isinstance(dec, ast.Call)
            and isinstance(dec.func, ast.Attribute)
            and dec.func.attr == "locals"
            and ast.unparse(dec.func.value) == "cython"
        ):
            return [k.arg for k in dec.keywords if k.arg is not None]
    return None


def _scope_nodes(func: FuncNode) -> Iterator[ast.AST]:
    """The nodes of ``func``'s own scope (not of nested functions, classes,
    lambdas or comprehensions, whose names are their own)."""
    todo: list[ast.AST] = list(func.body)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(
            node,
            ast.FunctionDef
            | ast.AsyncFunctionDef
            | ast.ClassDef
            | ast.Lambda
            | ast.ListComp
            | ast.SetComp
            | ast.DictComp
            | ast.GeneratorExp,
        ):
            continue
        todo.extend(ast.iter_child_nodes(node))


def function_locals(func: FuncNode) -> set[str]:
    """The parameters and local names of ``func``."""
    args = func.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    outer: set[str] = set()
    for node in _scope_nodes(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler):
            names.update([node.name] if node.name else [])
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            outer.update(node.names)
    return names - outer


def _is_method_like(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)


def _self_name(func: FuncNode) -> str | None:
    if any(ast.unparse(d) in ("staticmethod", "classmethod") for d in func.decorator_list):
        return None
    params = func.args.posonlyargs + func.args.args
    return params[0].arg if params else None


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for t in node.targets:
            yield from _unpack(t)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
        yield from _unpack(node.target)
    elif isinstance(node, ast.With | ast.AsyncWith):
        for item in node.items:
            if item.optional_vars is not None:
                yield from _unpack(item.optional_vars)
    elif isinstance(node, ast.comprehension):
        yield from _unpack(node.target)


def _unpack(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _unpack(elt)
    elif isinstance(target, ast.Starred):
        yield from _unpack(target.value)
    else:
        yield target


def assigned_attributes(cls: ast.ClassDef) -> dict[str, int]:
    """Every attribute ``cls`` gives its instances: ``self.<name>`` assigned in
    any method (nested functions included), ``__slots__`` entries and bare
    class-level annotations (``x: T``); name -> first line."""
    found: dict[str, int] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            if isinstance(stmt.target, ast.Name):
                found.setdefault(stmt.target.id, stmt.lineno)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in _targets(stmt)
        ):
            assert stmt.value is not None
            try:
                slots = ast.literal_eval(stmt.value)
            except ValueError:
                continue
            for name in [slots] if isinstance(slots, str) else slots:
                found.setdefault(str(name), stmt.lineno)
        elif _is_method_like(stmt):
            assert isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
            me = _self_name(stmt)
            if me is None:
                continue
            for node in ast.walk(stmt):
                for target in _targets(node):
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == me
                    ):
                        found.setdefault(target.attr, target.lineno)
    return found


def class_members(cls: ast.ClassDef) -> set[str]:
    """Names the class body defines itself (methods, properties, class
    attributes): assigning one of those is not a field."""
    names: set[str] = set()
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif (
            isinstance(stmt, ast.AnnAssign)
            and stmt.value is not None
            and isinstance(stmt.target, ast.Name)
        ):
            names.add(stmt.target.id)
    return names - {"__slots__"}


# -- the check ---------------------------------------------------------------------------


def check(root: Path, modules: Sequence[tuple[str, str]] = MODULES) -> list[str]:
    """One line per drift between the pure-Python mode sources of
    ``modules`` (compiled module, its source; paths under ``root``) and
    their ``.pxd`` files."""
    problems: list[str] = []
    pure = [(m, s) for m, s in modules if s.endswith(".py")]
    parsed: dict[str, tuple[ast.Module, Pxd | None]] = {}
    all_classes: dict[str, PxdClass] = {}
    for module, source in pure:
        pxd_path = root / (module.replace(".", "/") + ".pxd")
        pxd = parse_pxd(pxd_path, module) if pxd_path.exists() else None
        if pxd is not None:
            all_classes.update(pxd.classes)
        parsed[source] = (ast.parse((root / source).read_text(), source), pxd)
    for source, (tree, pxd) in parsed.items():
        problems += _check_module(source, tree, pxd or Pxd(), all_classes)
    return problems


def _fields(cls: PxdClass, classes: dict[str, PxdClass]) -> set[str] | None:
    """The fields of ``cls`` and its bases; None if it has a ``__dict__``
    (any attribute goes) or a base not known here."""
    fields = set(cls.fields)
    for base in cls.bases:
        if base not in classes:
            return None
        inherited = _fields(classes[base], classes)
        if inherited is None:
            return None
        fields |= inherited
    return None if "__dict__" in fields else fields


def _check_module(
    source: str, tree: ast.Module, pxd: Pxd, classes: dict[str, PxdClass]
) -> list[str]:
    problems: list[str] = []
    functions = {
        n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    problems += _check_locals(source, "", pxd.locals, functions)
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = {
            n.name: n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        declared = pxd.classes.get(cls.name)
        problems += _check_locals(
            source, f"{cls.name}.", declared.locals if declared else {}, methods
        )
        if declared is None and not _is_cclass(cls):
            continue  # a Python class: its instances have a __dict__
        if declared is None:
            fields: set[str] | None = set()
        else:
            fields = _fields(declared, classes)
        if fields is None:
            continue
        members = class_members(cls)
        for name, line in sorted(assigned_attributes(cls).items(), key=lambda kv: kv[1]):
            if name not in fields and name not in members:
                problems.append(
                    f"{source}:{line}: {cls.name}.{name} is assigned but not declared "
                    f"in the cdef class's .pxd (AttributeError on the compiled plane)"
                )
    return problems


def _check_locals(
    source: str, prefix: str, declared: dict[str, list[str]], funcs: dict[str, FuncNode]
) -> list[str]:
    problems: list[str] = []
    wanted = dict(declared)
    for name, func in funcs.items():  # @cython.locals written in the .py itself
        names = _py_locals(func)
        if names is not None:
            wanted[name] = wanted.get(name, []) + names
    for name, names in wanted.items():
        found = funcs.get(name)
        if found is None:
            if names:
                problems.append(f"{source}: {prefix}{name} has @cython.locals but no definition")
            continue
        func = found
        have = function_locals(func)
        for local in names:
            if local not in have:
                problems.append(
                    f"{source}:{func.lineno}: @cython.locals({local}=...) of {prefix}{name}: "
                    f"no parameter or local of that name (its typing is silently dropped)"
                )
    return problems


if __name__ == "__main__":
    import sys

    found = check(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    print("\n".join(found) or "no drift")
    raise SystemExit(1 if found else 0)
