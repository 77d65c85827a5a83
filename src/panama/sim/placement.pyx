# cython: language_level=3
"""Object placement, C implementation (contract and choice: ``placement.py``).

A placed type's ``tp_alloc`` and ``tp_free`` are the two C functions below: a block of
``ceil(basicsize / 64)`` lines per object, taken from that block size's list of freed
blocks, else carved from the current 64 KiB chunk of that size (a new chunk, aligned to a
line, when it is used up). Objects are zeroed and initialised as ``PyType_GenericAlloc``
does for a type outside the cyclic collector. One interpreter, one thread at a time (the
GIL): the lists need no lock.
"""

IMPLEMENTATION = "C"

cdef extern from *:
    """
    #define PANAMA_LINE_BYTES 64
    #define PANAMA_MAX_LINES 8                /* blocks of 1 to 8 lines (64 to 512 bytes) */
    #define PANAMA_CHUNK_BYTES (64 * 1024)

    static void* panama_freed[PANAMA_MAX_LINES + 1];  /* per block size: freed blocks, linked */
    static char* panama_next[PANAMA_MAX_LINES + 1];   /* per block size: the chunk's next block */
    static char* panama_end[PANAMA_MAX_LINES + 1];    /* per block size: the end of that chunk */
    static Py_ssize_t panama_reserved = 0;

    static Py_ssize_t panama_lines_of(Py_ssize_t size) {
        return (size + PANAMA_LINE_BYTES - 1) / PANAMA_LINE_BYTES;
    }

    static PyObject* panama_placed_alloc(PyTypeObject* type, Py_ssize_t nitems) {
        Py_ssize_t lines = panama_lines_of(type->tp_basicsize);
        size_t block = (size_t)lines * PANAMA_LINE_BYTES;
        void* p = panama_freed[lines];
        (void)nitems;  /* placed types have no items (on_cache_lines checks) */
        if (p != NULL) {
            panama_freed[lines] = *(void**)p;
        } else {
            if (panama_next[lines] == NULL || panama_next[lines] + block > panama_end[lines]) {
                char* raw = (char*)PyMem_RawMalloc(PANAMA_CHUNK_BYTES + PANAMA_LINE_BYTES);
                char* start;
                if (raw == NULL)
                    return PyErr_NoMemory();
                start = (char*)(((uintptr_t)raw + PANAMA_LINE_BYTES - 1) & ~(uintptr_t)(PANAMA_LINE_BYTES - 1));
                panama_next[lines] = start;
                panama_end[lines] = start + PANAMA_CHUNK_BYTES;
                panama_reserved += PANAMA_CHUNK_BYTES + PANAMA_LINE_BYTES;
            }
            p = panama_next[lines];
            panama_next[lines] += block;
        }
        memset(p, 0, (size_t)type->tp_basicsize);
        return PyObject_Init((PyObject*)p, type);
    }

    static void panama_placed_free(void* p) {
        Py_ssize_t lines = panama_lines_of(Py_TYPE((PyObject*)p)->tp_basicsize);
        *(void**)p = panama_freed[lines];
        panama_freed[lines] = p;
    }

    /* 0, or why ``type`` cannot be placed. */
    static const char* panama_unplaceable(PyTypeObject* type) {
        if (type->tp_alloc == panama_placed_alloc)
            return "is placed already";
        if (type->tp_flags & Py_TPFLAGS_HEAPTYPE)
            return "is not an extension type (a class defined in Python)";
        if (type->tp_flags & Py_TPFLAGS_BASETYPE)
            return "can be subclassed (declare it final)";
        if (type->tp_flags & Py_TPFLAGS_HAVE_GC)
            return "is tracked by the cyclic garbage collector";
        if (type->tp_itemsize != 0)
            return "has items (a variable size)";
        if (panama_lines_of(type->tp_basicsize) > PANAMA_MAX_LINES)
            return "is larger than 512 bytes";
        if (type->tp_alloc != PyType_GenericAlloc || type->tp_free != PyObject_Free)
            return "has an allocator of its own";
        return NULL;
    }

    static void panama_place(PyTypeObject* type) {
        type->tp_alloc = panama_placed_alloc;
        type->tp_free = panama_placed_free;
    }
    """
    ctypedef struct PyTypeObject
    const char* panama_unplaceable(PyTypeObject* type)
    void panama_place(PyTypeObject* type)
    Py_ssize_t panama_reserved


def on_cache_lines(cls):
    """See placement.py: ``cls``, whose instances now start on a 64-byte line."""
    if not isinstance(cls, type):
        raise TypeError(f"on_cache_lines: {cls!r} is not a class")
    cdef const char* why = panama_unplaceable(<PyTypeObject*>cls)
    if why != NULL:
        raise TypeError(f"on_cache_lines: {cls.__qualname__} {why.decode()}")
    panama_place(<PyTypeObject*>cls)
    return cls


def reserved_bytes():
    """Memory set aside for placed objects so far (chunks, with their alignment slack)."""
    return panama_reserved
