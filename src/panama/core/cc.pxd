# Types of panama/core/cc.py for the simulator's compiled fast path (setup.py); the .py
# is the source. Windows are doubles (Python floats), counters and sequence numbers
# 64-bit integers.
cimport cython

cdef class CongestionControl:
    cdef public double cwnd
    cdef public long long cwnd_cap

    @cython.locals(w=cython.longlong)
    cpdef long long win(self) except -1
    cpdef limit_to_cap(self, long long cap)
    cpdef limit_to_path(self, long long window)
    cpdef _clamp(self, long long cap)
    cpdef on_result(self, long long seq, bint ece, long long cwnd_cap, long long snd_nxt)
    cpdef on_timeout(self)

cdef class DctcpOr(CongestionControl):
    cdef public double g
    cdef public double alpha
    cdef public double ssthresh
    cdef public long long _acked
    cdef public long long _marked
    cdef public long long _window_end
    cdef public long long _cwr_end

    @cython.locals(fraction=cython.double)
    cpdef on_result(self, long long seq, bint ece, long long cwnd_cap, long long snd_nxt)

cdef class DctcpPath(DctcpOr):
    cdef public double floor_share
    cdef public double ceiling
    cdef public double floor

    cpdef limit_to_path(self, long long window)
    cpdef on_result(self, long long seq, bint ece, long long cwnd_cap, long long snd_nxt)

cdef class Fixed(CongestionControl):
    pass

cdef class NoControl(CongestionControl):
    cpdef long long win(self) except -1
