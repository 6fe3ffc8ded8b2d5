# The C declarations of router/hotchannels.py compiled as router._hotchannels (issue 51).
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport memcmp

cdef double _A0, _A1, _A2


cdef extern from *:
    """
    /* router/hotchannels.py's _hash: the bytes object's cached hash (the
       PUBLISH's dict lookups computed it), PyObject_Hash when there is none */
    #if !defined(Py_LIMITED_API) && !defined(PYPY_VERSION) && PY_VERSION_HEX < 0x030E0000
    #if defined(__GNUC__)
    #pragma GCC diagnostic push
    #pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    #endif
    static CYTHON_INLINE Py_hash_t bloomcast_bytes_hash(PyObject *o) {
        Py_hash_t h = ((PyBytesObject *)o)->ob_shash;
        return h != -1 ? h : PyObject_Hash(o);
    }
    #if defined(__GNUC__)
    #pragma GCC diagnostic pop
    #endif
    #else
    #define bloomcast_bytes_hash(o) PyObject_Hash(o)
    #endif
    """
    Py_hash_t bloomcast_bytes_hash(object o) except -1


cdef inline Py_hash_t _hash(bytes name) except -1:
    return bloomcast_bytes_hash(name)


cdef inline bint _same(bytes a, bytes b) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(a)
    return n == PyBytes_GET_SIZE(b) and memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), n) == 0


@cython.final
cdef class Entry:
    cdef public bytes name
    cdef public Py_ssize_t pos
    cdef public Py_hash_t h
    cdef public double since, key, err
    cdef public double p0, p1, p2, b0, b1, b2, d0, d1, d2, f0, f1, f2, r0, r1, r2
    cdef public long long cp, cb, cd, cf, cr
    cdef public bint touched
    cpdef reset(self, bytes name, double since, double err)
    cpdef fold(self, double g0, double g1, double g2)
    cpdef scale(self, double s0, double s1, double s2)


@cython.final
cdef class Summary:
    cdef public Py_ssize_t k
    cdef public list heap, slots, touched
    cdef public Py_ssize_t mask, size
    cdef public double landmark, now, g0, g1, g2, n1, t0, t1, t2
    cdef public long long cn, cp, replacements
    cpdef tick(self, double now)
    @cython.locals(g0=double, g1=double, g2=double, e=Entry)
    cpdef fold(self)
    @cython.locals(slots=list, mask=Py_ssize_t, i=Py_ssize_t, s=object, e=Entry)
    cpdef Entry find(self, bytes name, Py_hash_t h)
    @cython.locals(slots=list, mask=Py_ssize_t, i=Py_ssize_t)
    cdef void _insert(self, Entry e) noexcept
    @cython.locals(slots=list, mask=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, home=Py_ssize_t,
                   s=object, stays=bint)
    cdef void _remove(self, Entry e) noexcept
    @cython.locals(e=Entry, h=Py_hash_t, slots=list, mask=Py_ssize_t, i=Py_ssize_t, s=object)
    cpdef int add(self, bytes name, Py_ssize_t nbytes, Py_ssize_t deliveries,
                  Py_ssize_t forwards) except -1
    @cython.locals(e=Entry, h=Py_hash_t, slots=list, mask=Py_ssize_t, i=Py_ssize_t, s=object)
    cpdef int add_received(self, bytes name, Py_ssize_t deliveries) except -1
    @cython.locals(heap=list, n=Py_ssize_t, e=Entry)
    cdef Entry _admit(self, bytes name, Py_hash_t h)
    @cython.locals(heap=list, e=Entry, p=Entry, key=double, parent=Py_ssize_t)
    cdef void _sift_up(self, Py_ssize_t pos) noexcept
    @cython.locals(heap=list, n=Py_ssize_t, e=Entry, c=Entry, r=Entry, key=double,
                   child=Py_ssize_t, start=Py_ssize_t)
    cdef void _sift_down(self, Py_ssize_t pos) noexcept


@cython.final
cdef class HotChannels:
    cdef public Py_ssize_t k
    cdef public Summary channels, patterns, shards
    cpdef tick(self, double now)
    cpdef int published(self, bytes name, Py_ssize_t nbytes, Py_ssize_t deliveries,
                        Py_ssize_t forwards, bint shard) except -1
    cpdef int received(self, bytes name, Py_ssize_t deliveries, bint shard) except -1
    cpdef int matched(self, bytes pattern, Py_ssize_t nbytes, Py_ssize_t deliveries) except -1
