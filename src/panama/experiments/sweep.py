"""Parameter sweeps: a grid of points, run in worker processes or on a Dask cluster.

Contract:

* A *point* is a flat ``dict`` of parameter values (``{"load": 0.5, "trees": 2, "seed": 1}``).
  The point function ``fn(point) -> dict`` must be picklable (a module-level function or a
  ``functools.partial`` of one) and return a JSON-serialisable mapping of results.
* Every finished point is written to ``<out>/points/<point_id>.json`` atomically (temporary
  file + ``os.replace``), by the driving process only. A rerun with the same output
  directory loads those files and computes only the missing points, so a sweep that was
  killed (or had failing points) resumes where it stopped.
* Each point file records the sweep's ``fingerprint`` (the fixed configuration). Resuming
  into a directory whose files carry another fingerprint raises :class:`SweepError`
  rather than silently mixing results of two configurations.
* ``jobs == 1`` runs points in this process, in order; ``jobs > 1`` uses a
  ``ProcessPoolExecutor``; ``scheduler="tcp://host:port"`` (or a ``distributed.Client``)
  submits the points to an existing Dask cluster. The results do not depend on which.
* :func:`aggregate` groups the points that differ only by seed and reports each numeric
  metric's mean with a two-sided t confidence interval (:mod:`panama.experiments.stats`).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import itertools
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from panama.experiments.stats import mean_ci

PointFn = Callable[[dict[str, Any]], Mapping[str, Any]]

POINTS_DIR = "points"


class SweepError(RuntimeError):
    """A sweep could not complete: failed points (listed in ``failures``) or a config mismatch."""

    def __init__(self, message: str, failures: Mapping[str, str] | None = None):
        super().__init__(message)
        self.failures = dict(failures or {})


# --------------------------------------------------------------------------- grid


def parse_value(text: str) -> int | float | str:
    """``"3"`` -> 3, ``"0.5"`` -> 0.5, anything else stays a string."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    return value


def parse_sweep(specs: Iterable[str]) -> dict[str, list[Any]]:
    """Parse ``["load=0.3,0.5", "trees=1,2 seed=1,2,3"]`` into ordered axes.

    Values are separated by commas, or by semicolons when the text contains one (so that
    values may contain commas: ``topology=leaf-spine:leaves=2,spines=2;fat-tree:k=4``).
    Raises ``ValueError`` naming the bad token (missing ``=``, empty values, repeated key).
    """
    axes: dict[str, list[Any]] = {}
    for spec in specs:
        for token in spec.split():
            key, sep, values = token.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ValueError(f"expected KEY=V1,V2,... but got {token!r}")
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"bad parameter name {key!r} in {token!r}")
            if key in axes:
                raise ValueError(f"parameter {key!r} given twice")
            sep_char = ";" if ";" in values else ","  # ';' lets values contain commas (topology specs)
            parsed = [parse_value(v) for v in values.split(sep_char) if v.strip()]
            if not parsed:
                raise ValueError(f"no values for {key!r} in {token!r}")
            if len(set(map(repr, parsed))) != len(parsed):
                raise ValueError(f"repeated value for {key!r} in {token!r}")
            axes[key] = parsed
    return axes


def grid(axes: Mapping[str, Sequence[Any]], base: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Cartesian product of ``axes`` (first axis varies slowest), each merged over ``base``."""
    keys = list(axes)
    points = []
    for combo in itertools.product(*(axes[k] for k in keys)):
        point = dict(base or {})
        point.update(zip(keys, combo))
        points.append(point)
    return points


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def point_id(point: Mapping[str, Any]) -> str:
    """A stable file-name-safe id: readable ``key=value`` pairs plus a short content hash."""
    readable = "_".join(f"{k}={point[k]}" for k in sorted(point))
    readable = re.sub(r"[^A-Za-z0-9=.,+-]+", "-", readable)[:80].strip("-") or "point"
    digest = hashlib.sha1(_canonical(point).encode()).hexdigest()[:10]
    return f"{readable}__{digest}"


def fingerprint_of(config: Any) -> str:
    """Short hash of a JSON-able configuration (what stays fixed across the sweep)."""
    return hashlib.sha1(_canonical(config).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- files


def _umask() -> int:
    """The process umask, read without changing it (Linux ``/proc``; else set and restore)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` so readers see either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2, sort_keys=False, default=_json_default, allow_nan=True)
            fh.write("\n")
            fh.flush()
            # mkstemp creates 0600; results are as readable as the CSVs beside them
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


@dataclass
class PointRecord:
    """One finished point: its parameters, its result and how long it took."""

    id: str
    params: dict[str, Any]
    result: dict[str, Any]
    elapsed_s: float
    fingerprint: str | None = None
    resumed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "params": self.params,
            "fingerprint": self.fingerprint,
            "elapsed_s": self.elapsed_s,
            "result": self.result,
        }


@dataclass
class SweepResult:
    """Records in the order of the requested points, and what was computed vs. resumed."""

    records: list[PointRecord]
    computed: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)


def load_point(path: Path) -> PointRecord | None:
    """Read one point file; ``None`` if it is missing or unreadable (then it is recomputed)."""
    try:
        data = json.loads(Path(path).read_text())
        return PointRecord(
            id=data["id"],
            params=data["params"],
            result=data["result"],
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            fingerprint=data.get("fingerprint"),
            resumed=True,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_points(out_dir: Path) -> list[PointRecord]:
    """All readable point files under ``out_dir/points`` (any order)."""
    folder = Path(out_dir) / POINTS_DIR
    if not folder.is_dir():
        return []
    records = [load_point(p) for p in sorted(folder.glob("*.json"))]
    return [r for r in records if r is not None]


# --------------------------------------------------------------------------- runner


def _timed_call(fn: PointFn, point: dict[str, Any]) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    result = fn(dict(point))
    return dict(result), time.perf_counter() - start


def run_sweep(
    fn: PointFn,
    points: Sequence[Mapping[str, Any]],
    out_dir: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    scheduler: Any = None,
    fingerprint: str | None = None,
    progress: bool = True,
    desc: str = "sweep",
) -> SweepResult:
    """Run ``fn`` on every point not already finished in ``out_dir``; see the module docstring.

    ``jobs``: worker processes (default: ``os.cpu_count()``, capped by the number of
    missing points); ``1`` runs in this process. ``scheduler``: Dask scheduler address or
    ``distributed.Client``; when given, ``jobs`` is ignored. Raises :class:`SweepError`
    after all other points finished if any point raised (finished points stay on disk).
    """
    out = Path(out_dir)
    folder = out / POINTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    plist = [dict(p) for p in points]
    ids = [point_id(p) for p in plist]
    if len(set(ids)) != len(ids):
        raise ValueError("sweep points are not unique")

    done = _finished_points(folder, ids, plist, fingerprint)
    todo = [(pid, p) for pid, p in zip(ids, plist) if pid not in done]
    computed: list[str] = []
    failures: dict[str, str] = {}

    bar = tqdm(
        total=len(plist),
        initial=len(done),
        desc=desc,
        unit="pt",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )

    def finish(pid: str, params: dict[str, Any], result: dict[str, Any], elapsed: float) -> None:
        rec = PointRecord(pid, params, result, elapsed, fingerprint)
        write_json_atomic(folder / f"{pid}.json", rec.to_json())
        done[pid] = rec
        computed.append(pid)
        bar.update(1)

    def fail(pid: str, exc: BaseException) -> None:
        failures[pid] = f"{type(exc).__name__}: {exc}"
        bar.update(1)
        bar.write(f"{desc}: point {pid} failed: {failures[pid]}", file=sys.stderr)

    try:
        if todo and scheduler is not None:
            _run_dask(fn, todo, scheduler, finish, fail)
        elif todo:
            _run_local(fn, todo, jobs, finish, fail)
    finally:
        bar.close()

    if failures:
        listing = "; ".join(f"{k}: {v}" for k, v in failures.items())
        raise SweepError(f"{len(failures)} of {len(plist)} sweep points failed ({listing})", failures)
    records = [done[pid] for pid in ids]
    return SweepResult(records, computed=computed, resumed=[pid for pid in ids if pid not in computed])


def _finished_points(
    folder: Path, ids: list[str], plist: list[dict[str, Any]], fingerprint: str | None
) -> dict[str, PointRecord]:
    """The points already finished in ``folder`` (by id); SweepError if one was produced by
    another configuration (``fingerprint``)."""
    done: dict[str, PointRecord] = {}
    for pid, p in zip(ids, plist):
        rec = load_point(folder / f"{pid}.json")
        if rec is None:
            continue
        if rec.fingerprint != fingerprint:
            raise SweepError(
                f"{folder / (pid + '.json')} was produced by another configuration "
                f"(fingerprint {rec.fingerprint} != {fingerprint}); use a new output directory"
            )
        if _canonical(rec.params) != _canonical(p):
            continue
        done[pid] = rec
    return done


def _run_local(fn: PointFn, todo: list[tuple[str, dict[str, Any]]], jobs: int | None, finish, fail) -> None:
    """Run the missing points in this process (one job) or in a pool of worker processes."""
    n_jobs = min(jobs or os.cpu_count() or 1, len(todo))
    if n_jobs <= 1:
        for pid, p in todo:
            try:
                result, elapsed = _timed_call(fn, p)
            except Exception as exc:  # noqa: BLE001 - a failing point must not lose the others
                fail(pid, exc)
            else:
                finish(pid, p, result, elapsed)
    else:
        # Workers ignore SIGINT: Ctrl-C reaches the whole process group, and only
        # this process decides (it stops every worker: _stop_pool).
        pool = cf.ProcessPoolExecutor(max_workers=n_jobs, initializer=_ignore_sigint)
        try:
            futures = {pool.submit(_timed_call, fn, p): (pid, p) for pid, p in todo}
            _collect(cf.as_completed(futures), futures, finish, fail)
        except BaseException:
            _stop_pool(pool)  # interrupted: finished points are already on disk
            raise
        pool.shutdown()


def _ignore_sigint() -> None:
    """Pool worker initializer: Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_pool(pool: cf.ProcessPoolExecutor, grace_s: float = 2.0) -> None:
    """Drop queued points and end the running ones now (SIGTERM, then SIGKILL after
    ``grace_s``), waiting for every worker so none outlives this process."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(grace_s)
        if proc.is_alive():
            proc.kill()
            proc.join(grace_s)


def _collect(completed, futures: dict, finish, fail) -> None:
    """Hand each finished future (concurrent.futures or dask) to ``finish``, or to ``fail``."""
    for fut in completed:
        pid, p = futures[fut]
        try:
            result, elapsed = fut.result()
        except Exception as exc:  # noqa: BLE001 - reported with the point, after the rest
            fail(pid, exc)
        else:
            finish(pid, p, result, elapsed)


def _run_dask(fn: PointFn, todo, scheduler: Any, finish, fail) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError as exc:  # pragma: no cover - dask is an optional extra
        raise SweepError("--scheduler needs dask.distributed (pip install 'panama-ina[dask]')") from exc
    own_client = not isinstance(scheduler, Client)
    client = Client(scheduler) if own_client else scheduler
    try:
        futures = {}
        for pid, p in todo:
            fut = client.submit(_timed_call, fn, p, key=f"panama-sweep-{pid}", pure=False)
            futures[fut] = (pid, p)
        _collect(as_completed(list(futures)), futures, finish, fail)
    finally:
        if own_client:
            client.close()


# --------------------------------------------------------------------------- aggregation


def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists are left as values."""
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def aggregate(
    records: Sequence[PointRecord],
    *,
    seed_key: str = "seed",
    confidence: float = 0.95,
    metrics: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Group points equal in every parameter but ``seed_key``; mean and CI of each metric.

    Each output row holds the group's parameters, ``n_seeds``, ``seeds`` and for every
    numeric (flattened) result metric ``m``: ``m_mean``, ``m_ci_low``, ``m_ci_high``,
    ``m_n`` (finite values used). Rows keep the order of first appearance.
    """
    groups: dict[str, tuple[dict[str, Any], list[PointRecord]]] = {}
    for rec in records:
        params = {k: v for k, v in rec.params.items() if k != seed_key}
        key = _canonical(params)
        groups.setdefault(key, (params, []))[1].append(rec)
    rows = []
    for params, recs in groups.values():
        flats = [flatten(r.result) for r in recs]
        names = list(metrics) if metrics is not None else _numeric_names(flats)
        row: dict[str, Any] = dict(params)
        row["n_seeds"] = len(recs)
        row["seeds"] = [r.params.get(seed_key) for r in recs]
        for name in names:
            values = [f.get(name) for f in flats]
            values = [float(v) for v in values if _is_number(v)]
            row.update(mean_ci(values, confidence).as_dict(name))
        rows.append(row)
    return rows


def _numeric_names(flats: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    seen = set()
    for flat in flats:
        for name, value in flat.items():
            if name not in seen and _is_number(value):
                seen.add(name)
                names.append(name)
    return names


def finite_or_none(x: float) -> float | None:
    """JSON-friendly: NaN/inf become ``None``."""
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
