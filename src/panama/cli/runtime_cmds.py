"""Commands of the UDP runtime: ``panama switch``, ``panama controller serve``,
``panama cluster up|down|status`` and ``panama bench allreduce``.

``python -m panama.cli.runtime_cmds ARGS`` is the same as ``panama ARGS`` (the local cluster
starts its daemons that way, with the interpreter it runs under).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import click

from panama import environment
from panama.benchmarks.settings import BenchConfig, SwitchBenchConfig
from panama.cli.common import echo_json, usage_error
from panama.cli.options import model_from_options, model_options, option_error
from panama.core.errors import FieldError
from panama.runtime.settings import ClusterConfig, ControllerConfig, ProcessSettings, SwitchConfig
from panama.settings import SettingsError
from panama.tables import format_table


def _daemon(run, settings, program: str) -> None:
    """Prepare the process (token, logging, lifeline) and run the daemon; errors as one line."""
    from panama.runtime.process import prepare

    try:
        run(settings, prepare(settings))  # prepare first: a refused start changes nothing
    except FieldError as exc:  # the token, or a file the daemon reads (a controller's cluster file)
        raise usage_error(exc.field, exc.detail) from None
    except OSError as exc:
        raise click.ClickException(f"{program}: cannot bind: {exc}") from None


def _concrete(config, field: str):
    """Refuse a bind address peers cannot send to (0.0.0.0, a multicast or the broadcast address:
    :mod:`panama.addresses`; the host only, port 0 binds any): the address is what peers
    are told to send to."""
    from panama.addresses import reachable

    addr = getattr(config, field)
    if not reachable(addr[0]):
        raise usage_error(
            f"--{field}",
            f"{addr[0] or '(empty)'} is not an address workers can reach: bind one address of this machine (e.g. its "
            f"LAN IPv4)",
        )


# ---------------------------------------------------------------------- panama switch
@click.command("switch")
@model_options(
    SwitchConfig,
    aliases={
        "switch_id": ["--id"],
        "ecn_threshold_pkts": ["--ecn-threshold"],
        "status_interval_s": ["--status-interval"],
    },
)
@model_options(ProcessSettings)
def switch(**options):
    """Run one PANAMA switch daemon (a UDP aggregation accelerator) in the foreground.

    The controller installs jobs through the HTTP control address; GET /metrics there
    gives Prometheus counters, GET /stats the same as JSON. SIGTERM/SIGINT stop it.
    Every option is a field of the daemon's settings (``python -m panama.runtime.switch.daemon
    CONFIG.json`` takes the same as a JSON file).
    """
    from panama.runtime.settings import SwitchProcess
    from panama.runtime.switch.daemon import run_switch_process

    config = model_from_options(SwitchConfig, options)
    for field in ("udp", "control"):
        _concrete(config, field)
    settings = model_from_options(SwitchProcess, options, switch=config)
    _daemon(run_switch_process, settings, f"switch {config.switch_id}")


# ---------------------------------------------------------------------- panama controller serve
@click.command("serve")
@model_options(
    ControllerConfig,
    aliases={
        "cluster_file": ["--cluster"],
        "heartbeat_timeout_s": ["--heartbeat-timeout"],
        "startup_wait_s": ["--startup-wait"],
    },
)
@model_options(ProcessSettings)
def controller_serve(**options):
    """Serve the controller's HTTP/JSON API (docs/runtime.md) for workers and switch daemons.

    Every option is a field of the controller's settings (``python -m
    panama.runtime.controller.service CONFIG.json`` takes the same as a JSON file).
    """
    from panama.runtime.controller.service import run_controller_process
    from panama.runtime.settings import ControllerProcess

    config = model_from_options(ControllerConfig, options)
    settings = model_from_options(ControllerProcess, options, controller=config)
    _daemon(run_controller_process, settings, "controller")


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


def _state_file(state_path, create: bool = False) -> Path:
    """The state file; its directory checked (ours, not a symlink, closed to others: the
    default one mode 0700) and, with ``create``, made 0700 when missing. One line, exit 2
    when it is unsafe (docs/runtime.md, "Trust model")."""
    from panama.runtime.cluster import default_state_path
    from panama.runtime.files import UnsafePathError, check_private_dir, private_dir

    path = Path(state_path) if state_path else default_state_path()
    strict = not state_path and environment.cluster_state() is None  # our own /tmp directory
    try:
        if create:
            private_dir(path.parent, "state", strict=strict)
        elif path.parent.exists() or path.parent.is_symlink():
            check_private_dir(path.parent, "state", strict=strict)
    except UnsafePathError as exc:
        raise usage_error(exc.field, exc.detail) from None
    return path


def _read_state(state_file: Path) -> dict:
    """The state file's JSON: refused (one line, exit 2) when it is a symlink, a FIFO or any
    other non-regular file, another user's, not JSON or not a cluster state."""
    from panama.runtime.cluster import read_cluster_state
    from panama.runtime.files import UnsafePathError

    try:
        return read_cluster_state(state_file)
    except UnsafePathError as exc:
        raise usage_error(exc.field, exc.detail) from None
    except OSError as exc:
        raise click.ClickException(f"cannot read cluster state {state_file}: {exc.strerror or exc}") from None


@cluster.command("up")
@model_options(
    ClusterConfig,
    exclude=("switch_drop_prob", "netns", "startup_timeout_s"),
    aliases={
        "heartbeat_timeout_s": ["--heartbeat-timeout"],
        "controller_port": ["--port"],
        "ecn_threshold_pkts": ["--ecn-threshold"],
    },
)
@_state_option
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def cluster_up(state_path, as_json, **options):
    """Start a local cluster in the background and record it in the state file."""
    from panama.runtime.cluster import ClusterError, LocalCluster, record_cluster

    config = model_from_options(ClusterConfig, options)
    _check_bindable(config.host)
    state_file = _state_file(state_path, create=True)
    if os.path.lexists(state_file):
        old = _read_state(state_file)
        if _any_alive(old):
            raise usage_error("state", f"a cluster is already running ({state_file}); run 'panama cluster down' first")
    workdir = state_file.parent / "run"
    lc = LocalCluster(config, workdir=workdir, detached=True)
    try:  # start() stops what it started on failure; record_cluster() stops all if it cannot record
        lc.start()
        state = record_cluster(lc, state_file)  # holds the token: mode 0600
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json(state)
    else:
        _print_status(state, state_file)


def _check_bindable(host: str) -> None:
    """``--host`` must be an address of this machine (one line, exit 2, instead of EADDRNOTAVAIL later)."""
    import socket

    with socket.socket() as s:
        try:
            s.bind((host, 0))
        except OSError as exc:
            raise usage_error("host", f"cannot bind {host}: {exc.strerror or exc} (give an address of this machine)")


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
    state = _read_state(state_file)
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
    from panama.runtime.net.udp import parse_addr

    state_file = _state_file(state_path)
    if not state_file.exists():
        raise click.ClickException(f"no cluster state at {state_file} (start one with 'panama cluster up')")
    state = _read_state(state_file)
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
    rows = [
        (sw["id"], sw["role"], sw["udp"], sw["control"], sw["pid"], "yes" if sw.get("up", sw.get("alive")) else "NO")
        for sw in state["switches"]
    ]
    click.echo(format_table(rows, ("id", "role", "udp", "control", "pid", "up"), align="llllrl"))
    click.echo(f"state file: {state_file}")


def _is_ours(pid) -> bool:
    """True if ``pid`` is alive and runs the panama runtime (never signal a recycled pid)."""
    if not isinstance(pid, int):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    from panama.runtime.cluster import DAEMON_MODULES

    # its daemons (python -m ...), or the CLI that started the daemons of older clusters
    return any(name.encode() in cmdline for name in (*DAEMON_MODULES.values(), "panama.cli.runtime_cmds"))


def _any_alive(state: dict) -> bool:
    return any(_is_ours(pid) for pid in state.get("pids", {}).values())


# ---------------------------------------------------------------------- panama bench allreduce
class _Converted(NamedTuple):
    """A field of BenchConfig that ``bench allreduce`` takes in another unit or shape."""

    option: str
    to_field: Callable[[Any], Any]  # the option's value -> the field's
    shown: Callable[[Any], Any]  # the field's default -> the option's
    note: str = ""  # added to the field's description in --help (a flag's whole help)
    kind: type = float  # the option's type (bool: a flag)


_ALLREDUCE_CONVERTED = {
    "sizes_mb": _Converted(
        "--size-mb",
        lambda text: _numbers("--size-mb", text),
        lambda v: ",".join(f"{x:g}" for x in v),
        "Comma-separated.",
        str,
    ),
    "min_rto_s": _Converted("--min-rto-ms", lambda ms: ms / 1000, lambda s: 1000 * s),
    "min_pto_s": _Converted("--min-pto-ms", lambda ms: ms / 1000, lambda s: 1000 * (s or 0.0)),
    "gloo": _Converted(
        "--skip-gloo", lambda skip: not skip, lambda gloo: not gloo, "Time PANAMA only (no ratio).", bool
    ),
}
_ALLREDUCE_PYTHON_ONLY = ("floor_blocks", "timeout_s")  # fields that are not options


def _numbers(option: str, text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise usage_error(option, f"expected comma-separated numbers, got {text!r}") from None


def _allreduce_options(command: Callable) -> Callable:
    """One option per field of BenchConfig, in the model's order: derived by ``model_options``
    but for the fields of ``_ALLREDUCE_CONVERTED``, which keep the command's units and shapes
    (their help and default still come from the field)."""
    fields = list(BenchConfig.model_fields)
    for name in reversed(fields):
        if name in _ALLREDUCE_PYTHON_ONLY:
            continue
        info = BenchConfig.model_fields[name]
        conv = _ALLREDUCE_CONVERTED.get(name)
        if conv is None:
            only = model_options(
                BenchConfig,
                exclude=[f for f in fields if f != name],
                aliases={"ecn_threshold_pkts": ["--ecn-threshold"]},
            )
            command = only(command)
        elif conv.kind is bool:  # --skip-gloo: a flag for the field's opposite
            command = click.option(conv.option, name, is_flag=True, help=conv.note)(command)
        else:
            command = click.option(
                conv.option,
                name,
                default=conv.shown(info.get_default(call_default_factory=True)),
                type=conv.kind,
                show_default=True,
                help=f"{info.description} {conv.note}".strip(),
            )(command)
    return command


def _allreduce_config(options: dict[str, Any]) -> BenchConfig:
    """BenchConfig from the options; a bad value is a usage error naming the option given."""
    values = {k: (_ALLREDUCE_CONVERTED[k].to_field(v) if k in _ALLREDUCE_CONVERTED else v) for k, v in options.items()}
    try:
        return BenchConfig(**values)
    except SettingsError as exc:
        field = exc.field.split(".")[0]
        if field not in _ALLREDUCE_CONVERTED:
            raise option_error(exc) from None
        detail = f"{exc.detail.split(' (got ')[0]} (got {options[field]!r})"  # the value as given, not converted
        raise usage_error(_ALLREDUCE_CONVERTED[field].option, detail) from None


@click.command("allreduce")
@_allreduce_options
@click.option("--out", "out_dir", default=None, help="Directory for results.json and results.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
def bench_allreduce(out_dir, as_json, **options):
    """Time PANAMA allreduce through a local cluster against gloo (torch.distributed) in the same run."""
    from panama.benchmarks.allreduce import format_table, run_bench, write_results

    cfg = _allreduce_config(options)
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


# ---------------------------------------------------------------------- panama bench switch
@click.command("switch")
@model_options(SwitchBenchConfig, exclude=("warmup_s",))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
def bench_switch(as_json, **options):
    """One switch daemon summing pre-built datagrams from a feeder process, against its
    one-datagram-per-call loop and a receive-and-forward socket floor in the same run
    (payload Gb/s per core)."""
    from panama.benchmarks.switch import format_table, run_bench_switch

    report = run_bench_switch(model_from_options(SwitchBenchConfig, options))
    if as_json:
        echo_json(report)
    else:
        click.echo(format_table(report))


if __name__ == "__main__":  # ``python -m panama.cli.runtime_cmds ...`` (used by LocalCluster)
    from panama.cli import main

    main(sys.argv[1:])
