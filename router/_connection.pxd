# The C declarations of router/connection.py compiled as router._connection
# (issue 42): the request loop (router._dispatch) and the fan-out
# (router._pubsub) read its state in C and queue its output through the
# methods below (the per-request ones inline) and add_messages (issue 48).
cimport cython
from router._context cimport CommandContext
from router._parser cimport RequestParser

cdef object NORMAL, SUBSCRIBED, IN_MULTI, EXECUTING, BLOCKED, CLOSING, CLOSED


@cython.final
cdef class Connection:
    cdef public CommandContext ctx
    cdef public object transport, schedule_flush, extras, user, reply_mode, state
    cdef public object multi, blocked, ran
    cdef public Py_ssize_t id
    cdef public str addr, last_command
    cdef public bytes name
    cdef public bint quiet, closed, authenticated, postponed
    cdef public int resp
    cdef public dict channels, patterns, shard_channels
    cdef public RequestParser parser
    cdef public double last_interaction
    cdef public long long work_started
    # its output: written by router/connection.py alone (the tests read two)
    cdef list _out
    cdef Py_ssize_t _out_bytes, _held_bytes, _pending
    cdef bint _batching, _wire_empty
    cdef int _fd
    cdef object _is_closing
    cdef readonly list _held
    cdef readonly object _soft_limit_since

    cpdef _to(self, target)
    cpdef write(self, bytes data)
    cpdef end_batch(self, bint now)
    cpdef flush(self)
    cdef bint _send(self, bytes data) except -1
    cpdef block(self, future)
    cpdef bint finish_block(self) except -1
    cpdef close_after_reply(self)
    cdef bint _preauth_over_limit(self) except -1
    @cython.locals(now=double)
    cdef bint _over_limit(self, Py_ssize_t pending, bint normal) except -1

    # router/connection.py's begin_batch and add_reply, which are the pure-Python
    # data plane's (keep them alike): inline in the request loop, once per request
    cdef inline int begin_batch(self) except -1:
        self._batching = not self._out
        return 0

    cdef inline int add_reply(self, bytes data) except -1:
        cdef list out = self._out
        if not out and not self._batching:
            self.schedule_flush(self)
        out.append(data)
        self._out_bytes += len(data)
        return 0


@cython.locals(client=Connection, frame3=bytes)
cpdef Py_ssize_t add_messages(subs, bytes frame2) except -1


# router/connection.py's send_now (the pure-Python data plane's: nothing sent),
# in C: one send(2) that never waits and never raises SIGPIPE.
cdef extern from "<sys/socket.h>" nogil:
    Py_ssize_t send(int fd, const void* buf, size_t n, int flags)
    int MSG_DONTWAIT
    int MSG_NOSIGNAL


cdef inline Py_ssize_t send_now(int fd, bytes data) noexcept:
    return send(fd, <const char*>data, len(data), MSG_DONTWAIT | MSG_NOSIGNAL)
