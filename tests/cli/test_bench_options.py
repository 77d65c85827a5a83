"""The ``panama bench`` commands' options are their settings models' fields (declared once):
same names and defaults as the commands always had, and a bad value names its option."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from panama.benchmarks.settings import BenchConfig, CoreBenchConfig, SimBenchConfig, SwitchBenchConfig
from panama.cli.core_cmds import bench_core
from panama.cli.runtime_cmds import _allreduce_config, bench_allreduce, bench_switch
from panama.cli.sim_cmds import bench_sim
from panama.runtime.settings import DEFAULT_ECN_THRESHOLD_PKTS

# The options each command takes (a contract: docs, tests and bench/ scripts use them).
OPTIONS = {
    bench_allreduce: {
        "--workers": 4,
        "--size-mb": "1,16,100",
        "--iters": 5,
        "--rounds": 3,
        "--leaves": 2,
        "--spines": 2,
        "--trees": None,
        "--payload-elems": 16367,
        "--packet-memory": 512,
        "--cc": "dctcp-or",  # spelled "dctcp" before issue 38 (the same reaction; still accepted)
        "--ecn-threshold": DEFAULT_ECN_THRESHOLD_PKTS,
        "--min-rto-ms": 100.0,
        "--min-pto-ms": 5.0,
        "--drop-prob": 0.0,
        "--multicast-results": True,
        "--skip-gloo": False,
        "--floor": True,
        "--out": None,
        "--json": False,
        "--seed": 0,
    },
    bench_switch: {
        "--jobs": 1,
        "--trees": 2,
        "--workers": 4,
        "--payload-elems": 16367,
        "--window": 8,
        "--seconds": 3.0,
        "--packet-memory": 512,
        "--json": False,
        "--seed": 0,
        "--offload": True,
    },
    bench_sim: {
        "--scenario": "reference",
        "--duration-ms": None,
        "--seed": None,
        "--compare-pure": True,
        "--json": False,
    },
    bench_core: {
        "--workers": 8,
        "--size-mb": 64.0,
        "--payload-elems": 361,
        "--repeat": 1,
        "--seed": 0,
        "--json": False,
    },
}


def _defaults(command) -> dict:
    """What the command's callback gets when no option is given (param name -> value)."""
    with command.make_context(command.name, []) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize("command", list(OPTIONS), ids=lambda c: c.name)
def test_every_option_keeps_its_name_and_default(command):
    params = {opt: p for p in command.params for opt in p.opts}
    given = _defaults(command)
    for option, default in OPTIONS[command].items():
        assert option in params, (command.name, option)
        assert given[params[option].name] == default, (command.name, option, given[params[option].name])
    names = {o for p in command.params for o in p.opts if o not in OPTIONS[command]}
    assert names <= {"--ecn-threshold-pkts"}, names  # the canonical name of --ecn-threshold


@pytest.mark.parametrize(
    "command, model, not_options",
    [
        (bench_allreduce, BenchConfig, {"floor_blocks", "timeout_s"}),
        (bench_switch, SwitchBenchConfig, {"warmup_s"}),
        (bench_sim, SimBenchConfig, set()),
        (bench_core, CoreBenchConfig, {"window"}),
    ],
    ids=lambda x: getattr(x, "name", None) or getattr(x, "__name__", ""),
)
def test_the_options_are_the_models_fields(command, model, not_options):
    """Every field is an option (by its own name, or a converted one for bench allreduce), help from its description."""
    params = {p.name: p for p in command.params}
    assert set(model.model_fields) - not_options <= set(params)
    for name in set(model.model_fields) - not_options:
        description = model.model_fields[name].description
        if name != "gloo":  # --skip-gloo says what the flag does, the opposite of the field
            assert description and description in params[name].help, name


def test_the_ecn_default_is_the_runtimes():
    assert BenchConfig().ecn_threshold_pkts == DEFAULT_ECN_THRESHOLD_PKTS


def test_converted_options_reach_the_model():
    cfg = _allreduce_config(
        {"sizes_mb": "0.5, 2", "min_rto_s": 20.0, "min_pto_s": 0.0, "gloo": True, "ecn_threshold_pkts": 0}
    )
    assert cfg.sizes_mb == [0.5, 2.0] and cfg.min_rto_s == pytest.approx(0.02)
    assert cfg.min_pto_s is None and cfg.gloo is False and cfg.ecn_threshold_pkts == 0  # 0 ms: no probes
    given = {k: v for k, v in _defaults(bench_allreduce).items() if k in BenchConfig.model_fields}
    assert _allreduce_config(given) == BenchConfig()


@pytest.mark.parametrize(
    "command, args, option",
    [
        (bench_allreduce, ["--workers", "1"], "--workers"),
        (bench_allreduce, ["--size-mb", "1,x"], "--size-mb"),
        (bench_allreduce, ["--size-mb", "1,-2"], "--size-mb"),
        (bench_allreduce, ["--size-mb", ","], "--size-mb"),
        (bench_allreduce, ["--min-rto-ms", "0"], "--min-rto-ms"),
        (bench_allreduce, ["--min-pto-ms", "-1"], "--min-pto-ms"),
        (bench_allreduce, ["--ecn-threshold", "-1"], "--ecn-threshold"),
        (bench_allreduce, ["--payload-elems", "70000"], "--payload-elems"),
        (bench_allreduce, ["--spines", "0"], "--spines"),
        (bench_switch, ["--seconds", "-1"], "--seconds"),
        (bench_switch, ["--jobs", "0"], "--jobs"),
        (bench_sim, ["--duration-ms", "20000"], "--duration-ms"),
        (bench_core, ["--repeat", "21"], "--repeat"),
        (bench_core, ["--size-mb", "0"], "--size-mb"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option(command, args, option):
    out = CliRunner().invoke(command, args)
    assert out.exit_code == 2
    last = out.output.strip().splitlines()[-1]
    assert option in last and "Error" in last, out.output


def test_got_names_the_value_as_given():
    """A converted option's error shows what was typed, not the converted value."""
    out = CliRunner().invoke(bench_allreduce, ["--min-pto-ms", "-1"])
    assert "(got -1.0)" in out.output
