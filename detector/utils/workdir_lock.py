"""One run per folder: an OS lock on `<workdir>/.train.lock` (predict.py's
--out: `.predict.lock`), taken by process 0 for all (docs/faults.md)."""

import contextlib
import errno
import fcntl
import json
import os
import pathlib
import socket
import time
from collections.abc import Iterator

import jax
from absl import logging

from detector.utils import files

LOCK_NAME = ".train.lock"


class WorkdirLockedError(ValueError):
    """Another run holds the workdir's lock."""


def _holder_text(record: dict) -> str:
    return f"host {record.get('host', '?')} pid {record.get('pid', '?')}" + (
        f", started {record['started']}" if record.get("started") else ""
    )


def _read_record(fd: int) -> dict | None:
    """The holder record in an open lock file; None when it is empty."""
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096).decode(errors="replace").strip()
    if not raw:
        return None
    try:
        record = json.loads(raw)
    except ValueError:
        return {"host": "?", "pid": f"? (unreadable lock file: {raw[:40]!r})"}
    return record if isinstance(record, dict) else {}


class WorkdirLock:
    """An acquired lock on a workdir (see `acquire`); `release` ends it."""

    def __init__(self, path: pathlib.Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(
        cls,
        workdir: str | pathlib.Path,
        *,
        flag: str = "--workdir",
        run: str = "training run",
        lock_name: str = LOCK_NAME,
    ) -> "WorkdirLock":
        """Takes the lock of `workdir` (which must exist) without waiting;
        `flag` names the folder and `run` its user in the error lines.

        Raises:
          WorkdirLockedError: a live run holds it; names its host and pid.
        """
        path = pathlib.Path(workdir) / lock_name
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                record = _read_record(fd) or {}
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                raise WorkdirLockedError(
                    f"{flag}={workdir}: another {run} is using it "
                    f"({_holder_text(record)}; lock file {path}); wait for "
                    f"it to end or choose another {flag}"
                ) from None
            # A releasing holder may have removed the file between our open
            # and our lock: then we hold a lock on a file no one sees.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        stale = _read_record(fd)
        if stale is not None:
            logging.warning(
                "%s: taking over the lock of a run that ended without "
                "releasing it (%s)",
                path,
                _holder_text(stale),
            )
        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
            os.fsync(fd)
        except OSError as e:
            lock = cls(path, fd)
            lock.release()
            raise ValueError(
                f"{flag}={workdir}: cannot write its lock file {path} "
                f"({e.strerror}); {files.free_space(path.parent)} free there"
            ) from None
        return cls(path, fd)

    def release(self) -> None:
        """Removes the lock file, then drops the lock."""
        if self._fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = -1


# The folders this process holds through `held` (resolved), on every
# process: a nested `held` of one of them is a no-op on all of them alike.
_HELD: set[str] = set()


@contextlib.contextmanager
def held(
    workdir: str | pathlib.Path, *, create: bool = False
) -> Iterator[None]:
    """Holds `workdir`'s lock for the block (process 0 takes it; with
    several processes every process raises when it is taken). Inside the
    block of another `held` of the same folder it does nothing.

    With `create` it makes the folder (and its parents) first, and removes
    those it made if they are empty at the end: a run that fails before it
    writes anything leaves no folder behind.

    Raises:
      WorkdirLockedError: another run holds the lock.
    """
    from detector.distributed import multihost  # not for one-process users

    key = os.path.realpath(workdir)
    if key in _HELD:
        yield
        return
    made = files.missing_folders(pathlib.Path(workdir)) if create else []
    if made and jax.process_index() == 0:
        made[0].mkdir(parents=True, exist_ok=True)
    lock, message = None, ""
    if jax.process_index() == 0:
        try:
            lock = WorkdirLock.acquire(workdir)
        except WorkdirLockedError as e:
            message = str(e)
    message = multihost.gather_json(message)[0]  # process 0's outcome
    try:
        if message:
            raise WorkdirLockedError(message)
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
    finally:
        if lock is not None:
            lock.release()
        if jax.process_index() == 0:
            files.remove_empty(made)
