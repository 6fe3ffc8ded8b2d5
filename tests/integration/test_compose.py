"""compose/docker-compose.yml cannot rot: every bloomcast service's command is
parsed by the real ``bloomcast`` argument parser, and the wiring between the
services (bus ports, spool volume, Spark master, Redis URL, Spark version) is
checked. No Docker engine runs here: what a container would run against a
node (the healthcheck, Prometheus's scrape of the names the Grafana dashboard
queries) runs against a real ``bloomcast node`` process instead."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.request
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import urlparse

import pyspark
import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bloomcast.cli import build_parser
from bloomcast.testing import free_port, wait_port
from netutil.dataplane import MODULES
from router.config import NodeConfig, add_node_arguments, config_from_args
from tests.procs import bloomcast_node

ROOT = Path(__file__).resolve().parents[2]
#: a node without a bus serving /metrics (the port follows)
METRICS_NODE = ("--loglevel", "warning", "--metrics-port")
COMPOSE = ROOT / "compose" / "docker-compose.yml"


@pytest.fixture(scope="module")
def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def _argv(service: dict) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def _is_bloomcast(service: dict) -> bool:
    """A service that runs the ``bloomcast`` command (the Spark services run
    the same image with spark-class as their entrypoint)."""
    return str(service.get("image", "")).startswith("bloomcast") and "entrypoint" not in service


#: every image the compose file pulls: release tags their projects publish
#: (Redis 7.4 as Docker's official image, Prometheus v2.53.0 and Grafana
#: 11.1.0 from their June 2024 releases). The tests cannot reach a registry, so
#: this reviewed list is the check: a new or changed tag fails the test below
#: until someone confirms it exists and adds it here
PINNED_IMAGES = {"redis:7.4", "prom/prometheus:v2.53.0", "grafana/grafana:11.1.0"}


def parse(argv: list[str], capsys) -> argparse.Namespace:
    """Parse with the real CLI parser; a parse error fails with argparse's message."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"bloomcast {' '.join(argv)}: {capsys.readouterr().err.strip()}")
    assert not getattr(args, "_missing", None), f"bloomcast {argv[0]} is not built"
    return args


def _node_services(services: dict) -> dict[str, dict]:
    return {n: s for n, s in services.items() if _is_bloomcast(s) and _argv(s)[0] == "node"}


def test_every_bloomcast_command_parses(services, capsys):
    bloomcast = {n: s for n, s in services.items() if _is_bloomcast(s)}
    assert {_argv(s)[0] for s in bloomcast.values()} == {"node", "stats"}
    for s in bloomcast.values():
        parse(_argv(s), capsys)


def test_a_renamed_flag_would_fail(capsys):
    # the check above is real: a flag the CLI does not know fails the parse
    with pytest.raises(pytest.fail.Exception):
        parse(["node", "--port", "6379", "--no-such-flag", "1"], capsys)
    with pytest.raises(pytest.fail.Exception):
        parse(["stats", "run", "--spool", "/spool", "--no-such-flag"], capsys)


def test_nodes_form_a_mesh_on_bus_ports(services, capsys):
    nodes = _node_services(services)
    assert len(nodes) >= 3
    configs: dict[str, NodeConfig] = {}
    for name, s in nodes.items():
        args = parse(_argv(s), capsys)
        configs[name] = config_from_args(args)
        assert s.get("hostname", name) == name
    for name, cfg in configs.items():
        assert cfg.bind == "0.0.0.0"  # reachable from the other containers
        assert cfg.join, f"{name} joins nobody"
        for seed in cfg.join:
            host, _, port = seed.rpartition(":")
            assert host in configs and host != name, f"{name} joins unknown {seed}"
            assert int(port) == configs[host].bus_port, f"{seed} is not {host}'s bus port"
        # published client and metrics ports stay on loopback
        metrics_port = parse(_argv(nodes[name]), capsys).metrics_port
        inside = set()
        for mapping in nodes[name].get("ports", []):
            published = mapping.split(":")
            assert published[0] == "127.0.0.1"
            inside.add(int(published[-1]))
        assert inside == {cfg.port, metrics_port}


def _mounts(service: dict) -> dict[str, str]:
    """container path -> volume name."""
    out = {}
    for v in service.get("volumes", []):
        volume, _, path = v.partition(":")
        out[path.split(":")[0]] = volume
    return out


def test_stats_job_wiring(services, capsys):
    stats = [s for s in services.values() if _is_bloomcast(s) and _argv(s)[0] == "stats"]
    assert len(stats) == 1
    job = stats[0]
    args = parse(_argv(job), capsys)
    assert args.stats_command == "run" and args.stream
    # the spool the job reads is the volume every node's tap writes, at the same
    # path on the Spark worker (executors read the files)
    spool_volume = _mounts(job)[args.spool]
    for s in _node_services(services).values():
        cfg = config_from_args(parse(_argv(s), capsys))
        assert _mounts(s)[cfg.traffic_dir] == spool_volume
    worker = services["spark-worker"]
    assert _mounts(worker)[args.spool] == spool_volume
    checkpoint_dir = str(Path(args.checkpoint).parent)
    assert _mounts(worker)[checkpoint_dir] == _mounts(job)[checkpoint_dir]
    # the master URL names the master service and the port its command listens on
    master = urlparse(args.master)
    assert master.scheme == "spark" and master.hostname in services
    master_argv = _argv(services[master.hostname])
    assert "org.apache.spark.deploy.master.Master" in master_argv
    assert master_argv[master_argv.index("--port") + 1] == str(master.port)
    assert f"spark://{master.hostname}:{master.port}" in _argv(worker)
    # Redis for statistics is a service of its own
    redis_url = urlparse(args.redis)
    assert redis_url.scheme == "redis" and redis_url.hostname in services
    assert "redis" in services[redis_url.hostname]["image"]
    conf = dict(c.split("=", 1) for c in args.conf)
    assert conf["spark.driver.host"] == job.get("hostname")


def test_spark_runs_the_locked_pyspark_and_other_images_are_pinned(services):
    # classic (non-Connect) Spark needs the driver and the cluster on one
    # version: the master and worker run the Spark inside the locked pyspark
    # wheel, from the bloomcast image, so no apache/spark tag must exist
    spark_home = Path("/app/.venv/lib/python3.11/site-packages/pyspark")
    local_home = Path(pyspark.__file__).parent
    assert (local_home / "bin" / "spark-class").is_file()  # the wheel carries it
    for name in ("spark-master", "spark-worker"):
        service = services[name]
        assert service["image"] == "bloomcast:latest" and "build" in service
        assert service["entrypoint"] == [str(spark_home / "bin" / "spark-class")]
        assert service["environment"]["SPARK_HOME"] == str(spark_home)
        assert _argv(service)[0].startswith("org.apache.spark.deploy.")
    pulled = {s["image"] for s in services.values() if not str(s["image"]).startswith("bloomcast")}
    assert pulled <= PINNED_IMAGES, pulled - PINNED_IMAGES


def test_dockerfile_builds_from_the_lock():
    dockerfile = (ROOT / "compose" / "Dockerfile").read_text()
    assert "uv sync --frozen --no-dev" in dockerfile
    for folder in ("router", "bloom", "cluster_bus", "spark", "netutil"):
        assert f"COPY {folder} {folder}" in dockerfile
    assert "COPY bench" not in dockerfile  # the benchmarks are not in the product (issue 50)
    assert 'ENTRYPOINT ["bloomcast"]' in dockerfile
    # the compiled data plane: setup.py and a C compiler before `uv sync`
    # (without them the image would run the pure-Python data plane, with a warning)
    sync = dockerfile.index("uv sync --frozen --no-dev")
    assert re.search(r"COPY [^\n]*\bsetup\.py\b", dockerfile[:sync])
    assert re.search(r"apt-get install [^\n]*\bgcc\b", dockerfile[:sync])


def test_readme_documents_every_node_flag_and_the_toml_example(tmp_path):
    # the README's configuration table and TOML example follow router/config.py
    readme = (ROOT / "README.md").read_text()
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    flags = [
        s for a in parser._actions for s in a.option_strings if s.startswith("--") and s != "--help"
    ]
    missing = [f for f in flags if f"`{f}" not in readme]
    assert not missing, f"README configuration table lacks {missing}"
    toml = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "node.toml").write_text(toml)
    config = NodeConfig.from_toml(tmp_path / "node.toml")
    assert config.port == 7001 and config.subscribe_visibility_timeout_ms == 200
    assert readme.startswith("# bloomcast")
    assert "uv run bloomcast demo" in readme[:1200] and "uv run pytest" in readme[:1200]


def _dockerignore() -> list[str]:
    """.dockerignore's patterns, each without its trailing slash (none negates)."""
    patterns = [
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not [p for p in patterns if p.startswith("!")], "the matcher below has no negation"
    return patterns


def _matches(parts: list[str], pattern: list[str]) -> bool:
    """Docker's pattern match of a path's parts (``**``: any number of them;
    else ``fnmatch`` per part, ``*`` never crossing a slash)."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_matches(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _matches(parts[1:], pattern[1:])


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves ``path`` (relative, with slashes)
    out: a pattern matches it or one of its parent folders."""
    parts = path.split("/")
    return any(
        _matches(parts[:n], pattern.split("/"))
        for pattern in patterns
        for n in range(1, len(parts) + 1)
    )


def _node_stage() -> tuple[list[list[str]], str]:
    """compose/Dockerfile's node stage: its COPY lines (sources, then the
    destination) before its ``uv sync``, and that RUN line's command."""
    stage = (ROOT / "compose" / "Dockerfile").read_text().split("\nFROM ")[1]
    before, _, sync = stage.partition("\nRUN uv sync")
    copies = [line.split()[1:] for line in before.splitlines() if line.startswith("COPY ")]
    return copies, "uv sync" + sync.split("\n", 1)[0]


def test_dockerignore_keeps_the_venv_git_and_caches_out():
    # the build context is the repository root (context: ..)
    ignored = set(_dockerignore())
    assert {".venv", ".git", ".mypy_cache", ".ruff_cache", ".pytest_cache"} <= ignored
    assert "**/__pycache__" in ignored
    dockerfile = (ROOT / "compose" / "Dockerfile").read_text()
    copies = [line.split() for line in dockerfile.splitlines() if line.startswith("COPY ")]
    copied = {word for words in copies for word in words[1:]}
    assert not copied & ignored, "the Dockerfile copies something .dockerignore drops"


def _modules() -> list[tuple[str, str]]:
    """The modules setup.py builds (netutil.dataplane.MODULES): (the compiled
    module as a path, its source)."""
    return [(module.replace(".", "/"), source) for module, source in MODULES]


#: what setup.py's build leaves beside the sources (the generated C, the
#: extension, an object file)
BUILD_OUTPUTS = (".c", ".so", ".o")


def test_dockerignore_keeps_the_in_place_build_out():
    # `uv sync` builds the compiled data plane in place (netutil.dataplane.MODULES:
    # the generated C under build/cy, the .so beside its source). The image
    # generates and compiles its own from the sources, so the context must not
    # carry a checkout's (another Cython, compiler or Python may have made them)
    patterns = _dockerignore()
    for module, source in _modules():
        assert _ignored(f"build/cy/{source.rsplit('.', 1)[0]}.c", patterns), module
        assert _ignored(f"{module}.cpython-311-x86_64-linux-gnu.so", patterns), module
        assert not _ignored(source, patterns), module
        if source.endswith(".py"):  # its C declarations
            assert not _ignored(f"{module}.pxd", patterns), module
    # and any other build output this checkout holds in the copied folders
    copies, _ = _node_stage()
    folders = [src for words in copies for src in words[:-1] if (ROOT / src).is_dir()]
    untracked = subprocess.run(
        ["git", "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--", *folders],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    outputs = [path for path in untracked if path.endswith(BUILD_OUTPUTS)]
    assert not [path for path in outputs if not _ignored(path, patterns)]


@pytest.mark.slow
@pytest.mark.long
def test_the_node_stage_replayed_builds_the_compiled_data_plane(tmp_path):
    # No Docker engine runs here: the node stage's COPY lines are replayed
    # from this checkout as the build context (less .dockerignore's paths),
    # then its `uv sync` line runs in the copy. It must build the compiled data
    # plane from the copied sources alone, with none of the checkout's build
    # in the context, and without the dev group. What is this machine's and not
    # the image's: the base system (gcc and the Python headers, as there), the
    # interpreter (this one's version, as the image's 3.11), uv, its cache and
    # the network it fetches the build requirements from (setuptools, Cython:
    # pyproject's build-system, not in the lock). Without gcc this fails, as
    # the image would build a node running the pure-Python data plane
    patterns = _dockerignore()
    app = tmp_path / "app"
    app.mkdir()
    copies, sync = _node_stage()
    for *sources, dest in copies:
        for source in sources:
            files = [ROOT / source] if (ROOT / source).is_file() else [
                f for f in (ROOT / source).rglob("*") if f.is_file()
            ]  # fmt: skip
            for f in files:
                rel = f.relative_to(ROOT).as_posix()
                if _ignored(rel, patterns):
                    continue
                inside = f.name if f == ROOT / source else f.relative_to(ROOT / source).as_posix()
                target = app / dest / inside  # a folder's content goes into dest, as COPY does
                target.parent.mkdir(parents=True, exist_ok=True)
                # (new times: uv keys its cache of a path's build by the path
                # and its files' times, and a tmp path can repeat)
                shutil.copy(f, target)
    copied = [f.relative_to(app).as_posix() for f in app.rglob("*") if f.is_file()]
    assert not [path for path in copied if path.endswith(BUILD_OUTPUTS)]
    assert all((app / source).is_file() for _, source in _modules())
    # as a build in the image: none of this run's uv settings (but its cache),
    # venv, compiler flags, Python path or bloomcast settings, and no uv config
    # file; the network's (proxy, CA certificates) kept
    dropped = ("UV_", "VIRTUAL_ENV", "BLOOMCAST_", "PYTHON", "CC", "CFLAGS", "CPPFLAGS", "LDFLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped) or k == "UV_CACHE_DIR"}
    env["UV_NO_CONFIG"] = "1"
    env["UV_PYTHON"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv runs this project's tests (README); it is not on PATH"
    argv = shlex.split(sync)
    assert argv[0] == "uv", sync
    built = subprocess.run([uv, *argv[1:]], cwd=app, env=env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    python = app / ".venv" / "bin" / "python"
    probe = (
        "import sys; from router import dataplane; p = dataplane.load(); "
        "print(p.name, sys.modules[p.PubSub.__module__].__file__)"
    )
    out = subprocess.run(
        [python, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    plane, _, path = out.stdout.strip().partition(" ")
    assert plane == "compiled" and Path(path).is_relative_to(app), out.stdout + out.stderr
    dev = subprocess.run([python, "-c", "import pytest"], env=env, capture_output=True, text=True)
    assert dev.returncode != 0, "the node image has no dev group"


def test_every_service_restarts_and_startup_is_health_gated(services, capsys):
    for name, s in services.items():
        assert s.get("restart") == "unless-stopped", f"{name} has no restart policy"
    stats = services["stats"]["depends_on"]
    for name, s in _node_services(services).items():
        assert stats[name] == {"condition": "service_healthy"}
        cfg_args = parse(_argv(s), capsys)
        test = s["healthcheck"]["test"]
        assert f"127.0.0.1:{cfg_args.metrics_port}/healthz" in " ".join(test)
    assert stats["redis"] == {"condition": "service_healthy"}
    assert "healthcheck" in services["redis"]


def test_node_healthcheck_command_works_against_a_real_node(services):
    # the healthcheck's own command, pointed at a real node's --metrics-port

    test = next(iter(_node_services(services).values()))["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    metrics = free_port()
    check = [sys.executable, *test[2:]]
    check[-1] = check[-1].replace("127.0.0.1:9121", f"127.0.0.1:{metrics}")
    assert subprocess.run(check, capture_output=True, timeout=30).returncode != 0  # no node yet
    with bloomcast_node(*METRICS_NODE, str(metrics)):
        wait_port(metrics)
        assert subprocess.run(check, capture_output=True, timeout=30).returncode == 0


def test_readme_compose_sequence_does_not_block_on_subscribe():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Docker Compose", 1)[1].split("\n## ", 1)[0]
    commands = section.split("```", 2)[1].splitlines()
    assert any("up --build --wait" in c for c in commands)
    # SUBSCRIBE never returns: PUBLISH must not follow it on the same line
    assert not [c for c in commands if "SUBSCRIBE" in c and "PUBLISH" in c]
    assert any(c.startswith("redis-cli -p 7003 PUBLISH news hello") for c in commands)


def test_prometheus_scrapes_every_node(services, capsys):
    config = yaml.safe_load((ROOT / "compose" / "prometheus.yml").read_text())
    targets = {
        t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    expected = set()
    for name, s in _node_services(services).items():
        expected.add(f"{s.get('hostname', name)}:{parse(_argv(s), capsys).metrics_port}")
    assert targets == expected
    mounted = {v.split(":")[0] for v in services["prometheus"]["volumes"]}
    assert "./prometheus.yml" in mounted


def test_grafana_dashboard_uses_only_metrics_a_node_serves(tmp_path):
    # every bloomcast_* name in the dashboard's queries is served by a real node

    dashboard = json.loads((ROOT / "compose/grafana/dashboards/bloomcast.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in re.findall(r"\bbloomcast_\w+", e)}
    assert len(used) >= 10
    metrics = free_port()
    with bloomcast_node(*METRICS_NODE, str(metrics)) as port:
        wait_port(metrics)
        # one command, so the labelled per-command series exists
        redis.Redis(port=port).publish("c", "m")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as r:
            text = r.read().decode()
    families = list(text_string_to_metric_families(text))
    # sample names (counters end in _total), and families without a sample yet
    # (no peer on a node without a bus: bloomcast_peer_link_connected)
    served = {s.name for f in families for s in f.samples} | {f.name for f in families}
    assert used <= served, f"dashboard queries unknown metrics {used - served}"
    datasource = (ROOT / "compose/grafana/provisioning/datasources/prometheus.yml").read_text()
    assert "url: http://prometheus:9090" in datasource
    assert all(p["datasource"]["uid"] == "prometheus" for p in dashboard["panels"])
