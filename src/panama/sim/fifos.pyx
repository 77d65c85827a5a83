# cython: language_level=3
"""The switch FIFOs, C implementation (declarations in fifos.pxd): ring buffers of C
structs that grow by doubling. Contract and choice of implementation: ``fifos.py``."""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.string cimport memcpy

from panama.sim.placement import on_cache_lines

IMPLEMENTATION = "C"

cdef long long _NEVER_C = (<long long>1) << _NEVER_SHIFT  # later than any simulated time (panama.sim.engine)


cdef void* _regrown(void* q, Py_ssize_t head, Py_ssize_t n, Py_ssize_t cap, Py_ssize_t new_cap,
                    size_t size) except NULL:
    """A new buffer of ``new_cap`` items of ``size`` bytes holding, from index 0 and in
    order, the ``n`` items of the ring ``q`` (``cap`` items, oldest at ``head``); frees ``q``."""
    cdef char* out = <char*>PyMem_Malloc(new_cap * size)
    if out == NULL:
        raise MemoryError()
    cdef Py_ssize_t first = n if n < cap - head else cap - head
    if first > 0:
        memcpy(out, <char*>q + head * size, first * size)
    if n > first:
        memcpy(out + first * size, q, (n - first) * size)
    PyMem_Free(q)
    return out


cdef class DelayLine:
    """See fifos.py. Each entry holds a reference to its packet list."""

    def __dealloc__(self):
        cdef Py_ssize_t j
        for j in range(self._n):
            Py_DECREF(<object>self._q[_slot(self._head, j, self._cap)].out)
        self._n = 0
        PyMem_Free(self._q)

    def __len__(self):
        return self._n

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self._cap * 2 if self._cap else 64
        self._q = <_Held*>_regrown(self._q, self._head, self._n, self._cap, cap, sizeof(_Held))
        self._head = 0
        self._cap = cap
        return 0

    cpdef put(self, long long due_ps, list out, long long in_idx):
        cdef Py_ssize_t i
        if self._n == self._cap:
            self._grow()
        i = _slot(self._head, self._n, self._cap)
        Py_INCREF(out)
        self._q[i].t = due_ps
        self._q[i].in_idx = in_idx
        self._q[i].out = <PyObject*>out
        self._n += 1

    cpdef long long head_time(self) noexcept:
        return self._q[self._head].t if self._n else -1

    cpdef long long head_in_idx(self) except? -1:
        if not self._n:
            raise IndexError("empty DelayLine")
        return self._q[self._head].in_idx

    cpdef list pop_head(self):
        if not self._n:
            raise IndexError("pop from an empty DelayLine")
        cdef PyObject* p = self._q[self._head].out
        cdef list out = <list>p
        Py_DECREF(out)  # the ring's reference (``out`` holds its own)
        self._head += 1
        if self._head == self._cap:
            self._head = 0
        self._n -= 1
        return out


cdef class ReleaseRings:
    """See fifos.py. One C ring of ``_Rel`` per port, in one array."""

    def __init__(self, Py_ssize_t nrings, long long[::1] ingress):
        cdef Py_ssize_t i
        if nrings < 0:
            raise ValueError(f"nrings must be >= 0, got {nrings}")
        self._r = <_Ring*>PyMem_Malloc((nrings if nrings else 1) * sizeof(_Ring))
        self._ends = <long long*>PyMem_Malloc((nrings if nrings else 1) * sizeof(long long))
        if self._r == NULL or self._ends == NULL:
            raise MemoryError()
        self._nrings = nrings
        for i in range(nrings):
            self._ends[i] = _NEVER_C
            self._r[i].q = NULL
            self._r[i].head = 0
            self._r[i].n = 0
            self._r[i].cap = 0
        self._next = _NEVER_C
        self._ingress = ingress

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._r != NULL:
            for i in range(self._nrings):
                PyMem_Free(self._r[i].q)
            PyMem_Free(self._r)
        PyMem_Free(self._ends)

    def __len__(self):
        cdef Py_ssize_t i, total = 0
        for i in range(self._nrings):
            total += self._r[i].n
        return total

    cpdef Py_ssize_t pending(self, Py_ssize_t ring) except -1:
        self._check(ring)
        return self._r[ring].n

    cdef int _check(self, Py_ssize_t ring) except -1:
        if ring < 0 or ring >= self._nrings:
            raise IndexError(f"ring {ring} out of range [0, {self._nrings})")
        return 0

    cdef int _bad_put(self, Py_ssize_t ring, long long size, long long in_idx) except -1:
        self._check(ring)
        if not 0 <= size <= INT_MAX:
            raise OverflowError(f"release size {size} out of range [0, {INT_MAX}]")
        raise OverflowError(f"ingress {in_idx} out of range [-1, {INT_MAX}]")

    cdef int _grow(self, _Ring* r) except -1:
        cdef Py_ssize_t cap = r.cap * 2 if r.cap else 64
        r.q = <_Rel*>_regrown(r.q, r.head, r.n, r.cap, cap, sizeof(_Rel))
        r.head = 0
        r.cap = cap
        return 0

    cpdef long long pop_back(self, Py_ssize_t ring) except? -1:
        cdef _Ring* r
        self._check(ring)
        r = &self._r[ring]
        if not r.n:
            raise IndexError("pop from an empty release ring")
        r.n -= 1
        if not r.n:
            self._ends[ring] = _NEVER_C
        return r.q[_slot(r.head, r.n, r.cap)].in_idx


cdef int _empty_pipe() except -1:
    raise IndexError("pop from an empty PacketPipe")


cdef int _not_a_packet(object pkt) except -1:
    raise TypeError(f"PacketPipe.pop_packet: not a SimPacket: {type(pkt).__name__}")


cdef class PacketPipe:
    """See fifos.py. A C ring of ``(arrive_ps, packet)``; each entry owns a reference."""

    def __dealloc__(self):
        cdef Py_ssize_t j
        for j in range(self._n):
            Py_DECREF(<object>self._q[_slot(self._head, j, self._cap)].pkt)
        self._n = 0
        PyMem_Free(self._q)

    def __len__(self):
        return self._n

    def __bool__(self):
        return self._n > 0

    def __getitem__(self, Py_ssize_t i):
        return self.at(i)

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self._cap * 2 if self._cap else 16
        self._q = <_Flight*>_regrown(self._q, self._head, self._n, self._cap, cap, sizeof(_Flight))
        self._head = 0
        self._cap = cap
        return 0

    cpdef long long back_time(self) noexcept:
        if not self._n:
            return -1
        return self._q[_slot(self._head, self._n - 1, self._cap)].t

    cpdef object pop_back(self):
        if not self._n:
            raise IndexError("pop from an empty PacketPipe")
        self._n -= 1
        cdef object pkt = <object>self._q[_slot(self._head, self._n, self._cap)].pkt
        Py_DECREF(pkt)
        return pkt


# Every pipe on a line of its own (panama.sim.placement), before any pipe exists: its header
# and ring fields (56 bytes), which a hop reads at both ends of a link, in one line, not two.
on_cache_lines(PacketPipe)
