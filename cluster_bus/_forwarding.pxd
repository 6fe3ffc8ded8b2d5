# The C declarations of cluster_bus/forwarding.py compiled as
# cluster_bus._forwarding (issue 42).
cimport cython
from cluster_bus._link cimport Link
from cluster_bus._routing cimport PeerTable
from cluster_bus._session cimport InSession, OutSession


@cython.final
cdef class Forwarding:
    cdef public object node, mesh, stats, _sender, _period
    cdef object _deliver_run
    cdef public PeerTable routing
    cdef public long long replay_bytes, replay_ms
    cdef public dict out_sessions, in_sessions, _retained
    cdef dict _links_out, _links_in
    cdef public set _gaps
    cdef public long long _forwards_sent, _forwards_suppressed, _forwards_received

    cpdef OutSession _out(self, str peer)
    cpdef InSession _in(self, str peer)
    @cython.locals(peers=Py_ssize_t, sent=Py_ssize_t, nodes=tuple, out=dict, sessions=dict,
                   session=OutSession, frame=bytes)
    cpdef Py_ssize_t forward(self, bytes channel, bytes message, bint shard, origin_seq) except -1
    @cython.locals(session=InSession, n=Py_ssize_t, i=Py_ssize_t)
    cpdef publishes_received(self, link, list msgs)
