cpdef bytes message(bytes channel, bytes payload)
cpdef bytes smessage(bytes channel, bytes payload)
cpdef bytes monitor_line(bytes head, list args)
