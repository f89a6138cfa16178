"""The `tfds` source: TFDS coco/2017 records (boxes, no masks) read with the
image still encoded, decoded, and their COCOeval ground truth. Grouped
training filters each process's share to one orientation per stream, by an
index of image sizes read once from the headers and kept beside the data."""

import functools
import itertools
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import ml_collections
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging
from pycocotools import coco as coco_lib

from detector.data import coco_checks, coco_folder, gt_boxes
from detector.data.orientation_schedule import OrientationSchedule
from detector.data.sources import base as source
from detector.data.sources import orientation_index_file as index_file
from detector.imaging import canvases
from detector.imaging import orientation as orientation_lib

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


def _header(record: dict, name: str) -> dict[str, tf.Tensor]:
    """image/id, image/filename, and the height and width once turned by the
    EXIF orientation (as decoded), read from the image's header: no pixel
    decoding but for formats other than JPEG."""
    image = _checked_image(record, name)
    shape = tf.cond(
        tf.io.is_jpeg(image),
        lambda: tf.image.extract_jpeg_shape(image)[:2],
        lambda: tf.shape(
            tf.io.decode_image(image, channels=3, expand_animations=False)
        )[:2],
    )
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
    }


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


def _kinds(records: np.ndarray) -> np.ndarray:
    """The orientation of each (image/id, height, width) row."""
    return np.asarray(canvases.orientations(records[:, 1:]), np.int64)


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
        self._sizes: dict[str, np.ndarray] = {}  # split -> orientation index

    def raw(
        self,
        split: SplitArg,
        shuffle_seed: int | None = None,
        in_order: bool = False,
    ) -> tf.data.Dataset:
        """Records of `split` with the image still encoded.

        `split` is a split string or a TFDS subsplit (`tfds.even_splits`).
        `shuffle_seed` shuffles the file order (deterministically); None reads
        the files in the stored order, interleaved 16 at a time (TFDS'
        default) unless `in_order`: one after another, so that record k is
        the k-th that TFDS' slices ('train[k:]') count.
        """
        read_config = tfds.ReadConfig(
            shuffle_seed=shuffle_seed,
            try_autocache=False,
            **({"interleave_cycle_length": 1} if in_order else {}),
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
            return {**_header(record, self.name), "objects": record["objects"]}

        source = f"tfds {self.name} {split}"
        return tfds_ground_truth(
            _numpy_elements(dataset.map(header), source),
            self.label_names,
            source,
        )

    @property
    def data_dir(self) -> str:
        """The builder's folder of prepared data (its version's)."""
        return self.builder.data_dir

    def sizes(self, split: str) -> np.ndarray:
        """[N, 3] int64 (image/id, height, width once turned) of the records
        of base split `split` in stored order: the orientation index.

        Read from its file (beside the data, else in the cache folder) when
        that matches the data; else read from the image headers, and written
        by process 0 (atomically; to the cache folder when the data folder
        is read-only). A stale or unreadable file is rebuilt, with a log line.
        """
        if split not in self._sizes:
            self._sizes[split] = self._load_sizes(split)
        return self._sizes[split]

    def _load_sizes(self, split: str) -> np.ndarray:
        """`sizes` of `split`, from its file or the image headers."""
        meta = index_file.made_for(
            f"{self.name}:{self.builder.version}",
            split,
            self.num_examples(split),
        )
        paths = index_file.paths(self.data_dir, split)
        table = index_file.read(paths, meta)
        if table is not None:
            return table
        table = self._read_sizes(split, meta["records"])
        if jax.process_index() == 0:
            index_file.write(table, meta, paths)
        return table

    def _read_sizes(self, split: str, count: int) -> np.ndarray:
        """The orientation index of `split`, from each record's header."""
        source = f"tfds {self.name} {split}"
        logging.info(
            "%s: reading the image headers of %d records for the "
            "orientation index",
            source,
            count,
        )

        def row(record):
            header = _header(record, self.name)
            return tf.stack(
                [
                    header["image/id"],
                    tf.cast(header["height"], tf.int64),
                    tf.cast(header["width"], tf.int64),
                ]
            )

        dataset = self.raw(split, in_order=True).map(
            row, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        batches = list(_numpy_elements(dataset.batch(4096), source))
        return np.concatenate([np.zeros([0, 3], np.int64), *batches])


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

    Grouped training (`grouped_train_records`) reads one stream per
    orientation: the share's records of it, epoch after epoch in the same
    seeded order, filtered by the orientation index (`TfdsCoco.sizes`). The
    schedule's proportions are the whole split's; a share that holds fewer
    images of an orientation only starts its next epoch of them sooner.
    """

    def __init__(
        self, config: ml_collections.ConfigDict, split: str, max_images: int = 0
    ):
        self.builder = TfdsCoco(config.data)
        self.split = split
        self.max_images = max_images
        self.seed = config.seed
        self._error: Exception | None = None
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
            records = self._epoch_records(share, seed, epoch)
            records = records.take(steps_per_epoch * batch)
            first_step = epoch * steps_per_epoch

            def position(k, record, first_step=first_step):
                step = first_step + k // batch
                row = index * batch + k % batch
                return step * batch * count + row, record

            records = records.enumerate().skip(skip_steps * batch)
            yield records.map(position)
            epoch, skip_steps = epoch + 1, 0

    def _epoch_records(
        self, share: SplitArg, seed: int, epoch: int
    ) -> tf.data.Dataset:
        """The share's records in epoch `epoch`'s order: its file order and
        a shuffle buffer, both seeded by (seed, epoch)."""
        epoch_seed = int(
            np.random.SeedSequence(
                [seed, source.ORDER_STREAM, epoch]
            ).generate_state(1)[0]
        )
        records = self.builder.raw(share, shuffle_seed=epoch_seed)
        return records.shuffle(self.shuffle_buffer, seed=epoch_seed)

    def _split_records(self, split: SplitArg) -> np.ndarray:
        """[N, 3] (image/id, height, width) of the records `split` reads, in
        the order TFDS' slices count, from the orientation index of its base
        splits."""
        text = split_name(split)
        names = {part.split("[")[0].strip() for part in text.split("+")}
        tables = {name: self.builder.sizes(name) for name in sorted(names)}
        sizes = {
            name: types.SimpleNamespace(num_examples=len(table))
            for name, table in tables.items()
        }
        if isinstance(split, str):
            split = tfds.core.ReadInstruction.from_spec(split)
        try:
            parts = split.to_absolute(sizes)
        except (KeyError, ValueError) as e:
            raise ValueError(
                f"split {text!r} of tfds {self.builder.name}: "
                f"{str(e).splitlines()[0]}"
            ) from None
        records = np.concatenate(
            [tables[p.splitname][p.from_ or 0 : p.to] for p in parts]
        )
        ids, repeats = np.unique(records[:, 0], return_counts=True)
        if np.any(repeats > 1):
            raise ValueError(
                f"split {text!r} of tfds {self.builder.name}: image/id "
                f"{ids[repeats > 1][0]} repeats; image ids must be unique"
            )
        return records

    def orientation_counts(self) -> tuple[int, ...]:
        """Images of each orientation in the training split (all processes)."""
        kinds = _kinds(self._split_records(self.split))
        return tuple(len(records) for records in canvases.group(kinds))

    def grouped_train_records(
        self,
        schedule: OrientationSchedule,
        start_step: int,
        batch: int,
        process: tuple[int, int],
    ) -> tuple[tf.data.Dataset, ...]:
        """One endless dataset per orientation of this process's (position,
        encoded record) rows of that orientation's steps, in step order.

        The stream of orientation o is the share's records of o, epoch
        after epoch in `_epoch_records`' order; the k-th step of o takes its
        records k * batch .. (k + 1) * batch - 1.
        """
        index, count = process
        share = tfds.even_splits(self.split, n=count, drop_remainder=True)[
            index
        ]
        records = self._split_records(share)
        kinds = _kinds(records)
        per_epoch = [len(found) for found in canvases.group(kinds)]
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(records[:, 0]), tf.constant(kinds)
            ),
            default_value=-1,
        )
        spec = (
            tf.TensorSpec([], tf.int64),
            self.builder.raw(share).element_spec,
        )

        def rows(kind: int) -> Iterator[tuple[int, dict]]:
            before = schedule.steps_before(start_step)[kind] * batch
            epoch, skip = divmod(before, int(per_epoch[kind]))
            stream = self._stream(share, kind, epoch, skip, table)
            for step in itertools.count(start_step):
                if schedule.orientation(step) == kind:
                    first = (step * count + index) * batch
                    for g in range(first, first + batch):
                        yield g, next(stream)

        datasets = []
        for kind, images in enumerate(schedule.counts):
            if images and not per_epoch[kind]:
                raise ValueError(
                    f"split {self.split!r} of tfds {self.builder.name}: the "
                    f"share of process {index} of {count} holds no "
                    f"{canvases.NAMES[kind]} image, but the schedule has "
                    f"{canvases.NAMES[kind]} steps; run fewer processes"
                )
            datasets.append(
                # An orientation without steps: no rows (tuple() is empty).
                tf.data.Dataset.from_generator(
                    functools.partial(rows, kind) if images else tuple,
                    output_signature=spec,
                )
            )
        return tuple(datasets)

    def _stream(
        self,
        share: SplitArg,
        kind: int,
        epoch: int,
        skip: int,
        table: tf.lookup.StaticHashTable,
    ) -> Iterator[dict]:
        """The share's records of orientation `kind`, epoch after epoch from
        `epoch`, the first `skip` read but left out (not decoded)."""

        def of_kind(record):
            found = table.lookup(record["image/id"])
            message = tf.strings.join(
                [
                    f"tfds {self.builder.name} record image/id=",
                    tf.strings.as_string(record["image/id"]),
                    " is not in the orientation index of split "
                    f"{self.split}: the data changed since it was built; "
                    "delete its orientation_index.*.npz to rebuild it",
                ]
            )
            with tf.control_dependencies(
                [tf.debugging.Assert(found >= 0, [message])]
            ):
                return tf.equal(found, kind)

        while True:
            records = self._epoch_records(share, self.seed, epoch)
            records = records.filter(of_kind).skip(skip)
            try:
                yield from _numpy_elements(records, f"tfds {self.builder.name}")
            except ValueError as e:  # re-raised by the pipeline (take_error)
                self._error = self._error or e
                raise
            epoch, skip = epoch + 1, 0

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
        """A reading error of the grouped records (decoding errors are
        TensorFlow's, one line each)."""
        error, self._error = self._error, None
        return error
