# Declarations of panama/sim/fifos.pyx, the C implementation of the switch FIFOs (its
# pure-Python twin is fifos.py; see its docstring).
cimport cython
from cpython.ref cimport PyObject

ctypedef struct _Rel:
    long long end
    long long size
    long long in_idx

ctypedef struct _Held:
    long long t
    long long in_idx
    PyObject* out

@cython.final
cdef class ReleaseRing:
    cdef _Rel* _q
    cdef Py_ssize_t _head
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap

    cdef int _grow(self) except -1
    cpdef put(self, long long end_ps, long long size, long long in_idx)
    cpdef long long pop_back(self) except? -1
    cpdef long long head_end(self) noexcept
    cpdef long long release(self, long long now, long long[::1] ingress) except? -1

@cython.final
cdef class DelayLine:
    cdef _Held* _q
    cdef Py_ssize_t _head
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap

    cdef int _grow(self) except -1
    cpdef put(self, long long due_ps, list out, long long in_idx)
    cpdef long long head_time(self) noexcept
    cpdef long long head_in_idx(self) except? -1
    cpdef list pop_head(self)
