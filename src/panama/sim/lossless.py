"""The ports of a lossless (PFC) network: PAUSE and RESUME from the peer, shared-buffer
release on switches, and the arrival handlers of lossless networks.

Contract: a :class:`LosslessPort` never drops on its own (the switch admits a packet to
its shared buffer first, :meth:`panama.sim.nodes.Switch._admit`); while paused by its peer
it holds every packet whose transmission has not started and sends them back to back at
RESUME. On a switch it queues the release of a packet's buffer space (per ingress) at the
end of its transmission in its release ring; the switch settles the releases
(:class:`panama.sim.nodes.Switch`, lazily), which may let it resume its upstreams. Its arrival handlers
check the pipe's head time, since a pause can take packets back from a pipe under a
pending event. Same model as :mod:`panama.sim.ports` (docs/simulator-network.md).

Part of the simulator's hot path: compiled with ``lossless.pxd`` when the fast path is
built, interpreted otherwise (same source, same results).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

try:
    import cython  # the compiled build's directive below (a no-op interpreted)
except ImportError:  # interpreted, without Cython installed
    from panama.core import _cython_shim as cython

from panama.core.packet import CE
from panama.sim.heap import schedule_event
from panama.sim.packet import DROP_LOSSLESS_OVERFLOW, DROP_NO_ROUTE, FLAG_TRACKED, NUM_KINDS, SimPacket
from panama.sim.ports import Port
from panama.sim.routing import ecmp_index

if TYPE_CHECKING:
    from panama.sim.nodes import Switch

__all__ = ["LosslessPort"]

_CE = CE  # a C constant when compiled
_TRACKED = FLAG_TRACKED  # see panama.sim.ports
_NUM_KINDS = NUM_KINDS
# The Port._mode values of the lossless arrival handlers (panama.sim.ports, whose copies
# are C constants when compiled, not importable).
_HOST_CHECKED = 3
_SWITCH_LOSSLESS = 4


class LosslessPort(Port):
    """A port of a lossless (PFC) network: can be paused by its peer, and on switches
    frees shared-buffer space (per ingress) when a packet's transmission ends."""

    __slots__ = ()

    def send(self, pkt: SimPacket, in_idx: int = -1) -> bool:
        # Only a switch's ports keep releases (Switch.set_lossless), so the owner is one
        # (one type test when compiled; the conditional expression made two).
        sw = None
        if self.release is not None:
            sw = self.owner
        return self._send(pkt, in_idx, sw, self._eng.now)

    def _send(self, pkt: SimPacket, in_idx: int, sw: Switch | None, now: int) -> bool:
        """:meth:`send` at ``now``, ``sw`` the owner if this port keeps releases (else
        None). A direct C call when compiled (final, ``lossless.pxd``): the switch's arrival
        handler hands it the switch and the time it has, instead of a call through the
        method table that looked both up again (and type-checked the owner) per hop."""
        size = pkt.size_bytes
        tx = size * self.ps_per_byte
        if self.paused:
            return self._send_paused(pkt, in_idx, tx)
        bu = self.busy_until
        if bu < now:
            bu = now
        if self.release is not None:  # the buffer space is freed when the transmission ends
            end = bu + tx
            self.release.put(self.index, end, size, in_idx)
            if end < sw.next_release_ps:  # --- Switch.note_release, inlined (half the hops) ---
                sw.next_release_ps = end
                if sw._npaused:
                    sw._rel_timer.arm(end)
        self._transmit(pkt, now, bu, tx)
        return True

    def fire(self) -> None:
        """:meth:`Port.fire`, with the lossless handlers called through the class: direct C
        calls when compiled (Port.fire reaches them through the method table)."""
        mode = self._mode
        if mode == _SWITCH_LOSSLESS:
            LosslessPort._deliver_switch_lossless(self)
        elif mode == _HOST_CHECKED:
            LosslessPort._deliver_host_checked(self)
        else:
            Port.fire(self)

    def _deliver_host_checked(self) -> None:
        """Arrival at a host in a lossless network (a pause may have emptied the pipe
        under the pending event, so the head's time is checked)."""
        pipe = self.pipe
        now = self._eng.now
        # Port._head_due, inlined: from this module it is a call through the vtable, about
        # 4 % of the 100 Gb/s slice's CPU in these two loops (measured against the inline form).
        while True:
            t = pipe.head_time()
            if t < 0:
                break
            if t > now:
                schedule_event(self._eng, t, self)
                return
            pkt = pipe.pop_packet()
            d = pkt.deliver
            if d is not None:
                d(pkt)
            else:
                host = self.peer_host
                host.receive_unbound(pkt)
        self.armed = False

    # Every index here is in range (dst is checked against the tables' length, a field of
    # the switch): compiled, an item of the forwarding tuples is read without their length,
    # one cache line per table, not two.
    @cython.wraparound(False)
    def _deliver_switch_lossless(self) -> None:
        """Arrival at a lossless switch: ECMP, buffer admission and PFC check inlined."""
        # Long: one function for the same reason as Port._deliver_switch (every local stays
        # in C across a burst of arrivals; a call per step cost the hot loop).
        sw = self.peer_switch
        pipe = self.pipe
        now = self._eng.now
        idx = self.peer_index
        # sw.hook_mask and sw.fib1 read in place, not held in locals: about one packet per
        # call, and each compiled local was a reference taken and dropped per call.
        while True:  # Port._head_due, inlined (see _deliver_host_checked)
            t = pipe.head_time()
            if t < 0:
                break
            if t > now:
                schedule_event(self._eng, t, self)
                return
            pkt = pipe.pop_packet()
            kind = pkt.kind
            if sw.hook_mask and 0 <= kind < _NUM_KINDS and sw.hook_mask >> kind & 1:
                sw._run_hook(pkt, idx, sw.hooked[kind])
                continue
            dst = pkt.dst
            if not 0 <= dst < sw.host_count:
                sw.drop_unroutable(pkt)
                continue
            out = sw.fib1[dst]
            if out is None:
                ports = sw.fib[dst]  # a tuple of tuples (Network._build_routes): C length and item
                n = len(ports)
                if not n:
                    self.tally.drop(None, pkt, DROP_NO_ROUTE, node=sw)
                    continue
                out = ports[ecmp_index(pkt.flow_hash, sw.salt, n)]
            # --- Switch._admit, inlined ---
            size = pkt.size_bytes
            used = sw._used + size
            ib = sw._ing[idx] + size
            if now >= sw.next_release_ps:
                # Due releases (before nearly every admission at 100 Gb/s), unsettled,
                # make used and ib upper bounds (Switch docstring). With no upstream paused
                # (no RESUME due), used <= peak (<= buffer: no drop, no new peak) and
                # ib <= thr(used) (thr falls as used rises: no PAUSE), the exact values
                # would decide the same: the settle (a scan of every ring) waits.
                if sw._npaused == 0 and used <= sw.peak_used_bytes:
                    if sw.pfc_static is None:
                        free = sw.pool_bytes - used
                        thr = int(sw.pfc_alpha * free) if free > 0 else 0
                    else:
                        thr = sw.pfc_static
                    if ib <= thr:
                        sw._used = used
                        sw._ing[idx] = ib
                        out._send(pkt, idx, sw, now)  # LosslessPort.send, a direct call
                        continue
                # --- Switch._catch_up, inlined (ReleaseRings.release is inline C too):
                # its two calls cost more than the release itself ---
                freed = sw.releases.release(now)
                sw.next_release_ps = sw.releases.next_end()
                if freed:
                    sw._used -= freed
                    if sw._npaused:
                        sw._check_resume()
                used = sw._used + size
                ib = sw._ing[idx] + size
            if used > sw.buffer_bytes:
                self.tally.drop(out, pkt, DROP_LOSSLESS_OVERFLOW)
                continue
            sw._used = used
            if used > sw.peak_used_bytes:
                sw.peak_used_bytes = used
            sw._ing[idx] = ib
            if not sw._npaused or not sw.pause_sent[idx]:  # (no pause sent: no list read)
                if sw.pfc_static is None:
                    free = sw.pool_bytes - used
                    thr = int(sw.pfc_alpha * free) if free > 0 else 0
                else:
                    thr = sw.pfc_static
                if ib > thr:
                    sw._send_pfc(idx, True)
            out._send(pkt, idx, sw, now)  # LosslessPort.send, a direct call
        self.armed = False

    def _commit(self, pkt: SimPacket, in_idx: int, tx: int) -> None:
        """Fix the transmission slot of a packet (now, or when a pause ends)."""
        now = self._eng.now
        bu = self.busy_until
        if bu < now:
            bu = now
        end = bu + tx
        self.busy_until = end
        arrive = end + self.delay_ps
        pkt.arrive_ps = arrive
        self.pipe.push(arrive, pkt)
        if self.release is not None:
            self.release.put(self.index, end, pkt.size_bytes, in_idx)
            sw = self.owner
            if end < sw.next_release_ps:
                sw.note_release(end)
        if not self.armed:
            self.armed = True
            schedule_event(self._eng, arrive, self)

    def _send_paused(self, pkt: SimPacket, in_idx: int, tx: int) -> bool:
        now = self._eng.now
        backlog = self.backlog_ps()
        if backlog > self.k_ps and 0 < pkt.ecn < _CE:
            pkt.ecn = _CE
            self.ecn_marks += 1
        self.tx_packets += 1
        self.tx_bytes += pkt.size_bytes
        self.waiting.append((pkt, in_idx))
        self.waiting_ps += tx
        if pkt.flags & _TRACKED:
            self.tally.ahead(self, pkt, now)
        if self._trace is not None:
            self._trace_packet(now, "hold", pkt, backlog)
        return True

    def pause(self) -> None:
        """A PAUSE frame arrived from the peer: finish the packet being serialised, hold
        every packet whose transmission has not started."""
        now = self._eng.now
        self.pauses += 1
        if self.paused:
            return
        self.paused = True
        self.paused_since = now
        pipe = self.pipe
        rel = self.release
        delay = self.delay_ps
        ppb = self.ps_per_byte
        held: list[tuple[SimPacket, int]] = []
        while pipe:
            pkt = pipe[-1]
            arrive = pkt.arrive_ps
            tx = pkt.size_bytes * ppb
            if arrive - delay - tx < now:
                break
            pipe.pop_back()
            in_idx = -1 if rel is None else rel.pop_back(self.index)
            held.append((pkt, in_idx))
            self.waiting_ps += tx
        if held:
            held.reverse()
            held.extend(self.waiting)
            self.waiting = deque(held)
        last = pipe.back_time()
        self.busy_until = last - delay if last >= 0 else min(self.busy_until, now)
        if self._trace is not None:
            self._trace((now, "pause", self.owner.name, self.peer.name, -1, -1, -1, -1, 0, self.queue_bytes()))

    def resume(self) -> None:
        """A RESUME frame arrived: transmit the held packets back to back."""
        if not self.paused:
            return
        now = self._eng.now
        self.paused = False
        self.paused_ps += now - self.paused_since
        waiting = self.waiting
        self.waiting = deque()
        self.waiting_ps = 0
        ppb = self.ps_per_byte
        for pkt, in_idx in waiting:
            self._commit(pkt, in_idx, pkt.size_bytes * ppb)
        if self._trace is not None:
            self._trace((now, "resume", self.owner.name, self.peer.name, -1, -1, -1, -1, 0, self.queue_bytes()))
