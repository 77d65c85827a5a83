# cython: language_level=3
"""The simulator's event queue, C implementation (declarations in heap.pxd).

The contract, and how this file and its pure-Python twin ``heap.py`` are chosen, are in
``heap.py``'s docstring; both run entries in the same ``(time, seq)`` order.

Here the pending entries are ``(t, seq, slot)`` keys, 16 bytes each: ``t`` biased by
2**63 in the high half, ``seq`` (below 2**40) and ``slot`` (below 2**24) in the low half,
so the keys compare as ``(t, seq)`` do (seq numbers are unique). ``slot`` is the event's
position in ``heap``, a list that only owns the pending events (visible to the garbage
collector) and whose free positions are reused (``_vacant``, ``_nfree`` of them). The loop
calls each event's ``fire()`` as a C method.

The near keys, those due less than 2**24 ps (about 17 us) after the wheel's base, are in
a wheel of 8,192 buckets of 2,048 ps: bucket ``(t >> 11) mod 8192``, each a list of slots
linked through their entries (``_went``, by slot) in ascending key order, a bit per
non-empty bucket in ``_wbits``, the smallest key and its bucket kept. Every wheel key
lies in ``[_wbase, _wbase + 2**24)`` (``_wbase`` aligned to a bucket), so the buckets
from the smallest key's, in ring order, are in time order: a pop unlinks the head of that
bucket and, if it is left empty, finds the next set bit (one or two 64-bit words on a
busy fabric); a push walks its bucket (past about one key at 100 Gb/s). The base moves up
to each popped key's bucket. The far heap (``_far``, a 4-ary heap of keys in a C array: the
children of entry ``i`` are ``4i+1 .. 4i+4``, each group of four siblings one 64-byte
line) holds the other keys: retransmission timers 100 us or more ahead, mostly, and a key
pushed below the base (a push between runs, after a stale entry let ``now`` fall back).
Its root moves to the wheel (``_bring_far``) once it is the earliest key (``_far_min``);
one below the base first moves the wheel's keys to the far heap (``_drain_wheel``, rare).
So the order is exactly the keys' order. An event leaves the wheel when it fires; if it
schedules itself meanwhile, ``schedule`` notes its new key and it goes back in its slot.
(The wheel replaced a 4-ary heap for the near keys too, whose sift was a fifth of a
100 Gb/s hop's instructions: docs/performance.md, fourteenth round.)
"""

from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.string cimport memcpy, memset

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

# The wheel: its buckets, the words of its bitmap, its span in ps (keys due this far after
# its base or later wait in the far heap).
cdef enum:
    _NB = 1 << _WHEEL_BITS
    _NWORDS = _NB >> 6
cdef long long _SPAN_PS = (<long long>_NB) << _BUCKET_SHIFT

cdef extern from *:
    int _ctz "__builtin_ctzll"(unsigned long long x) noexcept nogil

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
    learn. (When the near keys were in such a heap too, a re-fired port's new key ended at
    a leaf on 9 sifts in 10; going down to a leaf without comparing with ``k`` and sifting
    ``k`` up from there, Floyd's way, measured no fewer instructions: the compare with ``k``
    shares the loop's branch.)"""
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


cdef inline Py_ssize_t _bucket(_u128 k) noexcept:
    """The wheel bucket of key ``k``."""
    return <Py_ssize_t>((<unsigned long long>_key_t(k) >> _BUCKET_SHIFT) & (_NB - 1))


cdef inline long long _bucket_start(_u128 k) noexcept:
    """The time the bucket of key ``k`` starts at (times are >= 0)."""
    return (_key_t(k) >> _BUCKET_SHIFT) << _BUCKET_SHIFT


cdef inline void _wheel_insert(EventQueue q, _u128 k, Py_ssize_t slot) noexcept:
    """Put key ``k`` of ``slot`` in its bucket, in ascending order (``k`` is in the span)."""
    cdef Py_ssize_t b = _bucket(k)
    cdef int* link = &q._whead[b]
    cdef int s = link[0]
    cdef _Entry* went = q._went
    while s >= 0 and went[s].k < k:
        link = &went[s].next
        s = link[0]
    went[slot].next = s
    went[slot].k = k
    link[0] = <int>slot
    q._wbits[b >> 6] |= 1ULL << (b & 63)
    q._wn += 1
    if k < q._wmin:
        q._wmin = k
        q._wmin_bucket = b


cdef inline void _wheel_pop_min(EventQueue q) noexcept:
    """Remove the wheel's smallest key (the wheel is not empty); its bucket becomes the
    base. The next smallest is the head of the same bucket or of the next non-empty one."""
    cdef Py_ssize_t b = q._wmin_bucket
    cdef Py_ssize_t w
    cdef unsigned long long word
    cdef int s = q._went[q._whead[b]].next
    q._whead[b] = s
    q._wn -= 1
    q._wbase = _bucket_start(q._wmin)
    if s >= 0:
        q._wmin = q._went[s].k
        return
    w = b >> 6
    word = q._wbits[w] & ~(1ULL << (b & 63))
    q._wbits[w] = word
    if not q._wn:
        q._wmin = _NO_KEY
        return
    word &= ~0ULL << (b & 63)  # the buckets after b in its word
    while not word:  # a set bit exists (wn > 0): at worst b's word again, whole
        w = (w + 1) & (_NWORDS - 1)
        word = q._wbits[w]
    b = (w << 6) | _ctz(word)
    q._wmin_bucket = b
    q._wmin = q._went[q._whead[b]].k


cdef inline int _add(EventQueue q, _u128 k) except -1:
    """Put key ``k`` in the wheel if it falls in the wheel's span (an empty wheel's span
    starts at now's bucket), else in the far heap."""
    cdef long long t = _key_t(k)
    if not q._wn:
        q._wbase = (q.now >> _BUCKET_SHIFT) << _BUCKET_SHIFT
    if <unsigned long long>(t - q._wbase) < <unsigned long long>_SPAN_PS:
        _wheel_insert(q, k, _key_slot(k))
        return 0
    _keys_push(&q._far, k)
    q._far_min = q._far.keys[0].k
    return 0


cdef inline int _settle_fired(EventQueue q, Py_ssize_t slot) except -1:
    """After the event in ``slot`` fired (its key left the wheel first): if it scheduled
    itself again (``schedule`` noted its new key), the key goes back, with the same slot;
    else the slot is freed. Inline in the run loop (one call and its register saves fewer
    per event)."""
    if q._refired:
        q._refired = False
        _add(q, q._refire_key)
    else:
        _put(q.heap, slot, None)
        q._vacant[q._nfree] = slot
        q._nfree += 1
    if q._wn:
        _prefetch_event(q, _key_slot(q._wmin))
    return 0


cdef class EventQueue:
    """See heap.py."""

    def __cinit__(self):
        self._whead = <int*>PyMem_Malloc(_NB * sizeof(int))
        self._wbits = <unsigned long long*>PyMem_Malloc(_NWORDS * sizeof(unsigned long long))
        if self._whead == NULL or self._wbits == NULL:
            raise MemoryError()
        memset(self._whead, 0xFF, _NB * sizeof(int))  # -1: every bucket empty
        memset(self._wbits, 0, _NWORDS * sizeof(unsigned long long))
        self._wmin = _NO_KEY
        self._far_min = _NO_KEY

    def __init__(self):
        self.now = 0
        self.heap = []
        self.seq = 0
        self.events = 0

    def __dealloc__(self):
        PyMem_Free(self._whead)
        PyMem_Free(self._wbits)
        PyMem_Free(self._went_raw)
        PyMem_Free(self._far.raw)
        PyMem_Free(self._vacant)

    cdef int _drain_wheel(self) except -1:
        """Move every wheel key to the far heap (before the base moves down)."""
        cdef Py_ssize_t w, b
        cdef unsigned long long word
        cdef int s
        for w in range(_NWORDS):
            word = self._wbits[w]
            while word:
                b = (w << 6) | _ctz(word)
                word &= word - 1
                s = self._whead[b]
                while s >= 0:
                    _keys_push(&self._far, self._went[s].k)
                    s = self._went[s].next
                self._whead[b] = -1
            self._wbits[w] = 0
        self._wn = 0
        self._wmin = _NO_KEY
        self._far_min = self._far.keys[0].k if self._far.n else _NO_KEY
        return 0

    cdef int _bring_far(self) except -1:
        """Move the far heap's root (smaller than every wheel key) to the wheel: the span
        starts at its bucket if the wheel is empty or it is below the base (the wheel's
        keys go to the far heap first); else it is in the span already (below the wheel's
        smallest key)."""
        cdef _u128 k = self._far_min
        _keys_drop_root(&self._far)
        self._far_min = self._far.keys[0].k if self._far.n else _NO_KEY
        if self._wn and _key_t(k) < self._wbase:
            self._drain_wheel()
        if not self._wn:
            self._wbase = _bucket_start(k)
        _wheel_insert(self, k, _key_slot(k))
        return 0

    cdef int _heap_push(self, Event ev) except -1:
        """Push ``ev`` with key ``(ev.t, ev.seq)`` in a free slot of ``heap``."""
        cdef Py_ssize_t slot, cap
        cdef Py_ssize_t* vacant
        cdef void* raw
        cdef _Entry* went
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
            if slot >= self._vcap:  # room to free every slot, and each slot's wheel entry
                cap = self._vcap * 2 if self._vcap else 1024
                vacant = <Py_ssize_t*>PyMem_Realloc(self._vacant, cap * sizeof(Py_ssize_t))
                if vacant == NULL:
                    raise MemoryError()
                self._vacant = vacant
                raw = PyMem_Malloc(cap * sizeof(_Entry) + 64)
                if raw == NULL:
                    raise MemoryError()
                went = <_Entry*>((<size_t>raw + 63) & ~(<size_t>63))  # two entries a line
                if self._vcap:
                    memcpy(went, self._went, self._vcap * sizeof(_Entry))
                PyMem_Free(self._went_raw)
                self._went_raw = raw
                self._went = went
                self._vcap = cap
            heap.append(ev)
        return _add(self, _key(ev.t, ev.seq, slot))

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
        """Pending entries (including stale timer entries). While an event fires, it
        counts only if it scheduled itself again."""
        cdef Py_ssize_t n = self._wn + self._far.n
        if self._firing != NULL and self._refired:
            return n + 1
        return n

    def next_time(self):
        """Time of the earliest pending entry, or None (while an event fires: of the
        others, and of its own next firing if it scheduled itself again)."""
        cdef _u128 best = self._far_min  # all ones (no key) if the far heap is empty
        if self._wmin < best:
            best = self._wmin
        if self._firing != NULL and self._refired and self._refire_key < best:
            best = self._refire_key
        return _key_t(best) if best != _NO_KEY else None

    cpdef long long run_due(self, long long limit) except? -1:
        """See heap.py."""
        cdef long long t, n = 0
        cdef long long last = self.now
        cdef Py_ssize_t slot
        cdef Event ev
        cdef object r
        try:
            while True:
                # The far heap's root goes to the wheel once it is the earliest key.
                if self._wn:
                    if self._far_min < self._wmin:
                        self._bring_far()
                elif self._far.n:
                    self._bring_far()
                else:
                    break
                t = _key_t(self._wmin)
                if t > limit:
                    break
                # The event's key leaves the wheel before it fires (every key pushed
                # meanwhile is larger: later, or as late with a larger seq); _settle_fired
                # then frees its slot or, if it scheduled itself, puts its new key back.
                slot = _key_slot(self._wmin)
                ev = <Event>_event_at(self, slot)
                _wheel_pop_min(self)
                self._firing = <PyObject*>ev
                self._firing_slot = slot
                self._refired = False
                self.now = t
                n += 1
                try:
                    r = ev.fire()
                finally:
                    self._firing = NULL
                    _settle_fired(self, slot)
                if r is _STALE:
                    self.now = last
                else:
                    last = t
        except StopRun:
            pass
        return n
