# The C declarations of bloom/counting.py compiled as bloom._counting (issue
# 48): a counting filter's add and remove in C, the counters a bytearray
# read and written in place, the k positions made in 64-bit C arithmetic.
cimport cython

cdef int SATURATED
cdef Py_ssize_t PENDING_FLIPS


@cython.final
cdef class CountingBloomFilter:
    cdef Py_ssize_t _m, _k
    cdef unsigned long long _mask
    cdef bytearray _counters
    cdef object _bloom, _bits, _fp, _flips
    cdef tuple _last_set, _last_cleared
    cdef list _pending

    @cython.locals(
        h1=cython.ulonglong, h2=cython.ulonglong, mask=cython.ulonglong, b=cython.ulonglong,
        x=cython.ulonglong, counters=bytearray, flipped=list, i=Py_ssize_t, c=cython.int,
    )
    cpdef tuple add(self, key)

    @cython.locals(mask=cython.ulonglong, counters=bytearray, flipped=list, j=Py_ssize_t,
                   c=cython.int)
    cpdef tuple add_positions(self, tuple positions)

    @cython.locals(pending=list)
    cdef tuple _added(self, list flipped)

    @cython.locals(
        h1=cython.ulonglong, h2=cython.ulonglong, mask=cython.ulonglong, b=cython.ulonglong,
        x=cython.ulonglong, x0=cython.ulonglong, k=Py_ssize_t, counters=bytearray,
        flipped=list, i=Py_ssize_t, c=cython.int,
    )
    cpdef tuple remove(self, key)

    @cython.locals(mask=cython.ulonglong, counters=bytearray, flipped=list, c=cython.int,
                   reduced=list)
    cpdef tuple remove_positions(self, tuple positions, object key=*)

    @cython.locals(pending=list)
    cdef tuple _removed(self, list flipped)
