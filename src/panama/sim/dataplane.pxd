# Types of panama/sim/dataplane.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.sim.engine cimport Engine, Event
from panama.sim.packet cimport SimPacket

cdef long long _CE
cdef long long _GENERIC, _HOST, _SWITCH, _HOST_CHECKED, _SWITCH_LOSSLESS

cdef class Node
cdef class Switch
cdef class _Release

cdef class Port(Event):
    cdef public Node owner
    cdef public Node peer
    cdef public long long index
    cdef public long long peer_index
    cdef public Port reverse
    cdef public str name
    cdef public str tier
    cdef public double rate_bps
    cdef public long long ps_per_byte
    cdef public long long delay_ps
    cdef public long long busy_until
    cdef public object pipe
    cdef public bint armed
    cdef public bint paused
    cdef public long long paused_since
    cdef public object waiting
    cdef public long long waiting_ps
    cdef public long long limit_ps
    cdef public long long k_ps
    cdef public object release
    cdef public bint rel_armed
    cdef public Engine _eng
    cdef public object _trace
    cdef public long long _mode
    cdef public _Release _release_ev
    cdef public object net
    cdef public long long tx_packets
    cdef public long long tx_bytes
    cdef public long long ecn_marks
    cdef public long long drops
    cdef public long long pauses
    cdef public long long paused_ps

    @cython.locals(mode=cython.longlong)
    cpdef object fire(self)
    cpdef long long backlog_ps(self)
    cpdef long long queue_bytes(self)

    @cython.locals(now=cython.longlong, size=cython.longlong, tx=cython.longlong, bu=cython.longlong,
                   backlog=cython.longlong, end=cython.longlong, arrive=cython.longlong)
    cpdef bint send(self, SimPacket pkt, long long in_idx=*) except -1

    @cython.locals(now=cython.longlong, idx=cython.longlong, head=SimPacket)
    cpdef _deliver(self)

    @cython.locals(pkt=SimPacket, t=cython.longlong, host=Host)
    cpdef _deliver_host(self)

    @cython.locals(sw=Switch, pkt=SimPacket, out=Port, now=cython.longlong, t=cython.longlong,
                   dst=cython.longlong, n=cython.Py_ssize_t, size=cython.longlong, tx=cython.longlong,
                   bu=cython.longlong, backlog=cython.longlong, end=cython.longlong, fib1=list)
    cpdef _deliver_switch(self)

    cpdef pause(self)
    cpdef resume(self)
    cpdef _release(self)

cdef class _Release(Event):
    cdef public Port port

cdef class HostPort(Port):
    pass

cdef class LosslessPort(Port):
    @cython.locals(pkt=SimPacket, host=Host)
    cpdef _deliver_host_checked(self)

    @cython.locals(sw=Switch, pkt=SimPacket, out=Port, now=cython.longlong, idx=cython.longlong,
                   dst=cython.longlong, n=cython.Py_ssize_t, size=cython.longlong, used=cython.longlong,
                   ib=cython.longlong, free=cython.longlong, fib1=list, ingress=list)
    cpdef _deliver_switch_lossless(self)

    @cython.locals(now=cython.longlong, bu=cython.longlong, end=cython.longlong, arrive=cython.longlong)
    cpdef _commit(self, SimPacket pkt, long long in_idx, long long tx)

    @cython.locals(now=cython.longlong, backlog=cython.longlong)
    cpdef bint _send_paused(self, SimPacket pkt, long long in_idx, long long tx) except -1

    @cython.locals(now=cython.longlong, sw=Switch, freed=cython.longlong, ingress=list)
    cpdef _release(self)

cdef class Node:
    cdef public object net
    cdef public Engine _eng
    cdef public str name
    cdef public str kind
    cdef public list ports
    cdef public dict port_by_name
    cdef public list fib
    cdef public list fib1
    cdef public object salt

    cpdef receive(self, SimPacket pkt, long long in_idx)

cdef class Host(Node):
    cdef public long long index
    cdef public object handler
    cdef public Port uplink

    cpdef receive_unbound(self, SimPacket pkt)

cdef class Switch(Node):
    cdef public list hooks
    cdef public object hooked
    cdef public long long hook_latency_ps
    cdef public bint lossless
    cdef public long long buffer_bytes
    cdef public long long pool_bytes
    cdef public list ingress_bytes
    cdef public long long used_bytes
    cdef public list pause_sent
    cdef public double pfc_alpha
    cdef public object pfc_static
    cdef public long long resume_offset
    cdef public long long pauses_sent
    cdef public object _delayline
    cdef public bint _dl_armed
    cdef public object _dl_cb
    cdef public long long peak_used_bytes

    cpdef _run_hook(self, SimPacket pkt, long long in_idx, object hook)
    cpdef _emit(self, object out, long long in_idx)

    @cython.locals(size=cython.longlong, used=cython.longlong, ib=cython.longlong)
    cpdef bint _admit(self, SimPacket pkt, long long in_idx, Port port) except -1

    cpdef _check_resume(self)
    cpdef _send_pfc(self, long long in_idx, bint pause)
