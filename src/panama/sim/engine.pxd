# Types of panama/sim/engine.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

cdef class Engine:
    cdef public long long now
    cdef public list heap
    cdef public long long seq
    cdef public object trace
    cdef public long long events

    cpdef push(self, long long time_ps, object callback)

    @cython.locals(t=cython.longlong, seq=cython.longlong, limit=cython.longlong, n=cython.longlong, last=cython.longlong)
    cpdef long long run(self, object until_ps=*)

cdef class Timer:
    cdef public Engine engine
    cdef public object callback
    cdef public object when
    cdef public object _entry_time
    cdef public long long _token

    cpdef arm(self, long long time_ps)
    cpdef cancel(self)
    cpdef object _fire(self, long long token)
