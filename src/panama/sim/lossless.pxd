# Types of panama/sim/lossless.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.sim.heap cimport schedule_event
from panama.sim.nodes cimport Host, Switch
from panama.sim.packet cimport SimPacket
from panama.sim.routing cimport ecmp_index
from panama.sim.fifos cimport PacketPipe, ReleaseRings
from panama.sim.ports cimport Port

cdef long long _CE, _TRACKED, _NUM_KINDS, _HOST_CHECKED, _SWITCH_LOSSLESS

cdef class LosslessPort(Port):
    @cython.locals(mode=cython.longlong)
    cpdef object fire(self)

    @cython.locals(sw=Switch)
    cpdef bint send(self, SimPacket pkt, long long in_idx=*) except -1

    # Final: a direct call, inlined by the C compiler in _deliver_switch_lossless.
    @cython.final
    @cython.locals(size=cython.longlong, tx=cython.longlong, bu=cython.longlong, end=cython.longlong)
    cdef inline bint _send(self, SimPacket pkt, long long in_idx, Switch sw, long long now) except -1

    @cython.locals(pkt=SimPacket, host=Host, pipe=PacketPipe, t=cython.longlong, now=cython.longlong)
    cpdef _deliver_host_checked(self)

    @cython.locals(sw=Switch, pkt=SimPacket, out=LosslessPort, now=cython.longlong, idx=cython.longlong, pipe=PacketPipe,
                   kind=cython.longlong,
                   t=cython.longlong,
                   dst=cython.longlong, n=cython.Py_ssize_t, size=cython.longlong, used=cython.longlong,
                   ib=cython.longlong, free=cython.longlong, thr=cython.longlong,
                   ports=tuple, freed=cython.longlong)
    cpdef _deliver_switch_lossless(self)

    @cython.locals(now=cython.longlong, bu=cython.longlong, end=cython.longlong, arrive=cython.longlong, sw=Switch)
    cpdef _commit(self, SimPacket pkt, long long in_idx, long long tx)

    @cython.locals(now=cython.longlong, backlog=cython.longlong)
    cpdef bint _send_paused(self, SimPacket pkt, long long in_idx, long long tx) except -1
