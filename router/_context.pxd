# The C declarations of router/context.py compiled as router._context (issue 42).
cimport cython
from router._stats cimport NodeStats


@cython.final
cdef class CommandContext:
    cdef public str node_id, data_plane
    cdef public object config, settings, pubsub, subscriptions, acl, pause
    cdef public object link, view, on_settings, commands, port
    cdef public NodeStats stats
    cdef public dict clients
    cdef public Py_ssize_t queue_limit
    cdef public long long slice_ns, slow_ns, latency_ms
    cdef public object hooks
    cdef public bint watch, normal_limited, paused
