"""The `coco_json` source: ROOT/annotations/instances_<split>.json and
ROOT/<split>/ images, decoded on the host inside tf.data; training records
are image indices in a stateless per-epoch shuffle of (config.seed, epoch),
or each orientation's in `orientation_schedule`'s order when grouping.
"""

from collections.abc import Iterator

import ml_collections
import numpy as np
import tensorflow as tf
from pycocotools import coco as coco_lib

from detector.data import coco_folder, orientation_schedule
from detector.data.sources import base as source
from detector.imaging import canvases


class CocoJsonSource:
    """One split of a COCO-format folder (see the module docstring)."""

    def __init__(
        self, config: ml_collections.ConfigDict, split: str, max_images: int = 0
    ):
        if config.data.root:  # else of_config names the empty key
            self.prepare(config)
        self.folder = coco_folder.of_config(config.data, split, max_images)
        self.num_classes = config.data.num_classes
        self.has_masks = self.folder.has_masks
        self.category_ids = list(self.folder.category_ids)

    @staticmethod
    def prepare(config: ml_collections.ConfigDict) -> None:
        """Nothing to prepare: the folder is read as it is."""
        del config

    def train_records(
        self, seed: int, start_step: int, batch: int, process: tuple[int, int]
    ) -> Iterator[tf.data.Dataset]:
        """One endless dataset of this process's (position, image index)."""
        num_images = len(self.folder.images)
        start = start_step * batch * process[1]
        first_epoch = start // num_images

        def epoch(e):
            order = tf.random.experimental.stateless_shuffle(
                tf.range(num_images, dtype=tf.int64),
                source.stream_key(seed, source.ORDER_STREAM, e),
            )
            positions = e * num_images + tf.range(num_images, dtype=tf.int64)
            return tf.data.Dataset.from_tensor_slices((positions, order))

        epochs = tf.data.Dataset.range(first_epoch, np.iinfo(np.int64).max)
        skipped = start - first_epoch * num_images
        positions = epochs.flat_map(epoch).skip(skipped)
        yield source.own_rows(positions, batch, process)

    def _images_by_orientation(self) -> tuple[list[int], ...]:
        """The image indices of each orientation, from the JSON's sizes: the
        images' sizes once turned by their EXIF orientation (checked as
        each loads)."""
        sizes = [(im["height"], im["width"]) for im in self.folder.images]
        return canvases.group(canvases.orientations(sizes))

    def orientation_counts(self) -> tuple[int, ...]:
        return tuple(len(images) for images in self._images_by_orientation())

    def grouped_train_records(
        self,
        schedule: orientation_schedule.OrientationSchedule,
        start_step: int,
        batch: int,
        process: tuple[int, int],
    ) -> tuple[tf.data.Dataset, ...]:
        """Per orientation, this process's endless (position, image index)."""
        records = orientation_schedule.OrientationRecords(
            schedule.seed, self._images_by_orientation()
        )
        return tuple(
            source.orientation_rows(
                schedule, records, kind, start_step, batch, process
            )
            for kind in range(len(canvases.NAMES))
        )

    def decode_train(self, index: tf.Tensor) -> dict[str, tf.Tensor]:
        """Loads image `index` and its targets inside tf.data."""
        image, boxes, classes, masks, image_id = tf.numpy_function(
            self.folder.load_example,
            [index],
            [tf.uint8, tf.float32, tf.int32, tf.uint8, tf.int64],
            stateful=False,
        )
        return {
            "image": tf.ensure_shape(image, [None, None, 3]),
            "boxes": tf.ensure_shape(boxes, [None, 4]),
            "classes": tf.ensure_shape(classes, [None]),
            "masks": tf.ensure_shape(masks, [None, None, None]),
            "image_id": tf.ensure_shape(image_id, []),
        }

    def ground_truth(self) -> tuple[coco_lib.COCO, list[int]]:
        return self.folder.coco(), self.folder.image_ids

    def take_error(self) -> Exception | None:
        error, self.folder.error = self.folder.error, None
        return error
