"""Builds the compiled data plane (issue 29, docs/architecture.md §10): the
typed Cython twins of the Python core's hot loop. Everything else is in
pyproject.toml.

``BLOOMCAST_NO_EXTENSIONS=1`` builds a pure-Python wheel; a machine where the
extension cannot compile (no C compiler, no Python headers) gets one too,
with a warning, and the node runs the Python core (the reference).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MODULES = ["router/_parser.pyx", "cluster_bus/_forwarding.pyx"]


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

    exts = [
        Extension(path[:-4].replace("/", "."), [path], extra_compile_args=["-O2"])
        for path in MODULES
    ]
    return cythonize(exts, language_level=3, compiler_directives={"embedsignature": True})


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
