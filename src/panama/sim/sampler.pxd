# Types of panama/sim/sampler.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

from panama.sim.engine cimport Engine
from panama.sim.ports cimport Port

@cython.final
cdef class QueueSampler:
    cdef public Engine engine
    cdef public list ports
    cdef public long long interval_ps
    cdef public list times_ps
    cdef public list samples
    cdef public bint _stopped
    cdef public object _cb

    @cython.locals(now=cython.longlong, p=Port, col=list, b=cython.longlong, ports=list, samples=list,
                   i=cython.Py_ssize_t)
    cpdef _sample(self)
