"""Private files of the runtime: directories only their owner can enter, files written so
that nobody else can read, redirect or truncate them (docs/runtime.md, "Trust model").

* :func:`private_dir` creates a directory with mode 0700, or checks an existing one: it
  must be a real directory (not a symlink), owned by this user, with no group or other
  permission bits. Anything else is refused with :class:`UnsafePathError` (one line naming
  the path, what is wrong and what to do), never repaired silently: a directory someone
  else made may already hold their files.
* :func:`write_private_file` writes to a fresh temporary name in the same directory
  (``O_CREAT | O_EXCL | O_NOFOLLOW``, mode 0600: it cannot be a planted symlink or
  someone's file), writes every byte (short writes continue, ``ENOSPC`` raises), fsyncs,
  and renames over the target. On any failure the temporary file is removed and the
  target keeps its previous content: a full disk never leaves a truncated file.
* :func:`read_private_file` opens with ``O_NOFOLLOW | O_NONBLOCK`` and refuses what is not
  a regular file (a FIFO, a device: opening one would block or read forever) and a file
  that another user owns. :func:`check_regular_file` is the same check by ``lstat`` alone.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from panama.core.errors import FieldError

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


class UnsafePathError(FieldError):
    """A directory or file that another user could read or replace; ``field`` names the setting."""


def private_dir(path: str | Path, field: str = "state", strict: bool = True) -> Path:
    """``path`` as a directory only this user can use (created 0700 with its parents if missing).

    Raises :class:`UnsafePathError` when it is a symlink, not a directory, owned by another
    user, or open to group or others (``strict=False``: writable by group or others; for a
    directory the user chose, such as the parent of ``--state FILE``).
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(p, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafePathError(field, f"cannot create directory {p}: {exc.strerror or exc}") from None
    check_private_dir(p, field, strict)
    return p


def check_private_dir(path: str | Path, field: str = "state", strict: bool = True) -> None:
    """Refuse ``path`` unless it is a real directory of this user with mode 0700 or stricter
    (``strict=False``: that no one else may write to)."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except OSError as exc:
        raise UnsafePathError(field, f"cannot inspect {p}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(field, f"{p} is a symbolic link; refusing to use it (remove it, or choose another path)")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(field, f"{p} exists and is not a directory")
    if st.st_uid != os.getuid():
        raise UnsafePathError(
            field,
            f"{p} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): someone else may read or replace its "
            "files; remove it or choose another path",
        )
    if stat.S_IMODE(st.st_mode) & (0o077 if strict else 0o022):
        raise UnsafePathError(
            field,
            f"{p} has mode {stat.S_IMODE(st.st_mode):o}: others may read or replace its files; "
            f"chmod {'700' if strict else 'go-w'} {p} (or choose another path)",
        )


def write_private_file(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` atomically, mode 0600 (see the module docstring).

    Raises OSError (the target untouched) when the data cannot be written in full.
    """
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else bytes(data)
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, PRIVATE_FILE_MODE)
    try:
        try:
            os.fchmod(fd, PRIVATE_FILE_MODE)  # whatever the umask
            view = memoryview(raw)
            while view:
                n = os.write(fd, view)
                if n <= 0:  # pragma: no cover - a regular file raises instead
                    raise OSError(f"write to {tmp} made no progress")
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # the rename itself survives a crash once the directory is synced
        dfd = os.open(p.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # pragma: no cover
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover - some file systems refuse
        pass
    finally:
        os.close(dfd)


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"  # pragma: no cover


def check_regular_file(path: str | Path, field: str = "state") -> bool:
    """True if ``path`` is a regular file, False if nothing is there; :class:`UnsafePathError`
    (one line naming the path and what it is) for anything else. ``lstat`` only: never
    opens, so a FIFO cannot block it."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UnsafePathError(field, f"cannot inspect {p}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(
            field, f"{p} is {_kind(st.st_mode)}, not a regular file; remove it (or choose another path)"
        )
    return True


def read_private_file(path: str | Path, field: str = "state") -> str:
    """The text of ``path``, refused (:class:`UnsafePathError`) if it is a symlink, not a
    regular file (checked on the open descriptor: ``O_NONBLOCK`` keeps a FIFO from
    blocking the open), or another user's file.

    OSError (e.g. FileNotFoundError) passes through.
    """
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == getattr(os, "ELOOP", 40):
            raise UnsafePathError(field, f"{p} is a symbolic link; refusing to read it") from None
        raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(
                field, f"{p} is {_kind(st.st_mode)}, not a regular file; remove it (or choose another path)"
            )
        if st.st_uid != os.getuid():
            raise UnsafePathError(
                field, f"{p} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); not using it"
            )
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafePathError(field, f"{p} is not UTF-8 text") from None
