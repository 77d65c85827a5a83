"""The switch daemon's batched data-plane loop: GRO receives and GSO sends (:mod:`.offload`).

Used by :class:`~panama.runtime.switch.daemon.SwitchDaemon` instead of its one-datagram-per-
call loop when batching can pay: offload is asked for (``SwitchConfig.offload``, not
forced off by ``PANAMA_UDP_OFFLOAD=0``), the kernel has GSO or GRO on the daemon's
socket, and at least 2 datagrams of the configured size fit one GSO send (with the
default 65,504-byte datagrams they do not, and the plain loop runs).

Same contract as the plain loop (docs in :mod:`panama.runtime.switch.daemon`), per datagram:

* Receive: up to ``batch`` non-blocking ``recvmsg_into`` calls (or ``batch`` datagrams)
  per batch, each into a 64 KiB buffer; a GRO-coalesced buffer is cut at its segment size
  into datagrams, each decoded on its own (a malformed segment is a counted drop like a
  malformed datagram; the others of the buffer are served). ``rx_packets`` and
  ``rx_bytes`` count datagrams, not system calls (``rx_syscalls`` counts those). The
  kernel only coalesces datagrams with equal IP TOS, so the buffer's TOS is every
  segment's ECN codepoint.
* Send: every emitted datagram is copied into its destination's batch
  (:meth:`~panama.runtime.net.udp.PacketSocket.stage`; multicast copies the encoded bytes;
  a datagram of another size or codepoint sends the batch before it first, so each
  destination gets its datagrams in emission order: results reordered by batching would
  look like loss to the workers' fast retransmit), and all batches leave after the
  received batch is processed, one GSO ``sendmsg`` each
  (or one call per datagram when the kernel refuses GSO: counted fallback, no loss).
  Send errors are counted per datagram, as ``drops["send_error"]``.
* ECN backlog marking and ``drop_prob`` work per datagram as in the plain loop.
* Per datagram: :meth:`panama.runtime.switch.dataplane.DataPlane.ingest`, as in the
  plain loop; each datagram is summed as it is received (``Accelerator.receive``). (The
  core's batch API that deferred the sums to the end of a batch was measured slower here
  and removed in issue 29, docs/runtime-performance.md.)
"""

from __future__ import annotations

import select
import socket

import numpy as np

from panama.core import codec
from panama.runtime.net import offload
from panama.runtime.switch.dataplane import DROP_OVERSIZE, DROP_SEND_ERROR, kernel_queue_bytes, log


def batched_loop(daemon) -> None:
    """Serve ``daemon``'s socket until its stop flag is set (see the module docstring)."""
    # Long: the batched data plane's hot loop, as the plain loop's: every name it uses per
    # datagram is a local bound here, before the loop; the per-datagram work is one call
    # (DataPlane.ingest) and the GRO cut one call (offload.segments).
    cfg = daemon.config
    sock = daemon.sock
    raw = sock.sock
    raw.setblocking(True)
    calls = cfg.batch
    bufs = [bytearray(offload.RECV_BUFFER_BYTES) for _ in range(calls)]
    views = [memoryview(b) for b in bufs]
    floats = []
    for b in bufs:  # whole-buffer float32 views: a segment's payload is a slice of them
        f = np.frombuffer(b, dtype="<f4", count=len(b) // 4)
        f.flags.writeable = False
        floats.append(f)
    iovs = [[v] for v in views]
    poller = select.poll()
    poller.register(raw, select.POLLIN)
    cmsg_space = offload.RECV_CMSG_SPACE
    dontwait = int(socket.MSG_DONTWAIT)
    msg_trunc = int(socket.MSG_TRUNC)
    parse_cmsgs = offload.parse_cmsgs
    cut = offload.segments
    header_bytes = codec.HEADER_BYTES
    dp = daemon.dp
    ingest = dp.ingest
    mark = dp.mark
    drops = dp.drops
    stage = sock.stage
    stage_copy = sock.stage_copy
    flush = sock.flush
    datagram_bytes, threshold, truesize = dp.datagram_bytes, dp.threshold, dp.truesize
    meminfo = truesize > 0
    max_datagrams = cfg.batch
    recv = raw.recvmsg_into
    stop = daemon._stop  # noqa: SLF001
    items: list[tuple[int, int, int, int, tuple]] = []  # (buffer, offset, nbytes or -1, ecn, source)
    while not stop.is_set():
        items.clear()
        k = 0
        count = 0
        behind = 0
        while k < calls and count < max_datagrams:
            try:
                n, anc, flags, src = recv(iovs[k], cmsg_space, dontwait)
            except BlockingIOError:
                break
            except OSError as exc:  # pragma: no cover - e.g. socket closed at shutdown
                if stop.is_set():
                    return
                log.warning("recv failed: %s", exc)
                break
            ecn, seg = parse_cmsgs(anc) if anc else (0, 0)
            if flags & msg_trunc:
                items.append((k, 0, -1, ecn, src))
                count += 1
            elif seg and seg < n:  # a GRO-coalesced buffer, cut at its segment size
                for off, size in cut(n, seg):
                    items.append((k, off, size, ecn, src))
                    count += 1
                behind += n
            else:
                items.append((k, 0, n, ecn, src))
                count += 1
                behind += n
            k += 1
        if not k:
            poller.poll(200)  # ms; wakes up to check the stop flag
            continue
        queued = 0
        if (k == calls or count >= max_datagrams) and meminfo:
            queued = kernel_queue_bytes(raw, datagram_bytes, truesize)
            if queued is None:
                meminfo, queued = False, 0
        behind += queued
        with daemon.lock:
            dp.count_batch(count, k, queued)
            try:
                for b, off, n, ecn, src in items:
                    if n < 0 or n > datagram_bytes:  # larger than a slot holds (the plain loop's buffer)
                        behind -= max(n, 0)
                        drops[DROP_OVERSIZE] += 1
                        continue
                    behind -= n
                    if off:
                        fl = floats[b][(off + header_bytes) >> 2 :] if not off & 3 else None
                        out = ingest(views[b][off : off + n], ecn, fl, src)
                    else:
                        out = ingest(views[b][:n], ecn, floats[b][header_bytes >> 2 :], src)
                    if out is None:
                        continue
                    congested = behind > threshold
                    for destinations, pkt in out:
                        tos = pkt.ecn if not congested else mark(pkt.ecn, destinations)
                        first = None
                        for to in destinations:
                            if first is None:
                                first = stage(pkt, to, tos)
                            else:
                                stage_copy(first, to, tos)
            finally:
                failed = flush()
                if failed:
                    drops[DROP_SEND_ERROR] += failed
