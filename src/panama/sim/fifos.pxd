# Declarations of panama/sim/fifos.pyx, the C implementation of the switch FIFOs (its
# pure-Python twin is fifos.py; see its docstring).
cimport cython
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from libc.limits cimport INT_MAX

from panama.sim.packet cimport SimPacket

# The hot methods of ReleaseRings and PacketPipe have their bodies here, as ``cpdef
# inline``: every module that cimports this file gets its own copy, which the C compiler
# inlines into the callers (the ports' arrival handlers and sends); a call through the
# other module's method table cost a call, its argument checks and reference counts per
# packet hop. Python code calls them as ordinary methods.

cdef extern from *:
    # GCC/Clang: a hint to load a cache line early (no effect on results).
    void _prefetch "__builtin_prefetch"(const void* p) noexcept nogil

ctypedef struct _Rel:  # 16 bytes: four to a cache line (ReleaseRings.put checks the ranges)
    long long end
    int size
    int in_idx

ctypedef struct _Ring:
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

# Later than any simulated time (panama.sim.engine): the end of an empty release ring.
cdef enum:
    _NEVER_SHIFT = 62

cdef inline Py_ssize_t _slot(Py_ssize_t head, Py_ssize_t k, Py_ssize_t cap) noexcept nogil:
    """The buffer index of position ``k`` (0 <= k < cap: 0 the oldest) of a ring of
    ``cap`` slots whose oldest entry is at ``head``: the one wrap-around of every ring here."""
    cdef Py_ssize_t i = head + k
    if i >= cap:
        i -= cap
    return i

# The pipe's error paths, out of line (fifos.pyx): with them inline, pop_packet grew past
# what the C compiler inlines into the arrival loops once ``schedule_event`` was inlined
# there too (docs/performance.md, tenth round).
cdef int _empty_pipe() except -1
cdef int _not_a_packet(object pkt) except -1

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
    # _ends[k]: the end of ring k's oldest entry, or 2**62 when it is empty; one array,
    # so that release() skips the rings with nothing due reading a cache line or two.
    cdef long long* _ends
    # Before the 208-byte memoryview below: put() reads these with _r and _ends (one
    # cache line of the object, not two).
    cdef Py_ssize_t _nrings
    cdef long long _next
    # The ingress counters release() decreases, bound once (a memoryview argument per call
    # copied the caller's 208-byte slice, four cache lines of the switch, every settle).
    cdef long long[::1] _ingress

    cdef int _check(self, Py_ssize_t ring) except -1
    cdef int _bad_put(self, Py_ssize_t ring, long long size, long long in_idx) except -1
    cdef int _grow(self, _Ring* r) except -1
    cpdef Py_ssize_t pending(self, Py_ssize_t ring) except -1

    cpdef inline put(self, Py_ssize_t ring, long long end_ps, long long size, long long in_idx):
        cdef Py_ssize_t i
        cdef _Ring* r
        if ring < 0 or ring >= self._nrings or not 0 <= size <= INT_MAX or not -1 <= in_idx <= INT_MAX:
            self._bad_put(ring, size, in_idx)
        r = &self._r[ring]
        if r.n == r.cap:
            self._grow(r)
        i = _slot(r.head, r.n, r.cap)
        r.q[i].end = end_ps
        r.q[i].size = <int>size
        r.q[i].in_idx = <int>in_idx
        if not r.n:
            self._ends[ring] = end_ps
        r.n += 1
        if end_ps < self._next:
            self._next = end_ps

    cpdef long long pop_back(self, Py_ssize_t ring) except? -1

    cpdef inline long long next_end(self) noexcept:
        return self._next

    cpdef inline long long release(self, long long now) except? -1:
        """See fifos.py. Inline (see above): a switch settles its releases before nearly
        every admission at 100 Gb/s, a call per settle was a fifth of its cost."""
        cdef long long freed = 0, nxt = (<long long>1) << _NEVER_SHIFT
        cdef Py_ssize_t k, h, n
        cdef _Ring* r
        cdef _Rel* q
        cdef long long e
        for k in range(self._nrings):
            e = self._ends[k]
            if e <= now:  # else nothing ended (or empty): the ring stays unread
                r = &self._r[k]
                n = r.n
                q = r.q
                h = r.head
                while n and q[h].end <= now:
                    self._ingress[q[h].in_idx] -= q[h].size
                    freed += q[h].size
                    h += 1
                    if h == r.cap:
                        h = 0
                    n -= 1
                r.head = h
                r.n = n
                e = q[h].end if n else (<long long>1) << _NEVER_SHIFT
                self._ends[k] = e
            if e < nxt:
                nxt = e
        self._next = nxt
        return freed

@cython.final
cdef class PacketPipe:
    cdef _Flight* _q
    cdef Py_ssize_t _head
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap

    cdef int _grow(self) except -1
    cpdef long long back_time(self) noexcept
    cpdef object pop_back(self)

    cpdef inline object at(self, Py_ssize_t i):
        """The packet at position ``i`` (0: oldest; negative from the newest)."""
        if i < 0:
            i += self._n
        if i < 0 or i >= self._n:
            raise IndexError("PacketPipe index out of range")
        return <object>self._q[_slot(self._head, i, self._cap)].pkt

    cpdef inline push(self, long long arrive_ps, object pkt):
        cdef Py_ssize_t i
        if self._n == self._cap:
            self._grow()
        i = _slot(self._head, self._n, self._cap)
        Py_INCREF(pkt)
        self._q[i].t = arrive_ps
        self._q[i].pkt = <PyObject*>pkt
        self._n += 1

    cpdef inline long long head_time(self) noexcept:
        """See fifos.py. Also starts loading the head packet (its first two cache lines):
        a port asks before it re-arms for the head's arrival, and by then the packet,
        queued one link delay ago, has usually left the cache; its first touch was the
        largest single stall of a 100 Gb/s run (docs/performance.md)."""
        cdef char* p
        if not self._n:
            return -1
        p = <char*>self._q[self._head].pkt
        _prefetch(p)
        _prefetch(p + 64)
        return self._q[self._head].t

    cpdef inline object pop_head(self):
        cdef PyObject* p
        if not self._n:
            _empty_pipe()
        p = self._q[self._head].pkt
        self._head += 1
        if self._head == self._cap:
            self._head = 0
        self._n -= 1
        cdef object pkt = <object>p  # a new reference
        Py_DECREF(pkt)  # the ring's reference (``pkt`` holds its own)
        return pkt

    cpdef inline SimPacket pop_packet(self):
        """See fifos.py. The exact type test (SimPacket is final) is a compare here, where
        the caller's conversion of pop_head's object was an out-of-line call per hop."""
        cdef object pkt = self.pop_head()
        if type(pkt) is not SimPacket:
            _not_a_packet(pkt)
        return <SimPacket>pkt
