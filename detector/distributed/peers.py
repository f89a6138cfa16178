"""A lost process of the job ends the others in one line, within about 16 s,
by heartbeats in the coordination service (docs/faults.md; design:
docs/architecture.md, "Processes")."""

import atexit
import contextlib
import sys
import threading
import time
from collections.abc import Callable

HEARTBEAT_S = 1.0
LOST_AFTER_S = 15.0
_PREFIX = "detector/peers"
_active: list["Watch"] = []  # this process's watch, once started


def _key(kind: str, process: int) -> str:
    return f"{_PREFIX}/{kind}/{process}"


def lost_message(process: int, count: int, seconds: float) -> str:
    """The one line for a lost peer."""
    host = " (it hosts the coordinator)" if process == 0 else ""
    return (
        f"process {process} of {count}{host} stopped answering for "
        f"{seconds:.0f} s (killed, crashed or its host lost); stopping this "
        "process too: start every process again to resume from the last "
        "complete checkpoint"
    )


class Watch:
    """The heartbeat and the peer check of one process (module docstring)."""

    def __init__(
        self,
        client,
        process: int,
        count: int,
        on_lost: Callable[[str], None],
        lost_after_s: float = LOST_AFTER_S,
    ):
        self._client = client
        self._process = process
        self._count = count
        self._on_lost = on_lost
        self._lost_after_s = lost_after_s
        self._stopped = threading.Event()
        self._verdict = threading.Event()
        now = time.monotonic()
        # peer -> (last counter seen, when it last moved)
        self._seen = {p: (None, now) for p in range(count) if p != process}
        self._beat = 0

    def _read(self, peer: int) -> str | None:
        return self._client.key_value_try_get(_key("beat", peer))

    def _exited(self, peer: int) -> bool:
        try:
            self._client.key_value_try_get(_key("exited", peer))
        except Exception:  # noqa: BLE001 - absent: NOT_FOUND
            return False
        return True

    def check_once(self, now: float) -> str | None:
        """One heartbeat and one look at the peers: the lost-peer line, or
        None while every peer answers."""
        try:
            self._beat += 1
            self._client.key_value_set(
                _key("beat", self._process), str(self._beat), True
            )
        except Exception:  # noqa: BLE001 - the service itself is gone
            return lost_message(0, self._count, self._lost_after_s)
        for peer, (last, moved) in list(self._seen.items()):
            try:
                value = self._read(peer)
            except Exception:  # noqa: BLE001 - not written yet
                value = None
            if value != last:
                self._seen[peer] = (value, now)
            elif now - moved > self._lost_after_s and not self._exited(peer):
                return lost_message(peer, self._count, now - moved)
        return None

    def _run(self) -> None:
        while not self._stopped.wait(HEARTBEAT_S):
            message = self.check_once(time.monotonic())
            if message and not self._stopped.is_set():
                self._on_lost(message)  # ends the process
                self._verdict.set()  # (an on_lost that returns: tests)
                return

    def start(self) -> "Watch":
        threading.Thread(
            target=self._run, name="peer-watch", daemon=True
        ).start()
        atexit.register(self.stop)
        _active.append(self)  # what `finished` marks
        hook = sys.excepthook

        def excepthook(kind, value, traceback):
            # A collective that failed with a vanished peer: the watch's
            # one line (and os._exit) instead of the traceback.
            # The verdict never comes when on_lost ends the process first.
            if not self._stopped.is_set():
                self._verdict.wait(self._lost_after_s + 2 * HEARTBEAT_S)
            hook(kind, value, traceback)

        sys.excepthook = excepthook
        return self

    def finish(self) -> None:
        """Marks this process done: its peers never count it lost."""
        # The service may be gone already.
        with contextlib.suppress(Exception):
            self._client.key_value_set(_key("exited", self._process), "1", True)

    def stop(self) -> None:
        """Ends the heartbeat (and the check of the peers)."""
        self._stopped.set()


def finished() -> None:
    """This process's work is done (no-op without a watch)."""
    for active in _active:
        active.finish()


def watch(on_lost: Callable[[str], None]) -> Watch | None:
    """Starts the watch of this process when the job has several (after
    jax.distributed.initialize); None for a single process."""
    # jax.distributed's own record: no backend is started here.
    from jax._src import distributed

    state = distributed.global_state
    if state.client is None or (state.num_processes or 1) == 1:
        return None
    return Watch(
        state.client, state.process_id, state.num_processes, on_lost
    ).start()
