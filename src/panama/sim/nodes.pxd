# Types of panama/sim/nodes.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.sim.engine cimport Engine, Timer
from panama.sim.fifos cimport DelayLine, ReleaseRings
from panama.sim.heap cimport Event, schedule_event
from panama.sim.packet cimport SimPacket
from panama.sim.routing cimport ecmp_index
from panama.sim.ports cimport Port

cdef long long _NEVER

cdef class Switch
cdef class _DelayLine

cdef class HookObject:
    cpdef object run(self, SimPacket pkt, object from_node)

cdef class Node:
    # The forwarding table first: a switch's arrival handler reads it with the object's
    # header (refcount, type), in the same cache line (see Switch).
    cdef public tuple fib1
    cdef public tuple fib
    cdef public long long host_count
    cdef public unsigned long long salt
    cdef public Engine _eng
    cdef public object tally
    cdef public list ports
    cdef public dict port_by_name
    cdef public object net
    cdef public str name
    cdef public str kind

    cpdef receive(self, SimPacket pkt, long long in_idx)

cdef class PacketSink:
    cpdef receive(self, SimPacket pkt)

cdef class Host(Node):
    cdef public long long index
    cdef public object handler
    cdef public PacketSink sink
    cdef public Port uplink

    cpdef receive_unbound(self, SimPacket pkt)

cdef class Switch(Node):
    # Hot fields first, in the order a lossless hop reads them (LosslessPort's arrival
    # handler: hooks, buffer admission, PFC check, release settling; the data pointer of
    # _ing is its second word), then the hook path's. Node's fields come first, so a hop
    # reads the first ~210 bytes (four cache lines at most) and nothing further.
    cdef public long long hook_mask
    cdef public long long next_release_ps
    cdef public long long _used
    cdef public long long buffer_bytes
    cdef public long long peak_used_bytes
    cdef public long long pool_bytes
    cdef public double pfc_alpha
    cdef public object pfc_static
    cdef public long long _npaused
    cdef public ReleaseRings releases
    cdef public long long[::1] _ing
    cdef public list pause_sent
    cdef public list nb_names
    cdef public tuple hooked
    cdef public long long hook_latency_ps
    cdef public bint lossless
    cdef public bint _dl_armed
    cdef public _DelayLine _dl_ev
    cdef public DelayLine _delayline
    cdef public list hooks
    cdef public object _ingress
    cdef public Timer _rel_timer
    cdef public long long resume_offset
    cdef public long long pauses_sent

    @cython.locals(obj=HookObject, out=list)
    cpdef _run_hook(self, SimPacket pkt, long long in_idx, object hook)
    @cython.locals(pbn=dict, ports=list)
    cpdef tuple hook_ports(self, tuple neighbours)
    # port and p typed: one type test per hook output, not one per call taking it (_admit, send).
    @cython.locals(port=Port, p=SimPacket, j=cython.Py_ssize_t)
    cpdef _emit(self, list out, long long in_idx)

    @cython.locals(t=cython.longlong)
    cpdef _delay(self, list out, long long in_idx)

    @cython.locals(now=cython.longlong, t=cython.longlong, dl=DelayLine, in_idx=cython.longlong)
    cpdef _drain_delayline(self)

    cpdef settle(self)
    cpdef note_release(self, long long end_ps)
    @cython.locals(freed=cython.longlong)
    cpdef _catch_up(self, long long now)
    cpdef _release_due(self)

    @cython.locals(size=cython.longlong, used=cython.longlong, ib=cython.longlong, now=cython.longlong,
                   free=cython.longlong, thr=cython.longlong, settle=cython.bint)
    cpdef bint _admit(self, SimPacket pkt, long long in_idx, Port port) except -1

    # free in C: alpha * free is then one C double product, as the float * int product of
    # the interpreted path (the int converted to the nearest double, exactly so below
    # 2**53), truncated as int() truncates (the cast to long long was already C): same
    # value, no Python int and float per admitted hook output (Switch._admit).
    @cython.locals(free=cython.longlong)
    cpdef long long pfc_threshold(self) except? -1
    cpdef _check_resume(self)
    cpdef _send_pfc(self, long long in_idx, bint pause)

@cython.final
cdef class _DelayLine(Event):
    cdef public Switch switch
