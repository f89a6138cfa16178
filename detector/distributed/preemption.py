"""SIGTERM/SIGINT/SIGHUP (a closed terminal) stop a run: before step 1 at
once (nothing to save), after
it every process saves the same agreed step; exit 128 + the signal
(docs/faults.md; design: docs/architecture.md, "Processes")."""

import os
import signal
import sys
import threading
import types

import jax
import numpy as np
from jax.experimental import multihost_utils

# The signals that ask a run to stop, by number (SIGHUP: its terminal was
# closed; it saves as SIGTERM does).
SIGNALS = {
    signal.SIGTERM: "SIGTERM",
    signal.SIGINT: "SIGINT",
    signal.SIGHUP: "SIGHUP",
}


def _say(line: str) -> None:
    """`line` on stderr, if there still is one (a closed terminal's is
    gone: the run goes on to save all the same)."""
    try:
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def exit_code(signum: int) -> int:
    """128 + the signal number: what a shell reports for it (143, 130)."""
    return 128 + signum


class Preempted(Exception):  # noqa: N818 (not an error: a requested stop)
    """The run stopped on request at `step`, which a checkpoint holds (step
    0: stopped before the first step, nothing to save)."""

    def __init__(self, step: int, signum: int):
        self.step, self.signum = step, signum
        super().__init__(
            f"preempted at step {step}: checkpoint saved"
            if step
            else "preempted before step 1: nothing to save"
        )


def _exit_now(line: str, signum: int) -> None:
    """Ends the process at once, with `line` on stderr and the shell's code
    for `signum` (no cleanup: called from the signal-watch thread)."""
    _say(line)
    os._exit(exit_code(signum))


def _ignore(signum: int, frame: types.FrameType | None) -> None:
    """The Python-level handler: the signal-watch thread acts instead."""
    del signum, frame


class Watch:
    """The stop flag set by SIGTERM/SIGINT, agreed across processes."""

    def __init__(self):
        self.signum: int | None = None  # the first signal received
        self.stepping = False  # begin_steps() called: a signal saves

    @classmethod
    def install(cls) -> "Watch":
        """A watch whose handlers replace SIGTERM's and SIGINT's.

        Handlers can only be installed from the main thread; elsewhere (a
        library caller's worker thread) the watch stays unset and the
        signals keep their handlers.
        """
        watch = cls()
        if threading.current_thread() is not threading.main_thread():
            return watch
        # Python runs a signal handler only when the main thread runs
        # Python code, not during a long compile or device wait. Its C-level
        # handler, though, writes each signal's number to the wakeup fd at
        # once, from whatever thread the signal lands on: a thread of ours
        # reads them there. The Python-level handlers do nothing (they must
        # exist for the signals to be caught at all).
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        for signum in SIGNALS:
            signal.signal(signum, _ignore)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(
            target=watch._take_signals,
            args=(read_end,),
            name="signal-watch",
            daemon=True,
        ).start()
        return watch

    def _take_signals(self, read_end: int) -> None:
        while True:
            for signum in os.read(read_end, 64):
                if signum in SIGNALS:
                    self._handle(signum)

    def begin_steps(self) -> None:
        """From here on a first signal saves the step in progress; before,
        it ends the process at once (nothing to save)."""
        self.stepping = True

    def _handle(self, signum: int) -> None:
        name = SIGNALS.get(signum, str(signum))
        if not self.stepping:
            _exit_now(
                f"{name} before the first step: exiting at once, "
                "nothing to save",
                signum,
            )
        if self.signum is not None:
            _exit_now(f"{name} again: exiting at once, not saving", signum)
        self.signum = signum
        _say(
            f"{name} received: the run saves a checkpoint after the current "
            f"step and stops (send {name} again to exit at once)"
        )

    def stop_requested(self, *, agree: bool = True) -> bool:
        """Whether a stop was requested: this process's signal, with one
        process; with several, any process's, agreed by a collective at the
        `agree` points alone (every process passes the same `agree` at the
        same steps; between them the answer is False, no collective and no
        wait for the device)."""
        local = self.signum is not None
        if jax.process_count() == 1:
            return local
        if not agree:
            return False
        with jax.transfer_guard("allow"):
            flags = multihost_utils.process_allgather(
                np.asarray(self.signum if local else 0, dtype=np.int32)
            )
        flags = np.asarray(flags).ravel()
        if not local and flags.any():  # another process was signalled
            self.signum = int(flags[flags != 0][0])
        return bool(flags.any())
