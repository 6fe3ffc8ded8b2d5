"""The ``bloomcast`` console script: one entry, one subcommand per job.

Each subcommand lives in its own module, which exposes
``configure(parser)`` (add its flags; must import nothing heavy) and
``run(args) -> int`` (the exit code). Modules are imported only to build the
parser, so ``bloomcast --help`` stays fast; heavy imports (pyspark) go inside
``run``.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

#: subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "node": ("bloomcast.node_command", "run one node agent (Redis protocol pub/sub)"),
    "cluster": ("bloomcast.cluster_command", "start a local cluster of node processes"),
    "stats": ("spark.stats_command", "Spark statistics over the traffic spool"),
    "demo": ("bloomcast.demo", "the whole product end to end on a local cluster"),
    "bench": ("bench.bench_command", "benchmarks side by side with Redis"),
    "dashboard": ("bloomcast.dashboard", "live web view of every node of a cluster"),
}

#: subcommands whose module is not in the wheel: what to say instead (the
#: benchmarks are run from a checkout of the repository, where ``bench/`` is
#: importable; the product never imports them otherwise)
CHECKOUT_ONLY: dict[str, str] = {
    "bench": "the benchmarks run from a checkout of the repository "
    "(git clone it, then `uv run bloomcast bench`); an installed bloomcast does not ship them",
}


class OneLineParser(argparse.ArgumentParser):
    """A usage mistake is one line naming the flag, exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, just that subcommand's module is
    imported (the others keep their one-line help), so ``bloomcast node`` does
    not import numpy for ``stats`` or ``bench``: it starts about twice as fast,
    which is most of a large local cluster's ready time."""
    parser = OneLineParser(
        prog="bloomcast",
        description="Redis-protocol pub/sub cluster with Bloom-filter routing.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name and not (
                name in CHECKOUT_ONLY and exc.name == module_name.partition(".")[0]
            ):
                raise
            if name in CHECKOUT_ONLY:
                p.description = f"{help_text}: {CHECKOUT_ONLY[name]}"
            p.set_defaults(_missing=name)
            continue
        module.configure(p)
        p.set_defaults(_run=module.run)
    return parser


def interruptible() -> None:
    """Make SIGINT (Ctrl-C) stop this command even if the parent ignored it.

    A non-interactive shell starts its background jobs (``cmd &``) with SIGINT
    ignored (POSIX Shell Command Language, 2.11), and CPython keeps an
    inherited SIG_IGN instead of installing its KeyboardInterrupt handler. A
    script's ``kill -INT`` would then be lost on ``cluster up`` and ``demo``,
    which stop on KeyboardInterrupt. redis-server and ``bloomcast node``
    install their SIGINT handler unconditionally; so does every subcommand.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    interruptible()
    args_in = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_in if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in SUBCOMMANDS else None)
    # known args first: a subcommand that is not here says so in one line
    # whatever flags follow it (they are its own, unknown to this parser)
    args, unknown = parser.parse_known_args(args_in)
    missing = getattr(args, "_missing", None)
    if missing:
        why = CHECKOUT_ONLY.get(missing, "not yet built")
        print(f"bloomcast {missing}: {why}", file=sys.stderr)
        return 2
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.print_help()
        return 0
    code: int = args._run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
