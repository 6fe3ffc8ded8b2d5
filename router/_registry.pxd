# The C declarations of router/registry.py compiled as router._registry
# (issue 42): the compiled pub/sub counts every forwarded PUBLISH here in C.
cimport cython


@cython.final
cdef class SubscriptionFilters:
    cdef public double fp_rate
    cdef public Py_ssize_t max_m
    cdef public object channel_filter, pattern_filter, channel_names
    cdef public long long filter_epoch, false_positives_received, check_every
    cdef public long long _window_received, _window_false

    cpdef list forward_received(self, bint false_positive)
