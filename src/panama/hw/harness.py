"""The place-and-route harness of the datapath (:mod:`panama.hw.pnr`): the datapath's ports on
shift registers, so that a design with about 1,200 port bits fits a package with a few pins
and every datapath input and output is a flip-flop beside it (as behind a MAC)."""

from __future__ import annotations

from amaranth import Cat, Elaboratable, Module, Mux, Signal

from panama.hw.datapath import AggregationDatapath
from panama.hw.layout import HwConfig

__all__ = ["PnrHarness", "pnr_verilog"]

_IN_PORTS = (
    "in_data",
    "in_valid",
    "in_last",
    "in_port",
    "in_ecn",
    "in_length",
    "out_ready",
    "ctl_valid",
    "ctl_we",
    "ctl_tree",
    "ctl_field",
    "ctl_index",
    "ctl_wdata",
)
_OUT_PORTS = (
    "in_ready",
    "out_data",
    "out_valid",
    "out_last",
    "out_dests",
    "out_ecn",
    "event_valid",
    "event_code",
    "event_emit",
    "ctl_ready",
    "ctl_rdata",
    "host_req",
    "busy",
    "bad_key_drops",
)


class PnrHarness(Elaboratable):
    """The datapath with its ports on shift registers: ``sin`` shifts into the register driving
    every input port; with ``load`` the register behind ``sout`` takes every output port,
    otherwise it shifts. Four pins besides the clock and reset."""

    def __init__(self, cfg: HwConfig = HwConfig()):
        self.cfg = cfg
        self.sin = Signal()
        self.load = Signal()
        self.sout = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = AggregationDatapath(self.cfg)
        ins = Cat(*(getattr(dut, n) for n in _IN_PORTS))
        outs = Cat(*(getattr(dut, n) for n in _OUT_PORTS))
        chain_in = Signal(len(ins))
        chain_out = Signal(len(outs))
        m.d.sync += chain_in.eq(Cat(self.sin, chain_in[:-1]))
        m.d.sync += chain_out.eq(Mux(self.load, outs, chain_out >> 1))
        m.d.comb += [ins.eq(chain_in), self.sout.eq(chain_out[0])]
        return m


def pnr_verilog(cfg: HwConfig) -> str:
    from amaranth.back import verilog

    h = PnrHarness(cfg)
    return verilog.convert(h, name="panama_pnr", ports=[h.sin, h.load, h.sout])
