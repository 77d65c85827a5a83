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
    cdef _Keys _near
    cdef _Keys _far
    cdef _u128 _far_min
    cdef Py_ssize_t* _vacant
    cdef Py_ssize_t _vcap
    cdef Py_ssize_t _nfree
    cdef PyObject* _firing
    cdef bint _refired
    cdef long long _refire_t
    cdef _u128 _refire_key

    cdef int _bring_far(self) except -1
    cdef int _heap_push(self, Event ev) except -1

    cpdef push(self, long long time_ps, object callback)
    cpdef schedule(self, long long time_ps, Event ev)
    cpdef long long run_due(self, long long limit) except? -1
