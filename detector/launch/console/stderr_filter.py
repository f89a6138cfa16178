"""Native libraries' INFO lines and known noise dropped from file descriptor
2 by a child process: TensorFlow 2.20+ logs there whatever
TF_CPP_MIN_LOG_LEVEL says (docs/training.md, "Console")."""

import atexit
import contextlib
import os
import re
import select
import signal
import subprocess
import sys

DROPPED = re.compile(
    rb"^(?:I\d{4} [\d:.]+ +\d+ [\w.+-]+:\d+\] "
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|W\d{4} [\d:.]+ +\d+ op_level_cost_estimator\.cc:\d+\] "
    rb"Error in PredictCost\(\)"
    # libtpu loaded where no TPU is attached, to compile for a topology
    # (benchmarks/tpu_aot.py): it cannot find the host's TPU or workers.
    rb"|Failed to find host bounds for accelerator type: WARNING: could not "
    rb"determine TPU"
    rb"|WARNING: Logging before InitGoogle\(\) is written to STDERR"
    rb"|E\d{4} [\d:.]+ +\d+ common_lib\.cc:\d+\] INVALID_ARGUMENT: Error: "
    rb"unexpected worker hostname 'WARNING: could not determine TPU"
    rb"|=== Source Location Trace: === ?$"
    rb"|learning/[\w/]+/libtpu_init_utils\.cc:\d+$)"
)
# XLA's slow-compile banner, four lines: the log line of
# slow_operation_alarm.cc (its text starts on the next line), a row of
# asterisks, "[Compiling module M] Very slow compile? If you want to file a
# bug, ...", asterisks again. Dropped whole: the compile line before it
# already says how long a compile takes (a block of other text passes).
BANNER = (
    re.compile(rb"^E\d{4} [\d:.]+ +\d+ slow_operation_alarm\.cc:\d+\] ?$"),
    re.compile(rb"^\*+$"),
    re.compile(rb"^\[Compiling module .*\] Very slow compile\?"),
    re.compile(rb"^\*+$"),
)
# A partial line (no newline yet) waits this long for its end, then goes.
PARTIAL_LINE_S = 0.2
EXIT_WAIT_S = 2.0


class _BannerDrop:
    """Holds lines while they match BANNER from its start; drops them when
    the whole banner came, passes them on as soon as one does not fit."""

    def __init__(self):
        self.held: list[bytes] = []

    def feed(self, line: bytes) -> list[bytes]:
        """The lines to write now, `line` seen."""
        if BANNER[len(self.held)].match(line):
            self.held.append(line)
            if len(self.held) == len(BANNER):
                self.held = []
            return []
        out, self.held = self.held, []
        return out + (self.feed(line) if out else [line])

    def flush(self) -> list[bytes]:
        out, self.held = self.held, []
        return out


def filter_stream(read_fd: int, write_fd: int) -> None:
    """Copies `read_fd` to `write_fd` until EOF, without DROPPED lines and
    XLA's slow-compile BANNER."""
    pending = b""
    banner = _BannerDrop()
    while True:
        if pending:
            ready, _, _ = select.select([read_fd], [], [], PARTIAL_LINE_S)
            if not ready:  # a line without its end: pass it on as it is
                os.write(write_fd, b"".join(x + b"\n" for x in banner.flush()))
                os.write(write_fd, pending)
                pending = b""
                continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        kept = b"".join(
            out + b"\n"
            for line in lines
            if not DROPPED.match(line)
            for out in banner.feed(line)
        )
        if kept:
            os.write(write_fd, kept)
    rest = b"".join(line + b"\n" for line in banner.flush())
    if pending and not DROPPED.match(pending):
        rest += pending
    if rest:
        os.write(write_fd, rest)


def install() -> subprocess.Popen | None:
    """Routes file descriptor 2 through the filter; returns the child.

    The child (this file as a script) drops native INFO lines (absl's
    `I<mmdd> <time> <thread> <file>:<line>]`), absl's "before
    InitializeLog" notice and Grappler's `op_level_cost_estimator`
    warnings and libtpu's notes of a host without a TPU, and passes every
    other byte on. It ignores SIGINT, SIGTERM
    and SIGHUP and ends when the last writer closes the pipe, so a crash's
    last native lines still come out; at exit descriptor 2 is put back.

    Python's sys.stderr (and absl's log handler on it) move to a copy of
    the original descriptor. Returns None (and changes nothing) where the
    child cannot start.
    """
    sys.stderr.flush()
    original = os.dup(2)
    read_fd, write_fd = os.pipe()
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__)],
            stdin=read_fd,
            stdout=original,
            stderr=original,
            close_fds=True,
        )
    except OSError:
        for fd in (original, read_fd, write_fd):
            os.close(fd)
        return None
    os.close(read_fd)
    old_stderr = sys.stderr
    sys.stderr = os.fdopen(
        original,
        "w",
        buffering=1,
        encoding=getattr(old_stderr, "encoding", None),
        errors="backslashreplace",
    )
    _repoint_handlers(old_stderr, sys.stderr)
    os.dup2(write_fd, 2)
    os.close(write_fd)
    atexit.register(_finish, child, original)
    return child


def _repoint_handlers(old, new) -> None:
    """Logging handlers writing to stream `old` write to `new` instead."""
    import logging

    from absl import logging as absl_logging

    handlers = [absl_logging.get_absl_handler().python_handler]
    handlers += logging.getLogger().handlers
    for handler in handlers:
        if getattr(handler, "stream", None) is old:
            handler.setStream(new)


def _finish(child: subprocess.Popen, original: int) -> None:
    """At exit: descriptor 2 back to the original (the child then sees the
    end of its input), and a short wait for its last lines."""
    os.dup2(original, 2)
    # TimeoutExpired: a grandchild still holds the pipe; it ends with it.
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(EXIT_WAIT_S)


def main() -> None:
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)  # end with the parent's pipe
    filter_stream(0, 1)


if __name__ == "__main__":
    main()
