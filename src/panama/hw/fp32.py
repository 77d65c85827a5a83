"""A pipelined IEEE-754 binary32 adder in Amaranth, bit-exact with numpy float32 addition.

Round to nearest, ties to even; signed zeros (``x + -x`` is ``+0``, ``-0 + -0`` is
``-0``); subnormal inputs and outputs (no flush to zero); overflow to infinity;
infinities. NaN rule (the one x86 SSE/AVX ``addps`` applies, hence numpy on x86): if
``a`` is a NaN the result is ``a`` quieted (bit 22 set), else if ``b`` is a NaN it is
``b`` quieted, else ``inf + -inf`` gives the default NaN ``0xFFC00000``. Other
platforms may return other NaN bits, so tests and verification compare NaN results by
NaN-ness and the quiet bit (see :func:`same_float_bits`); every other result must be
equal bit for bit.

Pipeline, one addition per cycle, latency :data:`LATENCY` cycles (a register after
each stage)::

    S1 unpack, specials, swap so |x| >= |y|, exponent difference
    S2 align y: shift right by the difference into guard/round/sticky bits
    S3 add or subtract the 27-bit significands
    S4 normalise: carry shift right, or leading-zero shift left (stopping at the
       subnormal exponent)
    S5 round to nearest even on the packed word (the carry ripples into the exponent,
       so subnormal -> normal and max -> infinity need no special case), pack

``op`` selects :data:`OP_ADD`, :data:`OP_PASS_A` or :data:`OP_PASS_B`: the pass ops
ride the specials path, so the aggregation datapath can copy or re-emit a word through
the same pipeline without extra delay registers.
"""

from __future__ import annotations

import numpy as np
from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal

LATENCY = 5
OP_ADD = 0
OP_PASS_A = 1
OP_PASS_B = 2
DEFAULT_NAN = 0xFFC00000
QUIET_BIT = 0x00400000


class Fp32Adder(Elaboratable):
    """One lane: ``a``, ``b``, ``op``, ``valid`` in; ``result``, ``valid_out`` LATENCY cycles later."""

    def __init__(self):
        self.a = Signal(32)
        self.b = Signal(32)
        self.op = Signal(2)
        self.valid = Signal()
        self.result = Signal(32)
        self.valid_out = Signal()

    def elaborate(self, platform):
        m = Module()
        s1 = _unpack(m, self)
        s2 = _align(m, s1)
        s3 = _add(m, s2)
        s4 = _normalise(m, s3)
        _round_and_pack(m, s4, self)
        return m


def _unpack(m: Module, adder: Fp32Adder) -> dict:
    """S1: unpack, specials (and the pass ops), swap so |x| >= |y|, exponent difference."""
    a, b = adder.a, adder.b
    ea, eb = a[23:31], b[23:31]
    fa, fb = a[0:23], b[0:23]
    a_nan = (ea == 0xFF) & (fa != 0)
    b_nan = (eb == 0xFF) & (fb != 0)
    a_inf = (ea == 0xFF) & (fa == 0)
    b_inf = (eb == 0xFF) & (fb == 0)
    special = Signal()
    special_val = Signal(32)
    m.d.comb += special.eq(1)
    with m.If(adder.op == OP_PASS_A):
        m.d.comb += special_val.eq(a)
    with m.Elif(adder.op == OP_PASS_B):
        m.d.comb += special_val.eq(b)
    with m.Elif(a_nan):
        m.d.comb += special_val.eq(a | QUIET_BIT)
    with m.Elif(b_nan):
        m.d.comb += special_val.eq(b | QUIET_BIT)
    with m.Elif(a_inf & b_inf & (a[31] != b[31])):
        m.d.comb += special_val.eq(DEFAULT_NAN)
    with m.Elif(a_inf):
        m.d.comb += special_val.eq(a)
    with m.Elif(b_inf):
        m.d.comb += special_val.eq(b)
    with m.Else():
        m.d.comb += special.eq(0)
    swap = b[0:31] > a[0:31]
    x = Mux(swap, b, a)
    y = Mux(swap, a, b)
    ex_eff = Mux(x[23:31] == 0, 1, x[23:31])
    ey_eff = Mux(y[23:31] == 0, 1, y[23:31])
    s1_valid = Signal()
    s1_special = Signal()
    s1_sval = Signal(32)
    s1_sign = Signal()
    s1_sub = Signal()
    s1_e = Signal(8)
    s1_d = Signal(8)
    s1_mx = Signal(24)
    s1_my = Signal(24)
    m.d.sync += [
        s1_valid.eq(adder.valid),
        s1_special.eq(special),
        s1_sval.eq(special_val),
        s1_sign.eq(x[31]),
        s1_sub.eq(x[31] ^ y[31]),
        s1_e.eq(ex_eff),
        s1_d.eq(ex_eff - ey_eff),
        s1_mx.eq(Cat(x[0:23], x[23:31] != 0)),
        s1_my.eq(Cat(y[0:23], y[23:31] != 0)),
    ]
    return dict(
        valid=s1_valid, special=s1_special, sval=s1_sval, sign=s1_sign, sub=s1_sub, e=s1_e, d=s1_d, mx=s1_mx, my=s1_my
    )


def _align(m: Module, s1: dict) -> dict:
    """S2: align the smaller operand (27 bits: significand, guard, round, sticky)."""
    my_ext = Signal(27)
    m.d.comb += my_ext.eq(s1["my"] << 3)
    shift = Signal(5)
    m.d.comb += shift.eq(Mux(s1["d"] > 26, 27, s1["d"][0:5]))
    shifted = Signal(27)
    m.d.comb += shifted.eq(my_ext >> shift)
    lost = Signal(27)
    m.d.comb += lost.eq(my_ext & ((Const(1, 28) << shift) - 1)[0:27])
    s2 = dict(
        valid=Signal(),
        special=Signal(),
        sval=Signal(32),
        sign=Signal(),
        sub=Signal(),
        e=Signal(8),
        mx=Signal(27),
        my=Signal(27),
    )
    m.d.sync += [
        s2["valid"].eq(s1["valid"]),
        s2["special"].eq(s1["special"]),
        s2["sval"].eq(s1["sval"]),
        s2["sign"].eq(s1["sign"]),
        s2["sub"].eq(s1["sub"]),
        s2["e"].eq(s1["e"]),
        s2["mx"].eq(s1["mx"] << 3),
        s2["my"].eq(shifted | (lost != 0)),
    ]
    return s2


def _add(m: Module, s2: dict) -> dict:
    """S3: add or subtract (|x| >= |y|, so the difference is never negative)."""
    s3 = dict(
        valid=Signal(), special=Signal(), sval=Signal(32), sign=Signal(), sub=Signal(), e=Signal(8), sum=Signal(28)
    )
    m.d.sync += [
        s3["valid"].eq(s2["valid"]),
        s3["special"].eq(s2["special"]),
        s3["sval"].eq(s2["sval"]),
        s3["sign"].eq(s2["sign"]),
        s3["sub"].eq(s2["sub"]),
        s3["e"].eq(s2["e"]),
        s3["sum"].eq(Mux(s2["sub"], s2["mx"] - s2["my"], s2["mx"] + s2["my"])),
    ]
    return s3


def _normalise(m: Module, s3: dict) -> dict:
    """S4: normalise: carry shift right, or leading-zero shift left (stopping at the subnormal exponent)."""
    total = s3["sum"]
    lz = Signal(5)
    m.d.comb += lz.eq(27)
    for i in range(27):  # the highest set bit wins (later assignments take priority)
        with m.If(total[i]):
            m.d.comb += lz.eq(26 - i)
    lshift = Signal(5)
    m.d.comb += lshift.eq(Mux(lz < s3["e"], lz, s3["e"] - 1))
    norm = Signal(27)
    exp = Signal(9)
    with m.If(total[27]):
        m.d.comb += [norm.eq(total[1:28] | total[0]), exp.eq(s3["e"] + 1)]
    with m.Else():
        m.d.comb += [norm.eq(total[0:27] << lshift), exp.eq(s3["e"] - lshift)]
    s4 = dict(
        valid=Signal(),
        special=Signal(),
        sval=Signal(32),
        sign=Signal(),
        zero=Signal(),
        exp=Signal(9),
        norm=Signal(27),
    )
    m.d.sync += [
        s4["valid"].eq(s3["valid"]),
        s4["special"].eq(s3["special"]),
        s4["sval"].eq(s3["sval"]),
        # an exact zero is +0 unless both operands were -0 (then x is -0 and sub is 0)
        s4["sign"].eq(Mux(total == 0, s3["sign"] & ~s3["sub"], s3["sign"])),
        s4["zero"].eq(total == 0),
        s4["exp"].eq(exp),
        s4["norm"].eq(norm),
    ]
    return s4


def _round_and_pack(m: Module, s4: dict, adder: Fp32Adder) -> None:
    """S5: round to nearest even on the packed word, pack; the specials bypass it."""
    nrm = s4["norm"]
    efield = Mux(nrm[26], s4["exp"], 0)
    packed = Signal(32)
    m.d.comb += packed.eq(Cat(nrm[3:26], efield[0:8]))
    guard, rest, lsb = nrm[2], nrm[0:2] != 0, nrm[3]
    round_up = guard & (rest | lsb)
    rounded = Signal(32)
    with m.If(efield >= 0xFF):
        m.d.comb += rounded.eq(0x7F800000)
    with m.Else():
        m.d.comb += rounded.eq(packed + round_up)
    with m.If(s4["special"]):
        m.d.sync += adder.result.eq(s4["sval"])
    with m.Else():
        m.d.sync += adder.result.eq(Cat(rounded[0:31], s4["sign"]))
    m.d.sync += adder.valid_out.eq(s4["valid"])


class Fp32AdderLanes(Elaboratable):
    """``lanes`` adders side by side (the unit :func:`fp32_add` simulates)."""

    def __init__(self, lanes: int):
        self.lanes = lanes
        self.units = [Fp32Adder() for _ in range(lanes)]

    def elaborate(self, platform):
        m = Module()
        for i, unit in enumerate(self.units):
            m.submodules[f"lane{i}"] = unit
        return m


def _bits(x) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    return arr.reshape(-1).view(np.uint32)


def fp32_add(a, b, *, lanes: int = 4) -> np.ndarray:
    """``a + b`` (float32 arrays, broadcast like numpy) computed by the RTL adder in
    Amaranth's simulator, ``lanes`` additions per clock; returns a float32 array of the
    broadcast shape."""
    from amaranth.sim import Simulator

    a32, b32 = np.broadcast_arrays(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32))
    shape = a32.shape
    ab, bb = _bits(a32), _bits(b32)
    n = ab.size
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out.view(np.float32).reshape(shape)
    dut = Fp32AdderLanes(lanes)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    cycles = -(-n // lanes)

    async def bench(ctx):
        got = 0
        for cyc in range(cycles + LATENCY):
            if cyc < cycles:
                for lane, unit in enumerate(dut.units):
                    i = cyc * lanes + lane
                    ok = i < n
                    ctx.set(unit.valid, ok)
                    ctx.set(unit.a, int(ab[i]) if ok else 0)
                    ctx.set(unit.b, int(bb[i]) if ok else 0)
                    ctx.set(unit.op, OP_ADD)
            else:
                for unit in dut.units:
                    ctx.set(unit.valid, 0)
            await ctx.tick()
            if cyc >= LATENCY - 1:
                for lane, unit in enumerate(dut.units):
                    if ctx.get(unit.valid_out):
                        i = (cyc - LATENCY + 1) * lanes + lane
                        out[i] = ctx.get(unit.result)
                        got += 1
        assert got == n, (got, n)

    sim.add_testbench(bench)
    sim.run()
    return out.view(np.float32).reshape(shape)


def same_float_bits(x, y) -> np.ndarray:
    """Elementwise equality of float32 results as this package defines it: equal bits,
    or both NaN with the same quiet bit (NaN payloads and signs are platform-specific)."""
    xb, yb = _bits(x), _bits(y)
    xnan = ((xb & 0x7F800000) == 0x7F800000) & ((xb & 0x007FFFFF) != 0)
    ynan = ((yb & 0x7F800000) == 0x7F800000) & ((yb & 0x007FFFFF) != 0)
    return (xb == yb) | (xnan & ynan & ((xb & QUIET_BIT) == (yb & QUIET_BIT)))
