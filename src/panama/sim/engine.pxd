# Types of panama/sim/engine.py for the compiled fast path (setup.py); the .py is the source.
# The event queue it builds on is the component panama.sim.heap (heap.pyx / heap.py).
cimport cython

from panama.sim.heap cimport Event, EventQueue, schedule_event

cdef object _STALE

@cython.final
cdef class Engine(EventQueue):
    cdef public object trace

    @cython.locals(n=cython.longlong)
    cpdef long long run(self, object until_ps=*)

cdef class _TimerEntry

@cython.final
cdef class Timer:
    cdef public Engine engine
    cdef public object callback
    cdef public object when
    cdef public long long _entry_time
    cdef public long long _token

    cpdef arm(self, long long time_ps)
    cpdef cancel(self)
    @cython.locals(when=cython.longlong)
    cpdef object _fire(self, _TimerEntry entry)

@cython.final
cdef class _TimerEntry(Event):
    cdef public Timer timer
    cdef public long long token
