# Types of panama/sim/engine.py for the compiled fast path (setup.py); the .py is the source.
cimport cython
from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Realloc

cdef extern from *:
    ctypedef unsigned long long _u128 "unsigned __int128"
    # GCC/Clang (as unsigned __int128 above): a hint to load a cache line early.
    void _prefetch "__builtin_prefetch"(const void* p) noexcept nogil

# The heap's keys (engine.py, _heap_push): (t, seq, slot) as one unsigned 128-bit
# integer, 16 bytes: t biased by 2**63 in the high half; seq (below 2**40) and the event's
# position in Engine.heap (below 2**24) in the low half. Seq numbers are unique, so the
# keys sort as (t, seq) do.
ctypedef struct _Key:
    _u128 k

cdef enum:
    _SLOT_BITS = 24
    _SEQ_BITS = 40

cdef inline _u128 _key(long long t, long long seq, Py_ssize_t slot) noexcept:
    return (((<_u128>(<unsigned long long>t ^ 0x8000000000000000ULL)) << 64)
            | ((<unsigned long long>seq) << _SLOT_BITS) | <unsigned long long>slot)


cdef inline long long _key_t(_u128 k) noexcept:
    return <long long>(<unsigned long long>(k >> 64) ^ 0x8000000000000000ULL)


cdef inline Py_ssize_t _key_slot(_u128 k) noexcept:
    return <Py_ssize_t>(<unsigned long long>k & ((1ULL << _SLOT_BITS) - 1))

ctypedef _Key* _KeyPtr


cdef inline _Key* _realloc_keys(_Key* keys, Py_ssize_t n) except NULL:
    cdef _Key* p = <_Key*>PyMem_Realloc(keys, n * sizeof(_Key))
    if p == NULL:
        raise MemoryError()
    return p


cdef inline Py_ssize_t* _realloc_slots(Py_ssize_t* slots, Py_ssize_t n) except NULL:
    cdef Py_ssize_t* p = <Py_ssize_t*>PyMem_Realloc(slots, n * sizeof(Py_ssize_t))
    if p == NULL:
        raise MemoryError()
    return p


cdef inline void _free_keys(_Key* keys, Py_ssize_t* slots) noexcept:
    PyMem_Free(keys)
    PyMem_Free(slots)


cdef bint _COMPILED

cdef class Event:
    cdef public long long t
    cdef public long long seq
    cdef public object _fire_cb

    cpdef object fire(self)

@cython.final
cdef class _Call(Event):
    cdef public object fn

cdef class Engine


cdef inline Event _event_at(list heap, Py_ssize_t slot):
    """``heap[slot]``, known to be an Event (the compiled heap holds nothing else): an
    unchecked cast instead of a subtype test per pop."""
    return <Event>heap[slot]


cdef inline void _prefetch_event(list heap, Py_ssize_t slot) noexcept:
    """Start loading the event at ``slot`` (the next one due) while this one fires: the
    first touch of an event object is a cache miss more often than not."""
    _prefetch(<void*>PyList_GET_ITEM(heap, slot))

@cython.locals(heap=list, keys=_KeyPtr, n=cython.Py_ssize_t, slot=cython.Py_ssize_t, pos=cython.Py_ssize_t,
               up=cython.Py_ssize_t, k=_u128)
cdef _heap_push(Engine eng, Event ev)

@cython.locals(heap=list, keys=_KeyPtr, top=Event, n=cython.Py_ssize_t, slot=cython.Py_ssize_t,
               pos=cython.Py_ssize_t, child=cython.Py_ssize_t, k=_u128, ck=_u128)
cdef Event _heap_pop(Engine eng)

@cython.final
cdef class Engine:
    cdef public long long now
    cdef public list heap
    cdef public long long seq
    cdef public object trace
    cdef public long long events
    cdef _Key* _keys
    cdef Py_ssize_t* _vacant
    cdef Py_ssize_t _kcap
    cdef Py_ssize_t _n
    cdef Py_ssize_t _nfree

    cdef _grow_keys(self)

    cpdef push(self, long long time_ps, object callback)
    cpdef schedule(self, long long time_ps, Event ev)

    @cython.locals(t=cython.longlong, limit=cython.longlong, n=cython.longlong, last=cython.longlong, ev=Event)
    cpdef long long run(self, object until_ps=*)

@cython.final
cdef class Timer:
    cdef public Engine engine
    cdef public object callback
    cdef public object when
    cdef public object _entry_time
    cdef public long long _token

    cpdef arm(self, long long time_ps)
    cpdef cancel(self)
    cpdef object _fire(self, long long token)

@cython.final
cdef class _TimerEntry(Event):
    cdef public Timer timer
    cdef public long long token
