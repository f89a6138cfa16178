"""tqdm bars where a person waits without a log line: on a terminal, on
process 0, once a loop has run `delay_s` (docs/training.md)."""

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
