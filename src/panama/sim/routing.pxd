# Types of panama/sim/routing.py for the compiled fast path (setup.py); the .py is the source.
cimport cython

cdef unsigned long long _M64, _G64

@cython.locals(x=cython.ulonglong)
# Flow hashes and salts are unsigned 64-bit (splitmix64 outputs, seeded draws below 2**63).
cpdef long long ecmp_index(unsigned long long h, unsigned long long switch_salt, long long n) except? -1
