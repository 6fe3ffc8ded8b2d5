# The C declarations of router/dispatch.py compiled as router._dispatch (issue 42).
cimport cython
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
    data=bytes, name=str, last_kind=int, elapsed=cython.longlong,
)
cpdef object process(Connection conn, bytes data=*, double now=*)
cdef bint _open(Connection conn, CommandContext ctx) except -1
cdef int NOT_IN_LINE, IN_LINE_PUBLISH, IN_LINE_SPUBLISH, IN_LINE_PING
cdef tuple IN_LINE_NAMES
@cython.locals(name=bytes, n=Py_ssize_t)
cdef int _in_line(Connection conn, list args) except -1
cpdef object resume(Connection conn)
cpdef object unblock(Connection conn)
