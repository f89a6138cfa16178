"""Files written whole or not at all (a temporary file, fsync, one rename;
the process umask), regular files read with a size bound, and free space."""

import contextlib
import errno
import os
import pathlib
import shutil
import stat
import tempfile

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
            kind = next((k for test, k in _KINDS if test(mode)), "unknown")
            raise NotRegularError(path, kind)
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


def named(error: OSError, path: str | pathlib.Path) -> OSError:
    """`error` with `path` as its file name where it names none (a write
    or fsync on a descriptor: a full disk said `None: No space left`)."""
    if error.filename is not None:
        return error
    return OSError(error.errno, error.strerror or str(error), str(path))


def check_free_space(path: str | pathlib.Path, size: int) -> None:
    """Raises OSError (ENOSPC, naming `path`) when the filesystem of its
    folder has fewer than `size` bytes free."""
    path = pathlib.Path(path)
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return  # the write itself then says what is wrong
    if free < size:
        raise OSError(
            errno.ENOSPC,
            f"No space left on device ({size} bytes to write, {free} free)",
            str(path),
        )


def write_bytes(path: str | pathlib.Path, data: bytes) -> None:
    """Writes `data` to `path` atomically (the old file stays on failure),
    after checking the free space.

    Raises:
      OSError: naming `path` (a full disk included).
    """
    path = pathlib.Path(path)
    check_free_space(path, len(data))
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
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(e, OSError):
            raise named(e, path) from None
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
