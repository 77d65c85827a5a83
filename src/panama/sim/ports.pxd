# Types of panama/sim/ports.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.sim.engine cimport Engine
from panama.sim.fifos cimport PacketPipe, ReleaseRings
from panama.sim.heap cimport Event, schedule_event
from panama.sim.nodes cimport Host, Node, Switch
from panama.sim.packet cimport SimPacket
from panama.sim.routing cimport ecmp_index

cdef long long _CE, _TRACKED, _NUM_KINDS
cdef long long _GENERIC, _HOST, _SWITCH, _HOST_CHECKED, _SWITCH_LOSSLESS

cdef class Port(Event):
    # Fields in the order of use on the hot path (the C struct keeps this order: fewer
    # cache lines per packet hop).
    # A hop reads the arriving port's first fields (to peer_index) and the output port's
    # to tx_bytes, then limit_ps (lossy) or release, owner and index (lossless). A Port
    # starts on a cache line (CPython's size class for it, with the collector's header, is
    # a multiple of 64: checked for the slice's 640 ports), so the arriving port's fields
    # end with its second line: peer_index before peer (13th round: -1.4 % on the slice).
    cdef public Engine _eng
    cdef public long long _mode
    cdef public bint armed
    cdef public bint paused
    cdef public long long busy_until
    cdef public long long ps_per_byte
    cdef public long long delay_ps
    cdef public long long k_ps
    cdef public PacketPipe pipe
    # peer as a Switch or a Host (else None), typed: the arrival handlers read their node
    # with no type test (a call per arrival, where self.peer is only a Node).
    cdef public Switch peer_switch
    cdef public long long peer_index
    cdef public Node peer
    cdef public object _trace
    cdef public long long tx_packets
    cdef public long long tx_bytes
    cdef public long long limit_ps
    cdef public ReleaseRings release
    cdef public Node owner
    cdef public long long index
    cdef public Host peer_host
    cdef public long long ecn_marks
    cdef public long long waiting_ps
    cdef public Port reverse
    cdef public str name
    cdef public str tier
    cdef public double rate_bps
    cdef public long long paused_since
    cdef public object waiting
    cdef public object net
    cdef public object tally
    cdef public long long drops
    cdef public long long pauses
    cdef public long long paused_ps

    @cython.locals(mode=cython.longlong)
    cpdef object fire(self)
    # Final: called directly (no vtable); inline: the C compiler does inline it in the
    # lossy arrival loops, which it did not for a plain final cdef (a call per arrival).
    @cython.final
    @cython.locals(t=cython.longlong)
    cdef inline bint _head_due(self, long long now) except -1
    # Final: a direct call (inlined by the C compiler in this module's sends).
    @cython.final
    @cython.locals(backlog=cython.longlong, end=cython.longlong, arrive=cython.longlong)
    cdef inline int _transmit(self, SimPacket pkt, long long now, long long bu, long long tx) except -1
    cpdef _trace_packet(self, long long now, str what, SimPacket pkt, long long backlog_ps)
    cpdef long long backlog_ps(self)
    cpdef long long queue_bytes(self)

    @cython.locals(now=cython.longlong, size=cython.longlong, tx=cython.longlong, bu=cython.longlong,
                   backlog=cython.longlong, end=cython.longlong, arrive=cython.longlong)
    cpdef bint send(self, SimPacket pkt, long long in_idx=*) except -1

    @cython.locals(now=cython.longlong, idx=cython.longlong, peer=object, pipe=PacketPipe)
    cpdef _deliver(self)

    @cython.locals(pkt=SimPacket, host=Host, pipe=PacketPipe)
    cpdef _deliver_host(self)

    @cython.locals(sw=Switch, pkt=SimPacket, pipe=PacketPipe, out=Port, now=cython.longlong,
                   mask=cython.longlong, kind=cython.longlong,
                   dst=cython.longlong, n=cython.Py_ssize_t, size=cython.longlong, tx=cython.longlong,
                   bu=cython.longlong, backlog=cython.longlong, end=cython.longlong, fib1=tuple)
    cpdef _deliver_switch(self)

    cpdef _deliver_host_checked(self)
    cpdef _deliver_switch_lossless(self)
    cpdef pause(self)
    cpdef resume(self)

cdef class HostPort(Port):
    @cython.locals(now=cython.longlong, bu=cython.longlong, size=cython.longlong, end=cython.longlong)
    cpdef bint send(self, SimPacket pkt, long long in_idx=*) except -1

@cython.locals(b=cython.Py_ssize_t, i=cython.Py_ssize_t, t=cython.longlong, p=Port)
cpdef long long unloaded_ps(list path, long long wire_bytes, long long segment_bytes, long long ack_bytes) except? -1
