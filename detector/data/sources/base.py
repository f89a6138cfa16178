"""The data-source seam: what the pipeline needs from one split of a dataset
(the examples and adding a source: docs/architecture.md)."""

from collections.abc import Iterator
from typing import Protocol

import ml_collections
import numpy as np
import tensorflow as tf
from pycocotools import coco as coco_lib

from detector.data import orientation_schedule

# Independent stateless random streams derived from config.seed.
ORDER_STREAM, AUGMENT_STREAM = 1, 2
# Steps whose rows `orientation_rows` computes in one numpy call.
CHUNK_STEPS = 64


class Source(Protocol):
    """One split of a dataset, as the pipeline reads it.

    Constructed as `Source(config, split, max_images)`; raises a one-line
    ValueError / FileNotFoundError naming the key or file for bad input.
    """

    num_classes: int
    has_masks: bool
    category_ids: list[int]  # COCO category id of classes 1..C, in order

    def train_records(
        self, seed: int, start_step: int, batch: int, process: tuple[int, int]
    ) -> Iterator[tf.data.Dataset]:
        """Datasets of (global position g, record): this process's rows only.

        Process p of P owns the rows g = s * P * batch + p * batch + j
        (j < batch) of every step s; the datasets hold them in order from
        step `start_step` on, run forever together, and each holds whole
        steps. A record is whatever `decode_train` takes (an index, an
        encoded example); a source reads no other process's records where
        reading costs I/O. Checks that can fail are made before the first
        dataset is asked for.
        """

    def orientation_counts(self) -> tuple[int, ...]:
        """Images of each orientation (canvases.LANDSCAPE, PORTRAIT) in the
        training split, all processes together (the same on every process).
        """

    def grouped_train_records(
        self,
        schedule: orientation_schedule.OrientationSchedule,
        start_step: int,
        batch: int,
        process: tuple[int, int],
    ) -> tuple[tf.data.Dataset, ...]:
        """One endless dataset of (g, record) per orientation (with
        data.group_orientations): this process's rows of the steps of that
        orientation, from step `start_step` on, in step order.

        Row j of step s reads the image `orientation_schedule.step_rows`
        gives it and has g = s * P * batch + j, as in `train_records`. An
        orientation that no step uses still has a dataset of the same
        element structure (never read).
        """

    def decode_train(self, record) -> dict[str, tf.Tensor]:
        """A record -> the training example (see the module docstring)."""

    def ground_truth(self) -> tuple[coco_lib.COCO, list[int]]:
        """COCOeval ground truth (crowd regions too) and image ids in order."""

    def take_error(self) -> Exception | None:
        """The first Python error a loader raised inside tf.data (cleared)."""

    @staticmethod
    def prepare(config: ml_collections.ConfigDict) -> None:
        """Makes the data ready before any process reads it (may write)."""


def stream_key(seed: int, stream: int, position: tf.Tensor) -> tf.Tensor:
    """Stateless seed for (config.seed, stream, position): int64 [2]."""
    base = tf.constant([seed, stream], tf.int64)
    return tf.random.experimental.stateless_fold_in(base, position)


def own_rows(
    positions: tf.data.Dataset, batch: int, process: tuple[int, int]
) -> tf.data.Dataset:
    """The (g, record) elements of `process`'s rows (see train_records)."""
    index, count = process
    return positions.filter(lambda g, _: (g // batch) % count == index)


def orientation_rows(
    schedule: orientation_schedule.OrientationSchedule,
    records: orientation_schedule.OrientationRecords,
    kind: int,
    start_step: int,
    batch: int,
    process: tuple[int, int],
) -> tf.data.Dataset:
    """Endless (g, image index) int64 elements of `process`'s rows of the
    steps of orientation `kind` from `start_step` on (see
    `Source.grouped_train_records`); empty where no step has `kind`."""
    index, count = process
    rows = range(index * batch, (index + 1) * batch)
    if not schedule.counts[kind]:
        empty = tf.zeros([0], tf.int64)
        return tf.data.Dataset.from_tensor_slices((empty, empty))

    def chunk(first: np.int64) -> tuple[np.ndarray, np.ndarray]:
        steps = range(int(first), int(first) + CHUNK_STEPS)
        parts = [
            orientation_schedule.step_rows(
                schedule, records, step, rows, batch * count
            )[1:]
            for step in steps
            if schedule.orientation(step) == kind
        ]
        if not parts:
            return np.zeros([0], np.int64), np.zeros([0], np.int64)
        positions, images = zip(*parts, strict=True)
        return np.concatenate(positions), np.concatenate(images)

    def rows_of(first: tf.Tensor) -> tf.data.Dataset:
        positions, images = tf.numpy_function(
            chunk, [first], [tf.int64, tf.int64], stateful=False
        )
        return tf.data.Dataset.from_tensor_slices(
            (
                tf.ensure_shape(positions, [None]),
                tf.ensure_shape(images, [None]),
            )
        )

    firsts = tf.data.Dataset.range(
        start_step, np.iinfo(np.int64).max, CHUNK_STEPS
    )
    return firsts.flat_map(rows_of)
