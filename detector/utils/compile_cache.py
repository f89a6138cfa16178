"""JAX's persistent compilation cache for the entry points: a program
compiled once is loaded from disk by every later run on the machine.

The folder is `$XDG_CACHE_HOME/flax-maskrcnn/jax` (`~/.cache/...` by
default). `FLAX_MASKRCNN_COMPILE_CACHE=DIR` moves it and
`FLAX_MASKRCNN_COMPILE_CACHE=off` turns it off; without that variable,
JAX's own `JAX_COMPILATION_CACHE_DIR` (or a folder already set in
`jax.config`, as the tests set one) is kept.

Every program is kept, however short its compile: the model's
initialisation and the small programs around the train step add up to
a third of a cached start on a 2-core CPU (benchmarks/README.md); JAX's
`JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`, where set, is kept. Several
processes may share the folder: JAX writes an entry only from
process 0 of a multi-host job and never overwrites one, and an entry it
cannot read (cut short by a concurrent write, damaged, from another
build) is compiled again instead: said once, in one log line.

A run can say before it compiles whether its programs are there
(`ProgramIndex`): the entries a run's programs loaded or wrote are
recorded in the folder under a key of what makes those programs (the
run's config, the source that builds them, JAX, the devices); a later run
of the same key finds them, each of its recorded size, before its first
compile.
"""

import contextlib
import hashlib
import importlib.metadata
import json
import logging as std_logging
import os
import pathlib
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping

import jax
from absl import logging

from detector.utils import files

ENV = "FLAX_MASKRCNN_COMPILE_CACHE"
# JAX's variable for the shortest compile it keeps; unset: every program.
MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
OFF_VALUES = ("off", "0", "false", "no", "none")
_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# How JAX's entry files end, and the folder of recorded programs in the
# cache folder (ProgramIndex).
_ENTRY_SUFFIX = "-cache"
_INDEX_FOLDER = "flax-maskrcnn-programs"
# JAX's logger of each persistent-cache hit and miss (the entry's key), at
# DEBUG level: read inside `ProgramIndex.watching`, never shown.
_COMPILER_LOGGER = "jax._src.compiler"
_KEY_LINES = (
    "Persistent compilation cache hit for ",
    "PERSISTENT COMPILATION CACHE MISS for ",
)
# The start of JAX's warnings about an entry it could not read or write.
_ENTRY_WARNINGS = (
    "Error reading persistent compilation cache entry",
    "Error writing persistent compilation cache entry",
)

_lock = threading.Lock()
_hits = 0
_installed = False
_warned = False


def default_folder(env: Mapping[str, str] | None = None) -> pathlib.Path:
    """$XDG_CACHE_HOME/flax-maskrcnn/jax, `~/.cache` when XDG_CACHE_HOME is
    unset or empty."""
    env = os.environ if env is None else env
    root = env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return pathlib.Path(root) / "flax-maskrcnn" / "jax"


def chosen_folder(env: Mapping[str, str] | None = None) -> pathlib.Path | None:
    """The folder `enable` uses under `env`; None: the cache is off.

    FLAX_MASKRCNN_COMPILE_CACHE first (a folder, or one of OFF_VALUES),
    then a folder already set for JAX, then `default_folder`.
    """
    env = os.environ if env is None else env
    value = env.get(ENV, "").strip()
    if value.lower() in OFF_VALUES:
        return None
    if value:
        return pathlib.Path(value).expanduser()
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return pathlib.Path(configured)
    return default_folder(env)


def enable(env: Mapping[str, str] | None = None) -> pathlib.Path | None:
    """Turns JAX's persistent compilation cache on in `chosen_folder`.

    Call before the first compile. A folder that cannot be created turns
    the cache off with one warning line (the run compiles as without it).

    Returns:
      The cache folder, or None where the cache is off.
    """
    folder = chosen_folder(env)
    _install_hooks()
    if folder is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        logging.warning(
            "Compilation cache off: %s: %s (set %s to another folder)",
            folder,
            e.strerror or e,
            ENV,
        )
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if MIN_COMPILE_ENV not in (os.environ if env is None else env):
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return folder


def folder() -> pathlib.Path | None:
    """The folder JAX's persistent cache uses now; None where it is off."""
    configured = jax.config.jax_compilation_cache_dir
    if not (configured and jax.config.jax_enable_compilation_cache):
        return None
    return pathlib.Path(configured)


def entries(cache: pathlib.Path | None) -> dict[str, int]:
    """JAX's entries in `cache` (None: the cache is off): name -> bytes."""
    if cache is None:
        return {}
    try:
        scanned = list(os.scandir(cache))
    except OSError:
        return {}
    found = {}
    for entry in scanned:
        if entry.name.endswith(_ENTRY_SUFFIX):
            with contextlib.suppress(OSError):
                found[entry.name] = entry.stat().st_size
    return found


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def source_digest(*packages: pathlib.Path) -> str:
    """sha256 over the .py files under `packages` (path and bytes)."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(package.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class _KeysSeen(std_logging.Filter):
    """Notes the cache key of each hit and miss JAX logs; passes on only
    the records its logger showed before (`shown_from` and up)."""

    def __init__(self, shown_from: int):
        super().__init__()
        self.shown_from = shown_from
        self.keys: set[str] = set()

    def filter(self, record: std_logging.LogRecord) -> bool:
        args = record.args
        if (
            isinstance(record.msg, str)
            and record.msg.startswith(_KEY_LINES)
            and isinstance(args, tuple)
            and len(args) == 2
        ):
            self.keys.add(str(args[1]))
        return record.levelno >= self.shown_from


class ProgramIndex:
    """Which cache entries a run's programs are, by a key of what makes
    them; `cached` says before the compile whether they are all there.

    Made before the compile (`before` lists the entries then); the compile
    runs inside `watching`, which notes the entries JAX loads or writes;
    `record`, after it, keeps those under the key (and any written since
    `before`). Only process 0 records: JAX writes entries from process 0
    alone.
    """

    def __init__(self, *parts: str):
        self.cache = folder()
        devices = jax.devices()
        text = json.dumps(
            [
                *parts,
                jax.__version__,
                _version("jaxlib"),
                sys.version,
                jax.default_backend(),
                [d.device_kind for d in devices],
                jax.process_count(),
                os.environ.get("XLA_FLAGS", ""),
            ]
        )
        self.key = hashlib.sha256(text.encode()).hexdigest()[:32]
        self.before = entries(self.cache)
        self.recorded = self._read()
        self._used: set[str] = set()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Notes the entries the compiles inside the block load or write."""
        logger = std_logging.getLogger(_COMPILER_LOGGER)
        seen = _KeysSeen(logger.getEffectiveLevel())
        level = logger.level
        logger.setLevel(std_logging.DEBUG)
        logger.addFilter(seen)
        try:
            yield
        finally:
            logger.removeFilter(seen)
            logger.setLevel(level)
            self._used |= {key + _ENTRY_SUFFIX for key in seen.keys}

    def _path(self) -> pathlib.Path:
        return self.cache / _INDEX_FOLDER / f"{self.key}.json"

    def _read(self) -> dict[str, int]:
        if self.cache is None:
            return {}
        try:
            recorded = json.loads(self._path().read_text())
        except (OSError, ValueError):
            return {}
        return recorded if isinstance(recorded, dict) else {}

    @property
    def cached(self) -> bool:
        """Every recorded entry is in the folder at its recorded size."""
        return bool(self.recorded) and all(
            self.before.get(name) == size
            for name, size in self.recorded.items()
        )

    def record(self) -> None:
        """Records the key's entries (process 0; a failure is ignored: the
        next run only predicts less)."""
        if self.cache is None or jax.process_index() != 0:
            return
        now = entries(self.cache)
        names = self._used or now.keys() - self.before.keys()
        kept = {name: now[name] for name in names if name in now}
        if not kept or kept == self.recorded:
            return
        with contextlib.suppress(OSError):
            self._path().parent.mkdir(exist_ok=True)
            files.write_text(self._path(), json.dumps(kept, sort_keys=True))


def kept_note(env: Mapping[str, str] | None = None) -> str:
    """What the cache `enable` will use holds, for a start's first line:
    `; N programs compiled before are kept in the compilation cache (DIR)`,
    or "" where it is off or empty (before JAX starts: a listing)."""
    cache = chosen_folder(env)
    count = len(entries(cache))
    if not count:
        return ""
    return (
        f"; {count} programs compiled before are kept in the compilation "
        f"cache ({cache})"
    )


def hits() -> int:
    """How many compiles this process has loaded from the cache so far."""
    return _hits


def _count(event: str, **kwargs) -> None:
    global _hits
    del kwargs
    if event == _HIT_EVENT:
        with _lock:
            _hits += 1


def _install_hooks() -> None:
    """The hit counter and the one-line report of an unusable entry, once
    per process."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    jax.monitoring.register_event_listener(_count)
    warnings.showwarning = one_line_entry_warnings(warnings.showwarning)


def one_line_entry_warnings(shown: Callable) -> Callable:
    """A `warnings.showwarning` that passes JAX's warnings about a cache
    entry it could not read or write to `_report_entry`, the rest to
    `shown`."""

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if str(message).startswith(_ENTRY_WARNINGS):
            _report_entry(str(message))
            return
        shown(message, category, filename, lineno, file, line)

    return showwarning


def _report_entry(message: str) -> None:
    """One log line, for the first unusable entry of the process only."""
    global _warned
    with _lock:
        first, _warned = not _warned, True
    if first:
        reason = message.splitlines()[0].split(": ", 1)[-1]
        logging.warning(
            "Compilation cache: an entry could not be used (%s); compiling "
            "instead",
            reason[:200],
        )
