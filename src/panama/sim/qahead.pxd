# cython: language_level=3
# Compiled declarations of panama/sim/qahead.py (Cython pure mode): the walk over a port's
# queue reads the packets' and the port's fields in C and adds to C int64 accumulators.
cimport cython

from panama.sim.fifos cimport PacketPipe
from panama.sim.packet cimport SimPacket
from panama.sim.ports cimport Port

cdef long long _OWN, _SHORT, _BULK, _RING, _PANAMA, _OTHER, _NK
cdef long long _KIND_ACK, _KIND_DATA, _KIND_PANAMA

@cython.final
cdef class _Track:
    cdef long long[::1] row
    cdef public long long hops

@cython.final
cdef class _Source:
    cdef object flow
    cdef long long kind
    cdef _Track track

@cython.final
cdef class QueueAhead:
    cdef public object background
    cdef public long long short_bytes
    cdef public list directions
    cdef dict _base
    cdef dict _tracks
    cdef dict _by_callback

    @cython.locals(s=_Source)
    cdef _Source _source(self, object d)
    @cython.locals(f=object, size=object)
    cdef _Source _classify(self, object d)
    @cython.locals(t=_Track)
    cdef _Track _track(self, _Source src)
    @cython.locals(k=cython.longlong)
    cdef int _kind(self, SimPacket q, object own) except -1
    @cython.locals(s=_Source)
    cdef int _flow_kind(self, object d, object own) except -1

    @cython.locals(
        src=_Source, s=_Source, t=_Track, row=cython.longlong[::1], base=cython.longlong, ppb=cython.longlong,
        delay=cython.longlong, n=cython.longlong, i=cython.longlong, q=SimPacket, pipe=PacketPipe,
        end=cython.longlong, tx=cython.longlong, k=cython.longlong, a=object, ka=cython.longlong, b=object, c=object,
        kb=cython.longlong, kc=cython.longlong,
    )
    cpdef add(self, Port port, SimPacket pkt, long long now)
