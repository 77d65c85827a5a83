# Declarations of panama/sim/heap.pyx, the C implementation of the event queue (its
# pure-Python twin is heap.py; see its docstring). Other compiled modules cimport
# Event and EventQueue from here.
cimport cython
from cpython.ref cimport PyObject

cdef extern from *:
    ctypedef unsigned long long _u128 "unsigned __int128"

# A heap key: (t, seq, slot) as one unsigned 128-bit integer (heap.pyx, _key).
ctypedef struct _Key:
    _u128 k

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
    cdef _Key* _keys
    cdef void* _kraw
    cdef Py_ssize_t* _vacant
    cdef Py_ssize_t _kcap
    cdef Py_ssize_t _n
    cdef Py_ssize_t _nfree
    cdef PyObject* _firing
    cdef bint _refired
    cdef _u128 _refire_key

    cdef int _grow(self) except -1
    cdef int _heap_push(self, Event ev) except -1
    cdef void _sift_root(self, _u128 k, Py_ssize_t n) noexcept
    cdef void _settle_fired(self) noexcept

    cpdef push(self, long long time_ps, object callback)
    cpdef schedule(self, long long time_ps, Event ev)
    cpdef long long run_due(self, long long limit) except? -1
