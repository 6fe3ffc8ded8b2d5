# The C declarations of cluster_bus/session.py compiled as cluster_bus._session
# (issue 42): the compiled forwarding numbers and checks frames in C.
cimport cython
# the compiled session numbers in C: the frame's C twin takes seq as a C integer
from cluster_bus._codec cimport publish_frame as encode_publish

cdef long long _MOD, _HALF


@cython.final
cdef class OutSession:
    cdef public object session_id, period, boot, _frames, _marks, _gone, _gone_to
    cdef public str peer
    cdef public long long max_bytes, max_ms, next_seq, announced, _first, _bytes, peer_lost
    cdef public bint _marked
    cdef object _keep

    @cython.locals(seq=cython.longlong, frame=bytes)
    cpdef bytes publish(self, sender, origin_seq, shard, bytes channel, bytes payload)
    cpdef _evict_bytes(self)


@cython.final
cdef class InSession:
    cdef public object session_id, _horizon
    cdef public long long expected, lost, session_lost, _asked, _asked_ms

    cpdef bint accept(self, long long seq) except -1
    @cython.locals(expected=cython.longlong, n=Py_ssize_t)
    cpdef Py_ssize_t in_order(self, msgs) except -1
