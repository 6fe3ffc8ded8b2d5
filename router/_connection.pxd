# The C declarations of router/connection.py compiled as router._connection
# (issue 42): the request loop (router._dispatch) and the fan-out
# (router._pubsub) read and write these fields in C.
cimport cython
from router._context cimport CommandContext
from router._parser cimport RequestParser

cdef object NORMAL, SUBSCRIBED, IN_MULTI, EXECUTING, BLOCKED, CLOSING, CLOSED


@cython.final
cdef class Connection:
    cdef public CommandContext ctx
    cdef public object wire, schedule_flush, extras, user, reply_mode, state
    cdef public object multi, blocked, ran, _soft_limit_since
    cdef public Py_ssize_t id
    cdef public str addr, last_command
    cdef public bytes name
    cdef public bint quiet, closed, authenticated, postponed
    cdef public int resp
    cdef public dict channels, patterns, shard_channels
    cdef public RequestParser parser
    cdef public double last_interaction
    cdef public list _held, _out
    cdef public Py_ssize_t _out_bytes, _held_bytes
    cdef public long long work_started

    cpdef _to(self, target)
    cpdef write(self, bytes data)
    cpdef flush(self)
    cpdef block(self, future)
    cpdef bint finish_block(self) except -1
    cpdef close_after_reply(self)
