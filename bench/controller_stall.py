"""A controller stopped (SIGSTOP) for a while, then continued (SIGCONT), beside a running job.

    python bench/controller_stall.py [--stall-s 20] [--ranks 3] [--after-s 5] [--json FILE]

A local cluster (1 leaf, 1 spine, ``--ranks`` hosts; the default heartbeat timeout, 5 s)
runs one job of ``--ranks`` ranks (threads) doing allreduces of 100,000 floats back to
back, each checked exactly (integer-valued data). Once the job runs, the controller
process is stopped for ``--stall-s`` seconds, continued, and the job goes on for
``--after-s`` more. Printed: allreduces before, during and after the stall, every rank
error, the job's state and the monitor's stall counters (``/v1/health``). Issue 35 item 3:
before, the controller failed every job on SIGCONT ("rank N stopped heart-beating").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

import numpy as np

from panama.runtime.cluster import LocalCluster
from panama.runtime.worker.communicator import Communicator

ELEMS = 100_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stall-s", type=float, default=20.0)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--after-s", type=float, default=5.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ranks = args.ranks
    with LocalCluster(leaves=1, spines=1, hosts_per_leaf=ranks, log_level="WARNING") as lc:
        phase = {"now": "before"}
        counts = {r: {"before": 0, "during": 0, "after": 0} for r in range(ranks)}
        errors: dict[int, str] = {}
        wrong = [0]
        stop = threading.Event()
        expected = float(sum(range(1, ranks + 1)))

        def rank(r: int) -> None:
            x = np.full(ELEMS, float(r + 1), np.float32)
            try:
                with Communicator(lc.controller, "stall", r, ranks, timeout_s=60, token=lc.token, connect=True) as comm:
                    while not stop.is_set():
                        out = comm.allreduce(x)
                        if not np.all(out == expected):
                            wrong[0] += 1
                        counts[r][phase["now"]] += 1
            except Exception as exc:  # noqa: BLE001 - reported
                errors[r] = str(exc)

        threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(ranks)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while lc.controller_call("GET", "/v1/jobs/stall")[1].get("state") != "running":
            if errors or time.monotonic() > deadline:
                raise SystemExit(f"the job did not start: {errors or 'not running within 60 s'}")
            time.sleep(0.05)
        time.sleep(2.0)
        pid = lc.procs["controller"].pid
        phase["now"] = "during"
        os.kill(pid, signal.SIGSTOP)
        time.sleep(args.stall_s)
        os.kill(pid, signal.SIGCONT)
        phase["now"] = "after"
        time.sleep(args.after_s)
        state = lc.controller_call("GET", "/v1/jobs/stall")[1]
        health = lc.controller_call("GET", "/v1/health")[1]
        stop.set()
        for t in threads:
            t.join(timeout=90)
        final = lc.controller_call("GET", "/v1/jobs/stall")[1]
    result = {
        "stall_s": args.stall_s,
        "ranks": ranks,
        "allreduces": counts,
        "wrong_sums": wrong[0],
        "errors": errors,
        "state_after_stall": state.get("state"),
        "reason_after_stall": state.get("reason"),
        "final_state": final.get("state"),
        "monitor": health.get("monitor"),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
