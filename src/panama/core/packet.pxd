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


cdef inline Packet _new_packet(long long job_id, long long tree_id, long long seq, long long generation,
                               long long count, long long flags, long long cap, long long ack, long long ecn,
                               object payload):
    """The one C constructor of the compiled modules (accelerator, transport, simulator):
    ``Packet(job_id, tree_id, seq, generation, count, flags, cap, ack, ecn, payload)`` with
    its fields set in C (no argument tuple, no integer objects)."""
    cdef Packet p = Packet.__new__(Packet)
    p.job_id = job_id
    p.tree_id = tree_id
    p.seq = seq
    p.generation = generation
    p.count = count
    p.flags = flags
    p.cwnd_cap = cap
    p.ack = ack
    p.ecn = ecn
    p.payload = payload
    return p
