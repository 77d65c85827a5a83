# cython: language_level=3
"""The simulator's event queue, C implementation (declarations in heap.pxd).

The contract, and how this file and its pure-Python twin ``heap.py`` are chosen, are in
``heap.py``'s docstring; both run entries in the same ``(time, seq)`` order.

Here the pending entries are ``(t, seq, slot)`` keys, 16 bytes each, in two 4-ary heaps
in C arrays (``_Keys``: the children of entry ``i`` are ``4i+1 .. 4i+4``, and the array is
placed so that each group of four siblings fills one 64-byte cache line: a pop reads one
line per level, half the levels of a binary heap): ``t`` biased by 2**63 in the high half,
``seq`` (below 2**40) and ``slot`` (below 2**24) in the low half, so the keys compare as
``(t, seq)`` do (seq numbers are unique). ``slot`` is the event's position in ``heap``, a
list that only owns the pending events (visible to the garbage collector) and whose free
positions are reused (``_vacant``, ``_nfree`` of them). Sifting moves keys in contiguous
memory and never touches the events themselves; the loop calls each event's ``fire()``
as a C method.

The near heap (``_near``) holds the entries due less than ``_FAR_PS`` after ``now`` when
they were pushed; the far heap (``_far``) the others: on a fat tree, about 40 % of the
pending entries are retransmission timers 100 us or more ahead, which would otherwise
deepen every sift of the near events (ports' next arrivals) that make most of the pops.
Events fire from the near heap's root; the far heap's root moves there (``_bring_far``)
once it is the earliest key (``_far_min``), so the order is exactly the keys' order.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.string cimport memcpy

cdef extern from *:
    # GCC/Clang: a hint to load a cache line early.
    void _prefetch "__builtin_prefetch"(const void* p) noexcept nogil
    # An item of a list given as a borrowed pointer (no reference counting on the list).
    PyObject* _item "PyList_GET_ITEM"(PyObject* lst, Py_ssize_t i) noexcept nogil

cdef extern from *:
    """
    /* A condition as likely true as false (which of two keys is smaller): the compiler
       should evaluate both sides and select (cmov), not branch on it. */
    #if defined(__clang__)
    #define __pyx_panama_coin(c) __builtin_unpredictable(c)
    #elif defined(__GNUC__) && __GNUC__ >= 9
    #define __pyx_panama_coin(c) __builtin_expect_with_probability((c), 1, 0.5)
    #else
    #define __pyx_panama_coin(c) (c)
    #endif
    """
    bint _coin "__pyx_panama_coin"(bint c) noexcept nogil

IMPLEMENTATION = "C"

# Larger than any key (an event of time 2**63 - 1, seq 2**40 - 1): no far key.
cdef _u128 _NO_KEY = ~(<_u128>0)

# Entries due this far after now or later (retransmission timers, mostly) wait in a second
# heap, out of the way of the near events' sifts (about 17 us).
cdef long long _FAR_PS = 1LL << 24

# Returned by an event callback that did nothing (see heap.py).
STALE = object()
cdef object _STALE = STALE


class StopRun(Exception):
    """Raised inside a callback (or via ``Engine.stop``) to end the run now."""


cdef int _keys_grow(_Keys* h) except -1:
    """Double the key array of ``h``. The keys start 3 entries past a 64-byte boundary, so
    that every group of siblings (from entry 1 on) fills a line."""
    cdef Py_ssize_t cap = h.cap * 2 if h.cap else 256
    cdef void* raw = PyMem_Malloc(cap * sizeof(_Key) + 128)
    if raw == NULL:
        raise MemoryError()
    cdef size_t base = (<size_t>raw + 63) & ~(<size_t>63)
    cdef _Key* keys = (<_Key*>base) + 3
    if h.n:
        memcpy(keys, h.keys, h.n * sizeof(_Key))
    PyMem_Free(h.raw)
    h.raw = raw
    h.keys = keys
    h.cap = cap
    return 0


cdef inline int _keys_push(_Keys* h, _u128 k) except -1:
    """Add key ``k`` to the heap ``h`` (sifted up from a new leaf). Inline: one call fewer
    per push (the growth is out of line)."""
    cdef Py_ssize_t pos, up
    cdef _Key* keys
    if h.n >= h.cap:
        _keys_grow(h)
    keys = h.keys
    pos = h.n
    while pos > 0:
        up = (pos - 1) >> 2
        if keys[up].k < k:
            break
        keys[pos] = keys[up]
        pos = up
    keys[pos].k = k
    h.n += 1
    return 0


cdef inline void _sift_root(_Key* keys, _u128 k, Py_ssize_t n) noexcept:
    """Put key ``k`` at the root of the heap of ``n`` keys (the root's old key is dropped)
    and sift it down to its place: a hole moves down, ``k`` is written once at the end.

    A full group of four siblings (all but the last one) takes the smaller of each pair,
    then the smaller of the two, with pointer arithmetic on the compares' results and a
    select rather than branches: which child wins is a coin toss a branch predictor cannot
    learn. (On the paper's fat tree the new key of a re-fired port ends at a leaf on 9
    sifts in 10; going down to a leaf without comparing with ``k`` and sifting ``k`` up
    from there, Floyd's way, measured no fewer instructions: the compare with ``k`` shares
    the loop's branch.)"""
    cdef _Key* hole = keys
    cdef _Key* end = keys + n
    # The group at g is full if g < full_end (no pointer before keys: n is 1 or more).
    cdef _Key* full_end = end - 3 if n > 3 else keys
    cdef _Key* g = keys + 1  # the hole's children
    cdef _Key* pa
    cdef _Key* pc
    cdef _u128 a
    # The children of the key at address p are at 4 * p - child_bias (4 * (p - keys) + 1
    # entries from keys), in byte addresses: two instructions per level.
    cdef size_t child_bias = 3 * <size_t>keys - sizeof(_Key)
    while g < full_end:
        pa = g + <Py_ssize_t>(g[1].k < g[0].k)
        pc = g + 2 + <Py_ssize_t>(g[3].k < g[2].k)
        if _coin(pc.k < pa.k):
            pa = pc
        a = pa.k
        if k < a:
            hole.k = k
            return
        hole.k = a
        hole = pa
        g = <_Key*>(4 * <size_t>pa - child_bias)
    if g < end:  # the last, partial group: its children are leaves
        a = g.k
        pa = g
        g += 1
        while g < end:
            if g.k < a:
                a = g.k
                pa = g
            g += 1
        if a < k:
            hole.k = a
            hole = pa
    hole.k = k


cdef inline void _keys_drop_root(_Keys* h) noexcept:
    """Remove the root of the heap ``h`` (not empty): the last key replaces it."""
    cdef Py_ssize_t n = h.n - 1
    h.n = n
    if n:
        _sift_root(h.keys, h.keys[n].k, n)


cdef inline PyObject* _event_at(EventQueue q, Py_ssize_t slot) noexcept:
    """``q.heap[slot]``, borrowed (the heap holds nothing but events): no reference
    counting on the list, no None or type test per pop."""
    return _item(<PyObject*>q.heap, slot)


cdef inline void _prefetch_event(EventQueue q, Py_ssize_t slot) noexcept:
    """Start loading the event at ``slot`` (the next one due) while this one fires: the
    first touch of an event object is a cache miss more often than not."""
    _prefetch(<void*>_item(<PyObject*>q.heap, slot))


cdef inline void _put(list heap, Py_ssize_t slot, object o) noexcept:
    """``heap[slot] = o`` for a slot known to exist: no type or index checks."""
    cdef PyObject* old = PyList_GET_ITEM(heap, slot)
    Py_INCREF(o)
    PyList_SET_ITEM(heap, slot, o)
    Py_XDECREF(old)


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


cdef inline int _add(EventQueue q, long long t, _u128 k) except -1:
    """Put key ``k`` (of time ``t``) in the near heap of ``q``, or in the far one if ``t``
    is ``_FAR_PS`` or more after now."""
    if t - q.now < _FAR_PS:
        return _keys_push(&q._near, k)
    _keys_push(&q._far, k)
    q._far_min = q._far.keys[0].k
    return 0


cdef inline int _settle_fired(EventQueue q) except -1:
    """After the near root's event fired: if it scheduled itself again (``schedule``
    noted its new key), the new key replaces the root's, keeping its slot, or goes to the
    far heap; else the root is removed and its slot freed. Inline in the run loop (one
    call and its register saves fewer per event)."""
    cdef Py_ssize_t slot
    if q._refired:
        q._refired = False
        if q._refire_t - q.now < _FAR_PS:
            _sift_root(q._near.keys, q._refire_key, q._near.n)
        else:
            _keys_drop_root(&q._near)
            _keys_push(&q._far, q._refire_key)
            q._far_min = q._far.keys[0].k
    else:
        slot = _key_slot(q._near.keys[0].k)
        _put(q.heap, slot, None)
        q._vacant[q._nfree] = slot
        q._nfree += 1
        _keys_drop_root(&q._near)
    if q._near.n:
        _prefetch_event(q, _key_slot(q._near.keys[0].k))
    return 0


cdef class EventQueue:
    """See heap.py."""

    def __init__(self):
        self.now = 0
        self.heap = []
        self.seq = 0
        self.events = 0
        self._far_min = _NO_KEY

    def __dealloc__(self):
        PyMem_Free(self._near.raw)
        PyMem_Free(self._far.raw)
        PyMem_Free(self._vacant)

    cdef int _bring_far(self) except -1:
        """Move the far heap's root (smaller than every near key) to the near heap."""
        cdef _u128 k = self._far_min
        _keys_drop_root(&self._far)
        self._far_min = self._far.keys[0].k if self._far.n else _NO_KEY
        return _keys_push(&self._near, k)

    cdef int _heap_push(self, Event ev) except -1:
        """Push ``ev`` with key ``(ev.t, ev.seq)`` in a free slot of ``heap``."""
        cdef Py_ssize_t slot, cap
        cdef Py_ssize_t* vacant
        cdef list heap = self.heap
        if ev.seq >> _SEQ_BITS:
            raise OverflowError("engine: more than 2**40 events scheduled in one run")
        if self._nfree:
            slot = self._vacant[self._nfree - 1]
            _put(heap, slot, ev)
            self._nfree -= 1
        else:
            slot = len(heap)
            if slot >> _SLOT_BITS:
                raise OverflowError("engine: more than 2**24 events pending")
            if slot >= self._vcap:  # room to free every slot
                cap = self._vcap * 2 if self._vcap else 1024
                vacant = <Py_ssize_t*>PyMem_Realloc(self._vacant, cap * sizeof(Py_ssize_t))
                if vacant == NULL:
                    raise MemoryError()
                self._vacant = vacant
                self._vcap = cap
            heap.append(ev)
        return _add(self, ev.t, _key(ev.t, ev.seq, slot))

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
        (the event firing now may schedule itself: it keeps its slot). The body is
        ``schedule_event`` (heap.pxd), which compiled callers have inline."""
        schedule_event(self, time_ps, ev)

    def pending(self):
        """Pending entries (including stale timer entries). While an event fires, its root
        entry counts only if it scheduled itself again."""
        cdef Py_ssize_t n = self._near.n + self._far.n
        if self._firing != NULL and not self._refired:
            return n - 1
        return n

    def next_time(self):
        """Time of the earliest pending entry, or None (while an event fires: of the
        others, and of its own next firing if it scheduled itself again)."""
        cdef Py_ssize_t c
        cdef _u128 best = self._far_min  # all ones (no key) if the far heap is empty
        if self._firing == NULL:
            if self._near.n and self._near.keys[0].k < best:
                best = self._near.keys[0].k
        else:
            if self._refired and self._refire_key < best:
                best = self._refire_key
            for c in range(1, min(5, self._near.n)):  # the root's children: the next smallest
                if self._near.keys[c].k < best:
                    best = self._near.keys[c].k
        return _key_t(best) if best != _NO_KEY else None

    cpdef long long run_due(self, long long limit) except? -1:
        """See heap.py."""
        cdef long long t, n = 0
        cdef long long last = self.now
        cdef Event ev
        cdef object r
        try:
            while True:
                # The far heap's root goes to the near heap once it is the earliest key.
                if self._near.n:
                    if self._far_min < self._near.keys[0].k:
                        self._bring_far()
                elif self._far.n:
                    self._bring_far()
                else:
                    break
                t = _key_t(self._near.keys[0].k)
                if t > limit:
                    break
                # The event stays at the root while it fires (every key pushed meanwhile
                # is larger: later, or as late with a larger seq); _settle_fired then
                # removes it or, if it scheduled itself, re-keys it.
                ev = <Event>_event_at(self, _key_slot(self._near.keys[0].k))
                self._firing = <PyObject*>ev
                self._refired = False
                self.now = t
                n += 1
                try:
                    r = ev.fire()
                finally:
                    self._firing = NULL
                    _settle_fired(self)
                if r is _STALE:
                    self.now = last
                else:
                    last = t
        except StopRun:
            pass
        return n
