"""Which orientation each training step holds, and which images fill it:
pure functions of (config.seed, step), in the dataset's proportions
(docs/architecture.md, "Resizing, canvases and image sizes")."""

import functools
from collections.abc import Sequence

import numpy as np

# Independent of the sources' streams (data/sources/base.py: 1 and 2).
SCHEDULE_STREAM, RECORD_STREAM = 3, 4


def _permutation(seed: int, stream: int, *keys: int, size: int) -> np.ndarray:
    """A stateless permutation of range(size) keyed by (seed, stream, keys)."""
    entropy = np.random.SeedSequence([seed, stream, *keys])
    return np.random.Generator(np.random.Philox(entropy)).permutation(size)


class OrientationSchedule:
    """Step s -> (orientation, ordinal among that orientation's steps).

    Steps come in epochs of E = max(1, N // global_batch) steps, N the
    images of all orientations. Epoch e holds floor((e + 1) E n_o / N) -
    floor(e E n_o / N) steps of orientation o (n_o its images; the last
    orientation takes the rest), at slots a permutation keyed by (seed, e)
    picks. So an epoch's steps ask for about n_o images of each
    orientation, and the counts before any epoch are closed-form.
    """

    def __init__(self, seed: int, counts: Sequence[int], global_batch: int):
        if global_batch < 1:
            raise ValueError(f"global_batch={global_batch} must be >= 1")
        if not counts or min(counts) < 0 or sum(counts) == 0:
            raise ValueError(
                f"orientation counts {tuple(counts)}: need at least one image"
            )
        self.seed = seed
        self.counts = tuple(int(c) for c in counts)
        self.total = sum(self.counts)
        self.steps_per_epoch = max(1, self.total // global_batch)

    def steps_before_epoch(self, epoch: int) -> tuple[int, ...]:
        """Steps of each orientation in epochs [0, epoch)."""
        steps = epoch * self.steps_per_epoch
        cumulative = np.cumsum(self.counts)
        ends = [steps * int(c) // self.total for c in cumulative[:-1]]
        bounds = [0, *ends, steps]
        return tuple(int(d) for d in np.diff(bounds))

    @functools.lru_cache(maxsize=4)  # noqa: B019 (a schedule lives a run)
    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(orientation of each slot, ordinal within the epoch) of `epoch`."""
        first = self.steps_before_epoch(epoch)
        last = self.steps_before_epoch(epoch + 1)
        kinds = np.repeat(
            np.arange(len(self.counts)),
            np.subtract(last, first),
        )
        slots = _permutation(
            self.seed, SCHEDULE_STREAM, epoch, size=self.steps_per_epoch
        )
        orientation = np.empty(self.steps_per_epoch, np.int64)
        orientation[slots] = kinds
        ordinal = np.empty(self.steps_per_epoch, np.int64)
        for kind in range(len(self.counts)):
            mine = np.flatnonzero(orientation == kind)
            ordinal[mine] = first[kind] + np.arange(len(mine))
        return orientation, ordinal

    def orientation(self, step: int) -> int:
        """The orientation of step `step` (0-based)."""
        epoch, slot = divmod(int(step), self.steps_per_epoch)
        return int(self._epoch(epoch)[0][slot])

    def ordinal(self, step: int) -> int:
        """How many steps of the same orientation come before `step`."""
        epoch, slot = divmod(int(step), self.steps_per_epoch)
        return int(self._epoch(epoch)[1][slot])

    def steps_before(self, step: int) -> tuple[int, ...]:
        """Steps of each orientation in [0, step)."""
        epoch, slot = divmod(int(step), self.steps_per_epoch)
        counts = list(self.steps_before_epoch(epoch))
        kinds = self._epoch(epoch)[0][:slot]
        for kind in range(len(counts)):
            counts[kind] += int(np.sum(kinds == kind))
        return tuple(counts)


class OrientationRecords:
    """Position q of one orientation's stream -> an image of that
    orientation: epoch q // n_o of the orientation's images, in a
    permutation keyed by (seed, orientation, epoch)."""

    def __init__(self, seed: int, images: Sequence[Sequence[int]]):
        self.seed = seed
        self.images = tuple(np.asarray(i, np.int64) for i in images)

    @functools.lru_cache(maxsize=8)  # noqa: B019 (lives as long as a run)
    def _order(self, kind: int, epoch: int) -> np.ndarray:
        images = self.images[kind]
        slots = _permutation(
            self.seed, RECORD_STREAM, kind, epoch, size=len(images)
        )
        return images[slots]

    def image(self, kind: int, position: int) -> int:
        """The image at `position` of orientation `kind`'s stream."""
        count = len(self.images[kind])
        if count == 0:
            raise ValueError(f"orientation {kind} has no images")
        epoch, index = divmod(int(position), count)
        return int(self._order(kind, epoch)[index])


def step_rows(
    schedule: OrientationSchedule,
    records: OrientationRecords,
    step: int,
    rows: range,
    global_batch: int,
) -> tuple[int, np.ndarray, np.ndarray]:
    """(orientation, global positions g [R], images [R]) of `rows` of step
    `step`: row j reads position ordinal * global_batch + j of its
    orientation's stream; g = step * global_batch + j keys the
    augmentation."""
    kind = schedule.orientation(step)
    base = schedule.ordinal(step) * global_batch
    positions = np.asarray([step * global_batch + j for j in rows], np.int64)
    images = np.asarray([records.image(kind, base + j) for j in rows], np.int64)
    return kind, positions, images
