"""Results from the first hop into the transport: the communicator's receive paths.

Two paths, chosen at registration (:mod:`panama.runtime.net.offload`):

* :func:`receive_batch`: one datagram per buffer, ``RECV_BATCH`` per receive call
  (:mod:`panama.runtime.net.mmsg`; also the multicast group socket's path);
* :func:`receive_gro`: GRO-coalesced buffers, one ``recvmsg_into`` each, cut back into
  datagrams by :func:`panama.runtime.net.offload.segments` (the switch daemon's batched
  loop cuts with the same function); the kernel coalesces only equal TOS, so the buffer's
  codepoint is every segment's.

Both feed every datagram from the leaf (``leaf``) to the transport and count on the
communicator (``comm``) what they ignored (``FOREIGN_SOURCE``), what the codec refused
(``malformed``), ICMP port unreachable from the first hop (``refused``, ``refused_at``)
and GRO buffers (``gro_buffers``); both return the datagrams received (0: none waiting).
Called once per turn of the communicator's send/receive loop: hot code.
"""

from __future__ import annotations

import socket
import time

from panama.core import codec
from panama.core.transport import WorkerTransport
from panama.runtime.net import mmsg, offload
from panama.runtime.net.udp import Address, now_ps

__all__ = ["FOREIGN_SOURCE", "RECV_BATCH", "RECV_BATCH_ROUNDS", "receive_batch", "receive_gro"]

# Plain path (one datagram per buffer): datagrams per receive call, and calls per drain
# before the loop sends again (64 datagrams at most between sends, as the GRO path).
RECV_BATCH = 8  # 8 x 64 KB buffers: the batch stays in the core's L2 until the transport reads it
RECV_BATCH_ROUNDS = 8

# Reasons a received datagram is ignored by the communicator itself (the transport
# counts its own reasons in ``transport.stats['ignored']``).
FOREIGN_SOURCE = "foreign_source"


def receive_batch(comm, rx: mmsg.Receiver, views, floats, tr: WorkerTransport, leaf: Address, decode, keys) -> int:
    """Receive what has arrived at ``rx`` (the unicast or the group socket's receiver,
    datagram k into ``views[k]``; up to RECV_BATCH_ROUNDS batches) and feed what came
    from ``leaf`` to the transport; returns the datagrams received (0: none waiting)."""
    got = 0
    sizes, ecns, sources = rx.sizes, rx.ecns, rx.sources
    for _ in range(RECV_BATCH_ROUNDS):
        try:
            count = rx.recv(RECV_BATCH)
        except ConnectionRefusedError:  # ICMP: nothing listens at the first hop
            comm.refused += 1
            comm.refused_at = time.monotonic()
            return got
        if not count:
            return got
        got += count
        for k in range(count):
            if sources[k] != leaf:
                comm.ignored[FOREIGN_SOURCE] = comm.ignored.get(FOREIGN_SOURCE, 0) + 1
                continue
            n = sizes[k]
            try:
                # A cut datagram (-1) is short for the codec, as before.
                pkt = decode(views[k][: max(n, 0)], ecns[k], floats[k], keys)
            except codec.CodecError as exc:
                comm.malformed[exc.reason] = comm.malformed.get(exc.reason, 0) + 1
                continue
            tr.receive(pkt, now_ps())
            if tr.done:
                return got
        if count < RECV_BATCH:
            return got
    return got


def receive_gro(comm, tr, leaf, recv, iov, cmsg_space, view, f32, floats, decode, keys) -> int:
    """The GRO path (smaller datagrams, coalesced): one recvmsg_into per buffer, cut
    into datagrams by :func:`panama.runtime.net.offload.segments`; returns the datagrams
    received (0: nothing was waiting). ``view``/``f32``: the receive buffer as bytes and as
    float32 (a segment's payload is a slice from its offset); ``floats``: its payload view
    for a lone datagram."""
    got = 0
    dontwait = int(socket.MSG_DONTWAIT)  # plain int: enum flags are slow
    cut = offload.segments  # the daemon's batched loop cuts its GRO buffers with it too
    while True:
        try:
            n, anc, flags, src = recv(iov, cmsg_space, dontwait)
        except BlockingIOError:
            break
        except ConnectionRefusedError:  # ICMP: nothing listens at the first hop
            comm.refused += 1
            comm.refused_at = time.monotonic()
            break
        got += 1
        if src != leaf:
            comm.ignored[FOREIGN_SOURCE] = comm.ignored.get(FOREIGN_SOURCE, 0) + 1
            continue
        ecn, seg = offload.parse_cmsgs(anc) if anc else (0, 0)
        if seg and seg < n:  # several results back to back, one codepoint
            comm.gro_buffers += 1
            cuts = cut(n, seg)
            for off, size in cuts:
                try:
                    pkt = decode(
                        view[off : off + size],
                        ecn,
                        None if off & 3 else f32[(off + codec.HEADER_BYTES) >> 2 :],
                        keys,
                    )
                except codec.CodecError as exc:
                    comm.malformed[exc.reason] = comm.malformed.get(exc.reason, 0) + 1
                    continue
                tr.receive(pkt, now_ps())
                if tr.done:
                    break
            got += len(cuts) - 1
            if tr.done or got >= 64:
                break
            continue
        try:
            pkt = decode(view[:n], ecn, floats, keys)
        except codec.CodecError as exc:
            comm.malformed[exc.reason] = comm.malformed.get(exc.reason, 0) + 1
            continue
        tr.receive(pkt, now_ps())
        if tr.done or got >= 64:
            break
    return got
