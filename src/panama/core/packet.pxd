# Types of panama/core/packet.py for the simulator's compiled fast path (setup.py); the
# .py is the source. Cython compiles the @dataclass into an extension type with the same
# fields, defaults, __init__, __repr__ and __eq__ (and __dataclass_fields__, so
# dataclasses.replace works); header fields are 64-bit integers.
cimport cython

@cython.final
cdef class Packet:
    cdef public long long job_id
    cdef public long long tree_id
    cdef public long long seq
    cdef public long long generation
    cdef public long long count
    cdef public long long flags
    cdef public long long cwnd_cap
    cdef public long long ack
    cdef public long long ecn
    cdef public object payload


@cython.locals(p=Packet)
cpdef Packet new_packet(long long job_id, long long tree_id, long long seq, long long generation, long long count,
                        long long flags, long long cwnd_cap, long long ack, long long ecn, object payload)
