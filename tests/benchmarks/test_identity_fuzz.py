"""bench/identity_fuzz.py: the draws are valid scenarios, the comparison sees what differs,
the verdicts, and one real case through both paths."""

import json
import random
import sys
from pathlib import Path

import pytest

from panama import _ext
from panama.sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
try:
    import identity_fuzz
finally:
    sys.path.remove(str(ROOT / "bench"))


@pytest.mark.parametrize("stress", [False, True])
def test_every_draw_is_a_scenario_the_loader_accepts_and_a_seed_repeats_it(stress):
    def draws_of(seed):
        rng = random.Random(seed)
        return [identity_fuzz.draw_case(rng, stress) for _ in range(60)]

    draws = draws_of(7)
    assert draws == draws_of(7)
    assert {base for base, _ in draws} == set(identity_fuzz.BASES)
    for base, sets in draws:
        scenario = load_scenario(identity_fuzz.BASES[base][0], sets)  # unknown keys or values raise
        assert scenario.scheme in identity_fuzz.SCHEMES
    slots = {s for _, sets in draws for s in sets if s.startswith("pswitch.packet_memory_slots=")}
    harsh = {f"pswitch.packet_memory_slots={v}" for v in identity_fuzz.OPTIONS["pswitch.packet_memory_slots"][2]}
    assert slots and (slots <= harsh) == stress


@pytest.mark.parametrize(
    ("fast", "pure", "verdict"),
    [
        (
            {"summary": {"compiled": True, "packet_hops": 5, "drops": 0}},
            {"summary": {"compiled": False, "packet_hops": 5, "drops": 0}},
            "identical",
        ),
        (
            {"summary": {"compiled": True, "packet_hops": 5, "drops": 0}},
            {"summary": {"compiled": False, "packet_hops": 6, "drops": 0}},
            "differs",
        ),
        (
            {"summary": {"compiled": False, "packet_hops": 5, "drops": 0}},
            {"summary": {"compiled": False, "packet_hops": 5, "drops": 0}},
            "failed",
        ),
        ({"error": "buffer too small"}, {"error": "buffer too small"}, "refused"),
        ({"error": "buffer too small"}, {"summary": {"compiled": False}}, "failed"),
        ({"error": "Traceback: boom"}, {"error": "no result within 9 s (pure)"}, "failed"),
    ],
)
def test_the_verdict_of_a_case(monkeypatch, tmp_path, fast, pure, verdict):
    def simulate(base, sets, out, is_pure, timeout_s):
        out.mkdir(parents=True)
        result = pure if is_pure else fast
        if "summary" in result:
            (out / "summary.json").write_text(json.dumps(result["summary"]))
        return result

    monkeypatch.setattr(identity_fuzz, "simulate", simulate)
    with identity_fuzz.ThreadPoolExecutor(2) as pool:
        row = identity_fuzz.run_case("tiny", ["seed=1"], tmp_path, 9.0, pool)
    assert row["verdict"] == verdict


def test_usage_errors():
    for argv in (["--cases", "0"], ["--timeout", "0"]):
        with pytest.raises(SystemExit) as info:
            identity_fuzz.main(argv)
        assert info.value.code == 2


@pytest.mark.slow
def test_one_real_case_through_both_paths(tmp_path, capsys):
    if not _ext.extensions_built():
        pytest.skip("the compiled extensions are not built (pure-Python install)")
    out = tmp_path / "fuzz.json"
    assert identity_fuzz.main(["--cases", "1", "--seed", "3", "--json", str(out)]) == 0
    (case,) = json.loads(out.read_text())["cases"]
    assert case["verdict"] == "identical" and case["hops"] > 0
    assert "1 identical, 0 differs, 0 failed, 0 refused" in capsys.readouterr().out
