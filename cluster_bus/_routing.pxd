# The C declarations of cluster_bus/routing.py compiled as cluster_bus._routing
# (issue 42). The peer bitmasks are Python ints (a cluster has more peers
# than a C integer has bits).
cimport cython


@cython.final
cdef class PeerTable:
    cdef public dict _slot, _filters, _chan_index, _pat_index, _by_length
    cdef public dict _cache, _shard_cache, _nodes_cache
    cdef public list _node
    cdef public Py_ssize_t peer_count
    cdef public object _chan_open, _pat_open, _match_all, _k_max

    @cython.locals(cache=dict)
    cpdef route(self, bytes channel, bint shard=*)
    cpdef tuple nodes_of(self, mask)
