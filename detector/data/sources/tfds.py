"""The `tfds` source: TFDS coco/2017 records (boxes, no masks) read with the
image still encoded, decoded, and their COCOeval ground truth."""

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import ml_collections
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging
from pycocotools import coco as coco_lib

from detector.data import coco_checks, coco_folder, gt_boxes
from detector.data import orientation as orientation_lib
from detector.data.sources import base as source

# TFDS coco/2017 labels 0..79 are the COCO category ids below, in order.
COCO_2017_CATEGORY_IDS = (
    tuple(range(1, 12))
    + tuple(range(13, 26))
    + (27, 28)
    + tuple(range(31, 45))
    + tuple(range(46, 66))
    + (67, 70)
    + tuple(range(72, 83))
    + tuple(range(84, 91))
)
# Features the source reads, as paths into the builder's FeaturesDict.
_FEATURE_KEYS = (
    ("image",),
    ("image/id",),
    ("objects", "bbox"),
    ("objects", "label"),
    ("objects", "is_crowd"),
    ("objects", "area"),
)
# Leading bytes of the formats tf.io.decode_image reads, as (offset, bytes).
_IMAGE_SIGNATURES = (
    ((0, b"\xff\xd8\xff"),),
    ((0, b"\x89PNG"),),
    ((0, b"GIF"),),
    ((0, b"BM"),),
    ((0, b"RIFF"), (8, b"WEBP")),
    ((0, b"\xff\x0a"),),
    ((0, b"\x00\x00\x00\x0cJXL "),),
)
_ASSERTION = "assertion failed: ["
# A split string ('train[:50%]') or a TFDS subsplit object of one.
SplitArg: TypeAlias = str | Any


def split_name(split: SplitArg) -> str:
    """The split string a split or subsplit (`tfds.even_splits`) was made of."""
    if isinstance(split, str):
        return split
    return str(getattr(split, "split", split))


def error_line(error: tf.errors.OpError, context: str) -> str:
    """One line for a TensorFlow error raised while reading records.

    A failed assertion of this module gives its own message; any other
    error gives `context: <the error's first line>`.
    """
    line = (error.message or str(error)).strip().splitlines()[0]
    if _ASSERTION in line:
        line = line.split(_ASSERTION, 1)[1]
        return line[:-1] if line.endswith("]") else line
    return f"{context}: {line}"


def _check_features(name: str, features) -> list[str]:
    """Label names of a builder's features; ValueError names a missing key."""
    for path in _FEATURE_KEYS:
        node = features
        for part in path:
            try:
                node = node[part]
            except (KeyError, TypeError):
                node = None
                break
        if node is None:
            raise ValueError(
                f"tfds {name}: features lack {'/'.join(path)!r} (the "
                "source reads "
                f"{', '.join('/'.join(p) for p in _FEATURE_KEYS)})"
            )
    names = getattr(features["objects"]["label"], "names", None)
    if not names:
        raise ValueError(
            f"tfds {name}: feature 'objects/label' is not a "
            "ClassLabel with class names"
        )
    return list(names)


def _checked_image(record: dict, name: str) -> tf.Tensor:
    """The encoded image, asserted to start like a decodable image format."""
    data = record["image"]
    head = tf.strings.substr(data, 0, 16) + b"\x00" * 16

    def matches(signature) -> tf.Tensor:
        return tf.reduce_all(
            [
                tf.strings.substr(head, at, len(magic)) == magic
                for at, magic in signature
            ]
        )

    known = tf.reduce_any([matches(s) for s in _IMAGE_SIGNATURES])
    filename = record.get("image/filename", tf.constant("?"))
    message = tf.strings.join(
        [
            f"tfds {name} record image/filename=",
            filename,
            " (image/id=",
            tf.strings.as_string(record["image/id"]),
            "): cannot decode its image: ",
            tf.strings.as_string(tf.strings.length(data)),
            " bytes in no known format (JPEG, PNG, GIF, BMP, WebP, JPEG XL)",
        ]
    )
    check = tf.debugging.Assert(known, [message])
    with tf.control_dependencies([check]):
        return tf.identity(data)


def _numpy_elements(dataset: tf.data.Dataset, context: str) -> Iterator[dict]:
    """`dataset` as numpy; a TensorFlow error becomes one ValueError line."""
    iterator = dataset.as_numpy_iterator()
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            raise ValueError(error_line(e, context)) from None
        yield element


def _log_unusable_boxes(name: str, image_id, count) -> np.int64:
    """Logs (first few records) boxes left out of the training targets."""
    logging.log_first_n(
        logging.WARNING,
        "tfds %s record image/id=%d: %d non-finite or empty boxes left out "
        "of the training targets (the ground truth skips them too)",
        10,
        name,
        int(image_id),
        int(count),
    )
    return np.int64(count)


def _text(value) -> str:
    """A TFDS string feature (bytes in numpy) as str."""
    return (
        value.decode("utf-8", "replace")
        if isinstance(value, bytes)
        else str(value)
    )


def category_ids_for_tfds(label_names: Sequence[str]) -> list[int]:
    """COCO category ids of TFDS labels 0..C-1 (1..C when not COCO's 80)."""
    if len(label_names) == len(COCO_2017_CATEGORY_IDS):
        return list(COCO_2017_CATEGORY_IDS)
    return list(range(1, len(label_names) + 1))


def tfds_ground_truth(
    examples: Iterable[Mapping[str, Any]],
    label_names: Sequence[str],
    source: str,
) -> tuple[dict, list[int]]:
    """COCO GT dict from TFDS examples (numpy, image shape already taken).

    `examples` yields dicts with 'image/id', 'height', 'width' and 'objects'
    ('bbox' normalised [ymin, xmin, ymax, xmax], 'label', 'is_crowd', 'area').
    Returns the dataset dict and the image ids in order.
    """
    category_ids = category_ids_for_tfds(label_names)
    images, annotations = [], []
    log = coco_checks.SkipLog(source)
    clips = gt_boxes.ClipLog(source)
    seen: dict[int, str] = {}  # image id -> its record's image/filename
    for example in examples:
        image_id = int(example["image/id"])
        filename = _text(example.get("image/filename", str(image_id)))
        if image_id in seen:
            raise ValueError(
                f"{source}: image/id {image_id} repeats (image/filename "
                f"{seen[image_id]!r} and {filename!r}); image ids must be "
                "unique"
            )
        seen[image_id] = filename
        height, width = int(example["height"]), int(example["width"])
        images.append(
            {
                "id": image_id,
                "height": height,
                "width": width,
                "file_name": str(image_id),
            }
        )
        objects = example["objects"]
        for k, (ymin, xmin, ymax, xmax) in enumerate(objects["bbox"]):
            annotation = {
                "id": len(annotations) + 1,
                "image_id": image_id,
                "bbox": [
                    float(xmin * width),
                    float(ymin * height),
                    float((xmax - xmin) * width),
                    float((ymax - ymin) * height),
                ],
                "area": float(objects["area"][k]),
                "iscrowd": int(objects["is_crowd"][k]),
                "category_id": category_ids[int(objects["label"][k])],
            }
            bbox, problem = gt_boxes.fit_box(annotation["bbox"], width, height)
            if problem:
                log.skip(annotation, problem)
                continue
            if bbox is not annotation["bbox"]:
                clips.clip(annotation, bbox)
                annotation["bbox"] = bbox
            annotations.append(annotation)
    clips.summarize()
    log.summarize()
    categories = [
        {"id": cid, "name": str(name)}
        for cid, name in zip(category_ids, label_names, strict=True)
    ]
    return (
        {
            "images": images,
            "annotations": annotations,
            "categories": categories,
        },
        [im["id"] for im in images],
    )


class TfdsCoco:
    """A TFDS COCO builder (`data.tfds_name`, `data.tfds_data_dir`)."""

    def __init__(self, data: ml_collections.ConfigDict):
        self.name = data.tfds_name
        try:
            self.builder = tfds.builder(
                self.name, data_dir=data.tfds_data_dir or None
            )
        except Exception as e:  # tfds raises many types for a bad name
            raise ValueError(
                f"data.tfds_name={self.name!r}: {str(e).splitlines()[0]}"
            ) from None
        self.label_names = _check_features(
            self.name, self.builder.info.features
        )
        if len(self.label_names) != data.num_classes:
            raise ValueError(
                f"tfds {self.name}: {len(self.label_names)} labels but "
                f"data.num_classes is {data.num_classes}"
            )
        self.category_ids = category_ids_for_tfds(self.label_names)
        self.has_masks = False

    def raw(
        self, split: SplitArg, shuffle_seed: int | None = None
    ) -> tf.data.Dataset:
        """Records of `split` with the image still encoded.

        `split` is a split string or a TFDS subsplit (`tfds.even_splits`).
        `shuffle_seed` shuffles the file order (deterministically); None reads
        in the stored order.
        """
        read_config = tfds.ReadConfig(
            shuffle_seed=shuffle_seed, try_autocache=False
        )
        try:
            return self.builder.as_dataset(
                split=split,
                shuffle_files=shuffle_seed is not None,
                decoders={"image": tfds.decode.SkipDecoding()},
                read_config=read_config,
            )
        except AssertionError as e:  # not downloaded / prepared
            where = self.builder.data_dir
            raise FileNotFoundError(
                f"{where}: tfds {self.name} is not prepared there "
                f"({str(e).splitlines()[0][:120]}...); run "
                f"`tfds build {self.name}` or set data.tfds_data_dir"
            ) from None
        except (KeyError, ValueError) as e:
            raise ValueError(
                f"split {split_name(split)!r} of tfds {self.name}: "
                f"{str(e).splitlines()[0]}"
            ) from None

    def num_examples(self, split: SplitArg) -> int:
        """Number of records of `split` (cardinality, or counted once)."""
        dataset = self.raw(split)
        count = int(dataset.cardinality())
        if count < 0:
            count = int(dataset.reduce(np.int64(0), lambda n, _: n + 1))
        return count

    def decode(self, record: dict, training: bool) -> dict:
        """Record -> example (image uint8, image_id; targets when training).

        The image is turned by its EXIF orientation (`orientation`).
        Training targets drop crowd regions and non-finite or zero-size
        boxes, with a log line (the ground truth skips them too; boxes over
        the image edge are clipped by `transforms`, as in the ground
        truth); classes are the TFDS labels + 1.
        """
        encoded = _checked_image(record, self.name)
        image = orientation_lib.orient_tf(
            tf.io.decode_image(encoded, channels=3, expand_animations=False),
            orientation_lib.orientation_tf(encoded),
        )
        example = {"image": image, "image_id": record["image/id"]}
        if not training:
            return example
        objects = record["objects"]
        hw = tf.cast(tf.shape(image)[:2], tf.float32)
        ymin, xmin, ymax, xmax = tf.unstack(
            tf.reshape(objects["bbox"], [-1, 4]), axis=1
        )
        boxes = tf.stack(
            [xmin * hw[1], ymin * hw[0], xmax * hw[1], ymax * hw[0]], axis=1
        )
        keep = (
            tf.logical_not(objects["is_crowd"])
            & tf.reduce_all(tf.math.is_finite(boxes), axis=1)
            & (boxes[:, 2] > boxes[:, 0])
            & (boxes[:, 3] > boxes[:, 1])
        )
        unusable = tf.reduce_sum(
            tf.cast(tf.logical_not(objects["is_crowd"] | keep), tf.int64)
        )
        logged = tf.cond(
            unusable > 0,
            lambda: tf.numpy_function(
                functools.partial(_log_unusable_boxes, self.name),
                [record["image/id"], unusable],
                tf.int64,
                stateful=True,
            ),
            lambda: tf.constant(0, tf.int64),
        )
        with tf.control_dependencies([logged]):
            keep = tf.identity(keep)
        example["boxes"] = tf.boolean_mask(boxes, keep)
        example["classes"] = (
            tf.cast(tf.boolean_mask(objects["label"], keep), tf.int32) + 1
        )
        return example

    def ground_truth(
        self, split: str, max_images: int = 0
    ) -> tuple[dict, list[int]]:
        """COCO GT dict of `split` (first `max_images`) and its image ids."""
        dataset = self.raw(split)
        if max_images > 0:
            dataset = dataset.take(max_images)

        def header(record):
            image = _checked_image(record, self.name)
            shape = tf.cond(
                tf.io.is_jpeg(image),
                lambda: tf.image.extract_jpeg_shape(image)[:2],
                lambda: tf.shape(
                    tf.io.decode_image(
                        image, channels=3, expand_animations=False
                    )
                )[:2],
            )
            # The size once turned by the EXIF orientation, as decoded.
            shape = orientation_lib.oriented_size_tf(
                shape, orientation_lib.orientation_tf(image)
            )
            return {
                "image/id": record["image/id"],
                "image/filename": record.get(
                    "image/filename", tf.strings.as_string(record["image/id"])
                ),
                "height": shape[0],
                "width": shape[1],
                "objects": record["objects"],
            }

        source = f"tfds {self.name} {split}"
        return tfds_ground_truth(
            _numpy_elements(dataset.map(header), source),
            self.label_names,
            source,
        )


class TfdsSource:
    """The `tfds` source: one split of a TFDS COCO builder.

    Each of P processes reads only its own share of the training split:
    `tfds.even_splits(split, P, drop_remainder=True)`, the process's
    contiguous 1/P of the records (the last N mod P records go unused).
    Training reads the share epoch by epoch: each epoch shuffles the share's
    file order and a `data.shuffle_buffer` window, both seeded by
    (config.seed, epoch), and keeps its first steps_per_epoch = (N // P) //
    batch batches, so every process has the same number of steps per epoch.
    The k-th record of an epoch's share fills row k mod batch of the
    process's part of step epoch * steps_per_epoch + k // batch. Resuming at
    step s opens the epoch holding s and skips the earlier records of the
    share with the image still encoded (reading, no decoding). A 1-process
    run reads the whole split in the same order as before it was sharded;
    with P processes the order, and so the batches, depend on P.
    """

    def __init__(
        self, config: ml_collections.ConfigDict, split: str, max_images: int = 0
    ):
        self.builder = TfdsCoco(config.data)
        self.split = split
        self.max_images = max_images
        self.shuffle_buffer = max(config.data.shuffle_buffer, 1)
        self.num_classes = config.data.num_classes
        self.has_masks = self.builder.has_masks
        self.category_ids = list(self.builder.category_ids)
        logging.log_first_n(
            logging.WARNING,
            "tfds %s has no instance segmentations: "
            "mask targets are off (mask_valid=False) and segm evaluation "
            "is unavailable",
            1,
            self.builder.name,
        )

    @staticmethod
    def prepare(config: ml_collections.ConfigDict) -> None:
        """Nothing to prepare: `tfds build` prepares the data beforehand."""
        del config

    def train_records(
        self, seed: int, start_step: int, batch: int, process: tuple[int, int]
    ) -> Iterator[tf.data.Dataset]:
        """One dataset of (position, encoded record) per epoch of the share."""
        index, count = process
        share = tfds.even_splits(self.split, n=count, drop_remainder=True)[
            index
        ]
        num_examples = self.builder.num_examples(share)
        steps_per_epoch = num_examples // batch
        if steps_per_epoch == 0:
            raise ValueError(
                f"split {self.split!r} of tfds {self.builder.name} has "
                f"{num_examples} examples per process ({count} processes), "
                f"fewer than one per-process batch ({batch})"
            )
        return self._epochs(
            seed, share, start_step, steps_per_epoch, batch, process
        )

    def _epochs(
        self,
        seed: int,
        share: SplitArg,
        start_step: int,
        steps_per_epoch: int,
        batch: int,
        process: tuple[int, int],
    ) -> Iterator[tf.data.Dataset]:
        index, count = process
        epoch, skip_steps = divmod(start_step, steps_per_epoch)
        while True:
            epoch_seed = int(
                np.random.SeedSequence(
                    [seed, source.ORDER_STREAM, epoch]
                ).generate_state(1)[0]
            )
            records = self.builder.raw(share, shuffle_seed=epoch_seed)
            records = records.shuffle(self.shuffle_buffer, seed=epoch_seed)
            records = records.take(steps_per_epoch * batch)
            first_step = epoch * steps_per_epoch

            def position(k, record, first_step=first_step):
                step = first_step + k // batch
                row = index * batch + k % batch
                return step * batch * count + row, record

            records = records.enumerate().skip(skip_steps * batch)
            yield records.map(position)
            epoch, skip_steps = epoch + 1, 0

    def decode_train(self, record: dict) -> dict[str, tf.Tensor]:
        return self.builder.decode(record, training=True)

    def ground_truth(self) -> tuple[coco_lib.COCO, list[int]]:
        dataset, image_ids = self.builder.ground_truth(
            self.split, self.max_images
        )
        if not image_ids:
            raise ValueError(
                f"split {self.split!r} of tfds "
                f"{self.builder.name} selects no images"
            )
        return coco_folder.build_coco(dataset), image_ids

    def eval_images(self, positions: list[int]) -> tf.data.Dataset:
        """The split's records read in order, those at `positions` decoded."""
        if positions != sorted(set(positions)):
            raise ValueError(
                "eval_images positions must be ascending and distinct: "
                f"tfds {self.builder.name} reads its records in order"
            )
        wanted = np.zeros(max(positions, default=-1) + 1, bool)
        wanted[positions] = True
        records = self.builder.raw(self.split).take(len(wanted)).enumerate()
        return records.filter(lambda k, _: tf.gather(wanted, k)).map(
            lambda _, r: self.builder.decode(r, training=False)
        )

    def take_error(self) -> Exception | None:
        return None  # decoding errors are TensorFlow's, one line each
