# Types of panama/sim/packet.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.core.packet cimport Packet

# Allocated per packet: packet.py puts the class on a free list and outside the cyclic
# garbage collector (@cython.freelist, @cython.no_gc there: decorators in a .pxd are not
# applied). A SimPacket is never part of a reference cycle: what it references, the core
# packet and the flow's bound callback, never references a SimPacket.
@cython.final
cdef class SimPacket:
    # Fields in the order of use on the hot path. Compiled, every SimPacket starts on a
    # 64-byte line (panama.sim.placement; CPython's allocator started it 48 bytes into
    # one), so its header and the next seven fields, which every hop reads (kind, ecn and
    # flags in C ints: small codes and bits), share one line: a hop touches one line of
    # its packet, not two. ``deliver`` (read at the destination) opens the second line.
    cdef public long long arrive_ps
    # A splitmix64 output (panama.sim.routing.flow_hash): ECMP reads it without a Python int.
    cdef public unsigned long long flow_hash
    cdef public long long dst
    cdef public long long size_bytes
    cdef public int kind
    cdef public int ecn
    cdef public int flags
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
