# Types of panama/sim/packet.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.core.packet cimport Packet

# Allocated per packet: packet.py puts the class on a free list and outside the cyclic
# garbage collector (@cython.freelist, @cython.no_gc there: decorators in a .pxd are not
# applied). A SimPacket is never part of a reference cycle: what it references, the core
# packet and the flow's bound callback, never references a SimPacket.
@cython.final
cdef class SimPacket:
    # Hot fields first (see Port in panama/sim/ports.pxd).
    cdef public long long arrive_ps
    cdef public long long kind
    cdef public long long dst
    cdef public long long size_bytes
    cdef public long long ecn
    cdef public object inner
    cdef public object deliver
    cdef public object flow_hash
    cdef public long long src
    cdef public long long seq
    cdef public long long ack
    cdef public long long ts_ps
    cdef public long long flags

# Private copies of the PANAMA packet's constants (C constants here).
cdef long long _KIND_PANAMA_C, _OVERHEAD_C, _FLOAT_BYTES_C

@cython.locals(p=SimPacket)
cpdef SimPacket panama_sim_packet(Packet inner, long long src=*)
