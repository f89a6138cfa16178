"""Files written whole or not at all (a temporary file, fsync, one rename;
the process umask), regular files read with a size bound, and free space."""

import contextlib
import errno
import os
import pathlib
import shutil
import stat
import tempfile
from collections.abc import Iterator

# st_mode test -> what a file of that kind is, in error lines.
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotRegularError(ValueError):
    """A path that is no regular file; `kind` says what it is."""

    def __init__(self, path: str | pathlib.Path, kind: str):
        super().__init__(f"{path}: not a regular file ({kind})")
        self.kind = kind


class OverLimitError(ValueError):
    """A regular file larger than the caller allows; `size` its bytes."""

    def __init__(self, path: str | pathlib.Path, size: int, limit: int):
        super().__init__(f"{path}: {size} bytes, over {limit}")
        self.size = size


def kind_of(path: str | pathlib.Path) -> str:
    """What `path` is, in error lines: 'a FIFO', 'a folder', ... (links
    followed)."""
    mode = os.stat(path).st_mode
    return next((k for test, k in _KINDS if test(mode)), "unknown")


def read_regular(path: str | pathlib.Path, limit: int) -> bytes:
    """The bytes of `path` (links followed), which must be a regular file of
    at most `limit` bytes: a FIFO is never waited on, a device or a huge
    sparse file never read.

    Raises:
      OSError: it cannot be opened or read.
      NotRegularError: it is a FIFO, device, folder or socket.
      OverLimitError: it holds more than `limit` bytes.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        mode, size = os.fstat(fd).st_mode, os.fstat(fd).st_size
        if not stat.S_ISREG(mode):
            raise NotRegularError(path, kind_of(path))
        if size > limit:
            raise OverLimitError(path, size, limit)
        data = f.read(limit + 1)
    if len(data) > limit:  # grew since fstat
        raise OverLimitError(path, len(data), limit)
    return data


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


def missing_folders(path: str | pathlib.Path) -> list[pathlib.Path]:
    """`path` and its parents that do not exist yet, innermost first."""
    path, missing = pathlib.Path(path).expanduser().absolute(), []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def remove_empty(folders: list[pathlib.Path]) -> None:
    """Removes each of `folders` (innermost first) while it is empty: what
    a failed start made is not left behind."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone): keep it and its parents
            return
