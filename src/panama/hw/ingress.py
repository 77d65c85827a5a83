"""Store-and-forward ingress buffer: a datagram reaches the header FSM only once all of it
has arrived, with its key trailer already extracted.

Why: the per-job key (codec version 2) is the datagram's last 8 bytes, after the payload.
The core and the daemons reject a datagram whose key is wrong (``bad_key``) *before* the
accelerator sees it, so a bad-key contribution must not allocate a slot, set a child's
bit, take an ack or touch a sum. The datapath decides everything at the header and sums
the payload while it streams through, so the key has to be known before the header
decision: this buffer holds whole datagrams (two of the largest the datapath aggregates,
so one streams in while the previous one is decided and summed; line rate is unchanged)
and hands the header FSM a *descriptor* per complete datagram: ingress port, ECN, length
and the key read from the trailer's position (``in_length - 8``).

Interfaces
----------
Upstream (the datapath's ingress pins): ``in_data``/``in_valid``/``in_ready``/``in_last``
and the side-band ``in_port``/``in_ecn``/``in_length`` valid with the first beat.
Downstream: beats ``b_data``/``b_last``/``b_valid``/``b_ready`` in the same order, and
descriptors ``d_valid``/``d_ready``/``d_port``/``d_ecn``/``d_length``/``d_key`` (the key as
the codec's big-endian ``!Q`` value), one per datagram, valid only once every beat of that
datagram is in the beat buffer. ``busy``: a datagram is partly in or still buffered.

A datagram longer than the largest one the datapath aggregates (``HEADER + 4 *
payload_elems + KEY`` bytes: ``max_beats``) is always dropped by the header FSM (its count
is too large, or its length does not match its count), so only its first ``max_beats - 1``
beats and its last beat are buffered; its key is still read from the stream. The buffer
therefore never holds a datagram it cannot finish, and never deadlocks.
"""

from __future__ import annotations

from amaranth import Array, Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFOBuffered

from panama.core.codec import HEADER_BYTES
from panama.hw.layout import KEY_BYTES, HwConfig, _bits_for

BEAT_COUNTER_BITS = 13  # in_length < 2**17 bytes: at most 4096 beats of 32 bytes
DESCRIPTORS = 8  # complete datagrams queued ahead of the header FSM (short ones: acks)


def max_beats(cfg: HwConfig) -> int:
    """Beats of the largest datagram the datapath aggregates (header, payload, key)."""
    return cfg.beats(HEADER_BYTES + 4 * cfg.payload_elems + KEY_BYTES)


class IngressBuffer(Elaboratable):
    def __init__(self, cfg: HwConfig = HwConfig()):
        self.cfg = cfg
        W, P = cfg.width, cfg.ports
        self.in_data = Signal(W)
        self.in_valid = Signal()
        self.in_ready = Signal()
        self.in_last = Signal()
        self.in_port = Signal(_bits_for(P))
        self.in_ecn = Signal(2)
        self.in_length = Signal(17)
        self.b_data = Signal(W)
        self.b_last = Signal()
        self.b_valid = Signal()
        self.b_ready = Signal()
        self.d_valid = Signal()
        self.d_ready = Signal()
        self.d_port = Signal(_bits_for(P))
        self.d_ecn = Signal(2)
        self.d_length = Signal(17)
        self.d_key = Signal(64)
        self.busy = Signal()

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        W, LN = cfg.width, cfg.lanes
        mb = max_beats(cfg)
        lane_bits = _bits_for(LN)
        pbits = len(self.in_port)

        beats = SyncFIFOBuffered(width=W + 1, depth=2 * mb + 2)
        desc = SyncFIFOBuffered(width=pbits + 2 + 17 + 64, depth=DESCRIPTORS)
        m.submodules.beats = beats
        m.submodules.desc = desc

        fire = Signal()
        m.d.comb += [
            self.in_ready.eq(beats.w_rdy & desc.w_rdy),
            fire.eq(self.in_valid & self.in_ready),
        ]

        # position in the datagram; side band latched from the first beat
        ib = Signal(BEAT_COUNTER_BITS)
        first = ib == 0
        port_r, ecn_r, len_r = Signal.like(self.in_port), Signal(2), Signal(17)
        port = Mux(first, self.in_port, port_r)
        ecn = Mux(first, self.in_ecn, ecn_r)
        length = Signal(17)
        m.d.comb += length.eq(Mux(first, self.in_length, len_r))
        with m.If(fire):
            m.d.sync += ib.eq(Mux(self.in_last, 0, ib + 1))
            with m.If(first):
                m.d.sync += [port_r.eq(self.in_port), ecn_r.eq(self.in_ecn), len_r.eq(self.in_length)]

        # the key trailer: 32-bit words kw (high half) and kw + 1 (low half) of the datagram
        kw = Signal(17)
        m.d.comb += kw.eq((length - KEY_BYTES) >> 2)
        kbeat = kw[lane_bits:]
        klane = kw[:lane_bits]
        words = Array(self.in_data[32 * i : 32 * i + 32] for i in range(LN))

        def value(word):  # wire bytes (big-endian key) in a little-endian lane -> the key's value bits
            return Cat(word[24:32], word[16:24], word[8:16], word[0:8])

        hi_here = fire & (ib == kbeat)
        lo_here = fire & Mux(klane == LN - 1, ib == kbeat + 1, ib == kbeat)
        khi_r, klo_r = Signal(32), Signal(32)
        khi, klo = Signal(32), Signal(32)
        m.d.comb += [
            khi.eq(Mux(hi_here, value(words[klane]), khi_r)),
            klo.eq(Mux(lo_here, value(words[(klane + 1)[:lane_bits]]), klo_r)),
        ]
        m.d.sync += [khi_r.eq(khi), klo_r.eq(klo)]

        # beats (truncated past max_beats - 1 but for the last); a descriptor with the last beat
        m.d.comb += [
            beats.w_data.eq(Cat(self.in_data, self.in_last)),
            beats.w_en.eq(fire & ((ib < mb - 1) | self.in_last)),
            desc.w_data.eq(Cat(port, ecn, length, klo, khi)),
            desc.w_en.eq(fire & self.in_last),
            self.b_data.eq(beats.r_data[:W]),
            self.b_last.eq(beats.r_data[W]),
            self.b_valid.eq(beats.r_rdy),
            beats.r_en.eq(self.b_ready),
            self.d_port.eq(desc.r_data[:pbits]),
            self.d_ecn.eq(desc.r_data[pbits : pbits + 2]),
            self.d_length.eq(desc.r_data[pbits + 2 : pbits + 19]),
            self.d_key.eq(desc.r_data[pbits + 19 :]),
            self.d_valid.eq(desc.r_rdy),
            desc.r_en.eq(self.d_ready),
            self.busy.eq((ib != 0) | beats.r_rdy | (beats.level != 0)),
        ]
        return m
