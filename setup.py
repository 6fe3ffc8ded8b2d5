"""Builds the compiled data plane (issues 29 and 42, docs/architecture.md §10).
Everything else is in pyproject.toml.

Each module of the data plane is written once. Most are Python modules in
Cython's pure-Python mode, compiled here under a second name beside the
source, which stays importable as plain Python (the Python core, the
reference): ``router/connection.py`` becomes ``router._connection``, its C
declarations in ``router/_connection.pxd`` (Cython finds a module's
augmenting ``.pxd`` by the compiled module's name). The ``.pyx`` modules are
what only C pointers do: the RESP framing, a message frame, the bus's
PUBLISH frame read and written.

``BLOOMCAST_NO_EXTENSIONS=1`` builds a pure-Python wheel; a machine where the
extension cannot compile (no C compiler, no Python headers) gets one too,
with a warning, and the node runs the Python core (the reference).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: (compiled module, its source): a ``.py`` in pure-Python mode (its C
#: declarations in the compiled module's ``.pxd``) or a ``.pyx``; in the
#: order of their cimports
MODULES = [
    ("router._parser", "router/_parser.pyx"),
    ("router._resp", "router/_resp.pyx"),
    ("router._stats", "router/stats.py"),
    ("router._registry", "router/registry.py"),
    ("router._context", "router/context.py"),
    ("router._hotchannels", "router/hotchannels.py"),
    ("router._connection", "router/connection.py"),
    ("router._pubsub", "router/pubsub.py"),
    ("router._dispatch", "router/dispatch.py"),
    ("router._client", "router/client.py"),
    ("cluster_bus._codec", "cluster_bus/_codec.pyx"),
    ("cluster_bus._routing", "cluster_bus/routing.py"),
    ("cluster_bus._session", "cluster_bus/session.py"),
    ("cluster_bus._decoder", "cluster_bus/decoder.py"),
    ("cluster_bus._link", "cluster_bus/link.py"),
    ("cluster_bus._forwarding", "cluster_bus/forwarding.py"),
]

#: for the pure-Python mode sources: their annotations are for mypy; the
#: C types are the ``.pxd``'s alone
DIRECTIVES = {"embedsignature": True, "annotation_typing": False}


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, not a failed install (aiohttp's rule)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # the compiler is missing or fails
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc)

    @staticmethod
    def _skip(exc: Exception) -> None:
        print(
            f"bloomcast: the compiled data plane was not built ({exc}); "
            "the node will run the Python core",
            file=sys.stderr,
        )


def extensions() -> list[Extension]:
    if os.environ.get("BLOOMCAST_NO_EXTENSIONS"):
        return []
    from Cython.Build import cythonize

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


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
