# Declarations of panama/sim/fifos.pyx, the C implementation of the switch FIFOs (its
# pure-Python twin is fifos.py; see its docstring).
cimport cython
from cpython.ref cimport PyObject

ctypedef struct _Rel:
    long long end
    long long size
    long long in_idx

ctypedef struct _Ring:
    long long head_end  # q[head].end, or 2**62 when empty: release() skips a ring without reading q
    _Rel* q
    Py_ssize_t head
    Py_ssize_t n
    Py_ssize_t cap

ctypedef struct _Flight:
    long long t
    PyObject* pkt

ctypedef struct _Held:
    long long t
    long long in_idx
    PyObject* out

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

@cython.final
cdef class ReleaseRings:
    cdef _Ring* _r
    cdef Py_ssize_t _nrings
    cdef long long _next

    cdef int _check(self, Py_ssize_t ring) except -1
    cdef int _grow(self, _Ring* r) except -1
    cpdef Py_ssize_t pending(self, Py_ssize_t ring) except -1
    cpdef put(self, Py_ssize_t ring, long long end_ps, long long size, long long in_idx)
    cpdef long long pop_back(self, Py_ssize_t ring) except? -1
    cpdef long long next_end(self) noexcept
    cpdef long long release(self, long long now, long long[::1] ingress) except? -1

@cython.final
cdef class PacketPipe:
    cdef _Flight* _q
    cdef Py_ssize_t _head
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap

    cdef int _grow(self) except -1
    cpdef object at(self, Py_ssize_t i)
    cpdef push(self, long long arrive_ps, object pkt)
    cpdef long long head_time(self) noexcept
    cpdef long long back_time(self) noexcept
    cpdef object pop_head(self)
    cpdef object pop_back(self)
