# The C declarations of cluster_bus/link.py compiled as cluster_bus._link (issue 42).
cimport cython
from cluster_bus._decoder cimport FrameDecoder


@cython.final
cdef class Link:
    cdef public object owner, tls, _tls, handshake, dial_key, transport, peer_id, decoder
    cdef public object sealer, _pending, _linger, _loop, _flush_soon, _publish_sink
    cdef public bint _tls_wait, outbound, closed_by_peer, authenticated, closed, _forwards
    cdef public str peer_host, local_host
    cdef public bytes first_bytes
    cdef public long long created_ms, last_rx_ms, _pending_bytes
    cdef public double _last_forward_write, _forward_linger
    cdef public long long _sendbuf_limit

    cpdef write(self, bytes data, bint forward=*)
    cpdef flush(self)
    cdef _dispatch(self, list msgs)
    cdef _publishes(self, list run)
