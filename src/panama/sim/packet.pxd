# Types of panama/sim/packet.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.core.packet cimport Packet

# Allocated per packet: packet.py puts the class on a free list and outside the cyclic
# garbage collector (@cython.freelist, @cython.no_gc there: decorators in a .pxd are not
# applied). A SimPacket is never part of a reference cycle: what it references, the core
# packet and the flow's bound callback, never references a SimPacket.
@cython.final
cdef class SimPacket:
    # Fields in the order of use on the hot path: a packet's hops read the first eight
    # (with the refcount), the transports the rest. Allocated by pymalloc, the object
    # starts 48 bytes into a 64-byte line (its pool header is 48 bytes and every block 128),
    # so bytes 16-79, the first eight fields, share one line and a hop touches two lines,
    # not three (``flags`` was the last field: its own line, a miss in every _transmit).
    cdef public long long arrive_ps
    cdef public long long kind
    cdef public long long dst
    cdef public long long size_bytes
    cdef public long long ecn
    cdef public long long flags
    # A splitmix64 output (panama.sim.routing.flow_hash): ECMP reads it without a Python int.
    cdef public unsigned long long flow_hash
    cdef public object deliver
    cdef public object inner
    cdef public long long src
    cdef public long long seq
    cdef public long long ack
    cdef public long long ts_ps

# Private copies of the PANAMA packet's constants (C constants here).
cdef long long _KIND_PANAMA_C, _OVERHEAD_C, _FLOAT_BYTES_C

@cython.locals(p=SimPacket)
cpdef SimPacket panama_sim_packet(Packet inner, long long src=*)
