"""predict.py's output folder: never one that holds an input, one run at a
time, every file in it replaced whole (docs/export-and-predict.md)."""

import contextlib
import os
import pathlib
from collections.abc import Iterator

from detector.predict import overlay_names
from detector.utils import files, workdir_lock

# Held by the run writing into --out (see `locked`).
LOCK_NAME = ".predict.lock"
# The files of fixed names a run writes into --out, beside the overlays.
PREDICTIONS_FILE = "predictions.json"
RESULTS_FILE = "predictions.jsonl"


class OutFolderError(ValueError):
    """An --out that cannot hold this run's outputs; the message names it."""


def check_out(out: pathlib.Path, inputs: list[pathlib.Path]) -> None:
    """Raises OutFolderError when `out` is a file or a folder this process
    cannot write into (or create), or holds any of the `inputs` files.

    Both sides are compared resolved (symlinks followed), so `--out=.` with
    `photos/a.jpg` named from inside photos/ is caught too.
    """
    try:
        files.check_writable_folder(out, "--out")
    except ValueError as e:
        raise OutFolderError(str(e)) from None
    folder = pathlib.Path(os.path.realpath(out))
    for path in inputs:
        # realpath, unlike Path.resolve, stops quietly at a link loop.
        resolved = pathlib.Path(os.path.realpath(path))
        if folder == resolved or folder in resolved.parents:
            raise OutFolderError(
                f"--out={out}: holds the input {path}; the overlays and "
                f"predictions.json would overwrite or mix with the inputs; "
                "name an --out outside every input folder"
            )


def check_own_files(out: pathlib.Path) -> None:
    """Raises OutFolderError when `out` holds a predictions.json or
    predictions.jsonl that no run of predict.py wrote: one is predict.py's
    only where its overlays.json (written before any other output) records
    a run. An overlay's name is never one of another file
    (`overlay_names.assign`)."""
    if (out / overlay_names.OVERLAYS_FILE).exists():
        return
    for name in (PREDICTIONS_FILE, RESULTS_FILE):
        path = out / name
        if path.exists() or path.is_symlink():
            raise OutFolderError(
                f"--out={out}: {path} was not written by predict.py (no "
                f"{overlay_names.OVERLAYS_FILE} there records a run); move "
                "it away or choose another --out"
            )


def write(path: pathlib.Path, data: bytes) -> None:
    """Replaces `path` with `data` in one rename (a link there included)."""
    files.write_bytes(path, data)


@contextlib.contextmanager
def locked(out: pathlib.Path) -> Iterator[None]:
    """Creates `out` and holds its lock file for the block: two runs on one
    folder would each write predictions.json over the other's.

    Raises:
      OutFolderError: another run holds it (its host and pid named).
    """
    out.mkdir(parents=True, exist_ok=True)
    try:
        lock = workdir_lock.WorkdirLock.acquire(
            out, flag="--out", run="predict.py run", lock_name=LOCK_NAME
        )
    except ValueError as e:
        raise OutFolderError(str(e)) from None
    try:
        yield
    finally:
        lock.release()
