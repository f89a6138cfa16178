"""A mocked TFDS coco/2017, 4 records a split, for tfds mock_data."""

import types

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from tests.detector.data import helpers

# (height, width, objects as (ymin, xmin, ymax, xmax) normalised, label,
# is_crowd), image ids 101.. in this order.
EXAMPLES = [
    (
        40,
        60,
        [
            ((0.1, 0.1, 0.5, 0.4), 0, False),
            ((0.5, 0.5, 0.9, 0.9), 79, False),
            ((0.0, 0.0, 1.0, 1.0), 0, True),
        ],
    ),
    (
        50,
        30,
        [((0.2, 0.2, 0.6, 0.8), 5, False), ((0.3, 0.3, 0.3, 0.6), 6, False)],
    ),  # zero height
    (30, 30, []),
    (60, 40, [((0.1, 0.2, 0.3, 0.4), 2, False)]),
]


# The first image id of each mocked split: the splits hold the same records
# under different ids, so a test sees which split it read.
FIRST_IDS = {"train": 101, "validation": 201}
CORRUPT_BYTES = b"\x00\x01 not an image"


def mock_records(
    encoded_image: bool, first_id: int, corrupt: int | None = None
) -> tf.data.Dataset:
    """The mocked coco/2017 records, as TFDS would decode them.

    Record `corrupt` (an index) holds bytes of no image format.
    """

    def generate():
        for index, (height, width, objects) in enumerate(EXAMPLES):
            pixels = np.full((height, width, 3), 40 * index, np.uint8)
            image = (
                tf.io.encode_jpeg(pixels).numpy() if encoded_image else pixels
            )
            if index == corrupt:
                image = CORRUPT_BYTES
            boxes = np.array([o[0] for o in objects], np.float32)
            yield {
                "image": image,
                "image/filename": f"{index}.jpg",
                "image/id": first_id + index,
                "objects": {
                    "id": np.arange(len(objects), dtype=np.int64),
                    "area": np.full(len(objects), 12, np.int64),
                    "bbox": boxes.reshape(-1, 4),
                    "label": np.array([o[1] for o in objects], np.int64),
                    "is_crowd": np.array([o[2] for o in objects], bool),
                },
            }

    image_spec = (
        tf.TensorSpec([], tf.string)
        if encoded_image
        else tf.TensorSpec([None, None, 3], tf.uint8)
    )
    signature = {
        "image": image_spec,
        "image/filename": tf.TensorSpec([], tf.string),
        "image/id": tf.TensorSpec([], tf.int64),
        "objects": {
            "id": tf.TensorSpec([None], tf.int64),
            "area": tf.TensorSpec([None], tf.int64),
            "bbox": tf.TensorSpec([None, 4], tf.float32),
            "label": tf.TensorSpec([None], tf.int64),
            "is_crowd": tf.TensorSpec([None], tf.bool),
        },
    }
    dataset = tf.data.Dataset.from_generator(
        generate, output_signature=signature
    )
    return dataset.apply(tf.data.experimental.assert_cardinality(len(EXAMPLES)))


def as_dataset_fn(corrupt: int | None = None, reads: list | None = None):
    """A builder._as_dataset that slices the split with TFDS' own rules.

    Each call appends the (split name, first, stop) record range it serves
    to `reads`.
    """

    def as_dataset(
        self, split, decoders=None, read_config=None, shuffle_files=False
    ):
        del self, read_config, shuffle_files
        skip = isinstance(
            (decoders or {}).get("image"), tfds.decode.SkipDecoding
        )
        split_infos = {
            name: types.SimpleNamespace(num_examples=len(EXAMPLES))
            for name in FIRST_IDS
        }
        if isinstance(split, str):  # a subsplit object resolves itself
            split = tfds.core.ReadInstruction.from_spec(split)
        (absolute,) = split.to_absolute(split_infos)
        start = absolute.from_ or 0
        stop = len(EXAMPLES) if absolute.to is None else absolute.to
        if reads is not None:
            reads.append((absolute.splitname, start, stop))
        records = mock_records(skip, FIRST_IDS[absolute.splitname], corrupt)
        return records.skip(start).take(stop - start)

    return as_dataset


def config(data_dir: str):
    config = helpers.small_config("", source="tfds")
    config.data.tfds_data_dir = data_dir
    config.data.num_classes = 80
    config.data.train_split = "train"
    config.data.eval_split = "validation"
    config.data.hflip = False
    config.data.scale_jitter = (1.0, 1.0)
    return config
