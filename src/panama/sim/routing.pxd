# Types of panama/sim/routing.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

cdef unsigned long long _M64, _G64

@cython.locals(x=cython.ulonglong)
cpdef long long ecmp_index(object h, object switch_salt, long long n) except? -1
