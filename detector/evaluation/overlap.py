"""Host work on batch k, on one thread and in order, while the device
predicts batch k + 1; at most `depth` calls in flight."""

import collections
import concurrent.futures
from collections.abc import Callable
from typing import Any


class InOrder:
    """A one-thread queue of host calls whose results keep their order.

        with overlap.InOrder() as host:
            for batch in batches:
                host.submit(to_results, predict(batch), batch)
            parts = host.results()  # in submission order

    A thread suffices: the main thread waits for the device with the GIL
    released, and numpy releases it in its array operations. `submit`
    blocks on the oldest call beyond `depth`, so host memory stays bounded.
    """

    def __init__(self, depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth={depth}: must be >= 1")
        self._depth = depth
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="eval-host"
        )
        self._pending = collections.deque()
        self._done = []

    def __enter__(self) -> "InOrder":
        return self

    def __exit__(self, *exc_info) -> None:
        for future in self._pending:  # on an error: drop what is queued
            future.cancel()
        self._pool.shutdown(wait=True)

    def submit(self, fn: Callable[..., Any], *args, **kwargs) -> None:
        """Queues fn(*args, **kwargs); first waits for the oldest call while
        `depth` are queued (its error is raised here)."""
        while len(self._pending) >= self._depth:
            self._done.append(self._pending.popleft().result())
        self._pending.append(self._pool.submit(fn, *args, **kwargs))

    def results(self) -> list[Any]:
        """Every call's result, in submission order (waits for the rest)."""
        while self._pending:
            self._done.append(self._pending.popleft().result())
        return self._done
