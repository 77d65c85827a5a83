# Types of panama/sim/nodes.py for the compiled fast path (setup.py); the .py is the source.
cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject

from panama.sim.engine cimport Engine
from panama.sim.heap cimport Event
from panama.sim.packet cimport SimPacket
from panama.sim.routing cimport ecmp_index
from panama.sim.ports cimport Port

cdef class Switch
cdef class _DelayLine

# Compiled hook delay line of a switch (Switch._delay): a ring buffer of (due time,
# ingress, the hook's list) entries in C, instead of the interpreted deque of tuples.
ctypedef struct _Held:
    long long t
    long long in_idx
    PyObject* out

cdef bint _COMPILED

cdef class HookObject:
    cpdef object run(self, SimPacket pkt, object from_node)

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
    # Hot fields first (see Port in ports.pxd).
    cdef public list hooked
    cdef public list nb_names
    cdef public bint lossless
    cdef public bint _dl_armed
    cdef public long long used_bytes
    cdef public long long buffer_bytes
    cdef public long long peak_used_bytes
    cdef public long long pool_bytes
    cdef public double pfc_alpha
    cdef public object pfc_static
    cdef public list pause_sent
    cdef public long long _npaused
    cdef public long long hook_latency_ps
    cdef public _DelayLine _dl_ev
    cdef _Held* _dq
    cdef Py_ssize_t _dq_head
    cdef Py_ssize_t _dq_n
    cdef Py_ssize_t _dq_cap
    cdef public long long[::1] _ing
    cdef public list hooks
    cdef public object ingress_bytes
    cdef public long long resume_offset
    cdef public long long pauses_sent
    cdef public object _delayline

    @cython.locals(obj=HookObject)
    cpdef _run_hook(self, SimPacket pkt, long long in_idx, object hook)
    @cython.locals(port=Port, pbn=dict)
    cpdef _emit(self, object out, long long in_idx)

    @cython.locals(t=cython.longlong)
    cpdef _delay(self, list out, long long in_idx)

    @cython.locals(now=cython.longlong, t=cython.longlong, dl=object, in_idx=cython.longlong, out=list)
    cpdef _drain_delayline(self)

    @cython.locals(size=cython.longlong, used=cython.longlong, ib=cython.longlong)
    cpdef bint _admit(self, SimPacket pkt, long long in_idx, Port port) except -1

    cpdef long long pfc_threshold(self) except? -1
    cpdef _check_resume(self)
    cpdef _send_pfc(self, long long in_idx, bint pause)

@cython.final
cdef class _DelayLine(Event):
    cdef public Switch switch


cdef inline int _dq_put(Switch sw, long long t, list out, long long in_idx) except -1:
    """Append an entry to the delay line of ``sw`` (it keeps a reference to ``out``)."""
    cdef Py_ssize_t i, j, k, cap
    cdef _Held* q
    if sw._dq_n == sw._dq_cap:
        cap = sw._dq_cap * 2 if sw._dq_cap else 64
        q = <_Held*>PyMem_Malloc(cap * sizeof(_Held))
        if q == NULL:
            raise MemoryError()
        for j in range(sw._dq_n):
            k = sw._dq_head + j
            if k >= sw._dq_cap:
                k -= sw._dq_cap
            q[j] = sw._dq[k]
        PyMem_Free(sw._dq)
        sw._dq = q
        sw._dq_head = 0
        sw._dq_cap = cap
    i = sw._dq_head + sw._dq_n
    if i >= sw._dq_cap:
        i -= sw._dq_cap
    Py_INCREF(out)
    sw._dq[i].t = t
    sw._dq[i].in_idx = in_idx
    sw._dq[i].out = <PyObject*>out
    sw._dq_n += 1
    return 0


cdef inline list _dq_pop(Switch sw):
    """Remove the oldest entry of the (non-empty) delay line of ``sw``; its list."""
    cdef PyObject* p = sw._dq[sw._dq_head].out
    cdef list out = <list>p
    Py_DECREF(out)  # the ring's reference (``out`` holds its own)
    sw._dq_head += 1
    if sw._dq_head == sw._dq_cap:
        sw._dq_head = 0
    sw._dq_n -= 1
    return out


cdef inline void _dq_free(Switch sw) noexcept:
    cdef Py_ssize_t j, k
    for j in range(sw._dq_n):
        k = sw._dq_head + j
        if k >= sw._dq_cap:
            k -= sw._dq_cap
        Py_DECREF(<object>sw._dq[k].out)
    sw._dq_n = 0
    PyMem_Free(sw._dq)
    sw._dq = NULL
