"""One JAX compilation cache for the whole test session.

The pytest process, each xdist worker and every process a test starts
(they inherit os.environ) read and write one folder, so a program compiled
by one test is a lookup for any other: the tiny model's steps, the smoke
config's train and predict programs, the NMS kernels.

Concurrency: JAX (jax/_src/lru_cache.py) writes an entry with a plain
write_bytes, so a reader in another process could see half of it; with a
size limit set, it takes a file lock (the `filelock` package, in the test
extra) around every read and write. Where filelock is missing the folder
is still shared, unlocked, as the processes of one job share one today;
a torn read is then a warning and a recompile (jax/_src/compiler.py,
_cache_read), never a wrong program.
"""

import importlib.util
import os
import pathlib

import jax
import pytest

# Programs that compile faster than this are not written: most of the
# suite's small jits, whose lookup would cost about what compiling does.
MIN_COMPILE_SECONDS = 0.5
# Far above what the suite writes (about a GiB): the limit is set only for
# the lock that comes with it, not to evict.
MAX_BYTES = 64 * 2**30
# Set by a parent session (a torch child pytest joins it), or by the user
# to keep a cache across sessions.
DIR_VARIABLE = "JAX_COMPILATION_CACHE_DIR"


def locked() -> bool:
    """Whether JAX can lock the cache (the filelock package imports)."""
    return importlib.util.find_spec("filelock") is not None


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The folder every process of this session shares: $DIR_VARIABLE
    where set, else `jax_cache` in the session's base temporary folder
    (the xdist controller's, which holds each worker's)."""
    if os.environ.get(DIR_VARIABLE):
        return pathlib.Path(os.environ[DIR_VARIABLE])
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    directory = base / "jax_cache"
    directory.mkdir(exist_ok=True)
    return directory


def settings(directory: pathlib.Path) -> dict[str, str | float | int]:
    """JAX's cache options, by config name, for a cache at `directory`."""
    options = {
        "jax_compilation_cache_dir": str(directory),
        "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
    }
    if locked():
        options["jax_compilation_cache_max_size"] = MAX_BYTES
    return options


def install(directory: pathlib.Path) -> None:
    """This process compiles through the cache at `directory`, and so does
    every process started from it with os.environ."""
    for name, value in settings(directory).items():
        jax.config.update(name, value)
        os.environ[name.upper()] = str(value)
