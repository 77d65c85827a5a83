# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The loop of ``panama.benchmarks.sim.minimal_loop`` in C (built by ``sim_c_floor.py``).

The same store-and-forward hops over the reference dumbbell, in the same ``(time, seq)``
order: a 4-ary heap of C structs (one entry per packet, as the heapq loop has), links'
busy-until times in a C array, no Python object touched per hop. It is the floor of that
hop pattern in C: what a hop costs when nothing but the heap and the link are modelled.
"""

from libc.stdlib cimport free, malloc
from time import process_time


ctypedef struct _Hop:
    long long t
    long long seq
    int flow
    int hop


cdef inline bint _before(_Hop* a, _Hop* b) noexcept nogil:
    return a.t < b.t or (a.t == b.t and a.seq < b.seq)


def c_loop(long long n_hops, int n_flows, int window, long long ps_per_byte, long long delay_ps,
           long long data_bytes, long long ack_bytes):
    """Move ``n_hops`` hops; returns ``(hops, CPU seconds, final busy-until per link)``."""
    cdef long long tx_data = data_bytes * ps_per_byte, tx_ack = ack_bytes * ps_per_byte
    cdef int n = n_flows, size = 0, i, k, pos, child, c, last, link
    cdef _Hop* heap = <_Hop*>malloc((n * window + 1) * sizeof(_Hop))
    cdef long long* busy = <long long*>malloc((2 * n + 2) * sizeof(long long))
    cdef long long seq = 0, hops = 0, b, tx
    cdef _Hop e
    if heap == NULL or busy == NULL:
        free(heap)
        free(busy)
        raise MemoryError()
    for i in range(2 * n + 2):
        busy[i] = 0
    for i in range(n):  # in (0, seq) order: already a heap
        for k in range(window):
            seq += 1
            heap[size].t = 0
            heap[size].seq = seq
            heap[size].flow = i
            heap[size].hop = 0
            size += 1
    t0 = process_time()
    while hops < n_hops:
        e = heap[0]
        if e.hop == 0:  # data up, data down, ACK up, ACK down
            link, tx = e.flow, tx_data
        elif e.hop == 1:
            link, tx = n, tx_data
        elif e.hop == 2:
            link, tx = n + 1, tx_ack
        else:
            link, tx = n + 2 + e.flow, tx_ack
        b = busy[link]
        if b < e.t:
            b = e.t
        b += tx
        busy[link] = b
        hops += 1
        seq += 1
        e.t = b + delay_ps
        e.seq = seq
        e.hop = (e.hop + 1) & 3
        pos = 0  # the root's packet goes back in at its next time: sift it down
        while True:
            child = 4 * pos + 1
            if child >= size:
                break
            last = child + 3 if child + 3 < size else size - 1
            c = child + 1
            while c <= last:
                if _before(&heap[c], &heap[child]):
                    child = c
                c += 1
            if not _before(&heap[child], &e):
                break
            heap[pos] = heap[child]
            pos = child
        heap[pos] = e
    seconds = process_time() - t0
    final = [busy[i] for i in range(2 * n + 2)]
    free(heap)
    free(busy)
    return hops, seconds, final
