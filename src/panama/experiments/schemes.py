"""The schemes every shared-cluster table compares, declared once (standard library only,
so that the command line can show them without importing the simulator).

The simulator's own schemes are :data:`panama.sim.scenario.SCHEMES` (``panama-or`` among
them: PANAMA with the source's tree reaction); an experiment adds the floor (:data:`FLOOR`).
Every ratio a user sees is a *gain* against :data:`BASELINE`: baseline / scheme, "x better",
higher is better (:data:`GAIN_TEXT`).
"""

from __future__ import annotations

__all__ = [
    "BASELINE",
    "DEFAULT_PRESET",
    "FLOOR",
    "FLOOR_LABEL",
    "GAIN_TEXT",
    "PRESET_NAMES",
    "SCHEME_ORDER",
    "scheme_label",
]

#: The built-in scenario presets of ``panama experiment shared-cluster``, in the order the
#: command shows them (their settings: ``panama.experiments.cluster_scenario.PRESETS``, whose
#: keys are these names).
PRESET_NAMES = ("full", "quick", "tiny", "paper", "jobs-dominated")
#: The preset of ``panama experiment shared-cluster`` without --preset/--quick/--scenario.
DEFAULT_PRESET = "paper"

#: The order of the schemes in every table, and the default selection of the commands.
SCHEME_ORDER = ("ring", "ina-fixed", "ina-single", "panama-or", "panama")
#: The baseline of every ratio: host-based ring allreduce.
BASELINE = "ring"
#: The floor: the same scenario with its jobs removed (same background flows, same seed),
#: run beside the schemes so every gain can be read against what the fabric gives short
#: flows without any training traffic.
FLOOR = "floor"
#: How tables, plots and pages name the floor.
FLOOR_LABEL = "floor (no jobs)"
#: How every table and plot says which way its ratios go.
GAIN_TEXT = f"gain = {BASELINE} / scheme: x better than {BASELINE}, higher is better"


def scheme_label(scheme: str) -> str:
    """The name of ``scheme`` in tables and plots (the floor: :data:`FLOOR_LABEL`)."""
    return FLOOR_LABEL if scheme == FLOOR else scheme
