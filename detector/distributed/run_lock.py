"""One run per workdir across processes: process 0 takes the workdir lock
(`detector.utils.workdir_lock`) and every process learns the outcome."""

import contextlib
import pathlib
from collections.abc import Iterator

import jax

from detector.distributed import multihost
from detector.utils import workdir_lock


@contextlib.contextmanager
def held(workdir: str | pathlib.Path) -> Iterator[None]:
    """Holds `workdir`'s lock for the block (process 0 takes it; with
    several processes every process raises when it is taken).

    Raises:
      WorkdirLockedError: another run holds the lock.
    """
    lock, message = None, ""
    if jax.process_index() == 0:
        try:
            lock = workdir_lock.WorkdirLock.acquire(workdir)
        except workdir_lock.WorkdirLockedError as e:
            message = str(e)
    message = multihost.gather_json(message)[0]  # process 0's outcome
    if message:
        raise workdir_lock.WorkdirLockedError(message)
    try:
        yield
    finally:
        if lock is not None:
            lock.release()
