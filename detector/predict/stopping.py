"""Ctrl-C and SIGTERM as exceptions, and the exit code of each (130, 143)."""

import contextlib
import signal
from collections.abc import Iterator


class Terminated(BaseException):
    """SIGTERM arrived (as KeyboardInterrupt is SIGINT)."""


# The shell's 128 + signal number.
EXIT_CODES: dict[type[BaseException], int] = {
    KeyboardInterrupt: 128 + signal.SIGINT,
    Terminated: 128 + signal.SIGTERM,
}
STOPS = tuple(EXIT_CODES)


def exit_code(error: BaseException) -> int:
    """130 for Ctrl-C (SIGINT), 143 for SIGTERM."""
    return next(c for t, c in EXIT_CODES.items() if isinstance(error, t))


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises `Terminated` in the main thread for the block."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
