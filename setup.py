"""Builds the compiled data plane (issues 29 and 42, docs/architecture.md §10).
Everything else is in pyproject.toml.

Each module of the data plane is written once. Most are Python modules in
Cython's pure-Python mode, compiled here under a second name beside the
source, which stays importable as plain Python (the pure-Python data plane, the
reference): ``router/connection.py`` becomes ``router._connection``, its C
declarations in ``router/_connection.pxd`` (Cython finds a module's
augmenting ``.pxd`` by the compiled module's name). The ``.pyx`` modules are
what only C pointers do: the RESP framing, a message frame, the bus's
PUBLISH frame read and written.

The modules are listed once, in :data:`netutil.dataplane.MODULES` (the
node's planes and the tests read the same list). A module that fails to
compile fails the build, naming it (issue 50: a partial build once ran the
router on Python and the bus compiled); ``BLOOMCAST_NO_EXTENSIONS=1`` builds
a pure-Python wheel instead (a machine with no C compiler or Python
headers), whose node runs the pure-Python data plane (the reference) whole.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# the build runs this file with the project out of sys.path
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netutil.dataplane import ENV, MODULES  # (standard library only)

#: for the pure-Python mode sources: their annotations are for mypy; the
#: C types are the ``.pxd``'s alone. ``warn.unused``: a name declared and
#: never used, a stale ``@cython.locals`` name among them (its typing lost
#: silently), stops the build (every warning is an error: ``extensions``)
DIRECTIVES = {"embedsignature": True, "annotation_typing": False, "warn.unused": True}


class BuildExt(build_ext):
    """A module that does not compile stops the build with a line naming it
    and the way to a pure-Python node (never a partial build: a node runs
    one plane whole)."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception:
            print(
                f"bloomcast: {ext.name} did not compile: the build stops (a C compiler "
                f"and the Python headers are needed; {ENV}=1 builds a pure-Python node)",
                file=sys.stderr,
            )
            raise


def extensions() -> list[Extension]:
    if os.environ.get(ENV):
        return []
    from Cython.Build import cythonize
    from Cython.Compiler import Options

    Options.warning_errors = True  # a warning of Cython's stops the build
    exts = [Extension(name, [source], extra_compile_args=["-O2"]) for name, source in MODULES]
    # the generated C goes to build/ (a .py's C beside it would not say whose it is)
    return cythonize(
        exts,
        build_dir=BUILD_DIR,
        language_level=3,
        compiler_directives=DIRECTIVES,
        force=_stale(),
    )


BUILD_DIR = "build/cy"


def _stale() -> bool:
    """Whether any source or ``.pxd`` is newer than any generated C file.

    Cython's dependency tracking does not see that a pure-Python mode module
    depends on the ``.pxd`` files its own augmenting ``.pxd`` cimports (it is
    named after the compiled module, not the source): a changed
    ``router/_connection.pxd`` left ``router._dispatch`` built against the
    old layout of ``Connection`` ("size changed, may indicate binary
    incompatibility"). Any change regenerates every module instead."""
    from pathlib import Path

    inputs = [Path(source) for _, source in MODULES]
    inputs += [p for package in ["router", "cluster_bus"] for p in Path(package).glob("*.pxd")]
    outputs = [Path(BUILD_DIR, source).with_suffix(".c") for _, source in MODULES]
    if not all(c.exists() for c in outputs):
        return True
    return max(p.stat().st_mtime for p in inputs) > min(c.stat().st_mtime for c in outputs)


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
