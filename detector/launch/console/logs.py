"""Console hygiene: third-party informational logging off, warnings kept;
absl's --verbosity=1 shows everything (docs/training.md, "Console")."""

import importlib.util
import logging
import os
import pathlib

from absl import logging as absl_logging

from detector.launch.console import stderr_filter
from detector.utils import text

# Loggers (and their children) whose informational records are dropped.
QUIET_LOGGERS = (
    "asyncio",
    "matplotlib",
    "jax._src.xla_bridge",
    "tensorflow",
)
# Packages logging through absl's logger: recognised by the record's file.
QUIET_PACKAGES = ("orbax", "clu")
# TensorFlow's C++ log: 0 everything, 1 no INFO, 2 no WARNING, 3 no ERROR.
TF_CPP_LEVEL = "1"
_native_filter: list = []  # the stderr_filter child, once started


def _package_dir(name: str) -> str | None:
    """The folder of package `name` (without importing it), or None."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(pathlib.Path(next(iter(spec.submodule_search_locations))))


class LibraryFilter(logging.Filter):
    """Drops records below WARNING from the quiet loggers and packages."""

    def __init__(
        self,
        loggers: tuple[str, ...] = QUIET_LOGGERS,
        packages: tuple[str, ...] = QUIET_PACKAGES,
    ):
        super().__init__()
        self._loggers = loggers
        self._dirs = tuple(
            folder + os.sep
            for folder in map(_package_dir, packages)
            if folder is not None
        )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        name = record.name
        if any(name == n or name.startswith(n + ".") for n in self._loggers):
            return False
        return not (self._dirs and record.pathname.startswith(self._dirs))


class EscapingFilter(logging.Filter):
    """Escapes control characters in each record's text (file names in
    data's log lines, `text.printable`), line by line: a report of several
    lines (the host audit's) keeps its line breaks; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        escaped = "\n".join(map(text.printable, message.split("\n")))
        if escaped != message:
            record.msg, record.args = escaped, None
        return True


def escape_logged_text() -> None:
    """Installs EscapingFilter on absl's handler (once)."""
    handler = absl_logging.get_absl_handler()
    if not any(isinstance(f, EscapingFilter) for f in handler.filters):
        handler.addFilter(EscapingFilter())


def installed_filter() -> LibraryFilter | None:
    """The LibraryFilter on absl's handler, or None."""
    handler = absl_logging.get_absl_handler()
    return next(
        (f for f in handler.filters if isinstance(f, LibraryFilter)), None
    )


def quiet_libraries(
    verbosity: int | None = None, *, native: bool = True
) -> bool:
    """Silences third-party informational logging; returns whether it did.
    Control characters in every logged line are escaped either way.

    Args:
      verbosity: absl's verbosity (default: the parsed `--verbosity` flag).
        1 or more leaves every library's logging as it is.
      native: also filter native libraries' lines on file descriptor 2
        (stderr_filter.install; once per process).
    """
    escape_logged_text()
    if verbosity is None:
        verbosity = absl_logging.get_verbosity()
    if verbosity >= 1:
        return False
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", TF_CPP_LEVEL)
    if installed_filter() is None:
        # On absl's handler, which every record (absl's logger and the
        # stdlib loggers that propagate to the root) passes through.
        absl_logging.get_absl_handler().addFilter(LibraryFilter())
    if native and not _native_filter:
        _native_filter.append(stderr_filter.install())
    return True
