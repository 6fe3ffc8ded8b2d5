# The C declarations of router/client.py compiled as router._client (issue 42).
cimport cython
from router._connection cimport Connection
from router._dispatch cimport process, resume, unblock


@cython.final
cdef class Client:
    cdef public object _node, transport
    cdef public Connection conn
    cdef public bint _sliced
