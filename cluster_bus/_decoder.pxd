# The C declarations of cluster_bus/decoder.py compiled as cluster_bus._decoder
# (issue 42): its PUBLISH run is cluster_bus/_codec.pyx's, by C pointers.
cimport cython
from cluster_bus._codec cimport decode_positions, decode_publishes


@cython.final
cdef class FrameDecoder:
    cdef public bint _broken, _fast
    cdef public bytearray _buf
    cdef public Py_ssize_t _need, max_body
    cdef public object expect_sender

    @cython.locals(buf=bytearray, out=list, pos=Py_ssize_t)
    cpdef list feed(self, data, Py_ssize_t limit=*)
    @cython.locals(out=list, end=Py_ssize_t, pos=Py_ssize_t, fast=bint, start=Py_ssize_t,
                   stop=Py_ssize_t, length=Py_ssize_t)
    cdef tuple _parse(self, data, Py_ssize_t limit)
