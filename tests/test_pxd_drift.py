"""The ``.pxd`` drift check (tests/pxd_drift.py, issue 50): every field a
pure-Python mode ``cdef class`` assigns is declared in its ``.pxd``, every
``@cython.locals`` name is a parameter or local of its function. It passes
on the real sources and fails on each drift, built in a temporary tree."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from tests.pxd_drift import check

ROOT = Path(__file__).resolve().parents[1]

#: the module list of the temporary trees
PKG = [("pkg._mod", "pkg/mod.py"), ("pkg._raw", "pkg/_raw.pyx")]
SOURCE = """\
import cython


@cython.final
@cython.cclass
class Counter:
    def __init__(self, start: int) -> None:
        self.count = start
        self.seen, self.last = 0, b""

    def bump(self, n: int) -> int:
        total = self.count + n
        self.count += n
        for item in range(n):
            self.seen += item
        return total


class Plain:
    def __init__(self) -> None:
        self.anything = 1


def helper(data: bytes) -> int:
    size = len(data)
    return size
"""
PXD = """\
cimport cython


@cython.final
cdef class Counter:
    cdef public long long count, seen
    cdef public bytes last

    @cython.locals(total=cython.longlong)
    cpdef long long bump(self, long long n)


@cython.locals(size=Py_ssize_t)
cpdef long long helper(bytes data)
"""


def tree(tmp_path: Path, source: str = SOURCE, pxd: str = PXD) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(source)
    (pkg / "_mod.pxd").write_text(pxd)
    return tmp_path


def test_the_real_sources_have_no_drift():
    """The sources of netutil.dataplane.MODULES, the list setup.py builds."""
    assert check(ROOT) == []


def test_a_clean_tree_passes(tmp_path):
    assert check(tree(tmp_path), PKG) == []


def test_a_field_assigned_in_a_later_method_only_in_the_py_fails(tmp_path):
    source = SOURCE.replace(
        "        return total\n", "        self.peak = total\n        return total\n"
    )
    problems = check(tree(tmp_path, source), PKG)
    assert len(problems) == 1
    assert "pkg/mod.py:16: Counter.peak is assigned but not declared" in problems[0]


def test_an_augmented_or_unpacked_field_missing_from_the_pxd_fails(tmp_path):
    pxd = PXD.replace("count, seen", "count").replace("    cdef public bytes last\n", "")
    problems = check(tree(tmp_path, pxd=pxd), PKG)
    assert [p.split(": ")[1] for p in problems] == [
        "Counter.seen is assigned but not declared in the cdef class's .pxd "
        "(AttributeError on the compiled plane)",
        "Counter.last is assigned but not declared in the cdef class's .pxd "
        "(AttributeError on the compiled plane)",
    ]


def test_slots_and_bare_annotations_count_as_fields(tmp_path):
    source = SOURCE.replace(
        "class Counter:\n", "class Counter:\n    __slots__ = ('spare',)\n    limit: int\n\n"
    )
    problems = check(tree(tmp_path, source), PKG)
    assert sorted(p.split(": ")[1].split(" ")[0] for p in problems) == [
        "Counter.limit",
        "Counter.spare",
    ]


def test_a_cdef_dict_admits_any_attribute(tmp_path):
    source = SOURCE.replace(
        "        return total\n", "        self.peak = total\n        return total\n"
    )
    pxd = PXD.replace(
        "    cdef public bytes last\n", "    cdef public bytes last\n    cdef dict __dict__\n"
    )
    assert check(tree(tmp_path, source, pxd), PKG) == []


def test_a_stale_cython_locals_name_fails(tmp_path):
    # the local renamed in the .py, the .pxd still types the old name
    source = SOURCE.replace("total = self.count + n", "result = self.count + n").replace(
        "return total", "return result"
    )
    (tmp_path / "method").mkdir()
    problems = check(tree(tmp_path / "method", source), PKG)
    assert len(problems) == 1
    assert "@cython.locals(total=...) of Counter.bump: no parameter or local" in problems[0]
    pxd = PXD.replace("size=Py_ssize_t", "length=Py_ssize_t")
    (tmp_path / "function").mkdir()
    problems = check(tree(tmp_path / "function", pxd=pxd), PKG)
    assert len(problems) == 1
    assert "@cython.locals(length=...) of helper" in problems[0]


def test_a_stale_locals_name_written_in_the_py_fails(tmp_path):
    source = SOURCE.replace(
        "def helper(", "@cython.locals(size=cython.Py_ssize_t, gone=cython.int)\ndef helper("
    )
    problems = check(tree(tmp_path, source), PKG)
    assert len(problems) == 1 and "@cython.locals(gone=...) of helper" in problems[0]


def test_a_field_added_to_a_real_module_only_fails(tmp_path):
    """The real tree, copied, with one new field in a real class's method."""
    for package in ("router", "cluster_bus", "bloom"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("*.so", "*.c")
        )
    path = tmp_path / "cluster_bus" / "forwarding.py"
    text = path.read_text()
    cls = next(
        n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "Forwarding"
    )
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name != "__init__")
    last = method.body[-1]
    lines = text.splitlines(keepends=True)
    indent = " " * last.col_offset
    lines.insert(last.lineno - 1, f"{indent}self.drifted = 1\n")
    path.write_text("".join(lines))
    problems = check(tmp_path)
    assert len(problems) == 1
    assert "Forwarding.drifted is assigned but not declared" in problems[0]
