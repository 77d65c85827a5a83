# cython: language_level=3
"""The switch FIFOs, C implementation (declarations in fifos.pxd): ring buffers of C
structs that grow by doubling. Contract and choice of implementation: ``fifos.py``."""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_DECREF, Py_INCREF

IMPLEMENTATION = "C"


cdef class ReleaseRing:
    """See fifos.py."""

    def __dealloc__(self):
        PyMem_Free(self._q)

    def __len__(self):
        return self._n

    cdef int _grow(self) except -1:
        """Double the ring (entries kept in order, from index 0)."""
        cdef Py_ssize_t cap = self._cap * 2 if self._cap else 64
        cdef Py_ssize_t j, k
        cdef _Rel* q = <_Rel*>PyMem_Malloc(cap * sizeof(_Rel))
        if q == NULL:
            raise MemoryError()
        for j in range(self._n):
            k = self._head + j
            if k >= self._cap:
                k -= self._cap
            q[j] = self._q[k]
        PyMem_Free(self._q)
        self._q = q
        self._head = 0
        self._cap = cap
        return 0

    cpdef put(self, long long end_ps, long long size, long long in_idx):
        cdef Py_ssize_t i
        if self._n == self._cap:
            self._grow()
        i = self._head + self._n
        if i >= self._cap:
            i -= self._cap
        self._q[i].end = end_ps
        self._q[i].size = size
        self._q[i].in_idx = in_idx
        self._n += 1

    cpdef long long pop_back(self) except? -1:
        cdef Py_ssize_t i
        if not self._n:
            raise IndexError("pop from an empty ReleaseRing")
        self._n -= 1
        i = self._head + self._n
        if i >= self._cap:
            i -= self._cap
        return self._q[i].in_idx

    cpdef long long head_end(self) noexcept:
        return self._q[self._head].end if self._n else -1

    cpdef long long release(self, long long now, long long[::1] ingress) except? -1:
        cdef long long freed = 0
        cdef Py_ssize_t h = self._head, n = self._n
        cdef _Rel* q = self._q
        while n:
            if q[h].end > now:
                break
            ingress[q[h].in_idx] -= q[h].size
            freed += q[h].size
            h += 1
            if h == self._cap:
                h = 0
            n -= 1
        self._head = h
        self._n = n
        return freed


cdef class DelayLine:
    """See fifos.py. Each entry holds a reference to its packet list."""

    def __dealloc__(self):
        cdef Py_ssize_t j, k
        for j in range(self._n):
            k = self._head + j
            if k >= self._cap:
                k -= self._cap
            Py_DECREF(<object>self._q[k].out)
        self._n = 0
        PyMem_Free(self._q)

    def __len__(self):
        return self._n

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self._cap * 2 if self._cap else 64
        cdef Py_ssize_t j, k
        cdef _Held* q = <_Held*>PyMem_Malloc(cap * sizeof(_Held))
        if q == NULL:
            raise MemoryError()
        for j in range(self._n):
            k = self._head + j
            if k >= self._cap:
                k -= self._cap
            q[j] = self._q[k]
        PyMem_Free(self._q)
        self._q = q
        self._head = 0
        self._cap = cap
        return 0

    cpdef put(self, long long due_ps, list out, long long in_idx):
        cdef Py_ssize_t i
        if self._n == self._cap:
            self._grow()
        i = self._head + self._n
        if i >= self._cap:
            i -= self._cap
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
