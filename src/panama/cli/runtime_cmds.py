"""Commands of the UDP runtime: ``panama switch``, ``panama controller serve``,
``panama cluster up|down|status`` and ``panama bench allreduce``.

``python -m panama.cli.runtime_cmds ARGS`` is the same as ``panama ARGS`` (the local cluster
starts its daemons that way, with the interpreter it runs under).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
import time
from pathlib import Path

import click

from panama.cli.common import echo_json, usage_error
from panama.core.controller import DEFAULT_THRESHOLD_BYTES
from panama.runtime.udp import RUNTIME_PACKET_MEMORY

LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


def _addr(value: str, field: str):
    from panama.runtime.udp import AddressError, parse_addr

    try:
        return parse_addr(value, field=field)
    except AddressError as exc:
        raise usage_error(field, exc.detail) from None


_TOKEN_FILE_HELP = "File holding the API's bearer token (mode 0600) [default: $PANAMA_TOKEN]."


def _token(token_file):
    """The token from --token-file, else $PANAMA_TOKEN; usage error (exit 2) if neither."""
    from panama.runtime.http import TOKEN_ENV, check_token, read_token_file

    try:
        if token_file:
            return read_token_file(token_file)
        import os

        env = os.environ.get(TOKEN_ENV, "").strip()
        if env:
            return check_token(env, TOKEN_ENV)
    except ValueError as exc:
        field, _, msg = str(exc).partition(": ")
        raise usage_error(field, msg) from None
    raise usage_error(
        "token-file", f"required (or set ${TOKEN_ENV}): the control API only answers requests that carry its token"
    )


def _concrete(addr, field: str):
    """Refuse an unspecified bind address (0.0.0.0): the address is what peers are told to send to."""
    if addr[0] in ("0.0.0.0", ""):
        raise usage_error(
            field,
            f"{addr[0] or '(empty)'} is not an address workers can reach: bind one address of this machine (e.g. its "
            f"LAN IPv4)",
        )
    return addr


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# ---------------------------------------------------------------------- panama switch
@click.command("switch")
@click.option("--id", "switch_id", required=True, help="Switch name (e.g. leaf0); must match the cluster file.")
@click.option(
    "--udp", default="127.0.0.1:0", show_default=True, help="Data-plane bind address HOST:PORT (port 0: any)."
)
@click.option(
    "--control", default="127.0.0.1:0", show_default=True, help="HTTP control/metrics bind address HOST:PORT."
)
@click.option(
    "--packet-memory", default=RUNTIME_PACKET_MEMORY, show_default=True, type=int, help="Accelerator slots (packets)."
)
@click.option(
    "--payload-elems",
    default=None,
    type=int,
    help="float32 per slot/datagram [default: 16367, the largest UDP datagram].",
)
@click.option(
    "--ecn-threshold",
    default=128,
    show_default=True,
    type=int,
    help="Mark CE when the backlog exceeds this many full datagrams' bytes (0: never).",
)
@click.option("--batch", default=64, show_default=True, type=int, help="Datagrams drained per batch.")
@click.option(
    "--offload/--no-offload",
    default=True,
    show_default=True,
    help="UDP GSO/GRO batched loop where the kernel has it and 2+ datagrams fit one send (PANAMA_UDP_OFFLOAD=0: off).",
)
@click.option(
    "--drop-prob", default=0.0, show_default=True, type=float, help="Drop received datagrams (fault injection)."
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the drop generator.")
@click.option(
    "--status-interval", default=10.0, show_default=True, type=float, help="Seconds between status log lines."
)
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--ready-file", default=None, help="Write the bound addresses as JSON here once ready.")
@click.option("--exit-with", type=click.IntRange(min=1), default=None, help="Stop when this process id is gone.")
@click.option("--token-file", default=None, help=_TOKEN_FILE_HELP)
def switch(
    switch_id,
    udp,
    control,
    packet_memory,
    payload_elems,
    ecn_threshold,
    batch,
    offload,
    drop_prob,
    seed,
    status_interval,
    log_level,
    ready_file,
    exit_with,
    token_file,
):
    """Run one PANAMA switch daemon (a UDP aggregation accelerator) in the foreground.

    The controller installs jobs through the HTTP control address; GET /metrics there
    gives Prometheus counters, GET /stats the same as JSON. SIGTERM/SIGINT stop it.
    """
    from panama.runtime.switchd import SwitchConfig, run_switch
    from panama.runtime.udp import RUNTIME_PAYLOAD_ELEMS

    config = SwitchConfig(
        switch_id=switch_id,
        udp=_concrete(_addr(udp, "udp"), "udp"),
        control=_concrete(_addr(control, "control"), "control"),
        packet_memory=packet_memory,
        payload_elems=RUNTIME_PAYLOAD_ELEMS if payload_elems is None else payload_elems,
        ecn_threshold_pkts=ecn_threshold,
        batch=batch,
        offload=offload,
        drop_prob=drop_prob,
        seed=seed,
        status_interval_s=status_interval,
    )
    try:
        config.validate()
    except ValueError as exc:
        field, _, msg = str(exc).partition(": ")
        raise usage_error(field.replace("_", "-"), msg) from None
    token = _token(token_file)
    _setup_logging(log_level)
    if exit_with is not None:
        from panama.runtime.lifeline import exit_with as tie_to

        tie_to(exit_with)
    try:
        run_switch(config, ready_file, token=token)
    except OSError as exc:
        raise click.ClickException(f"switch {switch_id}: cannot bind: {exc}") from None


# ---------------------------------------------------------------------- panama controller serve
@click.command("serve")
@click.option("--cluster", "cluster_file", required=True, help="Cluster TOML: topology and daemon addresses.")
@click.option("--listen", default="127.0.0.1:7070", show_default=True, help="HTTP bind address HOST:PORT.")
@click.option(
    "--threshold-bytes",
    default=DEFAULT_THRESHOLD_BYTES,
    show_default=True,
    type=int,
    help="Smallest gradient aggregated in-network; smaller jobs are told host-based.",
)
@click.option("--max-jobs-per-switch", default=8, show_default=True, type=int)
@click.option("--trees", default=None, type=int, help="Trees per job unless a job asks [default: number of spines].")
@click.option(
    "--heartbeat-timeout",
    default=5.0,
    show_default=True,
    type=float,
    help="Seconds without a heartbeat before a job fails.",
)
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--ready-file", default=None, help="Write the bound address as JSON here once ready.")
@click.option("--exit-with", type=click.IntRange(min=1), default=None, help="Stop when this process id is gone.")
@click.option("--token-file", default=None, help=_TOKEN_FILE_HELP)
@click.option(
    "--state-file",
    default=None,
    help="Running jobs are kept here (mode 0600); a restarted controller takes them back [default: none].",
)
@click.option(
    "--startup-wait", default=20.0, show_default=True, type=float, help="Seconds to wait for the daemons at start-up."
)
def controller_serve(
    cluster_file,
    listen,
    threshold_bytes,
    max_jobs_per_switch,
    trees,
    heartbeat_timeout,
    log_level,
    ready_file,
    exit_with,
    token_file,
    state_file,
    startup_wait,
):
    """Serve the controller's HTTP/JSON API (docs/runtime.md) for workers and switch daemons."""
    from panama.runtime.cluster_file import ClusterFileError, load_cluster
    from panama.runtime.controller_service import ControllerService, run_controller

    address = _addr(listen, "listen")
    try:
        spec = load_cluster(cluster_file)
    except ClusterFileError as exc:
        field, _, msg = str(exc).partition(": ")
        raise usage_error(f"cluster {field}", msg) from None
    if threshold_bytes < 0:
        raise usage_error("threshold-bytes", f"must be >= 0, got {threshold_bytes}")
    if max_jobs_per_switch < 1:
        raise usage_error("max-jobs-per-switch", f"must be >= 1, got {max_jobs_per_switch}")
    if trees is not None and trees < 1:
        raise usage_error("trees", f"must be >= 1, got {trees}")
    if heartbeat_timeout <= 0:
        raise usage_error("heartbeat-timeout", f"must be > 0, got {heartbeat_timeout}")
    if startup_wait < 0:
        raise usage_error("startup-wait", f"must be >= 0, got {startup_wait}")
    token = _token(token_file)
    _setup_logging(log_level)
    if exit_with is not None:
        from panama.runtime.lifeline import exit_with as tie_to

        tie_to(exit_with)
    service = ControllerService(
        spec,
        threshold_bytes=threshold_bytes,
        max_jobs_per_switch=max_jobs_per_switch,
        default_trees=trees,
        heartbeat_timeout_s=heartbeat_timeout,
        token=token,
        state_file=state_file,
        startup_wait_s=startup_wait,
    )
    try:
        run_controller(service, address, ready_file)
    except OSError as exc:
        raise click.ClickException(f"controller: cannot listen on {listen}: {exc}") from None


# ---------------------------------------------------------------------- panama cluster
@click.group("cluster")
def cluster():
    """Start, inspect and stop a local cluster (controller + switch daemons on this machine)."""


_state_option = click.option(
    "--state",
    "state_path",
    default=None,
    help="State file [default: $PANAMA_CLUSTER_STATE or /tmp/panama-cluster-UID/cluster.json].",
)


def _state_file(state_path):
    from panama.runtime.cluster import default_state_path

    return Path(state_path) if state_path else default_state_path()


@cluster.command("up")
@click.option("--leaves", default=2, show_default=True, type=int)
@click.option("--spines", default=2, show_default=True, type=int)
@click.option("--hosts-per-leaf", default=4, show_default=True, type=int, help="Worker slots per leaf.")
@click.option("--trees", default=None, type=int, help="Trees per job [default: number of spines].")
@click.option("--packet-memory", default=RUNTIME_PACKET_MEMORY, show_default=True, type=int)
@click.option("--payload-elems", default=None, type=int, help="float32 per datagram [default: 16367].")
@click.option("--threshold-bytes", default=0, show_default=True, type=int)
@click.option("--heartbeat-timeout", default=5.0, show_default=True, type=float)
@click.option("--drop-prob", default=0.0, show_default=True, type=float, help="Loss injected at every switch.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="IPv4 address of this machine that the daemons and controller bind (workers on other machines connect there).",
)
@click.option(
    "--port",
    default=0,
    show_default=True,
    type=int,
    help="The controller's TCP port (0: any free port; PANAMA_CONTROLLER=HOST:PORT then stays fixed).",
)
@_state_option
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def cluster_up(
    leaves,
    spines,
    hosts_per_leaf,
    trees,
    packet_memory,
    payload_elems,
    threshold_bytes,
    heartbeat_timeout,
    drop_prob,
    seed,
    log_level,
    host,
    port,
    state_path,
    as_json,
):
    """Start a local cluster in the background and record it in the state file."""
    from panama.runtime.cluster import ClusterError, LocalCluster
    from panama.runtime.udp import RUNTIME_PAYLOAD_ELEMS

    for name, value, low in (
        ("leaves", leaves, 1),
        ("spines", spines, 1),
        ("hosts-per-leaf", hosts_per_leaf, 1),
        ("packet-memory", packet_memory, 1),
    ):
        if value < low:
            raise usage_error(name, f"must be >= {low}, got {value}")
    if not 0 <= drop_prob < 1:
        raise usage_error("drop-prob", f"must be in [0, 1), got {drop_prob}")
    if not 0 <= port <= 65535:
        raise usage_error("port", f"must be in [0, 65535], got {port}")
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        raise usage_error("host", f"expected an IPv4 address, got {host!r}") from None
    if ip.is_unspecified or ip.is_multicast or str(ip) == "255.255.255.255":
        raise usage_error("host", f"{host} is not an address workers can reach: give one address of this machine")
    state_file = _state_file(state_path)
    if state_file.exists():
        old = json.loads(state_file.read_text())
        if _any_alive(old):
            raise usage_error("state", f"a cluster is already running ({state_file}); run 'panama cluster down' first")
    workdir = state_file.parent / "run"
    lc = LocalCluster(
        leaves=leaves,
        spines=spines,
        hosts_per_leaf=hosts_per_leaf,
        trees=trees,
        packet_memory=packet_memory,
        payload_elems=RUNTIME_PAYLOAD_ELEMS if payload_elems is None else payload_elems,
        threshold_bytes=threshold_bytes,
        heartbeat_timeout_s=heartbeat_timeout,
        drop_prob=drop_prob,
        seed=seed,
        log_level=log_level,
        workdir=workdir,
        detached=True,
        host=host,
        controller_port=port,
    )
    try:
        lc.start()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    state = lc.detach()
    state_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    from panama.runtime.http import write_secret_file

    write_secret_file(state_file, json.dumps(state, indent=2))  # holds the token: mode 0600
    if as_json:
        echo_json(state)
    else:
        _print_status(state, state_file)


@cluster.command("down")
@_state_option
@click.option(
    "--grace-s",
    "--timeout",
    "timeout",
    default=5.0,
    show_default=True,
    type=float,
    help="Seconds between SIGTERM and SIGKILL.",
)
def cluster_down(state_path, timeout):
    """Stop the cluster recorded in the state file (SIGTERM, then SIGKILL)."""
    from panama.runtime.cluster import Proc, stop_processes

    state_file = _state_file(state_path)
    if not state_file.exists():
        raise click.ClickException(f"no cluster state at {state_file} (nothing to stop)")
    state = json.loads(state_file.read_text())
    procs = [
        Proc(name, "", None, pid, Path("."), Path(".")) for name, pid in state.get("pids", {}).items() if _is_ours(pid)
    ]
    procs.sort(key=lambda p: p.name != "controller")
    stop_processes(procs, timeout)
    state_file.unlink()
    click.echo(f"stopped {len(procs)} process(es) of the cluster in {state_file}")


@cluster.command("status")
@_state_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON: controller, switches (id, role, udp, ...).")
def cluster_status(state_path, as_json):
    """Show the recorded cluster and whether each process answers."""
    from panama.runtime.cluster import probe_health
    from panama.runtime.udp import parse_addr

    state_file = _state_file(state_path)
    if not state_file.exists():
        raise click.ClickException(f"no cluster state at {state_file} (start one with 'panama cluster up')")
    state = json.loads(state_file.read_text())
    pids = state.get("pids", {})
    state["controller_up"] = bool(state.get("controller")) and probe_health(
        parse_addr(state["controller"]), "/v1/health", "controller"
    )
    for sw in state["switches"]:
        sw["alive"] = _is_ours(pids.get(sw["id"], sw.get("pid")))
        sw["up"] = bool(sw.get("control")) and probe_health(parse_addr(sw["control"]), "/health", sw["id"])
    if as_json:
        echo_json(state)
    else:
        _print_status(state, state_file)


def _print_status(state: dict, state_file: Path) -> None:
    click.echo(
        f"controller  http://{state['controller']}  pid {state.get('controller_pid')}  log "
        f"{state.get('controller_log')}"
    )
    click.echo(f"{'id':<10}{'role':<8}{'udp':<22}{'control':<22}{'pid':>8}  up")
    for sw in state["switches"]:
        up = sw.get("up", sw.get("alive"))
        click.echo(
            f"{sw['id']:<10}{sw['role']:<8}{sw['udp']:<22}{sw['control']:<22}{sw['pid']:>8}  {'yes' if up else 'NO'}"
        )
    click.echo(f"state file: {state_file}")


def _is_ours(pid) -> bool:
    """True if ``pid`` is alive and runs the panama runtime (never signal a recycled pid)."""
    if not isinstance(pid, int):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"panama.cli.runtime_cmds" in cmdline


def _any_alive(state: dict) -> bool:
    return any(_is_ours(pid) for pid in state.get("pids", {}).values())


# ---------------------------------------------------------------------- panama bench allreduce
@click.command("allreduce")
@click.option("--workers", default=4, show_default=True, type=int, help="Ranks (processes) per run.")
@click.option(
    "--size-mb", default="1,16,100", show_default=True, help="Comma-separated gradient sizes in MB (10^6 bytes)."
)
@click.option("--iters", default=5, show_default=True, type=int, help="Timed allreduces per implementation per round.")
@click.option(
    "--rounds",
    default=3,
    show_default=True,
    type=int,
    help="Alternating PANAMA/gloo phases per size (medians reported).",
)
@click.option("--leaves", default=2, show_default=True, type=int)
@click.option("--spines", default=2, show_default=True, type=int)
@click.option("--trees", default=None, type=int, help="Trees per job [default: number of spines].")
@click.option("--payload-elems", default=None, type=int, help="float32 per datagram [default: 16367].")
@click.option("--packet-memory", default=RUNTIME_PACKET_MEMORY, show_default=True, type=int)
@click.option("--cc", default="dctcp", show_default=True, type=click.Choice(["dctcp", "fixed", "none"]))
@click.option(
    "--ecn-threshold",
    default=128,
    show_default=True,
    type=int,
    help="Switch CE-marking backlog (full datagrams; 0: off).",
)
@click.option(
    "--min-rto-ms", default=100.0, show_default=True, type=float, help="Workers' minimum retransmission timeout."
)
@click.option(
    "--drop-prob",
    default=0.0,
    show_default=True,
    type=float,
    help="Share of datagrams every switch daemon drops (loss recovery; results stay exact).",
)
@click.option("--skip-gloo", is_flag=True, help="Time PANAMA only (no ratio).")
@click.option("--out", "out_dir", default=None, help="Directory for results.json and results.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
@click.option("--seed", default=0, show_default=True, type=int)
def bench_allreduce(
    workers,
    size_mb,
    iters,
    rounds,
    leaves,
    spines,
    trees,
    payload_elems,
    packet_memory,
    cc,
    ecn_threshold,
    min_rto_ms,
    drop_prob,
    skip_gloo,
    out_dir,
    as_json,
    seed,
):
    """Time PANAMA allreduce through a local cluster against gloo (torch.distributed) in the same run."""
    from panama.benchmarks.allreduce import BenchConfig, format_table, run_bench, write_results
    from panama.runtime.udp import RUNTIME_PAYLOAD_ELEMS

    try:
        sizes = [float(x) for x in size_mb.split(",") if x.strip()]
    except ValueError:
        raise usage_error("size-mb", f"expected comma-separated numbers, got {size_mb!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise usage_error("size-mb", f"sizes must be > 0, got {size_mb!r}")
    if workers < 2:
        raise usage_error("workers", f"must be >= 2, got {workers}")
    if iters < 1:
        raise usage_error("iters", f"must be >= 1, got {iters}")
    if rounds < 1:
        raise usage_error("rounds", f"must be >= 1, got {rounds}")
    if ecn_threshold < 0:
        raise usage_error("ecn-threshold", f"must be >= 0, got {ecn_threshold}")
    if min_rto_ms <= 0:
        raise usage_error("min-rto-ms", f"must be > 0, got {min_rto_ms}")
    if not 0.0 <= drop_prob < 1.0:
        raise usage_error("drop-prob", f"must be in [0, 1), got {drop_prob}")
    if leaves < 1 or spines < 1:
        raise usage_error("leaves" if leaves < 1 else "spines", "must be >= 1")
    cfg = BenchConfig(
        workers=workers,
        sizes_mb=sizes,
        iters=iters,
        rounds=rounds,
        leaves=leaves,
        spines=spines,
        trees=trees,
        payload_elems=RUNTIME_PAYLOAD_ELEMS if payload_elems is None else payload_elems,
        packet_memory=packet_memory,
        cc=cc,
        ecn_threshold_pkts=ecn_threshold,
        min_rto_s=min_rto_ms / 1000,
        drop_prob=drop_prob,
        gloo=not skip_gloo,
        seed=seed,
    )
    t0 = time.monotonic()
    results = run_bench(cfg, progress=not as_json)
    if out_dir:
        write_results(results, cfg, Path(out_dir))
    if as_json:
        echo_json({"config": cfg.to_dict(), "results": results, "wall_s": round(time.monotonic() - t0, 2)})
    else:
        click.echo(format_table(results))
        if out_dir:
            click.echo(f"results written to {out_dir}/results.json and results.csv")


@click.command("switch")
@click.option("--jobs", default=1, show_default=True, type=int, help="Jobs installed on the daemon.")
@click.option("--trees", default=2, show_default=True, type=int, help="Trees per job.")
@click.option("--workers", default=4, show_default=True, type=int, help="Children per tree (feeder sockets).")
@click.option("--payload-elems", default=None, type=int, help="float32 per datagram [default: 16367, 64 KB datagrams].")
@click.option("--window", default=8, show_default=True, type=int, help="Sequence numbers in flight per tree.")
@click.option(
    "--seconds", default=3.0, show_default=True, type=float, help="Measured interval per run (after 0.5 s warm-up)."
)
@click.option("--packet-memory", default=RUNTIME_PACKET_MEMORY, show_default=True, type=int, help="Accelerator slots.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--offload/--no-offload",
    default=True,
    show_default=True,
    help="Measure the GSO/GRO batched path (daemon and feeder) against the one-datagram-per-call baseline.",
)
def bench_switch(jobs, trees, workers, payload_elems, window, seconds, packet_memory, as_json, seed, offload):
    """One switch daemon summing pre-built datagrams from a feeder process, against its
    one-datagram-per-call loop and a receive-and-forward socket floor in the same run
    (payload Gb/s per core)."""
    from panama.benchmarks.switch import SwitchBenchConfig, format_table, run_bench_switch
    from panama.runtime.udp import RUNTIME_PAYLOAD_ELEMS

    cfg = SwitchBenchConfig(
        jobs=jobs,
        trees=trees,
        workers=workers,
        payload_elems=RUNTIME_PAYLOAD_ELEMS if payload_elems is None else payload_elems,
        window=window,
        seconds=seconds,
        packet_memory=packet_memory,
        seed=seed,
        offload=offload,
    )
    try:
        cfg.validate()
    except ValueError as exc:
        field, _, detail = str(exc).partition(": ")
        raise usage_error(field.replace("_", "-"), detail) from None
    report = run_bench_switch(cfg)
    if as_json:
        echo_json(report)
    else:
        click.echo(format_table(report))


if __name__ == "__main__":  # ``python -m panama.cli.runtime_cmds ...`` (used by LocalCluster)
    from panama.cli import main

    main(sys.argv[1:])
