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


# Each stopping signal and its handler: the exception it raises in the main
# thread.
_HANDLERS = {
    signal.SIGINT: signal.default_int_handler,
    signal.SIGTERM: _raise_terminated,
}


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """For the block, SIGINT raises KeyboardInterrupt and SIGTERM raises
    `Terminated` in the main thread.

    SIGINT's handler is set too, not left to Python: a process started
    with SIGINT ignored (a background job of a script, `cmd &`) has no
    KeyboardInterrupt handler of Python's, and would run on through a
    Ctrl-C that train.py, which sets its own, stops at.
    """
    previous = {
        signum: signal.signal(signum, handler)
        for signum, handler in _HANDLERS.items()
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
