# Types of panama/sim/ports.py for the compiled fast path (setup.py); the .py is the source.
cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc

from panama.sim.engine cimport Engine
from panama.sim.heap cimport Event
from panama.sim.nodes cimport Host, Node, Switch
from panama.sim.packet cimport SimPacket
from panama.sim.routing cimport ecmp_index

cdef long long _CE, _TRACKED
cdef bint _COMPILED
cdef long long _GENERIC, _HOST, _SWITCH, _HOST_CHECKED, _SWITCH_LOSSLESS

cdef class _Release

# Compiled release queue of a lossless switch port (Port.enable_release): a ring buffer of
# (end_ps, size, in_idx) entries in C, instead of the interpreted deque of tuples.
ctypedef struct _Rel:
    long long end
    long long size
    long long in_idx

ctypedef _Rel* _RelPtr

cdef class Port(Event):
    # Fields in the order of use on the hot path (the C struct keeps this order: fewer
    # cache lines per packet hop).
    cdef public Engine _eng
    cdef public long long _mode
    cdef public bint armed
    cdef public bint paused
    cdef public bint rel_armed
    cdef public long long busy_until
    cdef public long long ps_per_byte
    cdef public long long delay_ps
    cdef public long long k_ps
    cdef public long long limit_ps
    cdef public object pipe
    cdef public object _push
    cdef public object _pop
    cdef public Node peer
    cdef public long long peer_index
    cdef public Node owner
    cdef public object _trace
    cdef public object release
    cdef public _Release _release_ev
    cdef _Rel* _rq
    cdef Py_ssize_t _rq_head
    cdef Py_ssize_t _rq_n
    cdef Py_ssize_t _rq_cap
    cdef public long long tx_packets
    cdef public long long tx_bytes
    cdef public long long ecn_marks
    cdef public long long waiting_ps
    cdef public long long index
    cdef public Port reverse
    cdef public str name
    cdef public str tier
    cdef public double rate_bps
    cdef public long long paused_since
    cdef public object waiting
    cdef public object _rel_push
    cdef public object _rel_pop
    cdef public object net
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

    @cython.locals(now=cython.longlong, idx=cython.longlong, head=SimPacket, peer=object)
    cpdef _deliver(self)

    @cython.locals(pkt=SimPacket, head=SimPacket, t=cython.longlong, host=Host)
    cpdef _deliver_host(self)

    @cython.locals(sw=Switch, pkt=SimPacket, head=SimPacket, out=Port, now=cython.longlong, t=cython.longlong,
                   dst=cython.longlong, n=cython.Py_ssize_t, size=cython.longlong, tx=cython.longlong,
                   bu=cython.longlong, backlog=cython.longlong, end=cython.longlong, fib1=list)
    cpdef _deliver_switch(self)

    cpdef _deliver_host_checked(self)
    cpdef _deliver_switch_lossless(self)
    cpdef pause(self)
    cpdef resume(self)
    cpdef _release(self)

@cython.final
cdef class _Release(Event):
    cdef public Port port

cdef class HostPort(Port):
    @cython.locals(now=cython.longlong, bu=cython.longlong, size=cython.longlong, end=cython.longlong)
    cpdef bint send(self, SimPacket pkt, long long in_idx=*) except -1


cdef inline int _rq_grow(Port p) except -1:
    """Double the ring of ``p`` (entries kept in order, from index 0)."""
    cdef Py_ssize_t cap = p._rq_cap * 2 if p._rq_cap else 64
    cdef Py_ssize_t j, k
    cdef _Rel* q = <_Rel*>PyMem_Malloc(cap * sizeof(_Rel))
    if q == NULL:
        raise MemoryError()
    for j in range(p._rq_n):
        k = p._rq_head + j
        if k >= p._rq_cap:
            k -= p._rq_cap
        q[j] = p._rq[k]
    PyMem_Free(p._rq)
    p._rq = q
    p._rq_head = 0
    p._rq_cap = cap
    return 0


cdef inline int _rq_put(Port p, long long end, long long size, long long in_idx) except -1:
    """Append an entry to the release ring of ``p``."""
    cdef Py_ssize_t i
    if p._rq_n == p._rq_cap:
        _rq_grow(p)
    i = p._rq_head + p._rq_n
    if i >= p._rq_cap:
        i -= p._rq_cap
    p._rq[i].end = end
    p._rq[i].size = size
    p._rq[i].in_idx = in_idx
    p._rq_n += 1
    return 0


cdef inline long long _rq_pop_back(Port p) noexcept:
    """Remove the newest entry of the (non-empty) ring of ``p``; its ``in_idx``."""
    cdef Py_ssize_t i
    p._rq_n -= 1
    i = p._rq_head + p._rq_n
    if i >= p._rq_cap:
        i -= p._rq_cap
    return p._rq[i].in_idx


cdef inline void _rq_free(Port p) noexcept:
    PyMem_Free(p._rq)
    p._rq = NULL
