"""RESP requests, sans-IO: request bytes in, argument lists out (replies: :mod:`router.resp`).

:class:`RequestParser` follows Redis 7.0.15's ``processMultibulkBuffer`` and
``processInlineBuffer`` (``src/networking.c``): a request starting with ``*``
is a multibulk of ``$``-bulk strings, anything else is an inline command split
like ``sdssplitargs`` (quotes, ``\\xHH`` escapes). Limits and the error texts
are Redis's; after a :class:`ProtocolError` the caller replies with the error
and closes that connection (Redis's ``CLIENT_CLOSE_AFTER_REPLY``). Framing
is Redis's too: a count or bulk line ends at its first CR (``strchr``, so a
NUL before it hides it and Redis waits) and the byte after the CR is skipped
unread, as are the two bytes after a bulk; a negative count is skipped, and
a count up to INT_MAX waits for its arguments.

Two paths, one result. The reference path is the pure-Python parser below
(``_next_slow``): one ``find`` per line, Redis's checks on every line.
Well-formed multibulk input, which is nearly all traffic, takes a fast path
through ``hiredis.Reader`` (C). hiredis parses replies, not requests: it
accepts ``+simple``, ``:int``, RESP3 types and nested arrays inside a request,
and knows no bulk-length limit, so the fast path accepts a request only after
checking, at the canonical offset of each element, that the request starts
with ``*`` and every element with ``$`` (hiredis reads lengths with Redis's
strict ``string2ll``, so the offsets follow by induction and the bytes are
exactly those the reference path would read). Anything else — an incomplete
request, a protocol error, a limit, a non-canonical element, before AUTH —
goes back to the reference path at the same byte, which answers as Redis
does. ``tests/fuzz/fuzz_resp.py`` checks the two paths agree.

The compiled twin of this class is ``router._parser.RequestParser``
(typed Cython, issue 29, docs/architecture.md §10): it does what the
reference path does, from the buffer by C pointers; the node picks one of the
two through :mod:`router.dataplane`, and the fuzzer compares it with the
reference path too.
"""

from __future__ import annotations

from collections.abc import Iterator

import hiredis

from router.inline import split_args

#: Redis PROTO_INLINE_MAX_SIZE: an inline request or a count line without
#: a newline longer than this is rejected
INLINE_MAX_SIZE = 64 * 1024
#: Redis: before AUTH, a multibulk may have at most 10 arguments and bulks at
#: most 16384 bytes (``authRequired`` checks in processMultibulkBuffer)
UNAUTH_MAX_MULTIBULK = 10
UNAUTH_MAX_BULK = 16384
#: bulks the reference path reads per call before it stops and says so
#: (``backlog``): the connection then lets other clients run before it reads
#: on, so a huge multibulk (1,048,576 elements) never holds the event loop
#: (Redis reads 16 KiB per event, PROTO_IOBUF_LEN, to the same end)
SLICE_BULKS = 2048


#: an aggregate header (``*``, ``%``, ``~``, ``>``, ``|``) counting 10000 or
#: more elements: hiredis allocates the whole list when it reads the header,
#: before any element arrives, so such bytes never reach the fast path (a
#: false alarm inside a payload only costs the slow path). Found with
#: translate + find, which is 4x faster than the equivalent regex
#: ``[*%~>|][0-9]{5}`` (C loops over the bytes, no backtracking engine).
_AGGREGATE_CLASSES = bytes(
    0x2A if c in b"*%~>|" else 0x30 if c in b"0123456789" else 0x20 for c in range(256)
)
_BIG_AGGREGATE = b"*00000"


def _has_big_aggregate(buf: bytes | bytearray, start: int) -> bool:
    """Whether ``buf[start:]`` holds a big aggregate header (or bytes like one)."""
    return buf[start:].translate(_AGGREGATE_CLASSES).find(_BIG_AGGREGATE) >= 0


def _hidden(buf: bytearray, pos: int, cr: int) -> bool:
    """Redis finds a line's end with ``strchr(..., '\\r')`` on a C string: a
    NUL byte before the CR hides it, and Redis waits for more bytes."""
    return buf.find(b"\0", pos, cr) >= 0


class ProtocolError(Exception):
    """A request Redis would reject; ``str(exc)`` is the reply text without ``-``."""


def string2ll(raw: bytes) -> int | None:
    """Redis ``string2ll``: optional ``-``, digits, no ``+``, no leading zeros,
    within a signed 64-bit integer; None where Redis fails."""
    if not raw or len(raw) > 20:
        return None
    if raw == b"0":
        return 0
    digits = raw[1:] if raw[:1] == b"-" else raw
    if not digits.isdigit() or digits[:1] == b"0" or not digits.isascii():
        return None
    n = int(raw)
    return n if -(1 << 63) <= n < (1 << 63) else None


class RequestParser:
    """Incremental request parser (sans-IO).

    ``feed(data)`` appends bytes; ``next_request()`` returns the next complete
    request as a list of bytes arguments, or None when more bytes are needed;
    it raises :class:`ProtocolError` with Redis's text on a malformed request.
    ``authenticated`` (set by the connection) lifts the pre-AUTH limits.
    ``fast=False`` disables the hiredis path (the reference, for tests).
    """

    __slots__ = (
        "_args",
        "_buf",
        "_fast",
        "_guard",
        "_pending",
        "_pos",
        "_read_start",
        "_reader",
        "_unread",
        "authenticated",
        "backlog",
        "max_bulk",
        "max_multibulk",
    )

    def __init__(self, max_bulk: int, max_multibulk: int, *, fast: bool = True) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._read_start = 0  # where the unparsed bytes began when the last read came
        self._args: list[bytes] = []
        self._pending = 0  # bulks still expected by the multibulk being read
        # hiredis mirror of self._buf[self._pos:] while the fast path is on, else None
        self._reader: hiredis.Reader | None = None
        self._fast = fast
        # the reference path owns self._buf[:self._guard]: after any hand-over
        # it takes everything buffered, so no byte is copied into hiredis or
        # scanned for big headers more than once per feed (linear work)
        self._guard = 0
        self.max_bulk = max_bulk
        self.max_multibulk = max_multibulk
        self.authenticated = True
        #: the last parse stopped after SLICE_BULKS bulks with more buffered:
        #: call ``requests()`` again (after letting other clients run)
        self.backlog = False
        #: a request taken and put back (``unread``): the next one taken
        self._unread: list[bytes] | None = None

    def feed(self, data: bytes) -> None:
        buf = self._buf
        pos = self._pos
        if pos and pos == len(buf):
            # all was parsed (the usual unpipelined read): the read replaces
            # the buffer in place, its allocation kept when the size is the
            # same (a clear() then += freed it and allocated it again: two
            # reallocs a read)
            buf[:] = data
            self._guard = self._pos = pos = before = 0
        else:
            if pos > 65536:
                del buf[:pos]
                self._guard = max(0, self._guard - pos)
                self._pos = pos = 0
            before = len(buf)
            buf += data
        self._read_start = pos
        reader = self._reader
        if reader is not None:
            # the new bytes, and the 5 before them in case a header straddles
            # (none before when all was parsed: the usual unpipelined read)
            if not (
                _has_big_aggregate(data, 0)  # data[0:] is data: no copy
                if before == pos
                else _has_big_aggregate(buf, max(pos, before - 5))
            ):
                reader.feed(data)
            else:
                self._reader = None
                self._guard = len(buf)

    def release(self) -> list[bytes]:
        """Hand over the arguments of a request still being read (a closed
        connection): the caller frees them in slices, not in one go."""
        args, self._args = self._args, []
        self._pending = 0
        return args

    @property
    def buffered(self) -> int:
        """Bytes received and not yet parsed."""
        return len(self._buf) - self._pos

    def query_buffer(self, running: bool) -> tuple[int, int, int]:
        """CLIENT LIST's ``qbuf``, ``qbuf-free`` and the buffer's allocation, as
        Redis counts them: while a request of it runs (``running``), the read
        it came in, parsed bytes included (Redis trims its query buffer only
        after the read's requests ran); otherwise the bytes not yet parsed."""
        buf = self._buf
        used = len(buf) - (self._read_start if running else self._pos)
        allocated = buf.__alloc__()
        return used, max(allocated - len(buf) - 1, 0), allocated

    @property
    def partial_bytes(self) -> int:
        """The bytes of the arguments read so far of a request still arriving
        (Redis's ``argv_len_sum`` between two reads)."""
        return sum(len(a) for a in self._args)

    def next_request(self) -> list[bytes] | None:
        """The next complete request, or None when more bytes are needed
        (parsing on through every slice: the connection uses ``requests()``)."""
        while True:
            for req in self.requests():
                return req
            if not self.backlog:
                return None

    def unread(self, req: list[bytes]) -> None:
        """Put back ``req``, the last request taken (the request loop took
        it and did not run it): the next one taken."""
        self._unread = req

    def requests(self) -> Iterator[list[bytes]]:
        """Every complete request buffered, in order.

        A generator, so a pipelined read is parsed with the parser's state
        loaded once; the caller may stop early (a blocked client): what it did
        not take stays buffered. Raises :class:`ProtocolError` after the
        requests that precede the bad one.
        """
        unread = self._unread
        if unread is not None:
            self._unread = None
            yield unread
        buf = self._buf
        max_bulk = self.max_bulk
        max_multibulk = self.max_multibulk
        while True:
            reader = self._reader
            pos = self._pos
            if reader is None:
                # start the fast path only at a request boundary, on a multibulk
                if (
                    self._pending
                    or not self._fast
                    or not self.authenticated
                    or pos >= len(buf)
                    or buf[pos] != 0x2A  # '*'
                    or pos < self._guard
                ):
                    req = self._next_slow()
                    if req is None:
                        return
                    yield req
                    continue
                if _has_big_aggregate(buf, pos):
                    self._guard = len(buf)
                    continue
                reader = self._reader = hiredis.Reader()
                reader.feed(buf, pos)  # type: ignore[arg-type]  # any buffer works
            try:
                req = reader.gets()
                if req is False:
                    if pos == len(buf):
                        return  # all parsed; the fast path stays on
                    req = None  # a partial request: its header checks are Redis's
                elif self.authenticated and buf[pos] == 0x2A and len(req) <= max_multibulk:
                    # hiredis read a request; accept it only if its encoding is
                    # the canonical one the reference parser reads (module doc)
                    n = len(req)
                    pos += 4 if n < 10 else 5 if n < 100 else 3 + len(str(n))
                    for arg in req:
                        size = len(arg)
                        if buf[pos] != 0x24 or size > max_bulk:  # '$'
                            req = None
                            break
                        pos += (
                            size + 6
                            if size < 10
                            else size + 7
                            if size < 100
                            else size + 5 + len(str(size))
                        )
                else:
                    req = None
            except (hiredis.ProtocolError, TypeError, IndexError):
                req = None
            if req is None:
                # malformed, limited, partial or before AUTH: the reference
                # path decides, from the first byte of this request, and reads
                # the rest of this buffer too
                self._reader = None
                self._guard = len(buf)
                req = self._next_slow()
                if req is None:
                    return
                yield req
                continue
            self._pos = pos
            if req:  # *0: Redis skips it
                yield req

    def _next_slow(self) -> list[bytes] | None:
        buf = self._buf
        while True:
            if self._pending:
                return self._read_bulks()
            if self._pos >= len(buf):
                return None
            if buf[self._pos] == 0x2A:  # '*'
                args = self._read_multibulk_header()
                if args is None:
                    return None
                if self._pending:
                    continue
                # *0 / *-1: Redis skips the line and reads on
                continue
            args = self._read_inline()
            if args is None:
                return None
            if args:
                return args

    def _read_multibulk_header(self) -> list[bytes] | None:
        buf = self._buf
        pos = self._pos
        cr = buf.find(b"\r", pos)
        count = string2ll(bytes(buf[pos + 1 : cr])) if cr >= 0 else None
        if cr < 0 or (count is None and _hidden(buf, pos, cr)):
            if len(buf) - pos > INLINE_MAX_SIZE:
                raise ProtocolError("ERR Protocol error: too big mbulk count string")
            return None
        if cr > len(buf) - 2:
            return None  # the byte after the CR has not come yet
        if count is None or count > self.max_multibulk:
            raise ProtocolError("ERR Protocol error: invalid multibulk length")
        if count > UNAUTH_MAX_MULTIBULK and not self.authenticated:
            raise ProtocolError("ERR Protocol error: unauthenticated multibulk length")
        self._pos = cr + 2  # Redis skips the CR and the byte after it, whatever it is
        self._args = []
        self._pending = max(count, 0)
        return self._args

    def _read_bulks(self) -> list[bytes] | None:
        buf = self._buf
        pos = self._pos
        args = self._args
        end = len(buf)
        budget = SLICE_BULKS
        self.backlog = False
        while self._pending:
            if not budget:
                self.backlog = True
                self._pos = pos
                return None
            budget -= 1
            cr = buf.find(b"\r", pos)
            raw = buf[pos + 1 : cr] if cr >= 0 else b""
            # '$' and plain digits without a leading zero: every sane client (any
            # other first byte may be the NUL that hides the line from strchr)
            plain = (
                raw.isdigit()  # (so the line has begun: buf[pos] is there)
                and buf[pos] == 0x24
                and (raw[0] != 0x30 or len(raw) == 1)
                and len(raw) < 19
            )
            if not plain and (cr < 0 or _hidden(buf, pos, cr)):
                if end - pos > INLINE_MAX_SIZE:
                    raise ProtocolError("ERR Protocol error: too big bulk count string")
                self._pos = pos
                return None
            size = int(raw) if plain else string2ll(bytes(raw))
            if cr > end - 2:  # the byte after the CR has not come yet
                self._pos = pos
                return None
            if buf[pos] != 0x24:  # '$'
                got = bytes(buf[pos : pos + 1]).decode(errors="surrogateescape")
                raise ProtocolError(f"ERR Protocol error: expected '$', got '{got}'")
            if size is None or size < 0 or size > self.max_bulk:
                raise ProtocolError("ERR Protocol error: invalid bulk length")
            if size > UNAUTH_MAX_BULK and not self.authenticated:
                raise ProtocolError("ERR Protocol error: unauthenticated bulk length")
            start = cr + 2
            if end < start + size + 2:
                self._pos = pos
                return None
            args.append(bytes(buf[start : start + size]))
            pos = start + size + 2
            self._pending -= 1
        self._pos = pos
        self._args = []
        return args

    def _read_inline(self) -> list[bytes] | None:
        buf = self._buf
        nl = buf.find(b"\n", self._pos)
        if nl >= 0 and buf.find(0, self._pos, nl) >= 0:
            nl = -1  # Redis finds the newline with strchr: a NUL before it hides it
        if nl < 0:
            if len(buf) - self._pos > INLINE_MAX_SIZE:
                raise ProtocolError("ERR Protocol error: too big inline request")
            return None
        line = bytes(buf[self._pos : nl])
        self._pos = nl + 1
        if line.endswith(b"\r"):
            line = line[:-1]
        args = split_args(line)
        if args is None:
            raise ProtocolError("ERR Protocol error: unbalanced quotes in request")
        return args
