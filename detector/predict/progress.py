"""predict.py's progress while it predicts: a tqdm bar on a terminal (as
train.py's), one line every `every` images with the rate and an ETA when
stdout is piped, nothing with --quiet (docs/export-and-predict.md)."""

import sys
import time
from collections.abc import Callable
from typing import TextIO

from detector.utils import progress as progress_lib

# Piped: a line per this many images (and one at the end).
LINE_EVERY = 20


def plural(count: int, noun: str = "image") -> str:
    """'1 image', '2 images'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


class Progress:
    """Counts predicted images out of `total` and shows it (see module).

    Args:
      total: the images this run predicts (not those kept from an earlier
        run).
      quiet: show nothing.
      every: piped, a line per this many images.
      stream: where lines go (stdout); a bar is drawn where it is a
        terminal (`utils.progress.enabled`).
      clock: seconds, for the rate (time.monotonic).
    """

    def __init__(
        self,
        total: int,
        *,
        quiet: bool = False,
        every: int = LINE_EVERY,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.done = total, 0
        self._every, self._clock = every, clock
        self._stream = stream or sys.stdout
        self._started = clock()
        self._next_line = every
        self._bar = None
        self._quiet = quiet or total == 0
        if not self._quiet and progress_lib.enabled():
            from tqdm import tqdm  # only where a bar is drawn

            self._bar = tqdm(
                total=total,
                desc="predict",
                unit="img",
                leave=False,
                dynamic_ncols=True,
            )

    def advance(self, count: int) -> None:
        """`count` more images predicted (or skipped)."""
        self.done += count
        if self._quiet:
            return
        if self._bar is not None:
            self._bar.update(count)
            return
        if self.done >= self._next_line or self.done == self.total:
            while self._next_line <= self.done:
                self._next_line += self._every
            print(self.line(), file=self._stream, flush=True)

    def line(self) -> str:
        """The piped line: '40 of 120 images done, 3.1 images/s, ETA 26 s'
        (done: predicted or skipped)."""
        seconds = max(self._clock() - self._started, 1e-9)
        rate = self.done / seconds
        text = f"{self.done} of {plural(self.total)} done"
        text += f", {rate:.1f} images/s"
        if self.done < self.total and rate > 0:
            text += f", ETA {(self.total - self.done) / rate:.0f} s"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
