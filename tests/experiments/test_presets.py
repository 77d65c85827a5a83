"""The preset names are declared once (experiments/schemes.py, light enough for the command
line) and are exactly the keys of the presets' settings."""

from panama.experiments.cluster_scenario import PRESETS
from panama.experiments.schemes import DEFAULT_PRESET, PRESET_NAMES


def test_the_preset_names_are_the_presets():
    assert set(PRESET_NAMES) == set(PRESETS) and len(PRESET_NAMES) == len(set(PRESET_NAMES))
    assert DEFAULT_PRESET in PRESET_NAMES


def test_the_command_offers_every_preset():
    from panama.cli.experiment_cmds import shared_cluster_cmd

    preset = next(p for p in shared_cluster_cmd.params if p.name == "preset")
    assert tuple(preset.type.choices) == PRESET_NAMES
