"""Data-parallel training under torchrun with the ``panama`` torch.distributed backend.

    torchrun --standalone --nproc-per-node 2 examples/ddp_torchrun.py
    torchrun --standalone --nproc-per-node 2 examples/ddp_torchrun.py --backend gloo   # host-based baseline

The only PANAMA-specific line is ``import panama.distributed``; the model is wrapped in an
unchanged ``DistributedDataParallel``. Without ``PANAMA_CONTROLLER`` rank 0 starts a local
cluster of switch daemons for the run; with it (and ``PANAMA_TOKEN``) the run joins that
cluster. The task: a 3-layer MLP classifying seeded synthetic data (the same on every rank;
each rank trains on its shard of every global batch). At the end every rank hashes its
parameters (SHA-256 of the float32 bytes); rank 0 prints one JSON line (``--json``) or a
summary: the backend, the digests, whether the replicas are identical, the median step
time after ``--warmup`` steps, the final loss and the backend's counters. Expected: with 2
ranks the digest equals the ``--backend gloo`` run's (a sum of two addends does not depend
on the order), replicas identical. The digest is the same under every launch shape
(``--standalone --nproc-per-node 2`` or ``--nnodes 2 --nproc-per-node 1``) because every rank
runs ``--threads`` (default 1) intra-op threads: torch's float reductions depend on it.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import panama.distributed  # noqa: F401  - registers the "panama" backend


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="panama", help="torch.distributed backend (panama, gloo, cpu:panama, ...)")
    p.add_argument("--steps", type=int, default=30, help="SGD steps")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the median step time")
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split over the ranks")
    p.add_argument("--hidden", type=int, default=256, help="hidden width (parameters grow with its square)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads of every rank (pinned: the parameter digest depends on it, and torchrun sets "
        "OMP_NUM_THREADS=1 only when a node runs several ranks, so an unpinned run differs between launch shapes)",
    )
    p.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP bucket size (default: torch's 25 MB)")
    p.add_argument("--save", default=None, help="rank 0 writes the final flat parameters here (torch.save)")
    p.add_argument("--json", action="store_true", help="rank 0 prints one JSON line instead of a summary")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "hidden", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1")
    if not 0 <= args.warmup < args.steps:
        p.error("--warmup: must be in [0, --steps)")
    return args


def make_data(seed: int, n: int = 4096, d: int = 32, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, classes, generator=g)
    y = (x @ w + 0.5 * torch.randn(n, classes, generator=g)).argmax(dim=1)
    return x, y


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)  # one digest for every launch shape (docs/training.md)
    dist.init_process_group(backend=args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size < world:
        raise SystemExit(f"--batch-size: must be >= the world size {world}")

    torch.manual_seed(args.seed)  # identical initial weights (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, args.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, args.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(args.hidden, 10),
    )
    kw = {} if args.bucket_cap_mb is None else {"bucket_cap_mb": args.bucket_cap_mb}
    ddp = DistributedDataParallel(model, **kw)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    x, y = make_data(args.seed + 1)
    order = torch.Generator().manual_seed(args.seed + 2)

    times, loss = [], float("nan")
    for _ in range(args.steps):
        batch = torch.randperm(len(x), generator=order)[: args.batch_size]
        mine = torch.tensor_split(batch, world)[rank]
        start = time.perf_counter()
        out = ddp(x[mine])
        step_loss = torch.nn.functional.cross_entropy(out, y[mine])
        opt.zero_grad()
        step_loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        loss = float(step_loss.detach())

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    digests: list[str | None] = [None] * world
    dist.all_gather_object(digests, digest)
    step_ms = [1e3 * t for t in times[args.warmup :]]
    backend = dist.get_backend()
    counters = panama.distributed.stats() if "panama" in backend else None
    if rank == 0:
        if args.save:
            torch.save(flat, args.save)
        report = {
            "backend": backend,
            "world_size": world,
            "steps": args.steps,
            "parameters": flat.numel(),
            "digests": digests,
            "replicas_identical": len(set(digests)) == 1,
            "step_ms_median": statistics.median(step_ms),
            "final_loss": loss,
            "panama": counters,
        }
        if args.json:
            print(json.dumps(report), flush=True)
        else:
            print(
                f"backend {backend}, {world} ranks, {flat.numel()} parameters, {args.steps} steps: "
                f"final loss {loss:.4f}, median step {report['step_ms_median']:.2f} ms, "
                f"replicas identical: {'yes' if report['replicas_identical'] else 'NO'} ({digest[:16]})",
                flush=True,
            )
            if counters is not None:
                print(f"panama: {counters}", flush=True)
    # Tear down while the interpreter is fully alive: DDP's reducer holds the process group,
    # and a gloo worker thread that drops the last reference to a tensor during interpreter
    # finalization takes the GIL, which Python 3.11 answers with pthread_exit; unwinding a
    # C++ thread that way aborts the process ("terminate called without an active exception").
    del ddp, opt, model
    gc.collect()
    dist.destroy_process_group()
    return 0 if len(set(digests)) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
