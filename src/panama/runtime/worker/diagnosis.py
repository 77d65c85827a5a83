"""What a stuck allreduce's timeout message says: what the rank itself saw
(:func:`local_facts`), and what the controller and the daemons' counters say
(:func:`job_probe_notes`, read from the controller's job probe ``GET /v1/jobs/{job}?probe=1``)."""

from __future__ import annotations

from typing import Any

from panama.runtime.net.udp import format_addr

# Drop reasons that point at one switch as the culprit of a stuck call.
_TELLING_DROPS = (
    "share_exceeded",
    "too_large",
    "oversize",
    "unknown_job",
    "unknown_tree",
    "not_child",
    "not_parent",
    "injected",
)


def local_facts(comm: Any, what: str) -> str:
    """The rank's own facts for a timeout message of ``comm`` (a Communicator): the packets
    without a result, what its transport sent and got, and ICMP refusals from its first hop."""
    tr = comm.transport
    missing = tr.missing() if tr is not None else []
    shown = ", ".join(f"tree {t} seq {q}" for t, q in missing[:4])
    more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
    msg = (
        f"job {comm.job} rank {comm.rank}: {what}; {len(missing)} packet(s) without a result "
        f"({shown}{more}) from first-hop switch {comm.first_hop_name} "
        f"({format_addr(comm.first_hop) if comm.first_hop else '?'})"
    )
    if tr is not None:
        st = tr.stats
        msg += (
            f"; sent {st['packets_sent']} ({st['retransmissions']} retransmissions, {st['timeouts']} timeouts), "
            f"results {st['results']}, ignored {dict(st['ignored'], **comm.ignored)}, "
            f"malformed {comm.malformed}, windows {tr.windows()}"
        )
    if comm.refused:
        msg += f"; the first hop answered {comm.refused} time(s) with ICMP port unreachable (no daemon on its port)"
    return msg


def switch_findings(switches: dict[str, Any], job_id: int | None) -> list[str]:
    """What the daemons' counters (``GET /v1/jobs/{job}?probe=1``) say about a stuck job, per switch."""
    notes = []
    for name, info in switches.items():
        if not isinstance(info, dict) or not info.get("up"):
            continue
        said = []
        if info.get("holds_job") is False:
            said.append(f"lost job {job_id} (not installed there any more)")
        dp = info.get("data_plane") or {}
        if dp and not dp.get("alive", True):
            said.append(f"data plane down ({dp.get('last_error')})")
        elif dp.get("errors"):
            said.append(f"{dp['errors']} data-plane error(s), last: {dp.get('last_error')}")
        if info.get("send_errors"):
            said.append(f"{info['send_errors']} send error(s), last: {dp.get('last_send_error')}")
        drops = {
            k: v for k, v in (info.get("drops") or {}).items() if v and any(k.startswith(t) for t in _TELLING_DROPS)
        }
        if drops:
            said.append(
                "dropped " + ", ".join(f"{v} {k}" for k, v in sorted(drops.items())) + " (all jobs, since start)"
            )
        malformed = {k: v for k, v in (info.get("malformed") or {}).items() if v}
        if malformed.get("bad_key"):
            said.append(f"refused {malformed['bad_key']} datagram(s) with a wrong key")
        if info.get("share_exceeded"):
            said.append("refused contributions above the job's memory share (starved share)")
        if said:
            notes.append(f"switch {name} ({info.get('udp')}): " + "; ".join(said))
    return notes


def job_probe_notes(reply: dict[str, Any], job_id: int | None) -> list[str]:
    """The findings of a job probe's ``reply`` (job state, switches down, ranks without a
    heartbeat, :func:`switch_findings`), or one note saying nothing was found."""
    notes = []
    if reply.get("state") != "running":
        notes.append(f"controller says job is {reply.get('state')}: {reply.get('reason')}")
    switches = reply.get("switches") or {}
    down = [f"{name} ({info.get('udp')})" for name, info in switches.items() if not info.get("up")]
    if down:
        notes.append("switch(es) not answering: " + ", ".join(down))
    late = reply.get("stale_ranks") or []
    if late:
        notes.append(f"ranks without a recent heartbeat: {late}")
    notes += switch_findings(switches, job_id)
    return notes or [
        "every switch and rank looks alive to the controller and no daemon counted a drop, send error "
        "or lost slot for this job (suspect loss outside the daemons, e.g. a full socket buffer)"
    ]
