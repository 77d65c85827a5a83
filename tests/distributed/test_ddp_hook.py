"""The PANAMA DDP communication hook against DDP's stock gloo allreduce."""

from __future__ import annotations

import os
import traceback
from datetime import timedelta

import numpy as np
import pytest

# torch is an extra: CI's second and third interpreters run the runtime suite without it.
torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from panama.distributed.ddp_hook import (  # noqa: E402
    PanamaHookState,
    panama_allreduce_hook,
    register_panama_hook,
)
from panama.runtime.control.tokens import new_token  # noqa: E402
from panama.training.models import make_lenet  # noqa: E402
from panama.training.run import worker_context  # noqa: E402

# Explicit tolerances for "same gradient as gloo": float32 sums of W=2 terms may only
# differ by the order of additions, i.e. a few ulps.
RTOL = 1e-6
ATOL = 1e-9
STEPS = 3
SHARD = 16


class ScalingCommunicator:
    """Test double: pretends ``world_size`` ranks all hold this rank's tensor (sum = W * x)."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.seen: list[torch.Tensor] = []

    def allreduce(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.clone())
        return x * self.world_size  # a new tensor: the hook must copy it back in place


class FailingCommunicator:
    world_size = 1

    def allreduce(self, x):
        raise RuntimeError("switch leaf0 did not answer")


@pytest.fixture
def single_rank_group(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _batch(seed: int = 0, n: int = SHARD) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic LeNet inputs (no dataset import: these tests are about the hook)."""
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.random((n, 1, 28, 28), dtype=np.float32))
    return x, torch.from_numpy(rng.integers(0, 10, size=n))


def test_hook_divides_before_reducing_and_writes_back_in_place(single_rank_group):
    x, y = _batch()
    plain = make_lenet(3)
    F.cross_entropy(plain(x), y).backward()
    ddp = DistributedDataParallel(make_lenet(3))
    comm = ScalingCommunicator(world_size=4)
    state = register_panama_hook(ddp, comm)
    F.cross_entropy(ddp(x), y).backward()
    assert state.calls >= 1 and state.world_size == 4
    assert state.elems == sum(p.numel() for p in plain.parameters())
    # What reached the communicator was the gradient divided by W = 4 ...
    sent = torch.cat([t.reshape(-1) for t in comm.seen])
    expected = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
    assert sent.abs().sum() > 0
    # ... (DDP buckets parameters in reverse order; compare as multisets of values)
    torch.testing.assert_close(sent.sort().values * 4, expected.sort().values, rtol=RTOL, atol=ATOL)
    # ... and the sum of 4 equal quarters was written back: the average equals the local gradient.
    for p_plain, p_ddp in zip(plain.parameters(), ddp.module.parameters(), strict=True):
        torch.testing.assert_close(p_ddp.grad, p_plain.grad, rtol=RTOL, atol=ATOL)


def test_communicator_error_surfaces_from_backward(single_rank_group):
    x, y = _batch()
    ddp = DistributedDataParallel(make_lenet(0))
    register_panama_hook(ddp, FailingCommunicator())
    with pytest.raises(RuntimeError, match="leaf0 did not answer"):
        F.cross_entropy(ddp(x), y).backward()


def test_state_rejects_mismatched_world_size():
    with pytest.raises(ValueError, match="world_size"):
        PanamaHookState(ScalingCommunicator(world_size=2), world_size=3)
    with pytest.raises(ValueError, match="world_size"):
        PanamaHookState(ScalingCommunicator(world_size=2), world_size=0)


def test_hook_has_torch_comm_hook_signature():
    import inspect

    sig = inspect.signature(panama_allreduce_hook)
    assert sig.parameters["bucket"].annotation is dist.GradBucket
    assert sig.return_annotation == torch.futures.Future[torch.Tensor]


# --------------------------------------------------------------------------- 2 processes


def _compare_worker(
    rank: int, world: int, store_path: str, controller: str, job: str, out_q, token: str, job_token: str
) -> None:
    """One rank: a stock-DDP model and a PANAMA-hook model take the same steps; report gradients."""
    try:
        from panama.runtime.worker.communicator import Communicator

        torch.set_num_threads(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group(
            "gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world, timeout=timedelta(seconds=60)
        )
        ref = DistributedDataParallel(make_lenet(7))
        pan = DistributedDataParallel(make_lenet(7))
        n_params = sum(p.numel() for p in pan.parameters())
        with Communicator(
            controller, job, rank, world, size_bytes=4 * n_params, timeout_s=30, token=token, job_token=job_token
        ) as comm:
            state = register_panama_hook(pan, comm)
            opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
            opt_pan = torch.optim.SGD(pan.parameters(), lr=0.1)
            report = {"local_grads": [], "ref_grads": [], "pan_grads": []}
            for step in range(STEPS):
                x, y = _batch(seed=100 * step + rank)  # each rank its own shard
                if step == 0:  # this rank's own gradient, before any averaging
                    local = make_lenet(7)
                    F.cross_entropy(local(x), y).backward()
                    report["local_grads"].append([p.grad.numpy().copy() for p in local.parameters()])
                for model, opt, key in ((ref, opt_ref, "ref_grads"), (pan, opt_pan, "pan_grads")):
                    F.cross_entropy(model(x), y).backward()
                    report[key].append([p.grad.numpy().copy() for p in model.module.parameters()])
                    opt.step()
                    opt.zero_grad()
            report["hook_calls"] = state.calls
            report["pan_params"] = [p.detach().numpy().copy() for p in pan.module.parameters()]
            report["comm_stats"] = comm.stats()
        out_q.put((rank, report))  # numpy arrays: pickled by value, outlive this process
        dist.destroy_process_group()
    except BaseException:
        out_q.put((rank, {"error": traceback.format_exc()}))


def test_two_process_gradients_match_gloo_allreduce(tmp_path, cluster):
    """Two ranks on the session's local cluster (tests/runtime/suite_cluster.py: small datagrams, many packets)."""
    world = 2
    ctx = worker_context()
    out_q = ctx.Queue()
    run = new_token()  # the two processes are one run
    procs = [
        ctx.Process(
            target=_compare_worker,
            args=(r, world, str(tmp_path / "store"), cluster.controller, "ddp-hook-test", out_q, cluster.token, run),
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    reports = {}
    try:
        for _ in range(world):
            rank, report = out_q.get(timeout=120)
            assert "error" not in report, f"rank {rank} failed:\n{report['error']}"
            reports[rank] = report
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    assert [p.exitcode for p in procs] == [0, 0]

    for rep in reports.values():
        for key in ("local_grads", "ref_grads", "pan_grads"):
            rep[key] = [[torch.from_numpy(g) for g in grads] for grads in rep[key]]
        rep["pan_params"] = [torch.from_numpy(p) for p in rep["pan_params"]]
    for rank, rep in reports.items():
        assert rep["hook_calls"] >= STEPS
        assert rep["comm_stats"]["bytes_sent"] > 0
        for step in range(STEPS):
            for g_ref, g_pan in zip(rep["ref_grads"][step], rep["pan_grads"][step], strict=True):
                torch.testing.assert_close(g_pan, g_ref, rtol=RTOL, atol=ATOL, msg=f"rank {rank} step {step}")
    # The averaged gradient is the mean of the ranks' own gradients ...
    for g0, g1, g_pan in zip(reports[0]["local_grads"][0], reports[1]["local_grads"][0], reports[0]["pan_grads"][0]):
        torch.testing.assert_close(g_pan, (g0 + g1) / 2, rtol=1e-5, atol=1e-8)
    # ... the same, bit for bit, on both ranks, so the replicas stay identical.
    for step in range(STEPS):
        for a, b in zip(reports[0]["pan_grads"][step], reports[1]["pan_grads"][step], strict=True):
            assert torch.equal(a, b)
    for a, b in zip(reports[0]["pan_params"], reports[1]["pan_params"], strict=True):
        assert torch.equal(a, b)
