"""SLOWLOG GET | LEN | RESET | HELP (Redis 7.0.15 ``src/slowlog.c``) and
LATENCY LATEST | HISTORY | RESET | DOCTOR | HISTOGRAM | HELP (``src/latency.c``): the
slow log and the latency monitor :mod:`router.hooks` keeps, in Redis's
reply shapes and errors; LATENCY HISTOGRAM from the commands' stats
(:meth:`router.stats.CommandStat.timed`); LATENCY GRAPH's sparkline
(:func:`router.latency.graph`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from router import latency, resp
from router.commands.base import Command, Reply, subcommand_table
from router.commands.server import lookup
from router.parser import string2ll

if TYPE_CHECKING:
    from router.context import CommandClient, CommandContext

_COUNT_ERROR = resp.error("ERR count should be greater than or equal to -1")
_LONG_MAX = 2**63 - 1


def help_reply(args: list[bytes], lines: tuple[str, ...]) -> bytes:
    """Redis's ``addReplyHelp``: the header with the command's name as sent
    (upper case), the lines, then HELP's own two."""
    name = resp.c_string(args[0]).upper()
    every = (f"{name} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", *lines,
             "HELP", "    Prints this help.")  # fmt: skip
    return resp.array_header(len(every)) + b"".join(resp.simple(line) for line in every)


def subcommand_syntax_error(args: list[bytes]) -> bytes:
    """Redis's ``addReplySubcommandSyntaxError``."""
    return resp.error(
        f"ERR unknown subcommand or wrong number of arguments for "
        f"'{resp.c_string(args[1][:128])}'. Try {resp.c_string(args[0]).upper()} HELP."
    )


def slowlog_get(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    if len(args) > 3:
        return subcommand_syntax_error(args)
    slowlog = ctx.hooks.slowlog
    slowlog.trim(ctx.settings.slowlog_max_len)
    count = 10
    if len(args) == 3:
        given = string2ll(args[2])
        if given is None or not -1 <= given <= _LONG_MAX:
            return _COUNT_ERROR
        count = len(slowlog.entries) if given == -1 else given
    entries = slowlog.latest(count)
    out = [resp.array_header(len(entries))]
    for entry_id, when, usec, argv, addr, name in entries:
        out.append(b"*6\r\n" + resp.integer(entry_id) + resp.integer(when) + resp.integer(usec))
        out.append(resp.array_header(len(argv)) + b"".join(resp.bulk(a) for a in argv))
        out.append(resp.bulk(addr) + resp.bulk(name))
    return b"".join(out)


def slowlog_len(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    slowlog = ctx.hooks.slowlog
    slowlog.trim(ctx.settings.slowlog_max_len)
    return resp.integer(len(slowlog.entries))


def slowlog_reset(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    ctx.hooks.slowlog.entries.clear()
    return resp.OK


_SLOWLOG_HELP = (
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
)


def slowlog_help(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return help_reply(args, _SLOWLOG_HELP)


def latency_latest(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    events = ctx.hooks.latency.events
    out = [resp.array_header(len(events))]
    for name, series in events.items():
        when, ms = series.latest()
        out.append(b"*4\r\n" + resp.bulk(name.encode()) + resp.integer(when) + resp.integer(ms))
        out.append(resp.integer(series.max))
    return b"".join(out)


def latency_history(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    series = ctx.hooks.latency.events.get(args[2].decode(errors="surrogateescape"))
    samples = series.history() if series is not None else []
    return resp.array_header(len(samples)) + b"".join(
        b"*2\r\n" + resp.integer(when) + resp.integer(ms) for when, ms in samples
    )


def latency_graph(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    name = args[2].decode(errors="surrogateescape")
    series = ctx.hooks.latency.events.get(name)
    if series is None:
        return resp.error(f"ERR No samples available for event '{resp.c_string(args[2])}'")
    text = latency.graph(name, series, int(time.time()))
    return resp.verbatim(text.encode(errors="surrogateescape"), client.resp)


def latency_reset(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    names = [a.decode(errors="surrogateescape") for a in args[2:]] or None
    return resp.integer(ctx.hooks.latency.reset(names))


def latency_doctor(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    settings = ctx.settings
    report = ctx.hooks.latency.report(
        settings.latency_monitor_threshold,
        settings.slowlog_log_slower_than,
        latency.huge_pages(),
    )
    return resp.verbatim(report.encode(), client.resp)


def _cdf(stat: Any, resp3: int) -> bytes:
    """Redis's ``fillCommandCDF``: calls, then each bucket that adds calls
    (its highest value in microseconds -> calls up to it)."""
    histogram: list[int] = stat.histogram
    pairs = []
    cumulative = 0
    for level, count in enumerate(histogram):
        if count:
            cumulative += count
            pairs.append(resp.integer(((1032 << level) - 1) // 1000) + resp.integer(cumulative))
    return (
        resp.map_header(2, resp3)
        + resp.bulk(b"calls")
        + resp.integer(cumulative)
        + resp.bulk(b"histogram_usec")
        + resp.map_header(len(pairs), resp3)
        + b"".join(pairs)
    )


def latency_histogram(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    """LATENCY HISTOGRAM [command ...] (Redis 7 ``latencyAllCommandsFillCDF``,
    ``latencySpecificCommandsFillCDF``): each command that ran (full name) ->
    its histogram; a container named: its subcommands that ran; unknown names
    left out. The node times a pipelined batch as a whole: each command of it
    counts at the batch's mean (:func:`router.stats.share_time`)."""
    stats = ctx.stats.commands
    if len(args) == 2:
        names = list(stats)
    else:
        names = []
        for arg in args[2:]:
            cmd = lookup(ctx, arg)
            if cmd is None:
                continue
            names.append(cmd.name)
            names += [sub.name for sub in (cmd.subcommands or {}).values()]
    found = [(n, stats.get(n)) for n in names]
    found = [(n, stat) for n, stat in found if stat is not None and stat.histogram is not None]
    return resp.map_header(len(found), client.resp) + b"".join(
        resp.bulk(n.encode()) + _cdf(stat, client.resp) for n, stat in found
    )


_LATENCY_HELP = (
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the "
    "specified command names.",
    "    If no commands are specified then all histograms are replied.",
)


def latency_help(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    return help_reply(args, _LATENCY_HELP)


def _container(ctx: CommandContext, client: CommandClient, args: list[bytes]) -> Reply:
    raise AssertionError("always a subcommand")


def _sub(container: str, name: str, arity: int, handler: object, summary: str) -> Command:
    return Command(f"{container}|{name}", arity, handler, summary, "server")  # type: ignore[arg-type]


COMMANDS = (
    Command(
        "slowlog",
        -2,
        _container,
        "A container for slow log commands.",
        "server",
        subcommands=subcommand_table(
            _sub("slowlog", "get", -2, slowlog_get, "Returns the slow log's entries."),
            _sub(
                "slowlog", "len", 2, slowlog_len, "Returns the number of entries in the slow log."
            ),
            _sub("slowlog", "reset", 2, slowlog_reset, "Clears all entries from the slow log."),
            _sub(
                "slowlog",
                "help",
                2,
                slowlog_help,
                "Show helpful text about the different subcommands",
            ),
        ),
    ),
    Command(
        "latency",
        -2,
        _container,
        "A container for latency diagnostics commands.",
        "server",
        subcommands=subcommand_table(
            _sub("latency", "latest", 2, latency_latest, "Returns the latest latency samples."),
            _sub("latency", "history", 3, latency_history, "Returns an event's samples."),
            _sub("latency", "graph", 3, latency_graph, "Returns a latency graph for an event."),
            _sub("latency", "reset", -2, latency_reset, "Resets the latency data of events."),
            _sub("latency", "doctor", 2, latency_doctor, "Returns a latency analysis report."),
            _sub("latency", "help", 2, latency_help, "Returns helpful text about the subcommands."),
            _sub("latency", "histogram", -2, latency_histogram, "Returns latency histograms."),
        ),
    ),
)
