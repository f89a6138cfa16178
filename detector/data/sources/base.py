"""The data-source seam: what the pipeline needs from one split of a dataset
(the examples and adding a source: docs/architecture.md)."""

from collections.abc import Iterator
from typing import Protocol

import ml_collections
import tensorflow as tf
from pycocotools import coco as coco_lib

# Independent stateless random streams derived from config.seed.
ORDER_STREAM, AUGMENT_STREAM = 1, 2


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

    def decode_train(self, record) -> dict[str, tf.Tensor]:
        """A record -> the training example (see the module docstring)."""

    def ground_truth(self) -> tuple[coco_lib.COCO, list[int]]:
        """COCOeval ground truth (crowd regions too) and image ids in order."""

    def eval_images(self, positions: list[int]) -> tf.data.Dataset:
        """Eval examples of the images at `positions` (ascending) of
        `ground_truth`'s order, in that order."""

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
