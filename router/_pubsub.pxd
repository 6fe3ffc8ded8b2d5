# The C declarations of router/pubsub.py compiled as router._pubsub (issue 42).
cimport cython
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
# the compiled bus's forwarding, which the compiled PubSub calls in C (the
# object ClusterLink.forwarder() handed over: router/pubsub.py
# _compiled_forwarding); the one cimport across the node/bus seam
from cluster_bus._forwarding cimport Forwarding
from router._connection cimport Connection, add_messages
from router._context cimport CommandContext
from router._hotchannels cimport HotChannels
from router._registry cimport SubscriptionFilters
from router._resp cimport message as _message, smessage as _smessage
from router._stats cimport NodeStats

cdef Py_hash_t MASK


@cython.final
cdef class PubSub:
    cdef public str node_id, on_publish_loss
    cdef public SubscriptionFilters filters
    cdef public object metrics, link, _forward, tap, channels, shard_channels, patterns
    cdef public object _call_soon, _flush_all_soon
    cdef public Forwarding _forwarding
    cdef public NodeStats stats
    cdef public dict clients, forwards_lost_from
    cdef public CommandContext context
    cdef public HotChannels hot
    cdef public tuple tables, _shards
    cdef public long long publish_seq
    cdef public Py_ssize_t iteration_output, fanout_limit
    cdef public list _dirty
    cdef public bint forwards
    cdef dict _pattern_table

    @cython.locals(forwarding=Forwarding, receivers=Py_ssize_t, forwarded=Py_ssize_t, hot=HotChannels)
    cpdef Py_ssize_t publish(self, bytes channel, bytes message, bint shard) except -1
    cpdef object publish_command(self, Connection client, list args, bint shard)
    @cython.locals(table=dict, subs=object, patterned=bint, n=Py_ssize_t, m=Py_ssize_t,
                   frame=bytes, hot=HotChannels)
    cpdef Py_ssize_t deliver_to(self, bytes channel, bytes message, bint shard) except -1
    @cython.locals(n=Py_ssize_t)
    cpdef Py_ssize_t write_to_all(self, subs, bytes frame2) except -1
    cpdef schedule_flush(self, client)
    @cython.locals(dirty=list, client=Connection, context=CommandContext, threshold=Py_ssize_t,
                   start=Py_ssize_t)
    cpdef flush_all(self)
    cdef _latency_event(self, str name, Py_ssize_t start)
    @cython.locals(receivers=Py_ssize_t, hot=HotChannels)
    cpdef deliver_forwarded(self, str origin, origin_seq, bytes channel, bytes message, bint shard)
    @cython.locals(i=Py_ssize_t, frame=tuple, context=CommandContext, threshold=Py_ssize_t,
                   start=Py_ssize_t)
    cpdef deliver_forwarded_run(self, str origin, list msgs, Py_ssize_t count)


# router/pubsub.py's _compiled_forwarding and _monotonic (the pure-Python data plane's
# time.monotonic, which reads this clock), in C.
cdef inline Forwarding _compiled_forwarding(object forward):
    owner = getattr(forward, "__self__", None)
    return <Forwarding>owner if type(owner) is Forwarding else None


cdef inline double _monotonic() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9
