"""Filesystem helpers: files written whole or not at all, free space.

    files.write_text(workdir / "eval_val.json", text)

The text goes to a temporary file in the same folder, is flushed to disk,
and then replaces the target in one rename, so a reader (or a run killed
mid-write, or a full disk) never leaves a cut file where the old one was.
"""

import contextlib
import os
import pathlib
import shutil
import tempfile


def write_text(path: str | pathlib.Path, text: str) -> None:
    """Writes `text` to `path` atomically (the old file stays on failure)."""
    path = pathlib.Path(path)
    fd, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def free_space(folder: str | pathlib.Path) -> str:
    """'<n> MiB' free on the filesystem of `folder` (for error lines)."""
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.0f} MiB"
    except OSError as e:
        return f"an unknown amount ({e.strerror})"
