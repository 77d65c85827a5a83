"""``panama hw`` commands: JSON keys, exit codes, one-line errors."""

import json

import pytest

pytest.importorskip("amaranth")

from click.testing import CliRunner  # noqa: E402

from panama.cli import cli  # noqa: E402


def test_verify_json_keys():
    res = CliRunner().invoke(cli, ["hw", "verify", "--packets", "30", "--seed", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["packets"] == 30 and out["mismatches"] == 0 and "verdicts" in out


def test_bad_arguments_exit_2(capsys):
    from panama.cli import main

    for argv in (
        ["hw", "verify", "--packets", "0"],
        ["hw", "report", "--clock-mhz", "0"],
        ["hw", "verify", "--width", "100"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "error" in err[0]


STAT_TAIL = """
3. Printing statistics.

=== add ===

        +----------Local Count, excluding submodules.
        |
      883 wires
     1117 cells
        1   BUFG
       42   CARRY4
      371   FDRE
      112   LUT2
      179   LUT5
       42   LUT6
        3   RAMB36E2
        2   RAMB18E2
        4   DSP48E2

End of script. Logfile hash: 7570ac0afe
"""


def test_yosys_stat_parsing():
    from panama.hw.report import _summarise, parse_stat

    cells = parse_stat("1. earlier\n=== x ===\n  99   LUT6\n" + STAT_TAIL)
    out = _summarise(cells, "xcup")
    assert out["LUT"] == 112 + 179 + 42 and out["FF"] == 371 and out["DSP"] == 4
    assert out["BRAM36"] == 4.0 and out["CARRY"] == 42


def test_shipped_resources_are_those_of_this_design():
    """The LUT/FF/DSP/BRAM figures the report (and docs/hardware.md) give come from a Yosys run of
    the RTL as it is now: any change to the code generating it needs `panama hw report --synth
    --save-synthesis src/panama/data/hw/synthesis.json` (about 25 minutes)."""
    from panama.hw.report import design_digest, load_synthesis_cache, synthesize

    assert design_digest() in load_synthesis_cache()
    res = synthesize()
    assert res["source"] == "cached" and res["LUT"] > 0 and res["FF"] > 0 and res["BRAM36"] > 0
    assert res["yosys"].startswith("YoWASP yosys") and "synth_xilinx -family xcup" in res["script"]


def test_the_design_key_ignores_where_code_lives_but_not_what_it_does():
    """design_digest hashes the top-level definitions of the design sources, sorted by name:
    moving a definition to another module, reformatting, comments, docstrings and imports keep
    the key (and the stored synthesis); changing one constant does not."""
    from panama.hw.report import source_definitions

    def defs(*texts):
        return sorted(d for t in texts for d in source_definitions(t))

    a = '''"""Module A."""
from amaranth import Signal

__all__ = ["f", "K"]
K = 3


def f(m):
    """Add f."""
    return Signal(K)
'''
    b = '''"""Module B."""
import math

__all__ = ["g"]


def g(x):
    return math.floor(x)  # a comment
'''
    # f moved from A to B (other imports, docstrings, comments, layout)
    a2 = """from amaranth import Signal

K = 3
"""
    b2 = '''"""Module B, now with f."""
from typing import TYPE_CHECKING
import math

if TYPE_CHECKING:
    from amaranth import Module

def g(x):
    return math.floor(x)
def f(m):
    return Signal( K )
'''
    assert defs(a, b) == defs(a2, b2)
    assert defs(a, b) != defs(a.replace("K = 3", "K = 4"), b)
    assert defs(a, b) != defs(a.replace("Signal(K)", "Signal(K + 1)"), b)
    # Compile directives and an optional import of cython say how the compiled build runs the
    # code, not what it does; another decorator does change it.
    b3 = b.replace("def g(x):", "@cython.locals(x=cython.int)\n@cython.ccall\ndef g(x):")
    optional = "\ntry:\n    import cython\nexcept ImportError:\n    from shim import cython\n"
    b3 = b3.replace("import math\n", "import math\n" + optional)
    assert defs(a, b3) == defs(a, b)
    assert defs(a, b) != defs(a, b.replace("def g(x):", "@functools.cache\ndef g(x):"))


def test_a_design_without_a_synthesis_says_so(tmp_path):
    from panama.hw.layout import HwConfig
    from panama.hw.report import design_digest, synthesize

    other = HwConfig(slots=8)
    assert design_digest(other) != design_digest()
    res = synthesize(other, cache=tmp_path / "none.json")
    assert "status" in res and "--synth" in res["status"] and "LUT" not in res


def test_report_options_need_synth():
    res = CliRunner().invoke(cli, ["hw", "report", "--no-synth", "--save-synthesis", "x.json"])
    assert res.exit_code == 2 and "--synth" in res.output
