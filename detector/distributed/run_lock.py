"""One run per workdir across processes: process 0 takes the workdir lock
(`detector.utils.workdir_lock`) and every process learns the outcome."""

import contextlib
import os
import pathlib
from collections.abc import Iterator

import jax

from detector.distributed import multihost
from detector.utils import files, workdir_lock

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
            lock = workdir_lock.WorkdirLock.acquire(workdir)
        except workdir_lock.WorkdirLockedError as e:
            message = str(e)
    message = multihost.gather_json(message)[0]  # process 0's outcome
    try:
        if message:
            raise workdir_lock.WorkdirLockedError(message)
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
