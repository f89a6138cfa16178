"""Files written whole or not at all (a temporary file, fsync, one rename;
the process umask), and free space."""

import contextlib
import os
import pathlib
import shutil
import tempfile


def umask() -> int:
    """The process umask (read by setting it, then set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes(path: str | pathlib.Path, data: bytes) -> None:
    """Writes `data` to `path` atomically (the old file stays on failure)."""
    path = pathlib.Path(path)
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
