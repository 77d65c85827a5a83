# Types of panama/core/transport.py for the simulator's compiled fast path (setup.py);
# the .py is the source. Sequence numbers, counts, indices, the RTO and receive's ``now``
# are 64-bit integers; the send times and deadlines stored in lists and dicts stay Python
# integers, and the RTO back-off shifts a Python integer (no overflow). The per-tree state
# is one _Tree of C integers per tree.
cimport cython

from panama.core.cc cimport CongestionControl
from panama.core.packet cimport Packet, new_packet

cdef long long _CE, _ECT0, _FLAG_ACK, _FLAG_ECE, _FLAG_RESULT, _FLAG_RETRANSMIT, _MAX_CWND_CAP
cdef long long HEADER_BYTES  # imported from panama.core.codec: a C constant here

@cython.final
cdef class _Tree:
    cdef public CongestionControl cc
    cdef public long long base, gen_start, gen_len, next_k, dups, recover, high
    cdef public bint echo

cdef class WorkerTransport:
    cdef public list tree_ids
    cdef public object job_id
    cdef public object rank
    cdef public long long payload_elems
    cdef public long long num_trees
    cdef public dict _tree_index
    cdef public list cc
    cdef public object cc_name
    cdef public object min_rto_ps
    cdef public object max_rto_ps
    cdef public long long max_retries
    cdef public long long dupthresh
    cdef public object min_pto_ps
    cdef public long long _probe_at
    cdef public long long rto_ps
    cdef public double _srtt
    cdef public double _rttvar
    cdef public long long generation
    cdef public list _trees
    cdef public list _inflight
    cdef public list _order
    cdef public long long _head
    cdef public long long _n_new
    cdef public dict _resent_due
    cdef public list _resent_heap
    cdef public dict _retries
    cdef public list _retx_queue
    cdef public list _closing_acks
    cdef public bytearray _got
    cdef public long long _remaining
    cdef public long long _npkts
    cdef public long long _num_elems
    cdef public object _data
    cdef public object _out
    cdef public bint active
    cdef public bint trace_windows
    cdef public list window_trace
    cdef public dict _stats
    cdef public long long _n_sent
    cdef public long long _n_bytes
    cdef public long long _n_results
    cdef public long long _n_ece
    cdef public long long _n_ce

    @cython.locals(out=list, inflight=list, order=list, n_new=cython.longlong, due=dict, T=cython.longlong,
                   t=cython.longlong, k=cython.longlong, i=cython.longlong, more=cython.bint, limit=cython.longlong,
                   window_end=cython.longlong,
                   trees=list, tree=_Tree, resent=cython.longlong)
    cpdef list poll(self, object now)

    @cython.locals(T=cython.longlong, t=cython.longlong, pe=cython.longlong, lo=cython.longlong,
                   count=cython.longlong, ecn=cython.longlong, g=cython.longlong, tree=_Tree)
    cpdef Packet _packet(self, long long i, long long flags)

    @cython.locals(first=cython.longlong, head=cython.longlong, i=cython.longlong, sent_at=cython.longlong)
    cpdef object timer(self)

    @cython.locals(T=cython.longlong, t=cython.longlong, k=cython.longlong, i=cython.longlong,
                   pe=cython.longlong, lo=cython.longlong, count=cython.longlong, base=cython.longlong,
                   end=cython.longlong, start=cython.longlong, old_base=cython.longlong, seq=cython.longlong,
                   ece=cython.bint, ctl=CongestionControl, before=cython.longlong, stats=dict, flags=cython.longlong,
                   got=bytearray, tree=_Tree, sent_at=cython.longlong)
    cpdef receive(self, Packet packet, long long now)

    @cython.locals(T=cython.longlong, i=cython.longlong, tree=_Tree)
    cpdef _fast_retransmit(self, long long t, long long base, long long old_base, long long seq)

    @cython.locals(pto=cython.longlong)
    cpdef _arm_probe(self, long long now)

    @cython.locals(T=cython.longlong, t=cython.longlong, i=cython.longlong, base=cython.longlong,
                   probes=cython.longlong, queued=set, tree=_Tree)
    cpdef _probe(self)

    cpdef _ignore(self, str reason)
    @cython.locals(r=cython.double, srtt=cython.double, rttvar=cython.double, rto=cython.double,
                   lo=cython.longlong, hi=cython.longlong)
    cpdef _rtt_sample(self, long long rtt)
