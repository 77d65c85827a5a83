"""The switch daemon's plain data-plane loop: one datagram per buffer, batched system calls.

Used by :class:`~panama.runtime.switch.daemon.SwitchDaemon` unless the batched GSO/GRO loop of
:mod:`panama.runtime.switch.loop_batch` can pay (the contract, shared by both, is in
:mod:`panama.runtime.switch.daemon`; the per-datagram work, shared too, is
:meth:`panama.runtime.switch.dataplane.DataPlane.ingest`). Datagrams are drained from the daemon's socket in batches
of up to ``batch`` into preallocated buffers (:class:`panama.runtime.net.mmsg.Receiver`: one
``recvmmsg`` where compiled), then from each group socket the daemon joined (its parents'
results multicast on a loopback cluster, ``install_job``'s ``join``), decoded, summed by
the accelerator and what it emits sent at once (one ``sendmmsg`` to all destinations
where compiled, or one datagram to a job's group). When nothing was waiting anywhere the
loop sleeps in one ``poll`` over all its sockets (200 ms at most, to see the stop flag).
The set of group sockets is read from the daemon on every turn (replaced whole under its
lock by installs and removals); the sockets of removed jobs are closed here, by their
only reader.
"""

from __future__ import annotations

import select

from panama.core import codec
from panama.runtime.net import mmsg
from panama.runtime.switch.dataplane import DROP_OVERSIZE, DROP_SEND_ERROR, kernel_queue_bytes, log


def plain_loop(daemon) -> None:
    """Run the plain loop of ``daemon`` (a :class:`~panama.runtime.switch.daemon.SwitchDaemon`) until it stops."""
    # Long: the data plane's hot loop. Every name it uses per datagram is bound to a local
    # here, before the loop (a function call or attribute lookup per datagram costs
    # measurably: docs/runtime-performance.md); receive, ingest and send per datagram are
    # already one call each (mmsg.Receiver, DataPlane.ingest, PacketSocket.send_all).
    cfg = daemon.config
    sock = daemon.sock
    raw = sock.sock
    raw.setblocking(True)
    bufs = [bytearray(codec.datagram_size(cfg.payload_elems) + 1) for _ in range(cfg.batch)]
    views = [memoryview(b) for b in bufs]
    floats = [codec.payload_view(b) for b in bufs]  # decode slices payloads from these
    # One recvmmsg per batch where compiled (panama.runtime.net.mmsg), else one recvmsg_into
    # per datagram: sizes (-1: cut), ECN codepoints and sources per buffer.
    rx = mmsg.Receiver(raw, bufs)
    dp = daemon.dp
    ingest = dp.ingest
    mark = dp.mark
    drops = dp.drops
    send_all = sock.send_all
    datagram_bytes, threshold, truesize = dp.datagram_bytes, dp.threshold, dp.truesize
    meminfo = truesize > 0  # SO_MEMINFO works here
    batch = cfg.batch
    recv = rx.recv
    batched_io = mmsg.BATCHED
    groups = dp.groups  # updated in place under the lock by install/remove

    def process(count: int, src: mmsg.Receiver, views: list, floats: list, queued: int) -> None:
        """Decode, aggregate and forward the ``count`` datagrams ``src`` just received
        into ``views`` (``queued``: bytes still in the kernel's queue behind them)."""
        sizes, ecns, sources = src.sizes, src.ecns, src.sources
        # Backlog behind the datagram being processed, in bytes (drained ones first).
        behind = queued
        for k in range(count):
            n = sizes[k]
            if n > 0:
                behind += n
        with daemon.lock:
            dp.count_batch(count, 1 if batched_io else count, queued)
            for k in range(count):
                n = sizes[k]
                if n < 0:
                    drops[DROP_OVERSIZE] += 1
                    continue
                behind -= n
                out = ingest(views[k][:n], ecns[k], floats[k], sources[k])
                if out is None:
                    continue
                congested = behind > threshold
                for destinations, pkt in out:
                    tos = pkt.ecn if not congested else mark(pkt.ecn, destinations)
                    if groups and len(destinations) > 1:
                        group = groups.get(pkt.job_id)
                        if group is not None and group[0] == frozenset(destinations):
                            # Exactly the group's members: one datagram to the group.
                            failed = daemon._send_group(pkt, group, destinations, tos)
                            if failed:
                                drops[DROP_SEND_ERROR] += failed
                            continue
                    # One packet to several children: encoded once, sent to each
                    # (software multicast; one sendmmsg where compiled).
                    failed = send_all(pkt, destinations, tos)
                    if failed:
                        drops[DROP_SEND_ERROR] += failed

    # Group sockets this daemon joined (results its parents multicast, see
    # install_job's ``join``): read after the unicast socket on every turn; the poller
    # is rebuilt when the set changes, and removed ones are closed here, by their
    # only reader.
    group_rx: tuple = ()
    poller = select.poll()
    poller.register(raw, select.POLLIN)
    while not daemon._stop.is_set():
        if daemon._group_sources is not group_rx or daemon._retired:
            with daemon.lock:
                group_rx = daemon._group_sources
                retired, daemon._retired = daemon._retired, []
            poller = select.poll()
            poller.register(raw, select.POLLIN)
            for g in group_rx:
                poller.register(g.sock, select.POLLIN)
            for g in retired:
                g.close()
        try:
            count = recv(batch)
        except OSError as exc:  # pragma: no cover - e.g. socket closed at shutdown
            if daemon._stop.is_set():
                return
            log.warning("recv failed: %s", exc)
            count = 0
        got = count
        if count:
            queued = 0  # bytes still in the kernel's receive queue (only looked up after a full batch)
            if count == batch and meminfo:
                queued = kernel_queue_bytes(raw, datagram_bytes, truesize)
                if queued is None:
                    meminfo, queued = False, 0
            process(count, rx, views, floats, queued)
        for g in group_rx:
            try:
                n = g.rx.recv(len(g.views))
            except OSError as exc:  # pragma: no cover - the kernel's error on a group socket
                log.warning("recv on group %s failed: %s", g.text(), exc)
                continue
            if n:
                g.datagrams += n
                got += n
                process(n, g.rx, g.views, g.floats, 0)
        if not got:
            poller.poll(200)  # ms; wakes up to check the stop flag
