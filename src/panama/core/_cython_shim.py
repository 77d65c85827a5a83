"""The few ``cython`` decorators the packet classes and the switches' arrival handlers use,
as no-ops, for an interpreted install without Cython (the compiled build reads the real
ones at compile time: they change how an extension type allocates or how an index is
read, never what the code does).

``panama.core.packet`` and ``panama.sim.packet`` put ``Packet`` and ``SimPacket`` on a free
list and outside the cyclic garbage collector (``freelist``, ``no_gc``, which Cython takes
only on a class marked ``cclass``); interpreted, each is an ordinary class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["cclass", "freelist", "no_gc", "wraparound"]

_C = TypeVar("_C", bound=type)


def freelist(size: int) -> Callable[[_C], _C]:
    """``@cython.freelist(size)``: keep up to ``size`` freed instances for reuse (compiled)."""

    def keep(cls: _C) -> _C:
        return cls

    return keep


def no_gc(cls: _C) -> _C:
    """``@cython.no_gc``: instances are never part of a reference cycle (compiled: untracked)."""
    return cls


def cclass(cls: _C) -> _C:
    """``@cython.cclass``: an extension type (compiled; its fields are in the ``.pxd``)."""
    return cls


def wraparound(flag: bool) -> Callable[[_C], _C]:
    """``@cython.wraparound(False)``: the function indexes with non-negative indices only, so
    the compiled code reads no length for negative ones (interpreted: nothing changes)."""

    def keep(fn: _C) -> _C:
        return fn

    return keep
