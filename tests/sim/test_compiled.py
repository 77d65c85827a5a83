"""The compiled fast path and the pure-Python path give identical results.

Each scenario runs twice through ``panama simulate`` in subprocesses, once as installed
(compiled when the extensions were built) and once with ``PANAMA_NO_EXTENSIONS=1``;
summary.json (apart from wall time and ``compiled``), flows.csv and jobs.csv must be
identical. Without built extensions both runs would be pure and the comparison is
skipped. The test runs the same way in CI's pure-mode pass (it sets the switch itself).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sim_helpers import python_child

import panama
from panama import _ext
from panama.core.packet import CE, ECT0, FLAG_RESULT, Packet, new_packet
from panama.sim.outputs import differences
from panama.sim.packet import KIND_PANAMA, PANAMA_OVERHEAD_BYTES, SimPacket, panama_sim_packet

GOLDEN = Path(__file__).parent / "golden_sim" / "tiny.toml"
HEAVY = Path(panama.__file__).parent / "data" / "scenarios" / "panama_heavy.toml"


def _simulate(scenario: Path, out: Path, pure: bool, sets: list[str]) -> dict:
    args = [sys.executable, "-m", "panama", "simulate", str(scenario), "--out", str(out), "--no-plots", "-q"]
    for s in sets:
        args += ["--set", s]
    subprocess.run(args, env=_ext.child_env(pure), check=True, capture_output=True, text=True)
    return json.loads((out / "summary.json").read_text())


def test_switch_forces_the_pure_path():
    code = "from panama import _ext; print(_ext.compiled(), sorted(set(_ext.compiled_modules().values())))"
    assert python_child(code, pure=True) == "False [False]"
    # Without the switch every module of the fast path is compiled, or none is.
    compiled, kinds = python_child(code, pure=False).split(" ", 1)
    assert kinds in ("[False]", "[True]") and (compiled == "True") == (kinds == "[True]")
    assert (compiled == "True") == _ext.extensions_built()


def test_child_env_sets_or_removes_the_switch(monkeypatch):
    monkeypatch.setenv(_ext.ENV_VAR, "1")
    assert _ext.ENV_VAR not in _ext.child_env(False)  # compiled where built, whatever this process has
    env = _ext.child_env(True, PYTHONPATH="elsewhere")
    assert env[_ext.ENV_VAR] == "1" and env["PYTHONPATH"] == "elsewhere"
    monkeypatch.delenv(_ext.ENV_VAR)
    assert _ext.child_env(True)[_ext.ENV_VAR] == "1"


CASES = {
    "golden-panama": (GOLDEN, ["scheme=panama"]),
    "golden-ring": (GOLDEN, ["scheme=ring"]),
    # PANAMA-heavy multi-job k=8 fat-tree, shortened to 1 ms (PFC, ECN, four 16-worker
    # in-network jobs, background DCTCP flows).
    "panama-heavy": (HEAVY, ["duration_ms=1.0", "max_time_ms=1.0"]),
    # The same at 100 Gb/s (issue 34): ten times the packets per simulated ms, PFC pauses,
    # releases settled lazily by the switches.
    "panama-heavy-100g": (
        HEAVY,
        ["duration_ms=0.4", "max_time_ms=0.4", "topology.host_rate_gbps=100", "topology.fabric_rate_gbps=100"],
    ),
    # And with a small shared buffer, so that PFC pauses (over 2,000 PAUSE frames: the
    # switches' release timers run while they pause an upstream).
    "panama-heavy-100g-pfc": (
        HEAVY,
        [
            "duration_ms=0.4",
            "max_time_ms=0.4",
            "topology.host_rate_gbps=100",
            "topology.fabric_rate_gbps=100",
            "network.switch_buffer_bytes=400000",
        ],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_and_pure_give_identical_outputs(case, tmp_path):
    if not _ext.extensions_built():
        pytest.skip("the compiled extensions are not built (pure-Python install)")
    scenario, sets = CASES[case]
    fast = _simulate(scenario, tmp_path / "compiled", False, sets)
    pure = _simulate(scenario, tmp_path / "pure", True, sets)
    assert fast["compiled"] is True and pure["compiled"] is False
    assert differences(tmp_path / "compiled", tmp_path / "pure") == []
    assert fast["packet_hops"] > 0
    if case.endswith("-pfc"):
        assert fast["pfc_pauses"] > 0


def test_stale_extensions_force_the_pure_path_with_one_warning_line(monkeypatch, capsys):
    monkeypatch.delenv(_ext.ENV_VAR, raising=False)
    monkeypatch.setattr(_ext, "_stale_extensions", lambda: ["panama.sim.engine", "panama.sim.heap"])
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, _ext._PureFinder)])
    _ext.install_pure_finder()
    _ext.install_pure_finder()  # once per process
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "engine, heap" in err and "pure-Python" in err
    assert isinstance(sys.meta_path[0], _ext._PureFinder)


def test_each_component_has_a_python_and_a_c_implementation():
    root = Path(panama.__file__).parent
    for name in _ext.COMPONENTS:
        assert name in _ext.COMPILED_MODULES
        base = root.joinpath(*name.split(".")[1:])
        for ext in (".py", ".pyx", ".pxd"):
            assert base.with_suffix(ext).exists(), f"{name}: no {ext}"
        assert _ext.source_of(name) == str(base.with_suffix(".pyx"))
    code = f"import {_ext.COMPONENTS[0]} as m; print(m.IMPLEMENTATION)"
    assert python_child(code, pure=True) == "python"
    if _ext.extensions_built():
        assert python_child(code, pure=False) == "C"


def test_generated_c_goes_under_build_never_into_src():
    """Every ``cythonize`` call of setup.py names ``build_dir`` (``build/cython``, git-ignored):
    generated ``.c`` files in ``src`` are leftovers of older builds, never written now."""
    setup_py = Path(__file__).resolve().parents[2] / "setup.py"
    if not setup_py.exists():
        pytest.skip("no source checkout")
    tree = ast.parse(setup_py.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "cythonize"]
    assert calls and all(any(k.arg == "build_dir" for k in call.keywords) for call in calls)
    build_dir = next(
        n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "BUILD_DIR"
    )
    assert [ast.literal_eval(a) for a in build_dir.args] == ["build", "cython"]


def test_no_name_exists_only_compiled():
    """No module uses a name that only its ``.pxd`` defines (``# noqa: F821``): the same
    code runs interpreted."""
    root = Path(panama.__file__).parent
    assert [str(p.relative_to(root)) for p in sorted(root.rglob("*.py")) if "noqa: F821" in p.read_text()] == []


def test_the_field_by_field_constructors_build_the_same_packets():
    """``new_packet`` and ``panama_sim_packet`` set every field of a bare instance (C fields
    compiled): the packets equal those of the class constructors, on either path."""
    payload = np.arange(3, dtype=np.float32)
    fields = (7, 2, 40, 3, 3, FLAG_RESULT, 12, 39, CE, payload)
    p = new_packet(*fields)
    assert type(p) is Packet and dataclasses.astuple(p)[:-1] == fields[:-1] and p.payload is payload
    # (equality with payload arrays differs: the compiled dataclass compares them with ==)
    assert dataclasses.replace(p, seq=41, payload=None) == Packet(*fields[:2], 41, *fields[3:-1], None)
    q = new_packet(7, 2, 40, 3, 361, 0, 12, 39, ECT0, None)
    assert q == Packet(7, 2, 40, 3, 361, 0, 12, 39, ECT0, None)
    wire = panama_sim_packet(q, 5)
    size = PANAMA_OVERHEAD_BYTES + 4 * 361
    assert wire == SimPacket(KIND_PANAMA, 5, -1, size, 0, ECT0, None, 0, 0, 0, 0, q) and wire.arrive_ps == 0
    assert panama_sim_packet(p) == SimPacket(KIND_PANAMA, -1, -1, PANAMA_OVERHEAD_BYTES + 12, 0, CE, inner=p)
