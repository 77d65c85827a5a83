"""Every terminal table of the project, through one formatter (tabulate).

Cells arrive formatted (the caller decides digits and units, ``"12.3"``, ``"1.05 [0.98,
1.12]"``); ``None`` prints as ``-``. :func:`format_table` draws a header, a rule and the
rows, columns aligned by ``align`` (one letter per column: ``l`` left, ``r`` right);
:func:`format_pairs` draws label/value pairs without a header. Rows printed while they
are produced (``panama train``'s epochs) cannot be measured first and keep fixed widths.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tabulate import tabulate

__all__ = ["format_pairs", "format_table"]

_ALIGN = {"l": "left", "r": "right", "c": "center"}


def _cells(rows: Iterable[Sequence[object]]) -> list[list[str]]:
    return [["-" if c is None else str(c) for c in row] for row in rows]


def format_table(
    rows: Iterable[Sequence[object]], headers: Sequence[str], align: str | None = None, indent: str = ""
) -> str:
    """A header, a rule of dashes and the rows; ``align`` defaults to the first column left, the rest right."""
    align = align or "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError(f"align has {len(align)} letters for {len(headers)} columns")
    text = tabulate(
        _cells(rows),
        headers=list(headers),
        tablefmt="simple",
        disable_numparse=True,
        colalign=tuple(_ALIGN[a] for a in align),
    )
    return "\n".join(indent + line.rstrip() for line in text.splitlines())


def format_pairs(pairs: Iterable[tuple[str, object]], indent: str = "") -> str:
    """``label  value`` lines, labels padded to one width."""
    text = tabulate(_cells(pairs), tablefmt="plain", disable_numparse=True, colalign=("left", "left"))
    return "\n".join(indent + line.rstrip() for line in text.splitlines())
