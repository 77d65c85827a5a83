"""The benchmarks' settings models: bounds and cross-field rules name the field; defaults resolve."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from panama.benchmarks.core import run_core_bench
from panama.benchmarks.settings import BenchConfig, CoreBenchConfig, SimBenchConfig, SwitchBenchConfig
from panama.settings import SettingsError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: BenchConfig(workers=1), "workers"),
        (lambda: BenchConfig(sizes_mb=[]), "sizes_mb"),
        (lambda: BenchConfig(sizes_mb=[1.0, float("nan")]), "sizes_mb.1"),
        (lambda: BenchConfig(cc="reno"), "cc"),
        (lambda: BenchConfig(timeout_s=0), "timeout_s"),
        (lambda: SwitchBenchConfig(warmup_s=-1), "warmup_s"),
        (lambda: SwitchBenchConfig(jobs=8, trees=8, window=8), "window"),  # 512 slots over 64 trees
        (lambda: SimBenchConfig(scenario="other"), "scenario"),
        (lambda: CoreBenchConfig(workers=65), "workers"),
    ],
)
def test_bad_values_name_the_field(make, field):
    with pytest.raises(SettingsError) as info:
        make()
    assert info.value.field == field, info.value


def test_no_probes_is_none_either_way():
    assert BenchConfig(min_pto_s=0).min_pto_s is None and BenchConfig(min_pto_s=None).min_pto_s is None


def test_the_allreduce_config_round_trips_through_json():
    cfg = BenchConfig(sizes_mb=[0.5], gloo=False)
    assert cfg.to_dict()["sizes_mb"] == [0.5] and BenchConfig.from_dict(cfg.to_dict()) == cfg


def test_sim_defaults_follow_the_scenario():
    assert SimBenchConfig().resolved().duration_ms == 100.0 and SimBenchConfig().resolved().seed == 1
    panama = SimBenchConfig(scenario="panama").resolved()
    assert (panama.duration_ms, panama.seed) == (3.0, 3)
    assert SimBenchConfig(scenario="panama", duration_ms=0.5, seed=0).resolved().duration_ms == 0.5


def test_core_bench_takes_a_config_or_fields():
    res = run_core_bench(CoreBenchConfig(workers=2, size_mb=0.01))
    assert res.exact and res.workers == 2
    assert run_core_bench(workers=2, size_mb=0.01).contributions == res.contributions
    with pytest.raises(SettingsError):
        run_core_bench(window=0)


BENCH_FILES = [
    *sorted((ROOT / "src" / "panama" / "benchmarks").glob("*.py")),
    *(ROOT / "src" / "panama" / "cli" / name for name in ("runtime_cmds.py", "sim_cmds.py", "core_cmds.py")),
]


@pytest.mark.parametrize("path", BENCH_FILES, ids=lambda p: p.name)
def test_no_long_function(path):
    """No function over 120 lines; one over 80 starts with a ``# Long: <why>`` comment."""
    lines = path.read_text().splitlines()
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            assert length <= 120, (node.name, length)
            if length > 80:
                body = "\n".join(lines[node.lineno : node.lineno + 12])
                assert "# Long:" in body, (node.name, length)
