# Declarations of panama/sim/heap.pyx, the C implementation of the event queue (its
# pure-Python twin is heap.py; see its docstring). Other compiled modules cimport
# Event and EventQueue from here.
cimport cython
from cpython.ref cimport PyObject

cdef extern from *:
    ctypedef unsigned long long _u128 "unsigned __int128"

# A heap key: (t, seq, slot) as one unsigned 128-bit integer: ``t`` biased by 2**63 in the
# high half, ``seq`` (below 2**40) and ``slot`` (below 2**24) in the low half (heap.pyx).
ctypedef struct _Key:
    _u128 k

cdef enum:
    _SLOT_BITS = 24
    _SEQ_BITS = 40
    # The near events' wheel (heap.pyx): 2**_WHEEL_BITS buckets of 2**_BUCKET_SHIFT ps,
    # spanning 2**24 ps (about 17 us).
    _WHEEL_BITS = 13
    _BUCKET_SHIFT = 11

cdef inline _u128 _key(long long t, long long seq, Py_ssize_t slot) noexcept:
    return (((<_u128>(<unsigned long long>t ^ 0x8000000000000000ULL)) << 64)
            | ((<unsigned long long>seq) << _SLOT_BITS) | <unsigned long long>slot)

cdef inline long long _key_t(_u128 k) noexcept:
    return <long long>(<unsigned long long>(k >> 64) ^ 0x8000000000000000ULL)

cdef inline Py_ssize_t _key_slot(_u128 k) noexcept:
    return <Py_ssize_t>(<unsigned long long>k & ((1ULL << _SLOT_BITS) - 1))

# A wheel entry (heap.pyx): a slot's key and the next slot in its bucket (-1: the last);
# 32 bytes, two to a cache line.
ctypedef struct _Entry:
    _u128 k
    int next

# A 4-ary heap of keys in a C array (heap.pyx): ``n`` keys from ``keys``, room for ``cap``;
# ``raw`` is the allocation ``keys`` lies in.
ctypedef struct _Keys:
    _Key* keys
    void* raw
    Py_ssize_t n
    Py_ssize_t cap

cdef class Event:
    cdef public long long t
    cdef public long long seq
    cdef public object _fire_cb

    cpdef object fire(self)

@cython.final
cdef class _Call(Event):
    cdef public object fn

cdef class EventQueue:
    cdef public long long now
    cdef public list heap
    cdef public long long seq
    cdef public long long events
    # The wheel of near keys (heap.pyx): its smallest key and that key's bucket, the
    # bucket-aligned time its span starts at, its size, the buckets' first slots (-1:
    # empty) and a bit per non-empty bucket; per slot, its entry (the key and the next slot
    # in its bucket, keys ascending; ``_went_raw`` the allocation they lie in).
    cdef _u128 _wmin
    cdef Py_ssize_t _wmin_bucket
    cdef long long _wbase
    cdef Py_ssize_t _wn
    cdef int* _whead
    cdef unsigned long long* _wbits
    cdef _Entry* _went
    cdef void* _went_raw
    cdef _Keys _far
    cdef _u128 _far_min
    cdef Py_ssize_t* _vacant
    cdef Py_ssize_t _vcap
    cdef Py_ssize_t _nfree
    cdef PyObject* _firing
    cdef Py_ssize_t _firing_slot
    cdef bint _refired
    cdef _u128 _refire_key

    cdef int _bring_far(self) except -1
    cdef int _drain_wheel(self) except -1
    cdef int _heap_push(self, Event ev) except -1

    cpdef push(self, long long time_ps, object callback)
    cpdef schedule(self, long long time_ps, Event ev)
    cpdef long long run_due(self, long long limit) except? -1

# ``EventQueue.schedule``'s body (see heap.py's ``schedule_event``): here, so that every
# compiled module that cimports it gets its own inline copy; the ports' arrival handlers
# and sends call it per packet hop, where a call through the method table and its
# override check cost about 20 instructions (docs/performance.md, tenth round).
cpdef inline int schedule_event(EventQueue q, long long time_ps, Event ev) except -1:
    cdef long long seq = q.seq + 1
    q.seq = seq
    ev.t = time_ps
    ev.seq = seq
    if <PyObject*>ev == q._firing and not q._refired:
        # The firing event scheduled itself: _settle_fired puts it back, in its own slot.
        if seq >> _SEQ_BITS:
            raise OverflowError("engine: more than 2**40 events scheduled in one run")
        q._refired = True
        q._refire_key = _key(time_ps, seq, q._firing_slot)
        return 0
    q._heap_push(ev)
    return 0
