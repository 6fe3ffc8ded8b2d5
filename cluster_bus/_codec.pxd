from libc.stdint cimport uint32_t

cpdef Py_ssize_t decode_publishes(bytes data, Py_ssize_t pos, expect, Py_ssize_t max_body,
                                  list out) except -1
cpdef bytes encode_publish(sender, seq, origin_seq, shard, channel, payload)
cdef bytes publish_frame(sender, uint32_t seq, origin_seq, bint shard, bytes channel,
                         bytes payload)
cpdef tuple decode_positions(body, Py_ssize_t at, Py_ssize_t n, unsigned long long m)
