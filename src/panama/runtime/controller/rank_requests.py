"""What ranks ask the controller: ``register`` (the barrier before admission),
``heartbeat``, ``leave`` and ``unicast`` (``POST /v1/jobs/{job}/...``).

:class:`RankRequests` serves them for one
:class:`~panama.runtime.controller.service.ControllerService`: it reads and changes the
service's jobs in its one asyncio loop, and is handed, by the service that builds it,
the three lifecycle steps it may take (admit a job whose ranks are all in, drop a
provisional registration, write the state file). Each request is checked whole before
any job changes (a 409 changes nothing); refusals are
:class:`~panama.runtime.control.server.BadRequest` with the field first.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from panama.core.jobs import JobInput, JobState
from panama.runtime.control.client import HttpError, error_text
from panama.runtime.control.messages import (
    FirstHop,
    HeartbeatReply,
    LeaveReply,
    ProgressBody,
    RankBody,
    RegisterBody,
    RegisterReply,
    ResultsGroup,
    TreeInfo,
    UnicastBody,
    UnicastReply,
)
from panama.runtime.control.server import OPERATOR, BadRequest, Credential
from panama.runtime.control.tokens import JOB_TOKEN_ENV, new_token
from panama.runtime.controller.jobs import Job, Rank
from panama.runtime.net.udp import Address, AddressError, format_addr, parse_destination

log = logging.getLogger("panama.controller")


class RankRequests:
    """The rank-facing requests of one controller service (see the module docstring).

    ``service``: its public state (``jobs``, ``topology``, ``hosts_in_order``,
    ``switches``, ``daemons``, ``counters``, timings, ``find_job``, ``teardown``,
    ``remember_token``);
    ``admit(job)``: plan and install a job whose ranks are all in (one at a time);
    ``drop_rank(job, rank, why)``: forget a provisional registration; ``save_state()``:
    write the running jobs to the state file.
    """

    def __init__(
        self,
        service: Any,
        admit: Callable[[Job], Awaitable[None]],
        drop_rank: Callable[[Job, Rank, str], None],
        save_state: Callable[[], None],
    ):
        self.service = service
        self.admit = admit
        self.drop_rank = drop_rank
        self.save_state = save_state

    def authenticates(self) -> bool:
        """Whether the service checks credentials at all (a service without a token, used in
        process by tests, trusts every request)."""
        return self.service.token is not None

    def check_holder(self, job: Job, credential: Credential, what: str) -> None:
        """403 unless ``credential`` carries ``job``'s own token (``what``: the request, for the message)."""
        if self.authenticates() and not job.holds(credential.token):
            who = "the cluster token is for operators" if credential.operator else "that is another job's token"
            raise BadRequest(403, f"job: {what} of {job.name!r} needs its job token (the run's credential); {who}")

    async def register(
        self, name: str, reg: RegisterBody, credential: Credential = OPERATOR, connection: Any = None
    ) -> RegisterReply:
        """``POST /v1/jobs/{job}/register``: rank ``reg.rank`` joins job ``name`` and waits
        (``reg.wait_s``) until the job is admitted, refused or failed.

        A job name binds one run: the first registration (with the cluster token: admitting
        a new job is for operators) makes the job and binds it to the run's token
        (``reg.job_token``, else one drawn here and returned in the reply); every later one
        must carry that token (in the body, or as its bearer token), else 409 naming the
        job and its live run, the job unchanged. A rank whose registration is waiting may
        not be taken over; one whose register call hung up (its process died) is replaced.
        ``connection``: the waiting request (anything with a ``transport``): a
        registration whose client hung up is dropped before admission."""
        udp = self._check_register(reg)
        token = reg.job_token or (credential.token if not credential.operator else None)
        drawn = None
        # Every check first; the job changes only once the request is accepted (a 409 changes nothing).
        job = self.service.jobs.get(name)
        if job is not None:
            self._check_run(job, token)
            self._check_joins(job, reg)
        elif self.authenticates() and not credential.operator:
            raise BadRequest(403, f"job: {name!r} is not registering; admitting a new job needs the cluster token")
        else:
            if token is None:
                token = drawn = new_token()
            job = Job(name, reg.world_size, time.monotonic(), run=secrets.token_hex(4), token=token)
            self.service.jobs[name] = job
            self.service.remember_token(job)
            log.info("job %s: run %s admitted by its first registration (rank %d)", name, job.run, reg.rank)
        rank, incarnation = reg.rank, reg.incarnation
        other = job.ranks.get(rank)
        if other is not None:  # its register call hung up (_check_joins): this one replaces it
            self.service.counters["replaced_ranks"] += 1
            job.ready.set()  # its waiting register call (if any) wakes up and answers 409 "replaced"
            log.warning(
                "job %s: rank %d re-registered from %s (incarnation %s) replaces %s (incarnation %s), which hung up",
                name, rank, format_addr(udp), incarnation, format_addr(other.udp), other.incarnation,
            )  # fmt: skip
        if reg.trees is not None:
            job.trees = reg.trees
        if reg.payload_elems is not None:
            payload = reg.payload_elems
            job.payload_elems = payload if job.payload_elems is None else min(job.payload_elems, payload)
        job.size_bytes = max(job.size_bytes, reg.size_bytes or 0)
        host = self.service.hosts_in_order[rank]
        mine = Rank(rank, udp, host, time.monotonic(), incarnation, request=connection, multicast=reg.multicast)
        job.ranks[rank] = mine
        log.info("job %s: rank %d/%d registered from %s", name, rank, reg.world_size, format_addr(udp))
        if len(job.ranks) == reg.world_size:
            await self.admit(job)
        await self._wait_admission(job, mine, reg.wait_s)  # returns at once once admitted or ended
        if job.ranks.get(rank) is not mine:
            raise BadRequest(409, f"rank: {rank} of {name!r} was replaced by a newer registration of the same rank")
        answer = self._register_reply(job, rank)
        return answer if drawn is None else answer.model_copy(update={"job_token": drawn})

    def _check_run(self, job: Job, token: str | None) -> None:
        """A registration for a live job name must come from the run that holds it (409 otherwise)."""
        if not self.authenticates() or job.holds(token):
            return
        raise BadRequest(
            409,
            f"job: {job.name!r} is held by another run (run {job.run}, {job.state}, job_id {job.job_id}, ranks "
            f"{sorted(job.ranks)} of {job.world_size} registered); a job name binds one run and is never merged: "
            f"ranks of one run share its job token (job_token=, ${JOB_TOKEN_ENV}); pick another name, or register "
            f"after that run ends",
        )

    def _check_register(self, reg: RegisterBody) -> Address:
        """What a register body's types cannot say (400): the rank below the world size, a
        world that fits the topology, the worker's address; returns that address."""
        if reg.rank >= reg.world_size:
            raise BadRequest(400, f"rank: {reg.rank} is not below world_size {reg.world_size}")
        if reg.world_size > len(self.service.hosts_in_order):
            raise BadRequest(
                400,
                f"world_size: {reg.world_size} workers do not fit the {len(self.service.hosts_in_order)} hosts of "
                f"{self.service.topology.name}",
            )
        try:  # a literal (nothing is resolved here) the switches can send this rank's results to
            return parse_destination(reg.udp, field="udp")
        except AddressError as exc:
            raise BadRequest(400, str(exc)) from None

    def _check_joins(self, job: Job, reg: RegisterBody) -> None:
        """A register for a job other ranks registered: it must agree with them (409 otherwise)."""
        name, rank = job.name, reg.rank
        if job.life.state is not JobState.REGISTERING:
            raise BadRequest(
                409,
                f"job: {name!r} is {job.state} (job_id {job.job_id}); register again after it ends "
                f"(a job whose ranks died ends within heartbeat_timeout_s={self.service.heartbeat_timeout_s:g})",
            )
        if job.world_size != reg.world_size:
            raise BadRequest(
                409, f"world_size: {reg.world_size} differs from {job.world_size} given by other ranks of {name!r}"
            )
        if reg.trees is not None and job.trees not in (None, reg.trees):
            raise BadRequest(409, f"trees: {reg.trees} differs from {job.trees} asked by other ranks of {name!r}")
        other = job.ranks.get(rank)
        if other is not None and not other.gone():
            raise BadRequest(
                409,
                f"rank: {rank} of {name!r} is already registered (from udp {format_addr(other.udp)}, waiting for "
                f"the job's admission); ranks must be unique, and a rank is replaced only once its register call "
                f"hung up",
            )

    async def _wait_admission(self, job: Job, mine: Rank, wait_s: float) -> None:
        """Wait until the job leaves ``registering`` (admitted, refused, failed) or ``wait_s`` passes."""
        deadline = time.monotonic() + wait_s
        while job.ranks.get(mine.rank) is mine and job.life.state in (JobState.REGISTERING, JobState.INSTALLING):
            left = deadline - time.monotonic()
            if job.life.state is JobState.INSTALLING:
                left = max(left, 4 * self.service.switch_timeout_s)  # an admission under way is bounded by its PUTs
            elif left <= 0:
                break
            job.ready.clear()  # no await since the state was read: no wake-up is lost
            try:
                await asyncio.wait_for(job.ready.wait(), timeout=left)
            except asyncio.TimeoutError:
                if job.life.state is not JobState.INSTALLING:
                    break
        if job.life.state is JobState.REGISTERING and job.ranks.get(mine.rank) is mine:
            missing = sorted(set(range(job.world_size)) - set(job.ranks))
            registered = sorted(job.ranks)
            self.drop_rank(job, mine, f"no admission within wait_s={wait_s:g}")
            raise BadRequest(
                504,
                f"job {job.name!r}: ranks {missing} of world_size {job.world_size} did not register within "
                f"wait_s={wait_s:g} (registered: {registered})",
            )

    def _register_reply(self, job: Job, rank: int) -> RegisterReply:
        if job.life.state is JobState.REFUSED:
            return RegisterReply(job=job.name, job_id=job.job_id, admitted=False, reason=job.reason)
        if job.life.state is not JobState.RUNNING:
            raise BadRequest(503, f"job {job.name!r}: {job.state}: {job.reason}")
        plan = job.plan
        assert plan is not None
        host = job.ranks[rank].host
        leaf = self.service.topology.tor_of(host)
        group = job.groups.get(leaf)
        if group is not None and format_addr(job.ranks[rank].udp) in group["members"]:
            multicast = ResultsGroup(group=group["group"])
        else:
            multicast = ResultsGroup(group=None, reason=job.group_reasons.get(leaf, "no group for this rank's leaf"))
        return RegisterReply(
            job=job.name,
            job_id=plan.job_id,
            admitted=True,
            reason=plan.reason,
            warnings=list(plan.warnings),
            rank=rank,
            host=host,
            trees=[TreeInfo(tree_id=t.tree_id, root=t.root, group=t.group, cwnd_cap=t.cwnd_cap) for t in plan.trees],
            first_hop=FirstHop(switch=leaf, udp=format_addr(self.service.switches[leaf].udp)),
            payload_elems=job.payload_for_job,
            key=f"{job.key:016x}",
            heartbeat_timeout_s=self.service.heartbeat_timeout_s,
            multicast=multicast,
        )

    def _registered_rank(self, name: str, body: RankBody, credential: Credential, what: str) -> tuple[Job, Rank]:
        """The job and the rank a heartbeat, leave or unicast request names; 404 when either
        is unknown, 403 unless the request carries the job's token."""
        rank, job_id = body.rank, body.job_id
        job = self.service.find_job(name, job_id)
        if job is None:
            raise BadRequest(404, f"job: unknown job {name!r}" + (f" with job_id {job_id}" if job_id else ""))
        self.check_holder(job, credential, what)
        x = job.ranks.get(rank)
        if x is None:
            raise BadRequest(404, f"rank: {rank} is not registered in job {name!r}")
        return job, x

    async def heartbeat(self, name: str, body: ProgressBody, credential: Credential = OPERATOR) -> HeartbeatReply:
        """``POST /v1/jobs/{job}/heartbeat``: a rank is alive; its progress (``calls``; ``call``
        and ``elems`` during an allreduce) lets the controller name a size mismatch; the
        answer names the ranks that left cleanly (``left``: rank -> calls completed)."""
        job, x = self._registered_rank(name, body, credential, "a heartbeat")
        self._progress(x, body)
        call, elems = body.call, body.elems
        if job.life.state is JobState.RUNNING:
            x.last_seen = time.monotonic()
            if call is not None and elems is not None:
                x.call = (call, elems)
            await self._check_sizes(job)
        left = {str(r.rank): r.calls for r in job.ranks.values() if r.left}
        return HeartbeatReply(state=job.state, reason=job.reason, job_id=job.job_id, left=left)

    async def leave(self, name: str, body: ProgressBody, credential: Credential = OPERATOR) -> LeaveReply:
        """``POST /v1/jobs/{job}/leave``: the rank is done (after an ``error``: the job fails)."""
        job, x = self._registered_rank(name, body, credential, "a leave")
        error = body.error
        self._progress(x, body)
        if job.life.state is JobState.RUNNING:
            await self._check_sizes(job)
        if job.life.state is JobState.RUNNING:
            x.left = True
            if not error and not all(r.left for r in job.ranks.values()):
                log.info("job %s: rank %d left cleanly after %s allreduce(s)", job.name, x.rank, x.calls)
            if error:
                x.error = error[:500]
                await self.service.teardown(job, JobInput.RANK_FAILED, f"rank {x.rank} left after an error: {x.error}")
            elif all(r.left for r in job.ranks.values()):
                await self.service.teardown(job, JobInput.ALL_LEFT, f"all {job.world_size} ranks left")
            else:
                self.save_state()
        return LeaveReply(state=job.state, reason=job.reason, job_id=job.job_id)

    @staticmethod
    def _progress(x: Rank, body: ProgressBody) -> None:
        """A heartbeat's or leave's ``calls`` and ``last`` (the size of the last completed call)."""
        if body.calls is not None:
            x.calls = body.calls
        if x.calls and body.last is not None:
            x.last = (x.calls - 1, body.last)

    async def _check_sizes(self, job: Job) -> None:
        """Fail the job when two ranks passed different sizes to the same allreduce."""
        seen: dict[int, tuple[int, int]] = {}  # call index -> (rank, elements)
        for r in sorted(job.ranks.values(), key=lambda r: r.rank):
            for index, elems in (c for c in (r.last, r.call) if c is not None):
                first = seen.setdefault(index, (r.rank, elems))
                if first[1] != elems:
                    why = (
                        f"size mismatch in allreduce #{index + 1}: rank {first[0]} passed {first[1]} floats, rank "
                        f"{r.rank} passed {elems} (every rank must pass the same size to each allreduce)"
                    )
                    log.warning("job %s: %s", job.name, why)
                    await self.service.teardown(job, JobInput.RANK_FAILED, why)
                    return

    async def unicast(self, name: str, body: UnicastBody, credential: Credential = OPERATOR) -> UnicastReply:
        """``POST /v1/jobs/{job}/unicast``: a rank could not join its leaf's results group
        after all (its probe passed): the leaf daemon sends that job's results to each child
        from now on (``DELETE /jobs/{job_id}/multicast``), so the rank gets them on its own
        socket, not only as answers to its retransmissions."""
        job, x = self._registered_rank(name, body, credential, "a unicast request")
        reason = body.reason
        if reason is None:
            raise BadRequest(400, "reason: required (a string of 1-300 characters)")
        if job.life.state is not JobState.RUNNING or job.job_id is None:
            raise BadRequest(409, f"job {job.name!r}: {job.state}: {job.reason}")
        leaf = self.service.topology.tor_of(x.host)
        group = job.groups.get(leaf)
        if group is None or format_addr(x.udp) not in group["members"]:
            return UnicastReply(switch=leaf, results_path="unicast")
        why = f"rank {x.rank} could not join {group['group']}: {reason}"
        try:
            await self.service.daemons.multicast_off(leaf, job.job_id, why)
        except HttpError as exc:
            if exc.status is None:
                raise BadRequest(502, f"switch {leaf} unreachable: {exc}") from None
            raise BadRequest(
                502, f"switch {leaf} refused to stop multicast: HTTP {exc.status} {error_text(exc.body)}"
            ) from None
        job.drop_group(leaf, why)
        self.save_state()
        log.warning("job %s: %s sends results by unicast: %s", job.name, leaf, why)
        return UnicastReply(switch=leaf, results_path="unicast")
