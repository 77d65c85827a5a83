"""Run by test_torchrun.py under torchrun: checks of the ``panama`` backend, one JSON file per rank.

``worker_ops.py ops OUT_DIR`` (3 ranks): SUM and AVG through PANAMA, delegated operations,
issue order between the two paths, subgroups as their own jobs, a multi-datagram sum.
``worker_ops.py fail OUT_DIR`` (2 ranks, ``PANAMA_CONTROLLER`` set): DDP training; before
step 3 rank 0 kills the daemon whose pid is in ``PANAMA_TEST_KILL_PID``; every rank records
the error its backward raised and the one a later all_reduce raised.
``worker_ops.py orphan OUT_DIR`` (2 ranks, no ``PANAMA_CONTROLLER``): rank 0 starts the
automatic cluster and dies; rank 1 records what its next all_reduce raised and when.
``worker_ops.py interrupt OUT_DIR`` (2 ranks, ``PANAMA_CONTROLLER`` set): after one
all_reduce together, rank 0 blocks in a second one that rank 1 does not join and writes
``blocked`` (its pid); the test sends it SIGINT; rank 0 records how long after the signal
its ``destroy_process_group`` returned, rank 1 (once rank 0 is done) what its all_reduce
raised.
``worker_ops.py init OUT_DIR``: every rank records what init_process_group raised.
``worker_ops.py staged OUT_DIR cuda|fake`` (2 ranks): the staged path of device tensors:
DDP on the ``panama`` group against DDP on a gloo group (parameters bitwise), all_reduce
of non-contiguous tensors and of a multi-tensor bucket, other dtypes, a side stream (cuda
only). ``fake``: CPU tensors play the device's on the stream model of fake_device.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

import panama.distributed
from panama.distributed import PanamaFabricError


def err_info(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "mro": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}


def ops(rank: int, world: int) -> dict:
    res: dict = {}
    n = 1000
    base = torch.arange(n, dtype=torch.float32)

    x = base * (rank + 1)
    dist.all_reduce(x)  # SUM through PANAMA: small integers, exact in any order
    res["sum_ok"] = bool(torch.equal(x, base * sum(range(1, world + 1))))

    x = base * (rank + 1)
    work = dist.all_reduce(x, op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    res["avg_ok"] = bool(torch.equal(x, base * (sum(range(1, world + 1)) / world)))

    x = base.double() * (rank + 1)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)  # float64: gloo SUM, then divided
    res["avg_f64_ok"] = bool(torch.equal(x, base.double() * (sum(range(1, world + 1)) / world)))

    x = torch.arange(5, dtype=torch.int64) * (rank + 1)
    dist.all_reduce(x)
    res["int_sum_ok"] = bool(torch.equal(x, torch.arange(5, dtype=torch.int64) * sum(range(1, world + 1))))

    x = torch.tensor([float(rank), -float(rank)])
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    res["max_ok"] = x.tolist() == [float(world - 1), 0.0]

    try:
        dist.all_reduce(torch.arange(3), op=dist.ReduceOp.AVG)
        res["int_avg_error"] = None
    except ValueError as exc:
        res["int_avg_error"] = str(exc)

    # Issue order across paths: an async PANAMA all_reduce, then a gloo broadcast of the
    # same tensor without waiting: the broadcast must carry the sum.
    x = base * (rank + 1)
    w1 = dist.all_reduce(x, async_op=True)
    w2 = dist.broadcast(x, src=0, async_op=True)
    w1.wait()
    w2.wait()
    res["order_ok"] = bool(torch.equal(x, base * sum(range(1, world + 1))))

    t = torch.tensor([float(rank)])
    dist.broadcast(t, src=world - 1)
    res["broadcast_ok"] = t.item() == float(world - 1)

    outs = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(outs, torch.tensor([rank, rank + 0.5]))
    res["all_gather_ok"] = [o.tolist() for o in outs] == [[r, r + 0.5] for r in range(world)]

    out = torch.zeros(world * 2)
    dist.all_gather_into_tensor(out, torch.tensor([rank, rank + 0.5]))
    res["all_gather_into_tensor_ok"] = out.tolist() == [v for r in range(world) for v in (r, r + 0.5)]

    out = torch.zeros(1)
    dist.reduce_scatter_tensor(out, torch.arange(world, dtype=torch.float32) + rank)
    res["reduce_scatter_ok"] = out.item() == float(world * rank + sum(range(world)))

    out = torch.zeros(world)
    dist.all_to_all_single(out, torch.full((world,), float(rank)))
    res["all_to_all_ok"] = out.tolist() == [float(r) for r in range(world)]

    dist.barrier()
    res["barrier_ok"] = True

    # A multi-datagram sum (the backend sends 16365 floats per datagram): identical on every rank.
    g = torch.Generator().manual_seed(100 + rank)
    big = torch.randn(50_000, generator=g)
    ref = sum(torch.randn(50_000, generator=torch.Generator().manual_seed(100 + r)).double() for r in range(world))
    dist.all_reduce(big)
    res["big_close"] = bool(torch.allclose(big.double(), ref, rtol=1e-6, atol=1e-6))
    digests = [None] * world
    dist.all_gather_object(digests, hashlib.sha256(big.numpy().tobytes()).hexdigest())
    res["big_identical"] = len(set(digests)) == 1

    # Subgroups: their own PANAMA jobs.
    g02 = dist.new_group([0, 2])
    g12 = dist.new_group([1, 2])
    res["default_job"] = panama.distributed.stats()["job"]
    for name, group, members in (("g02", g02, [0, 2]), ("g12", g12, [1, 2])):
        if rank in members:
            x = base * (rank + 1)
            dist.all_reduce(x, group=group)
            want = base * sum(m + 1 for m in members)
            y = base * (rank + 1)
            dist.all_reduce(y, op=dist.ReduceOp.AVG, group=group)
            st = panama.distributed.stats(group)
            res[name] = {
                "sum_ok": bool(torch.equal(x, want)),
                "avg_ok": bool(torch.equal(y, want / len(members))),
                "job": st["job"],
                "mode": st["mode"],
                "panama_calls": st["panama_calls"],
                "backend": dist.get_backend(group),
            }
    res["stats"] = panama.distributed.stats()
    return res


def fail(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    res: dict = {"steps_done": 0}
    for step in range(6):
        if step == 2:
            dist.barrier()  # both ranks finished two steps on the live fabric
            if rank == 0:
                os.kill(int(os.environ["PANAMA_TEST_KILL_PID"]), signal.SIGKILL)
        loss = ddp(torch.randn(16, 8, generator=g)).square().mean()
        opt.zero_grad()
        try:
            loss.backward()
        except Exception as exc:  # what a user's training loop would see
            res["backward_error"] = err_info(exc)
            break
        opt.step()
        res["steps_done"] = step + 1
    try:
        dist.all_reduce(torch.ones(4))
        res["later_error"] = None
    except PanamaFabricError as exc:
        res["later_error"] = err_info(exc)
    res["stats"] = panama.distributed.stats()
    return res


def staged(rank: int, world: int, kind: str) -> dict:
    pg = dist.distributed_c10d._get_default_group()
    if kind == "fake":
        from fake_device import FakeDevice  # beside this script

        pg._device_apis = {"cpu": FakeDevice(lazy=False)}  # eager: DDP's C++ reducer waits without the model
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    total = sum(range(1, world + 1))
    res: dict = {"device": str(device)}
    if kind == "cuda":
        props = torch.cuda.get_device_properties(device)
        res["card"] = f"{props.name}, {props.total_memory // 2**20} MiB"
        res["torch"] = torch.__version__

    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = (base * (rank + 1)).to(device).t()  # non-contiguous
    dist.all_reduce(x)
    res["noncontig_ok"] = bool(torch.equal(x.cpu(), (base * total).t()))

    a = (torch.arange(6, dtype=torch.float32) * (rank + 1)).to(device)
    b = (torch.arange(20, dtype=torch.float32) * (rank + 1)).to(device)[1::3]
    pg.allreduce([a, b]).wait()  # one multi-tensor bucket, one staging buffer
    res["multi_ok"] = bool(
        torch.equal(a.cpu(), torch.arange(6, dtype=torch.float32) * total)
        and torch.equal(b.cpu(), (torch.arange(20, dtype=torch.float32) * total)[1::3])
    )

    x = (base * (rank + 1)).to(device)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    res["avg_ok"] = bool(torch.equal(x.cpu(), base * (total / world)))

    n = torch.arange(5, device=device) * (rank + 1)  # int64: gloo
    dist.all_reduce(n)
    res["int_ok"] = bool(torch.equal(n.cpu(), torch.arange(5) * total))

    if kind == "cuda":  # a side stream: the result is ordered on it, the host never syncs the device
        side = torch.cuda.Stream(device)
        with torch.cuda.stream(side):
            y = torch.full((1 << 20,), float(rank + 1), device=device)
            y.mul_(2)
            work = dist.all_reduce(y, async_op=True)
            work.wait()
            res["side_stream_ok"] = bool((y == 2.0 * total).all())

    params = {}
    for name, group in (("panama", None), ("gloo", dist.new_group(backend="gloo"))):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(
            device
        )
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device] if kind == "cuda" else None, process_group=group, bucket_cap_mb=0.002
        )
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(10 + rank)
        for step in range(6):
            loss = ddp(torch.randn(32, 16, generator=g).to(device)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        params[name] = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
        del ddp, opt
    res["ddp_bitwise"] = bool(torch.equal(params["panama"], params["gloo"]))
    res["ddp_max_diff"] = (params["panama"] - params["gloo"]).abs().max().item()
    res["stats"] = panama.distributed.stats()
    return res


def orphan(rank: int, world: int, out_dir: Path) -> dict:
    """Rank 0 owns the automatic cluster and exits after one all_reduce (its daemons stop with
    it); rank 1's next all_reduce must fail with PanamaFabricError, long before its timeout."""
    dist.all_reduce(torch.ones(1000))
    dist.barrier()
    if rank == 0:
        (out_dir / "rank0.json").write_text(json.dumps({"exited": True}))
        os._exit(0)  # no shutdown: as if it had crashed (exit 0 so that torchrun waits for rank 1)
    time.sleep(1.0)  # rank 0 and its cluster are gone
    start = time.monotonic()
    res: dict = {}
    try:
        dist.all_reduce(torch.ones(1000))
        res["error"] = None
    except Exception as exc:
        res["error"] = err_info(exc)
    res["seconds"] = time.monotonic() - start
    (out_dir / "rank1.json").write_text(json.dumps(res))
    os._exit(0)  # the group's owner is gone: nothing to close


def interrupt(rank: int, world: int, out_dir: Path) -> None:
    dist.all_reduce(torch.ones(1000))  # the job runs
    job = panama.distributed.stats()["job"]
    if rank == 1:
        for _ in range(2400):  # rank 0 is interrupted meanwhile (bounded: 120 s)
            if (out_dir / "rank0.json").exists():
                break
            time.sleep(0.05)
        start = time.monotonic()
        res: dict = {"job": job}
        try:
            dist.all_reduce(torch.ones(1000))
            res["error"] = None
        except Exception as exc:
            res["error"] = err_info(exc)
        res["seconds"] = time.monotonic() - start
        dist.destroy_process_group()
        (out_dir / "rank1.json").write_text(json.dumps(res))
        os._exit(0)
    signalled: dict = {}

    def on_sigint(signum, frame):  # what Python's default handler does, with the time noted
        signalled["at"] = time.monotonic()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    res = {"job": job, "interrupted": False}
    (out_dir / "blocked").write_text(str(os.getpid()))
    try:
        dist.all_reduce(torch.ones(1000))  # rank 1 never joins this one: blocked until Ctrl-C
    except KeyboardInterrupt:
        res["interrupted"] = True
    finally:
        dist.destroy_process_group()
    res["seconds"] = time.monotonic() - signalled.get("at", float("nan"))
    (out_dir / "rank0.json").write_text(json.dumps(res))
    os._exit(0)


def main() -> int:
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    if mode == "init":  # the controller or the token is bad: init_process_group says so
        try:
            dist.init_process_group(backend="panama")
            res = {"error": None}
        except Exception as exc:
            res = {"error": err_info(exc)}
        (out_dir / f"rank{os.environ['RANK']}.json").write_text(json.dumps(res))
        return 0
    dist.init_process_group(backend="panama")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        if mode == "orphan":
            orphan(rank, world, out_dir)
        if mode == "interrupt":
            interrupt(rank, world, out_dir)
        if mode == "staged":
            res = staged(rank, world, sys.argv[3])
        else:
            res = {"ops": ops, "fail": fail}[mode](rank, world)
    except Exception as exc:
        res = {"crash": err_info(exc), "traceback": traceback.format_exc()}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(res))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
