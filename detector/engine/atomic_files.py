"""Files written whole or not at all.

    atomic_files.write_text(workdir / "eval_val.json", text)

The text goes to a temporary file in the same folder, is flushed to disk,
and then replaces the target in one rename, so a reader (or a run killed
mid-write, or a full disk) never leaves a cut file where the old one was.
"""

import contextlib
import os
import pathlib
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
