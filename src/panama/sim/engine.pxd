# Types of panama/sim/engine.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

cdef bint _COMPILED

cdef class Event:
    cdef public long long t
    cdef public long long seq
    cdef public object _fire_cb

    cpdef object fire(self)

cdef class _Call(Event):
    cdef public object fn

@cython.locals(pos=cython.Py_ssize_t, up=cython.Py_ssize_t, parent=Event, t=cython.longlong, seq=cython.longlong)
cdef _heap_push(list heap, Event ev)

@cython.locals(last=Event, top=Event, c=Event, r=Event, n=cython.Py_ssize_t, pos=cython.Py_ssize_t,
               child=cython.Py_ssize_t, t=cython.longlong, seq=cython.longlong)
cdef Event _heap_pop(list heap)

cdef class Engine:
    cdef public long long now
    cdef public list heap
    cdef public long long seq
    cdef public object trace
    cdef public long long events

    cpdef push(self, long long time_ps, object callback)
    cpdef schedule(self, long long time_ps, Event ev)

    @cython.locals(t=cython.longlong, limit=cython.longlong, n=cython.longlong, last=cython.longlong, ev=Event)
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

cdef class _TimerEntry(Event):
    cdef public Timer timer
    cdef public long long token
