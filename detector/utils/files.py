"""Files written whole or not at all (a temporary file, fsync, one rename;
the process umask), and free space."""

import contextlib
import errno
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator


def umask() -> int:
    """The process umask (read by setting it, then set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def naming(path: str | pathlib.Path) -> Iterator[None]:
    """Re-raises an OSError that names no file (a full disk's, from a
    write) as the same error naming `path`, with the free space when the
    disk is full."""
    try:
        yield
    except OSError as e:
        if e.filename:
            raise
        reason = e.strerror or str(e)
        if e.errno == errno.ENOSPC:
            reason += f"; {free_space(pathlib.Path(path).parent)} free there"
        raise OSError(e.errno, reason, str(path)) from None


def check_space(paths_and_sizes: dict[pathlib.Path, int]) -> None:
    """Raises OSError(ENOSPC) naming the first file when the files, of
    known sizes, do not fit in their filesystem's free space (checked
    before any is written)."""
    needed: dict[int, tuple[pathlib.Path, int]] = {}
    for path, size in paths_and_sizes.items():
        try:
            device = os.stat(path.parent).st_dev
        except OSError:
            continue  # the write names the problem
        first, total = needed.get(device, (path, 0))
        needed[device] = (first, total + size)
    for path, total in needed.values():
        try:
            free = shutil.disk_usage(path.parent).free
        except OSError:
            continue
        if total > free:
            raise OSError(
                errno.ENOSPC,
                f"No space left on device: {total / 2**20:.1f} MiB to "
                f"write, {free / 2**20:.1f} MiB free there",
                str(path),
            )


def write_bytes(path: str | pathlib.Path, data: bytes) -> None:
    """Writes `data` to `path` atomically (the old file stays on failure);
    a failure names `path` (`naming`), and a file larger than the free
    space fails before writing (`check_space`)."""
    path = pathlib.Path(path)
    check_space({path: len(data)})
    with naming(path):
        fd, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
        )
        try:
            os.fchmod(fd, 0o666 & ~umask())
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


def write_text(path: str | pathlib.Path, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically, as write_bytes."""
    write_bytes(path, text.encode())


def check_writable_folder(path: str | pathlib.Path, name: str) -> None:
    """Raises ValueError unless `path` is, or can be made, a folder this
    process writes into; `name` ('--out') starts the line. Creates
    nothing: the nearest existing folder on the way is what is checked."""
    path = pathlib.Path(path)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(
            f"{name}={path}: {existing} is a file, not a folder; name a "
            "folder to write into"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(
            f"{name}={path}: cannot write into {existing} (permission "
            "denied); name a folder you can write into"
        )


def free_space(folder: str | pathlib.Path) -> str:
    """'<n> MiB' free on the filesystem of `folder` (for error lines)."""
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.0f} MiB"
    except OSError as e:
        return f"an unknown amount ({e.strerror})"
