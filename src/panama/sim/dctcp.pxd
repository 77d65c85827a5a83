# Types of panama/sim/dctcp.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.sim.engine cimport Engine, Timer
from panama.sim.packet cimport SimPacket
from panama.sim.ports cimport Port

cdef long long _KIND_DATA, _KIND_ACK, _CE, _ECT0, _NOT_ECT, _FLAG_ECE

cdef class Flow:
    cdef public object stack
    cdef public object id
    cdef public long long src
    cdef public long long dst
    cdef public object size_bytes
    cdef public long long num_pkts
    cdef public long long last_payload
    cdef public long long start_ps
    cdef public object finish_ps
    cdef public object on_complete
    cdef public unsigned long long hash  # a splitmix64 output (routing.flow_hash)
    cdef public object tag
    cdef public long long data_flags
    # sender
    cdef public long long snd_una
    cdef public long long snd_nxt
    cdef public long long max_sent
    cdef public double cwnd
    cdef public double ssthresh
    cdef public long long dupacks
    cdef public bint in_recovery
    cdef public long long recover
    cdef public double alpha
    cdef public long long win_end
    cdef public long long win_acked
    cdef public long long win_marked
    cdef public long long cwr_end
    cdef public long long srtt
    cdef public long long rttvar
    cdef public long long rto
    cdef public long long backoff
    cdef public Timer timer
    cdef public long long rto_base
    cdef public long long retransmits
    cdef public long long timeouts
    cdef public long long fast_retransmits
    cdef public long long ece_acks
    cdef public object _send
    cdef public object _ack_send
    cdef public Port _up
    cdef public Port _ack_up
    cdef public object _on_data_cb
    cdef public object _on_ack_cb
    cdef public long long _payload
    cdef public long long _last_size
    cdef public long long _ecn
    cdef public Engine _eng
    cdef public double _max_cwnd
    cdef public long long _ack_bytes
    cdef public long long _min_rto_ps
    cdef public long long _max_rto_ps
    cdef public double _g
    cdef public object _cfg
    # receiver
    cdef public long long rcv_nxt
    cdef public set ooo
    cdef public long long rcv_ce
    cdef public object ideal_fct_ps

    cpdef _start(self)

    @cython.locals(size=cython.longlong, now=cython.longlong, p=SimPacket, up=Port)
    cpdef _transmit(self, long long seq, SimPacket spare)

    @cython.locals(nxt=cython.longlong, end=cython.longlong, allowed=cython.double, una=cython.longlong,
                   last=cython.longlong, max_sent=cython.longlong, p=SimPacket, up=Port)
    cpdef _fill(self, SimPacket spare)

    @cython.locals(ack=cython.longlong, una=cython.longlong, acked=cython.longlong, cwnd=cython.double,
                   now=cython.longlong, nxt=cython.longlong, up=Port)
    cpdef _on_ack(self, SimPacket pkt)

    @cython.locals(now=cython.longlong, ack=cython.longlong, ece=cython.longlong, rtt=cython.longlong,
                   d=cython.longlong, rto=cython.longlong, lo=cython.longlong, hi=cython.longlong,
                   una=cython.longlong, acked=cython.longlong,
                   cwnd=cython.double, f=cython.double, g=cython.double)
    cpdef _on_ack_slow(self, SimPacket pkt)

    @cython.locals(cwnd=cython.double)
    cpdef _ece_cut(self)

    cpdef _arm_rto(self, long long now)

    @cython.locals(now=cython.longlong, deadline=cython.longlong)
    cpdef _on_rto(self)

    cpdef _complete(self, long long now)

    @cython.locals(seq=cython.longlong, nxt=cython.longlong, up=Port)
    cpdef _on_data(self, SimPacket pkt)
