# The C declarations of router/dispatch.py compiled as router._dispatch (issue 42).
cimport cython
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from router._connection cimport Connection
from router._context cimport CommandContext
from router._pubsub cimport PubSub
from router._stats cimport CommandStat, NodeStats, share_time

cdef object BLOCKED, CLOSED, CLOSING, DONE, NORMAL, SLICE
cdef bytes PONG


@cython.locals(
    ctx=CommandContext, stats=NodeStats, pubsub=PubSub, slice_ns=cython.longlong,
    start=cython.longlong,
    started=cython.longlong, sliced=bint, done=Py_ssize_t, runs=list,
    last=CommandStat, ran=CommandStat, n=Py_ssize_t, fast=bint, args=list, kind=int,
    data=bytes, name=str, last_kind=int, elapsed=cython.longlong, held=list,
)
cpdef object process(Connection conn, bytes data=*, double now=*)
cdef object _block(
    Connection conn, list held, list runs, CommandStat last, Py_ssize_t n, long long start
)
cdef bint _confirms(list args) except -1
cdef frozenset _CONFIRMING
cdef bint _open(Connection conn, CommandContext ctx) except -1
cdef int NOT_IN_LINE, IN_LINE_PUBLISH, IN_LINE_SPUBLISH, IN_LINE_PING
cdef tuple IN_LINE_NAMES
@cython.locals(name=bytes, n=Py_ssize_t)
cdef int _in_line(Connection conn, list args) except -1
cpdef object resume(Connection conn)
cpdef object unblock(Connection conn)


# The pure-Python data plane's time.perf_counter_ns and reply.startswith(b"-")
# (router/dispatch.py defines them for it), in C: the clock the loop reads
# for its budget and commandstats (Python's perf_counter_ns reads this
# clock too, CLOCK_MONOTONIC, through two int objects and a call), and the
# test of a reply, once per request.
cdef inline long long perf_counter_ns() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec * 1000000000LL + ts.tv_nsec


cdef inline bint _is_error(bytes reply) noexcept:
    return len(reply) != 0 and (<const char*>reply)[0] == b'-'
