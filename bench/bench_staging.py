"""What staging a CUDA all_reduce through pinned host memory costs, to set against PANAMA's transfer.

    python bench/bench_staging.py --size-mb 1,25,100 --iters 10

With CUDA (``torch.cuda.is_available()``): for each size, the median over ``iters`` of the
copy into a reused pinned buffer (``PinnedStaging.copy_in`` + ``wait_copied_in``: what the
backend's worker thread waits for) and of the copy back (``copy_out`` + the stream's
synchronize; the backend never waits for this one on the host), in ms and GB/s. Compare
with ``panama bench allreduce`` at the same size (docs/runtime-performance.md).

Without CUDA pinned memory does not exist (torch: "pin_memory=True requires a CUDA or other
accelerator backend"): the same calls run on host tensors with host copies (``HostApi``),
which times the staging's own bookkeeping (the 1-float row) and a host memcpy of the bytes
(one thread), not a PCIe copy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from typing import Any

import torch

from panama.distributed.staging import CudaApi, PinnedStaging


class HostApi:
    """Staging's device operations on host tensors: copies are memcpy, events complete at once."""

    def current_stream(self, device: torch.device) -> Any:
        return None

    def use_stream(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def record_event(self, stream: Any) -> Any:
        return None

    def wait_event(self, stream: Any, event: Any) -> None:
        pass

    def event_done(self, event: Any) -> bool:
        return True

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)

    def pinned_empty(self, numel: int) -> torch.Tensor:
        return torch.empty(numel, dtype=torch.float32)

    def future(self, device: torch.device) -> torch.futures.Future:
        return torch.futures.Future()


def measure(numel: int, iters: int, cuda: bool) -> dict[str, Any]:
    device = torch.device("cuda" if cuda else "cpu")
    staging = PinnedStaging(CudaApi() if cuda else HostApi())
    x = torch.ones(numel, dtype=torch.float32, device=device)
    ins, outs = [], []
    for i in range(iters + 1):  # the first call allocates the buffer: left out
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        staged = staging.copy_in([x])
        staging.wait_copied_in(staged, timeout_s=60.0)
        mid = time.perf_counter()
        staging.copy_out(staged)
        if cuda:
            torch.cuda.current_stream().synchronize()
        end = time.perf_counter()
        if i:
            ins.append(mid - start)
            outs.append(end - mid)
    mb = 4 * numel / 1e6
    t_in, t_out = statistics.median(ins), statistics.median(outs)
    return {
        "device": torch.cuda.get_device_name() if cuda else "cpu (no pinned memory: host copies)",
        "size_mb": mb,
        "copy_in_ms": 1e3 * t_in,
        "copy_out_ms": 1e3 * t_out,
        "copy_in_gbps": mb / 1e3 / t_in,
        "copy_out_gbps": mb / 1e3 / t_out,
        "allocations": staging.allocations,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", default="1,25,100", help="comma-separated sizes in MB (10^6 bytes)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--json", action="store_true", help="one JSON line per size")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda:  # one thread: torch's parallel copy waking a second thread costs ~8 ms on a busy 2-core VM
        torch.set_num_threads(1)
    sizes = [1] + [int(float(s) * 1e6 / 4) for s in args.size_mb.split(",")]  # 1 float: the bookkeeping alone
    print(f"torch {torch.__version__}, CUDA {'yes' if cuda else 'no'}")
    print(f"{'size MB':>10} {'in ms':>9} {'out ms':>9} {'in GB/s':>9} {'out GB/s':>9}  device")
    for numel in sizes:
        row = measure(numel, args.iters, cuda)
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"{row['size_mb']:>10.6g} {row['copy_in_ms']:>9.4f} {row['copy_out_ms']:>9.4f} "
                f"{row['copy_in_gbps']:>9.3f} {row['copy_out_gbps']:>9.3f}  {row['device']}"
            )


if __name__ == "__main__":
    main()
