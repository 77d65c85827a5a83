"""CUDA tensors through the ``panama`` backend, without a GPU: staging against a stream model.

:class:`fake_device.FakeDevice` plays torch.cuda with CPU tensors: queued work runs only when
the device is made to progress, in stream order, and pinned buffers start as NaN, so a
missing wait, a copy on the wrong stream or a buffer reused too early gives a wrong number.
The same checks on a real GPU: ``test_torchrun.py::test_cuda_tensors_match_gloo_bitwise``
(skipped without one).
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
from fake_device import FakeDevice, FakeFuture, FakeStream  # noqa: E402

import panama.distributed  # noqa: E402
from panama.distributed import PanamaDistributedError  # noqa: E402
from panama.distributed.staging import PinnedStaging, StagingError  # noqa: E402

JOIN_S = 30.0  # bound of a helper thread's join (it runs a few tensor copies)


def on_thread(fn):
    """Run ``fn`` on another thread (its own current stream, as the backend's worker thread)."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(JOIN_S)
    assert not thread.is_alive(), f"{fn} still running after {JOIN_S} s"
    assert out, f"{fn} raised (see the thread's traceback above)"
    return out[0]


def reduce_on_host(staging: PinnedStaging, staged, factor: float = 2.0) -> None:
    """The reducing thread's part: wait for the copy in, 'sum' (x factor), copy out."""
    staging.wait_copied_in(staged, timeout_s=30.0)
    for view in staged.views:
        view.mul_(factor)
    staging.copy_out(staged)


def test_copy_in_follows_the_callers_kernels_and_the_result_lands_on_the_callers_stream():
    dev = FakeDevice()
    side = FakeStream("side")
    dev.set_current(side)
    x = torch.zeros(6)
    dev.launch(lambda: x.copy_(torch.arange(6.0)))  # the gradient's kernel, still queued
    staging = PinnedStaging(dev)
    staged = staging.copy_in([x])
    assert staged.stream is side and torch.isnan(staged.views[0]).all()  # nothing ran yet: no host wait
    on_thread(lambda: reduce_on_host(staging, staged))
    # the reducing thread polled the copy-in event only, and queued the copy out on 'side'
    polls = dev.calls("poll")
    assert polls and {p[2] for p in polls} == {staged.copied_in.id}
    assert [c[1] for c in dev.calls("copy")] == ["side", "side"]
    assert torch.equal(x, torch.arange(6.0))  # the copy out is queued, not run
    dev.run(dev.default)
    assert torch.equal(x, torch.arange(6.0)), "the copy out ran on a stream the caller did not use"
    dev.run(side)
    assert torch.equal(x, 2 * torch.arange(6.0))


def test_non_contiguous_and_multi_tensor_buckets_share_one_buffer():
    dev = FakeDevice()
    staging = PinnedStaging(dev)
    a = torch.arange(12.0).reshape(3, 4).t()  # transposed
    b = torch.arange(10.0)[::2]  # strided
    c = torch.tensor(7.0)  # 0-dim
    d = torch.ones(2, 2)
    want = [2 * a.clone(), 2 * b.clone(), 2 * c.clone(), 2 * d.clone()]
    strides = [t.stride() for t in (a, b, c, d)]
    staged = staging.copy_in([a, b, c, d])
    assert staged.numel == 12 + 5 + 1 + 4 and dev.allocated == [22]
    assert [v.shape for v in staged.views] == [a.shape, b.shape, c.shape, d.shape]
    assert all(v.is_contiguous() for v in staged.views)
    assert len({v.untyped_storage().data_ptr() for v in staged.views}) == 1  # one buffer
    on_thread(lambda: reduce_on_host(staging, staged))
    dev.run()
    for got, w in zip((a, b, c, d), want, strict=True):
        assert torch.equal(got, w)
    assert [t.stride() for t in (a, b, c, d)] == strides  # written in place, layout untouched


def test_buffers_are_reused_grown_and_one_per_operation_in_flight():
    dev = FakeDevice()
    staging = PinnedStaging(dev)

    def op(n: int) -> None:
        staged = staging.copy_in([torch.ones(n)])
        on_thread(lambda: reduce_on_host(staging, staged))

    op(10)
    op(6)  # fits the free 10-element buffer
    op(10)
    assert dev.allocated == [10] and staging.allocations == 1 and staging.pinned_bytes == 40
    op(20)  # grows: the 10-element buffer is dropped
    assert dev.allocated == [10, 20] and staging.pinned_bytes == 80
    first = staging.copy_in([torch.ones(5)])  # two in flight: two buffers
    second = staging.copy_in([torch.ones(5)])
    assert dev.allocated == [10, 20, 5] and staging.pinned_bytes == 100
    assert first.views[0].untyped_storage().data_ptr() != second.views[0].untyped_storage().data_ptr()
    for staged in (first, second):
        on_thread(lambda s=staged: reduce_on_host(staging, s))
    small = staging.copy_in([torch.ones(5)])  # best fit: the 5-element buffer, leaving the 20
    large = staging.copy_in([torch.ones(15)])
    assert len(dev.allocated) == 3, dev.allocated
    for staged in (small, large):
        on_thread(lambda s=staged: reduce_on_host(staging, s))


def test_a_reused_buffer_waits_for_its_last_copy_out_on_the_device():
    """Operation 1 on stream A, its copy out still queued; operation 2 on stream B takes the
    same buffer: B waits (on the device) for A's copy out before its copy in overwrites it."""
    dev = FakeDevice()
    staging = PinnedStaging(dev)
    a_stream, b_stream = FakeStream("A"), FakeStream("B")
    x, y = torch.full((4,), 1.0), torch.full((4,), 5.0)
    dev.set_current(a_stream)
    s1 = staging.copy_in([x])
    on_thread(lambda: reduce_on_host(staging, s1))
    copy_out_1 = [e for e in dev.calls("record") if e[1] == "A"][-1][2]
    dev.set_current(b_stream)
    s2 = staging.copy_in([y])
    assert s2.views[0].untyped_storage().data_ptr() == s1.views[0].untyped_storage().data_ptr()
    b_ops = [e for e in dev.log if e[1:2] == ("B",) and e[0] in ("wait", "copy")]
    assert b_ops[0] == ("wait", "B", copy_out_1), b_ops
    on_thread(lambda: reduce_on_host(staging, s2, factor=3.0))
    dev.run(b_stream)
    dev.run(a_stream)
    assert torch.equal(x, torch.full((4,), 2.0)) and torch.equal(y, torch.full((4,), 15.0))
    assert dev.allocated == [4]


def test_a_failed_reduction_returns_the_buffer_and_leaves_the_tensors():
    dev = FakeDevice()
    staging = PinnedStaging(dev)
    x = torch.arange(3.0)
    staged = staging.copy_in([x])
    staging.abandon(staged)
    staging.abandon(staged)  # idempotent
    dev.run()
    assert torch.equal(x, torch.arange(3.0))
    staging.copy_in([torch.ones(3)])
    assert dev.allocated == [3]


class HungDevice(FakeDevice):
    def event_done(self, event):
        return False


def test_a_copy_that_never_finishes_is_an_error_naming_the_device_and_size():
    staging = PinnedStaging(HungDevice())
    staged = staging.copy_in([torch.ones(8)])
    with pytest.raises(StagingError, match=r"copy of 8 float32 from cpu into pinned host memory did not finish"):
        staging.wait_copied_in(staged, timeout_s=0.01)


def test_copy_in_refuses_mixed_devices_or_dtypes():
    staging = PinnedStaging(FakeDevice())
    with pytest.raises(ValueError, match="float32 tensors of one device"):
        staging.copy_in([torch.ones(2), torch.ones(2, dtype=torch.float64)])


# ---------------------------------------------------------------------- through the backend


@pytest.fixture
def staged_group(monkeypatch):
    """A one-rank ``panama`` group whose CPU tensors play CUDA tensors on a stream model."""
    for name in ("PANAMA_CONTROLLER", "PANAMA_TOKEN", "PANAMA_TIMEOUT_S", "PANAMA_SIZE_BYTES"):
        monkeypatch.delenv(name, raising=False)
    dist.init_process_group("panama", store=dist.HashStore(), rank=0, world_size=1)
    pg = dist.distributed_c10d._get_default_group()
    dev = FakeDevice()
    pg._device_apis = {"cpu": dev}
    try:
        yield pg, dev
    finally:
        dist.destroy_process_group()


def twice(views, avg):
    """As two ranks holding the same tensor would sum (one rank's real sum is the identity)."""
    for v in views:
        v.mul_(2)
    return views


def test_backend_stages_a_float32_all_reduce_and_its_work_follows_the_callers_stream(staged_group, monkeypatch):
    pg, dev = staged_group
    monkeypatch.setattr(pg, "_host_allreduce", twice)
    side = FakeStream("side")
    dev.set_current(side)
    x = torch.zeros(4, 3).t()  # non-contiguous
    dev.launch(lambda: x.copy_(torch.arange(12.0).reshape(4, 3).t()))
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    assert isinstance(fut, FakeFuture) and fut.device == x.device  # the future carries the device
    work.wait()
    assert fut.completed_on is side  # completed on the caller's stream, after the copy out
    wait_for_result = [e for e in dev.calls("wait") if e[1] == "side"][-1]
    assert wait_for_result[2] == fut.event.id  # wait(): the caller's stream waits for it
    dev.run(dev.default)
    assert not torch.equal(x, 2 * torch.arange(12.0).reshape(4, 3).t())  # the host did not sync the device
    dev.run(side)
    assert torch.equal(x, 2 * torch.arange(12.0).reshape(4, 3).t())
    st = panama.distributed.stats()
    assert st["staged_calls"] == 1 and st["pinned_allocations"] == 1 and st["pinned_bytes"] == 48, st


def test_backend_multi_tensor_bucket_and_buffer_reuse(staged_group, monkeypatch):
    pg, dev = staged_group
    monkeypatch.setattr(pg, "_host_allreduce", twice)
    a, b = torch.arange(6.0).reshape(2, 3), torch.arange(8.0)[1::2]
    want = [2 * a, 2 * b]
    for _ in range(3):
        pg.allreduce([a, b]).wait()
        dev.run()
        assert torch.equal(a, want[0]) and torch.equal(b, want[1])
        want = [2 * w for w in want]
    assert dev.allocated == [10]
    st = panama.distributed.stats()
    assert st["staged_calls"] == 3 and st["pinned_allocations"] == 1, st


def test_backend_one_rank_sum_is_the_tensor_itself(staged_group):
    """No patch: the real one-rank path (gloo on the host views) leaves the values, via the buffer."""
    _, dev = staged_group
    x = torch.arange(5.0)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    dev.run()
    assert torch.equal(x, torch.arange(5.0))
    st = panama.distributed.stats()
    assert st["staged_calls"] == 1 and st["gloo_calls"] == {"allreduce": 1}, st


def test_backend_other_dtypes_go_to_gloo_on_the_callers_stream(staged_group):
    _, dev = staged_group
    side = FakeStream("side")
    dev.set_current(side)
    x = torch.arange(4, dtype=torch.int64)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    fut = work.get_future()
    assert isinstance(fut, FakeFuture) and fut.completed_on is side
    assert ("use_stream", "side") in dev.log  # the worker thread ran gloo with the caller's stream current
    assert dev.allocated == []  # not staged by us: gloo stages its own
    assert torch.equal(x, torch.arange(4, dtype=torch.int64))
    t = torch.tensor([3.0])
    dist.broadcast(t, src=0)
    assert len(dev.futures) == 2 and dev.futures[1].completed_on is side
    st = panama.distributed.stats()
    assert st["staged_calls"] == 0 and st["gloo_calls"] == {"allreduce": 1, "broadcast": 1}, st


def test_backend_failed_staged_reduction_raises_and_returns_the_buffer(staged_group, monkeypatch):
    pg, dev = staged_group

    def broken(views, avg):
        raise RuntimeError("switch leaf0 did not answer")

    monkeypatch.setattr(pg, "_host_allreduce", broken)
    x = torch.arange(3.0)
    work = dist.all_reduce(x, async_op=True)
    with pytest.raises(RuntimeError, match="leaf0 did not answer"):
        work.wait()
    dev.run()
    assert torch.equal(x, torch.arange(3.0))
    monkeypatch.setattr(pg, "_host_allreduce", twice)
    dist.all_reduce(x)
    dev.run()
    assert torch.equal(x, 2 * torch.arange(3.0)) and dev.allocated == [3]


def test_backend_refuses_mixed_devices(staged_group):
    pg, dev = staged_group
    pg._device_apis["meta"] = dev
    with pytest.raises(PanamaDistributedError, match="tensors of one device"):
        pg.allreduce([torch.ones(2), torch.ones(2, device="meta")])


def test_backend_is_registered_for_cpu_and_cuda():
    assert dist.Backend.backend_capability["panama"] == ["cpu", "cuda"]


# ---------------------------------------------------------------------- the DDP communication hook


class DoublingCommunicator:
    """As if two ranks held this rank's bucket: returns a new tensor, 2 * x."""

    world_size = 2
    timeout_s = 30.0

    def allreduce(self, x):
        return x * 2


class Bucket:
    def __init__(self, buf):
        self._buf = buf

    def buffer(self):
        return self._buf


def test_hook_stages_a_device_bucket_on_the_current_stream():
    from panama.distributed.ddp_hook import PanamaHookState, panama_allreduce_hook

    dev = FakeDevice()
    side = FakeStream("side")
    dev.set_current(side)
    state = PanamaHookState(DoublingCommunicator(), world_size=2, device_apis={"cpu": dev})
    buf = torch.arange(8.0)
    fut = panama_allreduce_hook(state, Bucket(buf))
    assert isinstance(fut, FakeFuture) and fut.completed_on is side and fut.device == buf.device
    assert torch.equal(buf, torch.arange(8.0) / 2)  # divided (here at once: a CPU op), sum not yet copied back
    dev.run(side)
    assert torch.equal(buf, torch.arange(8.0)) and fut.wait() is buf
    assert state.calls == 1 and state.elems == 8 and dev.allocated == [8]
    panama_allreduce_hook(state, Bucket(torch.ones(4)))
    assert dev.allocated == [8]  # reused


def test_hook_under_ddp_with_staged_buckets_matches_the_local_gradient():
    from torch.nn.parallel import DistributedDataParallel

    from panama.distributed.ddp_hook import register_panama_hook

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        make = lambda: torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))  # noqa: E731
        plain, model = make(), make()
        model.load_state_dict(plain.state_dict())
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.0005)
        state = register_panama_hook(ddp, DoublingCommunicator())
        dev = FakeDevice(lazy=False)  # DDP's C++ reducer waits on the futures without the model
        state.device_apis = {"cpu": dev}
        x = torch.randn(5, 6)
        for _ in range(3):
            ddp.zero_grad()
            ddp(x).sum().backward()
        plain(x).sum().backward()
        for p, q in zip(plain.parameters(), model.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)  # 2 equal halves summed: the local gradient
        assert state.calls >= 3 and len(dev.futures) == state.calls
        # one buffer: DDP's first step reduces all gradients in one bucket, the later (smaller) buckets reuse it
        assert len(dev.allocated) == 1 and dev.allocated[0] == sum(p.numel() for p in model.parameters())
    finally:
        dist.destroy_process_group()
