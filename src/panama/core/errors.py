"""The one error base for inputs at fault (:class:`FieldError`).

Every error that names the offending input (a command-line option, a config or scenario
key, a table column, a control-request argument, an address) subclasses it, so callers
(the CLI's one-line messages, HTTP 400 bodies) read ``field`` and ``detail`` as
attributes and never split the message text.
"""

from __future__ import annotations

__all__ = ["FieldError"]


class FieldError(ValueError):
    """``field`` (which input) and ``detail`` (what is wrong with it); ``str()`` is ``"field: detail"``."""

    def __init__(self, field: str, detail: str):
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail

    def __reduce__(self):  # picklable across processes (Dask workers, multiprocessing)
        return (type(self), (self.field, self.detail))
