# cython: language_level=3
# Compiled declarations of panama/sim/qahead.py (Cython pure mode): the walk over a port's
# queue reads the packets' and the port's fields in C.
cimport cython

from panama.sim.fifos cimport PacketPipe
from panama.sim.packet cimport SimPacket
from panama.sim.ports cimport Port

cdef long long _OWN, _SHORT, _BULK, _RING, _PANAMA, _OTHER, _NK
cdef long long _KIND_ACK, _KIND_DATA, _KIND_PANAMA

@cython.final
cdef class QueueAhead:
    cdef public object background
    cdef public long long short_bytes
    cdef public list directions
    cdef public dict rows
    cdef public dict hops
    cdef dict _dir
    cdef dict _by_callback

    @cython.locals(k=cython.longlong, entry=tuple)
    cdef int _kind(self, SimPacket q, object own) except -1
    @cython.locals(f=object, size=object)
    cdef tuple _classify(self, object d)

    @cython.locals(
        row=list, base=cython.longlong, ppb=cython.longlong, delay=cython.longlong,
        n=cython.longlong, i=cython.longlong, q=SimPacket, pipe=PacketPipe, end=cython.longlong, tx=cython.longlong,
    )
    cpdef add(self, Port port, SimPacket pkt, long long now)
