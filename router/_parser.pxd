# The compiled request parser's fields and C methods (router/_parser.pyx),
# for the compiled request loop (router/dispatch.py compiled as router._dispatch).
cdef class RequestParser:
    cdef bytearray _buf
    cdef Py_ssize_t _pos
    cdef Py_ssize_t _read_start
    cdef list _args
    cdef long long _pending
    cdef public long long max_bulk
    cdef public long long max_multibulk
    cdef public bint authenticated
    cdef public bint backlog
    cdef object _unread

    cpdef feed(self, data)
    cpdef requests(self)
    cdef int _feed(self, data) except -1
    cdef object _next(self)
    cdef int _read_multibulk_header(self) except -1
    cdef object _read_bulks(self)
    cdef object _read_inline(self)
