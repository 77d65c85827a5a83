# Types of panama/sim/sampler.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.sim.engine cimport Engine
from panama.sim.heap cimport Event, schedule_event
from panama.sim.ports cimport Port

@cython.final
cdef class QueueSampler(Event):
    cdef public Engine engine
    cdef public list ports
    cdef public long long interval_ps
    cdef public list times_ps
    cdef public object _data
    cdef long long[::1] _view
    cdef public bint _stopped

    @cython.locals(now=cython.longlong, p=Port, b=cython.longlong, view=cython.longlong[::1], k=cython.Py_ssize_t,
                   end=cython.Py_ssize_t)
    cpdef _sample(self)
    cpdef _grow(self, Py_ssize_t need)
