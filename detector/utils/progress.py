"""Progress bars where a person waits without a log line.

    for item in progress.bar(items, total=n, desc="Writing shapes train"):

A tqdm bar on stderr, shown only where stdout is a terminal (a run logged
to a file or a pipe gets no bar, just the log lines) and only on process 0
of a multi-host job; `delay_s` keeps short loops bar-free (tqdm's `delay`:
the bar appears once the loop has run that long). tqdm's own `TQDM_DISABLE=1`
turns every bar off.
"""

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
# Loops that usually end sooner than this draw no bar.
SLOW_LOOP_S = 2.0


def enabled() -> bool:
    """Whether bars are drawn: stdout is a terminal, and this is process 0
    (where JAX is already imported; one-process runs are process 0)."""
    isatty = getattr(sys.stdout, "isatty", None)
    if not (isatty and isatty()):
        return False
    jax = sys.modules.get("jax")
    return jax is None or jax.process_index() == 0


def bar(
    items: Iterable[T],
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    delay_s: float = 0.0,
) -> Iterator[T]:
    """Iterates `items`, drawing a bar when `enabled()`; else `items` as is.

    Args:
      items: what to iterate.
      total: the number of items (default: len(items) where it has one).
      desc: the bar's label.
      unit: what one item is ('img', 'batch').
      delay_s: seconds before the bar appears (0: at once).
    """
    if not enabled():
        yield from items
        return
    from tqdm import tqdm  # only where a bar is drawn

    yield from tqdm(
        items,
        total=total,
        desc=desc,
        unit=unit,
        delay=delay_s,
        leave=False,
        dynamic_ncols=True,
    )
