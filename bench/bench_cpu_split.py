"""Where the CPU of a PANAMA allreduce goes, by kind of work, and what that leaves to gain.

    python bench/bench_cpu_split.py [--leaves 1 --spines 1] [--size-mb 100] [--seconds 8]

Runs ``bench/bench_runtime_sched.py`` (a local cluster, 4 forked ranks, allreduces back
to back) and samples every CPU with ``perf record -a`` for ``--seconds`` in the middle of
it, then splits the samples of the Python processes (daemons, ranks, controller) into:

- the kernel (every system call, the loopback path, scheduling);
- the sums (numpy's ``FLOAT_add``);
- the copies (libc's ``memmove``/``memcpy``: a slot's first contribution, a result kept
  for retransmissions, a result into the output vector);
- the interpreter (``libpython``), numpy's other code, and the rest (libc, our compiled
  modules).

The kernel, the sums and the copies are work a software switch on this host does
whatever language its loop is written in; their share is the *inherent share*. The
ratio against gloo cannot exceed ``ratio / inherent share`` by removing user-space
overhead alone (the runs are CPU-bound on this 2-CPU host, so time follows CPU).
Needs ``perf`` and the permission to sample every CPU (root, or
``kernel.perf_event_paranoid`` <= 0). Linux only.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

KERNEL = "kernel"
SUMS = "sums (numpy FLOAT_add)"
COPIES = "copies (memmove/memcpy)"
INTERPRETER = "interpreter (libpython)"
NUMPY_OTHER = "numpy, other"
REST = "rest (libc, our modules)"
INHERENT = (KERNEL, SUMS, COPIES)


def classify(dso: str, symbol: str) -> str:
    """The kind of work of one sample, from its shared object and symbol."""
    if dso == "[kernel.kallsyms]":
        return KERNEL
    if "FLOAT_add" in symbol:
        return SUMS
    if "memmove" in symbol or "memcpy" in symbol:
        return COPIES
    if dso.startswith("libpython"):
        return INTERPRETER
    if "multiarray" in dso or "umath" in dso:
        return NUMPY_OTHER
    return REST


def split(perf_data: str) -> collections.Counter:
    """Percent of all samples per kind, over the processes named ``python``."""
    report = subprocess.run(
        ["perf", "report", "-i", perf_data, "--sort", "comm,dso,sym", "--stdio", "--no-children", "-g", "none"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shares: collections.Counter = collections.Counter()
    for line in report.splitlines():
        parts = line.split()
        if len(parts) < 5 or line.lstrip().startswith("#") or not parts[0].endswith("%"):
            continue
        pct, comm, dso, symbol = float(parts[0][:-1]), parts[1], parts[2], " ".join(parts[4:])
        if comm == "python":
            shares[classify(dso, symbol)] += pct
    return shares


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaves", type=int, default=1)
    ap.add_argument("--spines", type=int, default=1)
    ap.add_argument("--size-mb", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--calls", type=int, default=0, help="allreduces to run (default: enough for the sampling)")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("bench_cpu_split: perf is not installed")
    calls = args.calls or max(20, int((args.seconds + 12) * 1000 / max(1.0, 1.6 * args.size_mb)))
    sched = [
        sys.executable,
        os.path.join(HERE, "bench_runtime_sched.py"),
        f"--leaves={args.leaves}",
        f"--spines={args.spines}",
        f"--size-mb={args.size_mb:g}",
        f"--calls={calls}",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        # Its own session: the ranks it forks and the daemons it starts stop with it.
        run = subprocess.Popen(
            sched, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            time.sleep(6)  # the cluster is up and the warm-up calls are done
            if run.poll() is not None:
                sys.exit(f"bench_cpu_split: bench_runtime_sched.py ended early:\n{run.stdout.read()}")
            rec = subprocess.run(
                ["perf", "record", "-a", "-F", "1999", "-o", data, "--", "sleep", str(args.seconds)],
                capture_output=True,
                text=True,
            )
            if rec.returncode != 0:
                sys.exit(f"bench_cpu_split: perf record failed: {rec.stderr.strip()}")
            still_running = run.poll() is None
            shares = split(data)
        finally:
            try:
                os.killpg(run.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            run.wait()
    total = sum(shares.values())
    if not total:
        sys.exit("bench_cpu_split: no samples of the python processes")
    print(
        f"CPU of the Python processes, {args.leaves} leaves, {args.spines} spines, {args.size_mb:g} MB allreduces, "
        f"{args.seconds:g} s sampled" + ("" if still_running else " (the run ended inside the sampling)")
    )
    for kind in (KERNEL, SUMS, COPIES, INTERPRETER, NUMPY_OTHER, REST):
        print(f"  {kind:<26} {100 * shares[kind] / total:5.1f} %")
    inherent = sum(shares[k] for k in INHERENT) / total
    print(f"  inherent share (kernel + sums + copies): {inherent:.3f}")
    print(f"  => with no other user-space work, PANAMA's CPU per call would be {inherent:.2f}x of today's")


if __name__ == "__main__":
    main()
