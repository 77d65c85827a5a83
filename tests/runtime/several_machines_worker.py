"""Run by test_several_machines.py on each stand-in node under ``torchrun --nnodes 2``.

``several_machines_worker.py OUT_DIR``: ``init_process_group("panama")`` from the environment
(``PANAMA_CONTROLLER``, ``PANAMA_TOKEN``; torchrun's ``RANK``, ``WORLD_SIZE``, ``MASTER_*``),
then, each compared with a gloo group of the same ranks in the same process:

- an integer-valued all_reduce (exact in float32 in any order): the known sum;
- a random all_reduce of 40,000 floats (112 datagrams of 359): bitwise equal to gloo's;
- 3 DDP steps of a small MLP on the panama group and the same on the gloo group: parameters
  bitwise equal after every step.

Each rank writes ``OUT_DIR/rank<R>.json``: the checks, the backend's counters, the address
its PANAMA socket bound and its first-hop switch.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import panama.distributed


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def checks(rank: int, world: int, gloo: dist.ProcessGroup) -> dict:
    res: dict = {}
    base = torch.arange(1000, dtype=torch.float32)
    x = base * (rank + 1)
    dist.all_reduce(x)  # PANAMA
    res["known_sum"] = bool(torch.equal(x, base * sum(range(1, world + 1))))

    g = torch.Generator().manual_seed(1000 + rank)
    p = torch.randn(40_000, generator=g)
    q = p.clone()
    dist.all_reduce(p)  # PANAMA
    dist.all_reduce(q, group=gloo)
    res["random_sum_bitwise_gloo"] = bool(torch.equal(p, q))

    ddp_p = DistributedDataParallel(model())
    ddp_g = DistributedDataParallel(model(), process_group=gloo)
    opt_p = torch.optim.SGD(ddp_p.parameters(), lr=0.1, momentum=0.9)
    opt_g = torch.optim.SGD(ddp_g.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(rank)
    res["ddp_steps_bitwise_gloo"] = []
    for _ in range(3):
        xb, yb = torch.randn(32, 16, generator=data), torch.randn(32, 4, generator=data)
        for ddp, opt in ((ddp_p, opt_p), (ddp_g, opt_g)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(xb), yb).backward()
            opt.step()
        same = all(torch.equal(a, b) for a, b in zip(ddp_p.parameters(), ddp_g.parameters(), strict=True))
        res["ddp_steps_bitwise_gloo"].append(same)
    flat = torch.cat([t.detach().flatten() for t in ddp_p.parameters()])
    digests = [None] * world
    dist.all_gather_object(digests, hashlib.sha256(flat.numpy().tobytes()).hexdigest())
    res["replicas_identical"] = len(set(digests)) == 1

    pg = dist.distributed_c10d._get_default_group()
    comm = pg._comm
    res["bound"] = comm.addr[0]
    res["first_hop"] = comm.plan["first_hop"] if comm.plan else None
    res["payload_elems"] = comm.plan["payload_elems"] if comm.plan else None
    res["stats"] = panama.distributed.stats()
    return res


def main() -> int:
    out = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    res: dict = {"rank": rank, "host": socket.gethostname()}
    try:
        dist.init_process_group(backend="panama")
        gloo = dist.new_group(backend="gloo")
        res.update(checks(rank, dist.get_world_size(), gloo))
        dist.destroy_process_group()
    except Exception as exc:
        res["crash"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
    (out / f"rank{rank}.json").write_text(json.dumps(res))
    return 1 if "crash" in res else 0


if __name__ == "__main__":
    sys.exit(main())
