"""``panama.sim.lossless`` keeps its own copies of the ``Port._mode`` values of the
lossless arrival handlers (``panama.sim.ports``'s are C constants when compiled, so not
importable): they must agree, or LosslessPort.fire would hand those events back to
Port.fire (the same handler, through the method table: slower, never wrong). Checked
where the modules are interpreted (CI runs tests/sim with PANAMA_NO_EXTENSIONS=1 too)."""

from __future__ import annotations

import pytest

from panama.sim import lossless, ports


@pytest.mark.skipif(not hasattr(ports, "_HOST_CHECKED"), reason="compiled: the constants are C-level")
def test_lossless_mode_constants_match_ports():
    assert lossless._HOST_CHECKED == ports._HOST_CHECKED
    assert lossless._SWITCH_LOSSLESS == ports._SWITCH_LOSSLESS
