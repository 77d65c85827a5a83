"""Count the Python bytecodes a piece of code executes, by function (machine-load independent)."""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable
from typing import Any


def count_opcodes(run: Callable[[], Any]) -> collections.Counter[str]:
    """Run ``run()`` under an opcode tracer; return bytecodes executed per qualified function name.

    ``run``'s own frame is not counted (it is the driver loop, not the code measured).
    """
    counts: collections.Counter[str] = collections.Counter()
    driver = getattr(run, "__code__", None)

    def tracer(frame, event, arg):
        if frame.f_code is driver:
            return None  # calls made from it are still traced
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[frame.f_code.co_qualname] += 1
        return tracer

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return counts
