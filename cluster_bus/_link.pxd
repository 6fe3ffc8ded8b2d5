# The C declarations of cluster_bus/link.py compiled as cluster_bus._link (issue 42).
cimport cython
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec
from cluster_bus._decoder cimport FrameDecoder


@cython.final
cdef class Link:
    cdef public object owner, tls, _tls, handshake, dial_key, transport, peer_id, decoder
    cdef public object sealer, _pending, _linger, _loop, _flush_soon, _publish_sink
    cdef object _call_soon, _is_closing
    cdef public bint _tls_wait, outbound, closed_by_peer, authenticated, closed, _forwards
    cdef public str peer_host, local_host
    cdef public bytes first_bytes
    cdef public long long created_ms, last_rx_ms, _pending_bytes
    cdef public double _last_forward_write, _forward_linger
    cdef public long long _sendbuf_limit
    cdef public int _fd
    cdef public bint _wire_empty

    cpdef write(self, bytes data, bint forward=*)
    cpdef flush(self)
    cdef bint _send(self, object transport, bytes data) except -1
    cdef _dispatch(self, list msgs)
    cdef _publishes(self, list run)


# cluster_bus/link.py's send_now (the pure-Python data plane's: nothing sent),
# in C: one send(2) that never waits and never raises SIGPIPE (router/_connection.pxd
# has the same for a client; the bus does not cimport the router).
cdef extern from "<sys/socket.h>" nogil:
    Py_ssize_t send(int fd, const void* buf, size_t n, int flags)
    int MSG_DONTWAIT
    int MSG_NOSIGNAL


cdef inline Py_ssize_t send_now(int fd, bytes data) noexcept:
    return send(fd, <const char*>data, len(data), MSG_DONTWAIT | MSG_NOSIGNAL)


# cluster_bus/link.py's _wall_ms (the pure-Python data plane's int(time.time() * 1000)),
# in C: the wall clock a read stamps on its link.
cdef inline long long _wall_ms() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return ts.tv_sec * 1000LL + ts.tv_nsec // 1000000
