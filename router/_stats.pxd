# The C declarations of router/stats.py compiled as router._stats (issue 42).
cimport cython


@cython.final
cdef class CommandStat:
    cdef public long long calls, nanoseconds, rejected_calls, failed_calls
    cdef public list histogram
    @cython.locals(value=cython.longlong, level=Py_ssize_t, histogram=list)
    cpdef timed(self, long long ns, long long count)


@cython.final
cdef class NodeStats:
    cdef public long long connections_received, commands_processed
    cdef public long long output_buffer_limit_disconnections, rejected_connections
    cdef public long long publish_received, messages_delivered, forwards_lost
    cdef public long long net_input_bytes, net_output_bytes, loss_disconnections
    cdef public long long protected_mode_denied, tls_handshake_failures, parse_slices
    cdef public long long loop_exceptions
    cdef public dict errors
    cdef public object commands
    cpdef error_replied(self, bytes reply)


cpdef share_time(list runs, long long elapsed)
cdef long long HISTOGRAM_FIRST
cdef Py_ssize_t HISTOGRAM_LEVELS


# router/stats.py's _bit_length (the pure-Python data plane's int.bit_length), in C:
# CommandStat.timed runs once per batch of the request loop.
cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


cdef inline int _bit_length(long long value) noexcept:
    return 0 if value <= 0 else 64 - __builtin_clzll(<unsigned long long>value)
