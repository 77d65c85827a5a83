# cython: language_level=3
"""The simulator's event queue, C implementation (declarations in heap.pxd).

The contract, and how this file and its pure-Python twin ``heap.py`` are chosen, are in
``heap.py``'s docstring; both run entries in the same ``(time, seq)`` order.

Here the heap is a 4-ary heap in a C array of ``(t, seq, slot)`` keys, 16 bytes each
(``_keys``, ``_n`` of them; the children of entry ``i`` are ``4i+1 .. 4i+4``, and the array
is placed so that each group of four siblings fills one 64-byte cache line: a pop reads
one line per level, half the levels of a binary heap): ``t`` biased by 2**63 in the high half, ``seq`` (below 2**40) and ``slot``
(below 2**24) in the low half, so the keys compare as ``(t, seq)`` do (seq numbers are
unique). ``slot`` is the event's position in ``heap``, a list that only owns the pending
events (visible to the garbage collector) and whose free positions are reused
(``_vacant``, ``_nfree`` of them). Sifting moves keys in contiguous memory and never
touches the events themselves; the loop calls each event's ``fire()`` as a C method.
"""

from cpython.list cimport PyList_GET_ITEM
from cpython.ref cimport PyObject
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.string cimport memcpy

cdef extern from *:
    # GCC/Clang: a hint to load a cache line early.
    void _prefetch "__builtin_prefetch"(const void* p) noexcept nogil

IMPLEMENTATION = "C"

cdef enum:
    _SLOT_BITS = 24
    _SEQ_BITS = 40

# Returned by an event callback that did nothing (see heap.py).
STALE = object()
cdef object _STALE = STALE


class StopRun(Exception):
    """Raised inside a callback (or via ``Engine.stop``) to end the run now."""


cdef inline _u128 _key(long long t, long long seq, Py_ssize_t slot) noexcept:
    return (((<_u128>(<unsigned long long>t ^ 0x8000000000000000ULL)) << 64)
            | ((<unsigned long long>seq) << _SLOT_BITS) | <unsigned long long>slot)


cdef inline long long _key_t(_u128 k) noexcept:
    return <long long>(<unsigned long long>(k >> 64) ^ 0x8000000000000000ULL)


cdef inline Py_ssize_t _key_slot(_u128 k) noexcept:
    return <Py_ssize_t>(<unsigned long long>k & ((1ULL << _SLOT_BITS) - 1))


cdef inline Event _event_at(list heap, Py_ssize_t slot):
    """``heap[slot]``, known to be an Event (the heap holds nothing else): an unchecked
    cast instead of a subtype test per pop."""
    return <Event>heap[slot]


cdef inline void _prefetch_event(list heap, Py_ssize_t slot) noexcept:
    """Start loading the event at ``slot`` (the next one due) while this one fires: the
    first touch of an event object is a cache miss more often than not."""
    _prefetch(<void*>PyList_GET_ITEM(heap, slot))


cdef class Event:
    """See heap.py."""

    def __init__(self):
        self.t = 0
        self.seq = 0
        self._fire_cb = self.fire

    cpdef object fire(self):  # pragma: no cover - abstract
        raise NotImplementedError


cdef class _Call(Event):
    """A plain callable as a heap entry."""

    def __init__(self, fn):
        self.fn = fn
        self._fire_cb = fn

    cpdef object fire(self):
        return self.fn()


cdef class EventQueue:
    """See heap.py."""

    def __init__(self):
        self.now = 0
        self.heap = []
        self.seq = 0
        self.events = 0

    def __dealloc__(self):
        PyMem_Free(self._kraw)
        PyMem_Free(self._vacant)

    cdef int _grow(self) except -1:
        """Double the key array and the free-slot array. The keys start 3 entries past a
        64-byte boundary, so that every group of siblings (from entry 1 on) fills a line."""
        cdef Py_ssize_t cap = self._kcap * 2 if self._kcap else 1024
        cdef void* raw = PyMem_Malloc(cap * sizeof(_Key) + 128)
        if raw == NULL:
            raise MemoryError()
        cdef size_t base = (<size_t>raw + 63) & ~(<size_t>63)
        cdef _Key* keys = (<_Key*>base) + 3
        if self._n:
            memcpy(keys, self._keys, self._n * sizeof(_Key))
        PyMem_Free(self._kraw)
        self._kraw = raw
        self._keys = keys
        cdef Py_ssize_t* vacant = <Py_ssize_t*>PyMem_Realloc(self._vacant, cap * sizeof(Py_ssize_t))
        if vacant == NULL:
            raise MemoryError()
        self._vacant = vacant
        self._kcap = cap
        return 0

    cdef int _heap_push(self, Event ev) except -1:
        """Push ``ev`` with key ``(ev.t, ev.seq)``."""
        cdef Py_ssize_t n, slot, pos, up
        cdef _u128 k
        cdef _Key* keys
        cdef list heap = self.heap
        if ev.seq >> _SEQ_BITS:
            raise OverflowError("engine: more than 2**40 events scheduled in one run")
        n = self._n
        if n >= self._kcap:
            self._grow()
        if self._nfree:
            self._nfree -= 1
            slot = self._vacant[self._nfree]
            heap[slot] = ev
        else:
            slot = len(heap)
            if slot >> _SLOT_BITS:
                raise OverflowError("engine: more than 2**24 events pending")
            heap.append(ev)
        keys = self._keys
        k = _key(ev.t, ev.seq, slot)
        pos = n
        while pos > 0:
            up = (pos - 1) >> 2
            if keys[up].k < k:
                break
            keys[pos] = keys[up]
            pos = up
        keys[pos].k = k
        self._n = n + 1
        return 0

    cdef void _sift_root(self, _u128 k, Py_ssize_t n) noexcept:
        """Put key ``k`` at the root of the heap of ``n`` keys (the root's old key is
        dropped) and sift it down to its place."""
        cdef Py_ssize_t pos, child, last, c
        cdef _u128 ck
        cdef _Key* keys = self._keys
        pos = 0
        while True:
            child = 4 * pos + 1
            if child >= n:
                break
            # The smallest of the (up to) four siblings child .. child + 3.
            ck = keys[child].k
            last = child + 3 if child + 3 < n else n - 1
            c = child + 1
            while c <= last:
                if keys[c].k < ck:
                    ck = keys[c].k
                    child = c
                c += 1
            if k < ck:
                break
            keys[pos] = keys[child]
            pos = child
        keys[pos].k = k

    cdef void _settle_fired(self) noexcept:
        """After the root's event fired: if it scheduled itself again (``schedule`` noted
        its new key), the new key replaces the root's, keeping its slot (a due event's next
        time is usually near: the sift stops early); else the root is removed."""
        cdef Py_ssize_t slot, n
        if self._refired:
            self._refired = False
            self._sift_root(self._refire_key, self._n)
        else:
            slot = _key_slot(self._keys[0].k)
            self.heap[slot] = None
            self._vacant[self._nfree] = slot
            self._nfree += 1
            n = self._n - 1
            self._n = n
            if n:
                self._sift_root(self._keys[n].k, n)
        if self._n:
            _prefetch_event(self.heap, _key_slot(self._keys[0].k))

    cpdef push(self, long long time_ps, object callback):
        """Run ``callback()`` at ``time_ps`` (>= now, unchecked)."""
        cdef long long seq = self.seq + 1
        self.seq = seq
        cdef _Call ev = _Call(callback)
        ev.t = time_ps
        ev.seq = seq
        self._heap_push(ev)

    cpdef schedule(self, long long time_ps, Event ev):
        """Fire ``ev`` at ``time_ps`` (>= now, unchecked); ``ev`` must not be pending
        (the event firing now may schedule itself: its root entry is reused)."""
        cdef long long seq = self.seq + 1
        self.seq = seq
        ev.t = time_ps
        ev.seq = seq
        if <PyObject*>ev == self._firing and not self._refired:
            if seq >> _SEQ_BITS:
                raise OverflowError("engine: more than 2**40 events scheduled in one run")
            self._refired = True
            self._refire_key = _key(time_ps, seq, _key_slot(self._keys[0].k))
            return
        self._heap_push(ev)

    def pending(self):
        """Pending entries (including stale timer entries). While an event fires, its root
        entry counts only if it scheduled itself again."""
        if self._firing != NULL and not self._refired:
            return self._n - 1
        return self._n

    def next_time(self):
        """Time of the earliest pending entry, or None (while an event fires: of the
        others, and of its own next firing if it scheduled itself again)."""
        cdef Py_ssize_t c
        cdef bint found = False
        cdef _u128 best = 0
        if self._firing == NULL:
            return _key_t(self._keys[0].k) if self._n else None
        if self._refired:
            best = self._refire_key
            found = True
        for c in range(1, min(5, self._n)):  # the root's children hold the next smallest key
            if not found or self._keys[c].k < best:
                best = self._keys[c].k
                found = True
        return _key_t(best) if found else None

    cpdef long long run_due(self, long long limit) except? -1:
        """See heap.py."""
        cdef long long t, n = 0
        cdef long long last = self.now
        cdef Event ev
        cdef object r
        try:
            while self._n:
                t = _key_t(self._keys[0].k)
                if t > limit:
                    break
                # The event stays at the root while it fires (every key pushed meanwhile
                # is larger: later, or as late with a larger seq); _settle_fired then
                # removes it or, if it scheduled itself, re-keys it in place.
                ev = _event_at(self.heap, _key_slot(self._keys[0].k))
                self._firing = <PyObject*>ev
                self._refired = False
                self.now = t
                n += 1
                try:
                    r = ev.fire()
                finally:
                    self._firing = NULL
                    self._settle_fired()
                if r is _STALE:
                    self.now = last
                else:
                    last = t
        except StopRun:
            pass
        return n
