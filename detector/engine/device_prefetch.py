"""Training batches put on the devices ahead of the step that takes them, so
the host-to-device copy of step N+1's batch runs while step N computes."""

import collections
from collections.abc import Iterator

import jax
from jax.sharding import Mesh

from detector.distributed import sharding


def ahead(
    batches: Iterator[dict], mesh: Mesh, count: int
) -> Iterator[dict[str, jax.Array]]:
    """`batches`, each `sharding.put_batch` `count` batches before it is
    taken.

    Every process puts its own rows in the same order as without the
    prefetch (`put_batch` is no collective), so it is multi-host safe; the
    `count` batches put past the last one taken are never used.
    """
    queue = collections.deque()
    for batch in batches:
        queue.append(sharding.put_batch(batch, mesh))
        if len(queue) > count:
            yield queue.popleft()
    yield from queue
