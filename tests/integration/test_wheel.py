"""The product never imports its benchmarks (issue 50): ``bench/`` is left out
of the wheel, no module of the product imports it, and an installed wheel
answers ``bloomcast bench`` with one line saying the benchmarks run from a
checkout (exit 2, no traceback) while the demo's workload ships with the demo."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from bloomcast.cli import CHECKOUT_ONLY, SUBCOMMANDS

ROOT = Path(__file__).resolve().parents[2]
#: the packages the wheel ships; none may import bench
PRODUCT = ("bloomcast", "router", "cluster_bus", "bloom", "spark", "netutil")
#: a dotted module path inside bench, as an import_module argument would name it
BENCH_MODULE = re.compile(r"^bench(\.\w+)*$")


def _is_bench(module: str | None) -> bool:
    return module is not None and (module == "bench" or module.startswith("bench."))


def bench_imports(path: Path) -> list[str]:
    """Every ``import bench...`` / ``from bench... import`` in one file
    (inside functions and ``TYPE_CHECKING`` blocks too), as ``line: module``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: {a.name}" for a in node.names if _is_bench(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_bench(node.module):
            found.append(f"{node.lineno}: {node.module}")
    return found


def bench_module_strings(path: Path) -> list[str]:
    """String constants naming a bench module (an ``importlib`` door)."""
    return [
        f"{node.lineno}: {node.value}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "." in node.value
        and BENCH_MODULE.match(node.value)
    ]


def test_no_product_module_imports_bench():
    offenders = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            found = bench_imports(path)
            if path.relative_to(ROOT) != Path("bloomcast/cli.py"):
                found += bench_module_strings(path)
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_only_checkout_subcommands_reach_bench():
    """The console script's one door into bench is a subcommand that says
    "run it from a checkout" when bench is not importable."""
    reaching = {name for name, (module, _) in SUBCOMMANDS.items() if _is_bench(module)}
    assert reaching == {"bench"}
    assert reaching <= set(CHECKOUT_ONLY)


def test_find_config_leaves_bench_out():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = config["tool"]["setuptools"]["packages"]["find"]
    include, exclude = find.get("include", ["*"]), find.get("exclude", [])

    def shipped(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in include) and not any(
            fnmatch.fnmatchcase(name, p) for p in exclude
        )

    assert not shipped("bench") and not shipped("bench.workload")
    for package in PRODUCT:
        assert shipped(package) and shipped(f"{package}.sub")


def _clean_env() -> dict[str, str]:
    """This environment without the checkout on any path: no PYTHONPATH, no
    active virtualenv; a pure-Python build."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["BLOOMCAST_NO_EXTENSIONS"] = "1"
    return env


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv (its cache holds the deps)")
def test_installed_wheel_has_no_bench_and_says_where_it_runs(tmp_path):
    # the sources with bench beside them, as in a checkout: the find config
    # must leave it out (a copy, so the build writes nothing into the checkout)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "*.html")
    for package in (*PRODUCT, "bench"):
        shutil.copytree(ROOT / package, src / package, ignore=skip)
    dist = tmp_path / "dist"
    built = _run(["uv", "build", "--wheel", "--offline", "-o", str(dist), str(src)], tmp_path)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("bloomcast-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.split("/")[0] == "bench"] == []
    assert "bloomcast/demo/workload.py" in names
    assert "bloomcast/cli.py" in names

    venv = tmp_path / "venv"
    made = _run(["uv", "venv", "--offline", "--python", sys.executable, str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    # the runtime dependencies, pinned by uv.lock, from uv's local cache (no
    # network), then the wheel itself
    lock = tmp_path / "pylock.toml"
    exported = _run(
        [
            *("uv", "export", "--frozen", "--no-dev", "--no-emit-project"),
            *("--format", "pylock.toml", "-o", str(lock), "--project", str(ROOT)),
        ],
        tmp_path,
    )
    assert exported.returncode == 0, exported.stderr
    install = ["uv", "pip", "install", "--offline", "--python", str(python)]
    deps = _run([*install, "-r", str(lock)], tmp_path)
    assert deps.returncode == 0, deps.stderr
    installed = _run([*install, "--no-deps", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stderr

    where = _run([str(python), "-c", "import bloomcast, sys; print(bloomcast.__file__)"], tmp_path)
    assert where.stdout.strip().startswith(str(venv)), where.stdout
    no_bench = _run([str(python), "-c", "import bench"], tmp_path)
    assert "ModuleNotFoundError" in no_bench.stderr
    # the demo and its workload import from the wheel alone
    demo_modules = "import bloomcast.demo.drive, bloomcast.demo.summary"
    demo = _run([str(python), "-c", demo_modules], tmp_path)
    assert demo.returncode == 0, demo.stderr

    script = str(venv / "bin" / "bloomcast")
    # and the demo runs from it, out of the checkout (a short one: the Spark
    # job is the README's `uv run bloomcast demo`, tests/integration/test_demo.py)
    out = tmp_path / "demo"
    ran = _run(
        [
            *(script, "demo", "--nodes", "3", "--duration", "4s", "--subscribers", "30"),
            *("--skip-stats", "--no-progress", "--out", str(out)),
        ],
        tmp_path,
        timeout=240,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    # (the wheel without its `bench` extra: no matplotlib, no chart, said in a line)
    assert "chart.png not drawn: matplotlib is not installed" in ran.stdout
    report = json.loads((out / "report.json").read_text())
    assert all(c["ok"] for c in report["checks"].values()), report["checks"]
    helped = _run([script, "--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "bench" in helped.stdout and "demo" in helped.stdout
    for args in (["bench"], ["bench", "single", "--quick", "--out", "x"]):
        said = _run([script, *args], tmp_path)
        assert said.returncode == 2, said.stderr
        assert said.stdout == ""
        assert said.stderr == f"bloomcast bench: {CHECKOUT_ONLY['bench']}\n"
        assert "checkout of the repository" in said.stderr
