"""The controller's state file: the running jobs a restarted controller takes back.

Shape (JSON, mode 0600): ``{"version": 1, "jobs": [ENTRY, ...]}``, one ENTRY per running
job as :meth:`panama.runtime.controller.jobs.Job.to_state` writes it, declared here as
:class:`SavedJob`.

Reading (:meth:`StateFile.load`, once at start-up):

* the path must be a regular file of this user: a FIFO, a device, a directory, a symlink
  or another user's file is refused without opening it in a way that could block
  (``files.read_private_file``: ``O_NONBLOCK``, then ``fstat``);
* a file that is not JSON, not an object, of another ``version`` or whose ``jobs`` is not
  a list is refused as a whole with :class:`StateFileError` (one line naming the file): a
  controller that started anyway would remove every job it did not recover from the
  daemons and overwrite the only record of them, so it does not start (move the file
  away to start without recovering);
* an entry that does not fit :class:`SavedJob` (a key missing, a wrong type, a plan that
  does not rebuild) is skipped with one log line naming the file, the entry's index and
  the field; the other entries are recovered.

Writing (:meth:`StateFile.save`, on every change of the running jobs) is atomic
(``files.write_private_file``). A failed write is kept *pending*: :attr:`StateFile.error`
says why (``/v1/health`` answers ``degraded``) and :meth:`StateFile.retry` (the
controller's monitor calls it on every pass) writes the latest content again, at most
once per ``retry_interval_s``, until it succeeds; so a full disk that gets room again
turns health back to ``ok`` without waiting for a job to change, and a job admitted
meanwhile is on disk before the next restart.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from panama.core.errors import FieldError
from panama.core.plans import JobPlan
from panama.runtime.controller.jobs import plan_from_dict
from panama.runtime.files import UnsafePathError, check_regular_file, read_private_file, write_private_file
from panama.runtime.net.udp import Address, AddressError, parse_addr
from panama.settings import settings_error

log = logging.getLogger("panama.controller")

STATE_VERSION = 1
RETRY_INTERVAL_S = 1.0

__all__ = ["STATE_VERSION", "SavedJob", "SavedRank", "StateFile", "StateFileError"]


class StateFileError(FieldError):
    """The state file as a whole cannot be used; the controller does not start (``field``: ``state_file``)."""


class SavedRank(BaseModel):
    """One rank of a running job, as the state file keeps it."""

    model_config = ConfigDict(extra="ignore", strict=True)

    rank: int = Field(ge=0)
    udp: str
    host: str
    incarnation: str | None = None
    left: bool = False

    @field_validator("udp")
    @classmethod
    def _an_address(cls, value: str) -> str:
        try:
            parse_addr(value, field="udp")
        except AddressError as exc:
            raise ValueError(exc.detail) from None
        return value

    @property
    def address(self) -> Address:
        return parse_addr(self.udp)


class SavedJob(BaseModel):
    """One running job, as the state file keeps it (``Job.to_state``)."""

    model_config = ConfigDict(extra="ignore", strict=True, arbitrary_types_allowed=True)

    name: str = Field(min_length=1)
    run: str = ""  # the run the job is (a controller before per-job tokens wrote none)
    token: str = ""  # the job's own token (idem)
    job_id: int = Field(ge=0)
    world_size: int = Field(ge=1)
    key: str = Field(pattern=r"^[0-9a-f]{16}$")
    payload_elems: int | None = Field(default=None, ge=1)
    size_bytes: int = Field(ge=0)
    trees: int | None = Field(default=None, ge=1)
    plan: dict[str, Any]
    groups: dict[str, dict[str, Any]] = Field(default_factory=dict)
    ranks: list[SavedRank]

    @field_validator("plan")
    @classmethod
    def _a_plan(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            plan_from_dict(value)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"key {exc} missing" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"does not rebuild a job plan ({what})") from None
        return value

    def job_plan(self) -> JobPlan:
        return plan_from_dict(self.plan)


class StateFile:
    """The state file at ``path`` (see the module docstring); ``clock``: seconds, monotonic."""

    def __init__(self, path: Path, clock: Callable[[], float], retry_interval_s: float = RETRY_INTERVAL_S):
        self.path = path
        self.clock = clock
        self.retry_interval_s = retry_interval_s
        self.error: str | None = None  # why the last write failed; None once a write succeeded
        self._pending: str | None = None  # the content a failed write still owes the disk
        self._retry_at = 0.0

    # ------------------------------------------------------------------ reading
    def load(self) -> list[SavedJob]:
        """The file's valid entries ([] when there is no file); :class:`StateFileError` when
        the file as a whole is unusable; each bad entry logged in one line and skipped."""
        try:
            if not check_regular_file(self.path, "state_file"):
                return []
            data = json.loads(read_private_file(self.path, "state_file"))
        except UnsafePathError as exc:
            raise StateFileError("state_file", f"{exc.detail}; the controller recovers nothing from it") from None
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateFileError("state_file", f"cannot read {self.path}: {exc.strerror or exc}") from None
        except ValueError as exc:  # JSON (a UnicodeDecodeError is refused by read_private_file)
            raise StateFileError("state_file", f"{self.path} is not JSON ({exc}); {_MOVE_IT}") from None
        if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
            got = type(data).__name__ if not isinstance(data, dict) else f"jobs: {type(data.get('jobs')).__name__}"
            raise StateFileError(
                "state_file",
                f"{self.path} is not a state file (expected {{'version': 1, 'jobs': [...]}}, got {got}); {_MOVE_IT}",
            )
        if data.get("version") != STATE_VERSION:
            raise StateFileError(
                "state_file",
                f"{self.path} has version {data.get('version')!r}; this controller reads version {STATE_VERSION}; "
                f"{_MOVE_IT}",
            )
        entries = []
        for index, raw in enumerate(data["jobs"]):
            try:
                if not isinstance(raw, dict):
                    raise FieldError("entry", f"expected an object, got {type(raw).__name__}")
                entries.append(SavedJob.model_validate(raw))
            except (ValidationError, FieldError) as exc:
                err = settings_error(exc) if isinstance(exc, ValidationError) else exc
                name = raw.get("name") if isinstance(raw, dict) else None
                log.warning(
                    "state file %s: entry %d (job %r) skipped: %s: %s", self.path, index, name, err.field, err.detail
                )
        return entries

    # ------------------------------------------------------------------ writing
    def save(self, running: list[dict[str, Any]]) -> bool:
        """Write the running jobs now; on failure keep them pending (:meth:`retry`). True if written."""
        self._pending = json.dumps({"version": STATE_VERSION, "jobs": running}, indent=1)
        return self._write()

    def retry(self) -> bool:
        """Write the pending content if a write failed and ``retry_interval_s`` has passed since.
        True when nothing is pending any more."""
        if self._pending is None:
            return True
        if self.clock() < self._retry_at:
            return False
        return self._write()

    def _write(self) -> bool:
        assert self._pending is not None
        try:  # a full or unwritable disk leaves the previous file whole (write_private_file)
            write_private_file(self.path, self._pending)
        except OSError as exc:  # the service goes on, /v1/health says "degraded" until a retry succeeds
            error = f"cannot write state file {self.path}: {exc.strerror or exc}"
            if error != self.error:  # one line per new error, not one per retry
                log.error("%s (kept its previous content; retrying every %g s)", error, self.retry_interval_s)
            self.error = error
            self._retry_at = self.clock() + self.retry_interval_s
            return False
        if self.error is not None:
            log.warning("state file %s written again", self.path)
        self.error = None
        self._pending = None
        return True


_MOVE_IT = "move it away to start without recovering its jobs"
