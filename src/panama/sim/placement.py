"""Where the simulator's per-packet objects sit in memory: one component, two implementations.

Contract
--------
* ``on_cache_lines(cls)`` asks that every instance of ``cls`` made from now on start at a
  64-byte boundary (a cache line), so that the object's first 64 bytes (its header and
  the fields declared first) are one line. It returns ``cls``. Call it right after the
  class is defined, before any instance exists (``panama.sim.packet`` does it for
  :class:`~panama.sim.packet.SimPacket`). Where the C implementation runs, ``cls`` must
  be an extension type that nothing can subclass, has no items and is not tracked by the
  cyclic garbage collector (anything else: ``TypeError``, naming what is wrong), and must
  not be placed twice.
* ``reserved_bytes()``: the memory set aside for placed objects so far.
* Placement changes where objects are, never what they hold: both implementations give
  the same simulation results.

``placement.py`` (this file) places nothing (the interpreter's allocator decides where a
Python object goes): ``on_cache_lines`` returns ``cls`` and ``reserved_bytes`` 0.
``placement.pyx`` gives the type an allocator of its own: blocks of a whole number of
lines, carved from 64 KiB chunks aligned to a line, and freed blocks kept on one list per
block size for the next object of that size. Chunks are never returned to the system
(as CPython's free lists and arenas mostly are not): a run keeps the most packets it ever
had in flight. Why (docs/performance.md, thirteenth round): CPython's small-object
allocator starts 128-byte blocks 48 bytes into a line, so every packet's header and its
first fields were two lines, and a packet hop waits on each line it touches. Chosen once
at import with the rest of the compiled fast path (:mod:`panama._ext`).
"""

from __future__ import annotations

__all__ = ["on_cache_lines", "reserved_bytes", "IMPLEMENTATION"]

IMPLEMENTATION = "python"  # "C" in placement.pyx


def on_cache_lines(cls: type) -> type:
    """``cls`` unchanged: interpreted, the allocator places Python objects (see the module
    docstring)."""
    return cls


def reserved_bytes() -> int:
    """Memory set aside for placed objects: none here."""
    return 0
