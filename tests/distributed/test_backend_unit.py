"""In-process checks of panama.distributed: registration, environment, job names, the DDP hook's errors.

No cluster and no second process: world-size-1 groups on a HashStore (the ``panama`` group
then sends nothing to a switch; its float32 all_reduce is a one-rank gloo call).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import panama.distributed  # noqa: E402
from panama.distributed import EnvError, PanamaProcessGroup  # noqa: E402
from panama.distributed.ddp_hook import register_panama_hook  # noqa: E402
from panama.runtime.control.messages import JOB_NAME_RE  # noqa: E402
from panama.runtime.control.tokens import new_token  # noqa: E402
from panama.runtime.worker.communicator import Communicator, CommunicatorError  # noqa: E402
from panama.runtime.worker.env import bind_host_for, job_name  # noqa: E402


@pytest.fixture
def no_panama_env(monkeypatch):
    for name in ("PANAMA_CONTROLLER", "PANAMA_TOKEN", "PANAMA_JOB", "PANAMA_TIMEOUT_S", "PANAMA_SIZE_BYTES",
                 "PANAMA_BIND_HOST", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "RANK",
                 "WORLD_SIZE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("spec", ["panama", "cpu:panama", "cpu:panama,cuda:nccl"])
def test_backend_is_registered_and_one_rank_groups_work(spec):
    assert "panama" in dist.Backend.backend_list
    panama.distributed.register()  # idempotent
    dist.init_process_group(spec, store=dist.HashStore(), rank=0, world_size=1)
    try:
        pg = dist.distributed_c10d._get_default_group()
        assert isinstance(pg, PanamaProcessGroup)
        assert dist.get_backend() == spec
        x = torch.arange(4, dtype=torch.float32)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        assert torch.equal(x, torch.arange(4, dtype=torch.float32))
        with pytest.raises(panama.distributed.PanamaDistributedError, match="CPU and CUDA tensors only"):
            dist.all_reduce(torch.ones(2, device="meta"))
        st = panama.distributed.stats()
        assert st["mode"] == "pending" and st["panama_calls"] == 0 and st["gloo_calls"] == {"allreduce": 1}
    finally:
        dist.destroy_process_group()


def test_job_names_are_valid_and_carry_run_group_and_nonce(no_panama_env):
    no_panama_env.setenv("TORCHELASTIC_RUN_ID", "my run/with spaces:" + "x" * 200)
    no_panama_env.setenv("TORCHELASTIC_RESTART_COUNT", "3")
    name = job_name("group name!", "ab12cd34")
    assert JOB_NAME_RE.match(name), name
    assert name.startswith("torch-my-run-with-spaces-") and "-r3-ab12cd34-g" in name and name.endswith("group-name")
    assert job_name("0", "ab12cd34") != job_name("0", "ef56ab78")
    no_panama_env.delenv("TORCHELASTIC_RUN_ID")
    assert job_name("0", "n1") == "torch-none-r3-n1-g0"


def test_communicator_from_env_names_what_is_missing(no_panama_env):
    with pytest.raises(EnvError, match="PANAMA_CONTROLLER: not set"):
        Communicator.from_env()
    no_panama_env.setenv("PANAMA_CONTROLLER", "no-port-here")
    with pytest.raises(EnvError, match="PANAMA_CONTROLLER"):
        Communicator.from_env()
    no_panama_env.setenv("PANAMA_CONTROLLER", "127.0.0.1:9")
    with pytest.raises(EnvError, match="PANAMA_JOB: not set"):
        Communicator.from_env()
    no_panama_env.setenv("TORCHELASTIC_RUN_ID", "abc")
    with pytest.raises(EnvError, match="RANK: not set"):
        Communicator.from_env()
    no_panama_env.setenv("RANK", "1")
    no_panama_env.setenv("WORLD_SIZE", "two")
    with pytest.raises(EnvError, match="WORLD_SIZE: must be an integer"):
        Communicator.from_env()
    no_panama_env.setenv("WORLD_SIZE", "2")
    no_panama_env.setenv("PANAMA_TIMEOUT_S", "-1")
    with pytest.raises(EnvError, match="PANAMA_TIMEOUT_S: must be > 0"):
        Communicator.from_env()
    no_panama_env.setenv("PANAMA_TIMEOUT_S", "7")
    no_panama_env.setenv("PANAMA_TOKEN", "tok-from-env")
    comm = Communicator.from_env()  # registers at the first allreduce: no network yet
    try:
        assert (comm.job, comm.rank, comm.world_size, comm.timeout_s) == ("torch-abc", 1, 2, 7.0)
        assert comm.controller == ("127.0.0.1", 9)
        assert getattr(comm, "token", "tok-from-env") == "tok-from-env"
    finally:
        comm.close()
    comm = Communicator.from_env(job="explicit", rank=0)
    try:
        assert (comm.job, comm.rank) == ("explicit", 0)
    finally:
        comm.close()


def test_bind_address_follows_the_route_to_the_controller(no_panama_env):
    """A rank binds the address its machine reaches the controller from (127.0.0.1 for a
    controller on loopback, as before), or $PANAMA_BIND_HOST; the several-machine case is
    tests/runtime/test_several_machines.py."""
    assert bind_host_for("127.0.0.1:7070") == "127.0.0.1"
    assert bind_host_for("127.0.0.5:7070") == "127.0.0.1"  # the loopback route's source
    assert bind_host_for("not an address") == "127.0.0.1"  # the Communicator refuses it, naming it
    no_panama_env.setenv("PANAMA_BIND_HOST", "127.0.0.2")
    assert bind_host_for("127.0.0.1:7070") == "127.0.0.2"
    for bad in ("0.0.0.0", "eth0", "239.1.2.3"):
        no_panama_env.setenv("PANAMA_BIND_HOST", bad)
        with pytest.raises(EnvError, match="PANAMA_BIND_HOST"):
            bind_host_for("127.0.0.1:7070")
    no_panama_env.setenv("PANAMA_BIND_HOST", "127.0.0.2")
    no_panama_env.setenv("PANAMA_CONTROLLER", "127.0.0.1:9")
    comm = Communicator.from_env(job="bind", rank=0, world_size=2)
    try:
        assert comm.addr[0] == "127.0.0.2"
    finally:
        comm.close()


class FabricDown(CommunicatorError):
    pass


class FailingCommunicator:
    world_size = 1

    def allreduce(self, x, out=None):
        raise FabricDown("switch leaf0 did not answer")


class InPlaceCommunicator:
    """One rank; records whether the hook asked for the sum in the bucket itself."""

    world_size = 1

    def __init__(self):
        self.outs_were_inputs = []

    def allreduce(self, x, out=None):
        self.outs_were_inputs.append(out is x)
        if out is None:
            return x.clone()
        out.copy_(x)
        return out


@pytest.fixture
def gloo_one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_hook_error_keeps_its_type_through_backward(gloo_one_rank):
    ddp = DistributedDataParallel(_model())
    register_panama_hook(ddp, FailingCommunicator())
    with pytest.raises(FabricDown, match="leaf0 did not answer") as info:
        ddp(torch.randn(4, 6)).sum().backward()
    assert "Unable to cast" not in str(info.value)


def test_hook_reduces_in_place(gloo_one_rank):
    ddp = DistributedDataParallel(_model())
    comm = InPlaceCommunicator()
    state = register_panama_hook(ddp, comm)
    ddp(torch.randn(4, 6)).sum().backward()
    assert state.in_place and comm.outs_were_inputs and all(comm.outs_were_inputs)


def test_a_blocked_collective_wait_runs_signal_handlers():
    """A rank blocked in a collective's wait() runs a signal handler (torchrun's SIGTERM,
    Ctrl-C) instead of ignoring it until the collective ends (issue 27)."""
    import signal

    from panama.distributed.work import FutureWork

    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop

    work = FutureWork(torch.futures.Future())  # never completes
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(Stop):
            work.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    done = torch.futures.Future()
    done.set_result([1])
    assert FutureWork(done).wait() is True


def test_one_timeout_rule_for_the_backend_and_from_env(no_panama_env):
    """Issue 38: one rule, one place (env.timeout_s): $PANAMA_TIMEOUT_S when set, else
    CommunicatorConfig's default, lowered to the group's timeout when that is shorter
    (before: the backend took 60 s against the communicator's 30 s, restated in env.py)."""
    from panama.runtime.settings import CommunicatorConfig
    from panama.runtime.worker import env

    default = CommunicatorConfig().timeout_s
    assert env.timeout_s() == default and env.timeout_s(limit_s=1800.0) == default
    assert env.timeout_s(limit_s=5.0) == 5.0
    config = env.communicator_config("127.0.0.1:9", limit_s=1800.0)
    assert (config.timeout_s, config.size_bytes, config.bind_host) == (default, None, "127.0.0.1")
    no_panama_env.setenv("PANAMA_TIMEOUT_S", "90")
    no_panama_env.setenv("PANAMA_SIZE_BYTES", "4000")
    config = env.communicator_config("127.0.0.1:9", limit_s=1800.0)
    assert (config.timeout_s, config.size_bytes) == (90.0, 4000)
    assert env.communicator_kwargs_from_env(controller="127.0.0.1:9", job="j", rank=0, world_size=2)["timeout_s"] == 90
    # The backend's group of 2 ranks builds its communicator from that config (size hint kept
    # for the first all_reduce, not announced at construction: no network here).
    store = dist.HashStore()
    store.set(
        "panama/setup", json.dumps({"controller": "127.0.0.1:9", "token": None, "nonce": "n", "job": new_token()})
    )
    no_panama_env.setattr("panama.distributed.backend.check_access", lambda *a, **k: None)
    no_panama_env.setattr("panama.distributed.backend.ProcessGroupGloo", lambda *a: None)  # no peer rank here
    pg = PanamaProcessGroup(store, 1, 2, timedelta(seconds=60), "0", is_default=False)
    try:
        assert pg._comm.timeout_s == 90.0 and pg._timeout_s == 90.0  # $PANAMA_TIMEOUT_S=90 is explicit: it wins
        assert pg._size_hint == 4000 and pg._comm.plan is None
    finally:
        pg.shutdown()
    no_panama_env.delenv("PANAMA_TIMEOUT_S")
    pg = PanamaProcessGroup(store, 1, 2, timedelta(seconds=12), "0", is_default=False)
    try:
        assert pg._comm.timeout_s == 12.0  # the default, lowered to the group's timeout
    finally:
        pg.shutdown()


def test_an_interrupted_wait_tells_its_group_before_propagating():
    """Ctrl-C in wait(): on_interrupt sees the KeyboardInterrupt, which still propagates."""
    import signal

    from panama.distributed.work import FutureWork

    seen = []

    def handler(signum, frame):
        raise KeyboardInterrupt

    work = FutureWork(torch.futures.Future(), on_interrupt=seen.append)  # never completes
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            work.wait()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert len(seen) == 1 and isinstance(seen[0], KeyboardInterrupt)
