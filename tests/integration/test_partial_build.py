"""A build never leaves part of the data plane compiled (issue 50): a module
of netutil.dataplane.MODULES that does not compile stops setup.py's build,
naming it and the way to a pure-Python node, and builds nothing after it
(a partial build once ran the router on Python and the bus compiled while
INFO said ``python``). The node side, a compiled module missing at run time,
is tests/router/test_dataplane.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from netutil.dataplane import ENV, MODULES

ROOT = Path(__file__).resolve().parents[2]
#: the generated C of each module, where setup.py leaves it (its BUILD_DIR)
GENERATED = [ROOT / "build" / "cy" / Path(source).with_suffix(".c") for _, source in MODULES]


def _tree(tmp_path: Path) -> Path:
    """setup.py, the sources and the checkout's generated C (made newer
    than every source, so Cython regenerates none and the build goes
    straight to the C compiler), in a copy: the checkout is not touched."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.html")
    for package in ("netutil", "bloom", "router", "cluster_bus"):
        shutil.copytree(ROOT / package, src / package, ignore=skip)
    now = time.time()
    for c in GENERATED:
        target = src / c.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(c, target)
        os.utime(target, (now + 60, now + 60))
    return src


def _build(src: Path, pure: bool) -> subprocess.CompletedProcess[str]:
    """A wheel built from ``src`` as ``uv sync`` builds (pyproject's build
    system, in an isolated environment from uv's cache)."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "VIRTUAL_ENV", "PYTHONPATH")}
    if pure:
        env[ENV] = "1"
    args = ["uv", "build", "--wheel", "--offline", "-o", str(src / "dist"), str(src)]
    return subprocess.run(args, cwd=src, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv (its cache holds the build deps)")
@pytest.mark.skipif(
    not all(c.exists() for c in GENERATED), reason="no generated C here (a pure build)"
)
@pytest.mark.slow
def test_a_module_that_does_not_compile_stops_the_build(tmp_path):
    src = _tree(tmp_path)
    first, source = MODULES[0]  # built first: a lenient build would go on to the others
    c = src / "build" / "cy" / Path(source).with_suffix(".c")
    with c.open("a") as f:
        f.write('\n#error "made to fail (tests/integration/test_partial_build.py)"\n')
    built = _build(src, pure=False)
    assert built.returncode != 0, built.stderr[-2000:]
    assert f"bloomcast: {first} did not compile: the build stops" in built.stderr
    assert f"{ENV}=1 builds a pure-Python node" in built.stderr
    assert list(src.glob("dist/*.whl")) == []


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv (its cache holds the build deps)")
@pytest.mark.skipif(
    not all(c.exists() for c in GENERATED), reason="no generated C here (a pure build)"
)
def test_the_switch_builds_a_wheel_with_no_module(tmp_path):
    """BLOOMCAST_NO_EXTENSIONS=1: the wheel has no extension (Cython is not
    even run), and its node runs the pure-Python data plane whole (test_dataplane's
    INFO tests)."""
    src = _tree(tmp_path)
    for _, source in MODULES:  # a source Cython would refuse: it is never read
        (src / "build" / "cy" / Path(source).with_suffix(".c")).write_text("#error\n")
    built = _build(src, pure=True)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = src.glob("dist/*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.endswith(".so")] == []
    assert "router/stats.py" in names and "netutil/dataplane.py" in names


MOD = """\
import cython


def helper(data: bytes) -> int:
    size = len(data)
    return size
"""
MOD_PXD = """\
cimport cython

@cython.locals(size=Py_ssize_t)
cpdef long helper(bytes data)
"""


def _small_tree(tmp_path: Path, pxd: str) -> Path:
    """The real setup.py and pyproject.toml over a one-module list (a
    netutil/dataplane.py of its own naming ``pkg._mod``): seconds to build."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "netutil").mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    (src / "netutil" / "__init__.py").write_text("")
    (src / "netutil" / "dataplane.py").write_text(
        f'ENV = "{ENV}"\nMODULES = (("pkg._mod", "pkg/mod.py"),)\n'
    )
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "mod.py").write_text(MOD)
    (src / "pkg" / "_mod.pxd").write_text(pxd)
    return src


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv (its cache holds the build deps)")
def test_a_cython_warning_stops_the_build(tmp_path):
    """setup.py compiles with ``warn.unused`` and every warning an error: a
    ``@cython.locals`` name left behind by a rename (its typing silently
    lost) stops the build (the real modules build with it: ``uv sync``)."""
    stale = MOD_PXD.replace("size=Py_ssize_t", "length=Py_ssize_t")
    built = _build(_small_tree(tmp_path, stale), pure=False)
    assert built.returncode != 0, built.stderr[-2000:]
    assert "Unused entry 'length'" in built.stderr
