cpdef Py_ssize_t decode_publishes(bytes data, Py_ssize_t pos, expect, Py_ssize_t max_body,
                                  list out) except -1
cpdef bytes encode_publish(sender, seq, origin_seq, shard, channel, payload)
