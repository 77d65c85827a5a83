"""The results page's outputs and the experiment behind each: one table (:data:`PAGE`) that
``panama experiment reproduce`` runs, that names the directories ``panama experiment publish``
stores (:data:`PAGE_OUTPUTS`), and whose :meth:`PageOutput.command` is the command each output
records and the page prints ("Command: ..."), so that what reproduce runs and what the page
says was run cannot drift apart.

The settings are those the published page used (docs/results.md; docs/experiments.md, "What
holds PANAMA's tail"); ``tests/experiments/test_reproduce.py`` checks them against the stored
outputs' ``config.json`` (docs/results/<name>/).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PAGE", "PAGE_OUTPUTS", "PageOutput", "page_output"]


@dataclass(frozen=True)
class PageOutput:
    """One output of the results page: its directory name and the experiment that writes it.

    ``kind`` is ``comm-ratio``, ``shared-cluster`` or ``demo``. For shared-cluster outputs:
    ``preset``, ``seeds`` (``()``: the preset's own seeds), ``schemes`` (``()``: every scheme,
    the command's default) and ``sets`` (``--set KEY=VALUE`` overrides of the preset's scenario).
    """

    name: str
    kind: str
    preset: str | None = None
    seeds: tuple[int, ...] = ()
    schemes: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()

    def settings(self, *, seeds: Sequence[int] | None = None, preset: str | None = None) -> list[str]:
        """The command-line options that decide this output's numbers (not ``--out``, ``-j``),
        in the page's order; ``seeds``/``preset`` replace the table's (reproduce's --seeds, --preset)."""
        if self.kind != "shared-cluster":
            return []
        args = ["--preset", preset or self.preset or ""]
        chosen = tuple(seeds) if seeds else self.seeds
        if chosen:
            args += ["--seeds", ",".join(str(s) for s in chosen)]
        if self.schemes:
            args += ["--schemes", ",".join(self.schemes)]
        for s in self.sets:
            args += ["--set", s]
        return args

    def command(self, out: str | Path, *, seeds: Sequence[int] | None = None, preset: str | None = None) -> str:
        """The standalone command that writes this output into ``out`` (what the page prints)."""
        head = {
            "comm-ratio": ["panama", "experiment", "comm-ratio"],
            "shared-cluster": ["panama", "experiment", "shared-cluster"],
            "demo": ["panama", "demo"],
        }[self.kind]
        return shlex.join([*head, *self.settings(seeds=seeds, preset=preset), "--out", Path(out).as_posix()])


#: The page's outputs in page order (the first shared-cluster one is the page's main
#: configuration), with the settings the published page used.
PAGE = (
    PageOutput("comm-ratio", "comm-ratio"),
    PageOutput("paper", "shared-cluster", preset="paper", seeds=(1, 2, 3), schemes=("ring", "panama-or", "panama")),
    PageOutput("jobs-dominated", "shared-cluster", preset="jobs-dominated"),
    PageOutput(
        "paper-100g",
        "shared-cluster",
        preset="paper",
        seeds=(1, 2, 3),
        schemes=("ring", "panama-or", "panama"),
        sets=("topology.host_rate_gbps=100", "topology.fabric_rate_gbps=100"),
    ),
    PageOutput("demo", "demo"),
)

#: The outputs of the results page, by directory name, in page order.
PAGE_OUTPUTS = tuple(o.name for o in PAGE)


def page_output(name: str) -> PageOutput:
    """The table's entry for ``name`` (KeyError when it is not on the page)."""
    for o in PAGE:
        if o.name == name:
            return o
    raise KeyError(name)
