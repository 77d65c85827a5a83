"""The schemes every shared-cluster table compares, declared once (standard library only,
so that the command line can show them without importing the simulator).

The simulator's own schemes are :data:`panama.sim.scenario.SCHEMES`; an experiment adds
variants of them (:data:`SCHEME_VARIANTS`) and the floor (:data:`FLOOR`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BASELINE", "FLOOR", "SCHEME_ORDER", "SCHEME_VARIANTS"]

#: The order of the schemes in every table, and the default selection of the commands.
SCHEME_ORDER = ("ring", "ina-fixed", "ina-single", "panama-or", "panama")
#: The baseline of every ratio: host-based ring allreduce.
BASELINE = "ring"
#: Experiment schemes that are a simulator scheme with settings of their own: ``panama-or``
#: is PANAMA with the source's tree reaction (DCTCP on the OR of marks, ``panama.cc =
#: "dctcp-or"``), beside ``panama`` with the default (``dctcp-path``), in every table.
SCHEME_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {"panama-or": ("panama", {"panama.cc": "dctcp-or"})}
#: The floor: the same scenario with its jobs removed (same background flows, same seed),
#: run beside the schemes so every ratio can be read against what the fabric gives
#: short flows without any training traffic.
FLOOR = "background"
