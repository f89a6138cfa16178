"""tf.data input pipelines: per-process numpy batches for training and eval,
each step's batch a function of its position (docs/architecture.md, "Data
flow" and "Data sources")."""

import atexit
import dataclasses
import functools
import math
import weakref
from collections.abc import Callable, Iterator

import jax
import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging
from pycocotools import coco as coco_lib

from detector.config import data as data_config
from detector.data import (
    augment,
    gt_masks,
    orientation_schedule,
    sources,
    transforms,
)
from detector.data.sources import base as source_lib
from detector.data.sources import coco_json
from detector.data.sources import shapes as shapes_source
from detector.data.sources import tfds as tfds_coco
from detector.imaging import canvases

# data.source -> the class reading it (see detector.data.sources.base.Source).
SOURCES: dict[str, type[source_lib.Source]] = {
    "shapes": shapes_source.ShapesSource,
    "coco_json": coco_json.CocoJsonSource,
    "tfds": tfds_coco.TfdsSource,
}
assert tuple(SOURCES) == sources.NAMES


@functools.cache
def _set_up_tensorflow() -> None:
    """Once, before the first dataset: TF off the GPUs; iterators closed.

    JAX owns the accelerators. Iterators still open at interpreter exit are
    closed first (see _NumpyBatches).
    """
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TF already initialised its devices
        if tf.config.get_visible_devices("GPU"):
            logging.warning(
                "TensorFlow was initialised before the data "
                "pipeline and can see a GPU"
            )
    atexit.register(_NumpyBatches.close_all)


def _processes(
    process_index: int | None, process_count: int | None
) -> tuple[int, int]:
    """(index, count) of this process, from JAX unless given."""
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ValueError(f"process_index={index} is not in [0, {count})")
    return index, count


def _per_process(global_size: int, count: int, key: str) -> int:
    """The per-process share of a global batch size; it must divide evenly."""
    if global_size <= 0 or global_size % count:
        raise ValueError(
            f"{key}={global_size} must be a positive multiple "
            f"of the process count {count}"
        )
    return global_size // count


def _source_class(config: ml_collections.ConfigDict) -> type[source_lib.Source]:
    """The registered class of `data.source`; ValueError names the key."""
    sources.check_name(config.data.source, "data.source")
    return SOURCES[config.data.source]


def prepare(config: ml_collections.ConfigDict) -> None:
    """Makes `data.source`'s data ready (the shapes set is written here)."""
    _source_class(config).prepare(config)


def _options() -> tf.data.Options:
    """Deterministic order; no autotuning model thread.

    The parallel maps run on min(16, CPU cores) threads. tf.data's
    autotuning thread is off: destroying an iterator waits for that thread,
    whose sleep between optimisations grows to tens of seconds and was seen
    to delay the end of training runs by up to 40 s.
    """
    options = tf.data.Options()
    options.deterministic = True
    options.threading.max_intra_op_parallelism = 1
    options.autotune.enabled = False
    return options


class _NumpyBatches:
    """Iterates a dataset as numpy; loader errors surface as raised.

    A source's loader that fails keeps its error (one line, naming the file)
    and hands tf.data a stand-in, so TensorFlow neither wraps nor logs it;
    the error is raised here with the next batch. Iterators still open at
    interpreter exit are closed first: a tf.data iterator whose threads call
    back into Python would otherwise hang the exit.
    """

    _open: "weakref.WeakSet[_NumpyBatches]" = weakref.WeakSet()

    def __init__(self, dataset: tf.data.Dataset, source: source_lib.Source):
        self._iterator = dataset.with_options(_options()).as_numpy_iterator()
        self._source = source
        _NumpyBatches._open.add(self)

    def __iter__(self) -> "_NumpyBatches":
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._iterator is None:
            raise StopIteration
        try:
            batch = next(self._iterator)
            failure = self._source.take_error()
            if failure is None:
                return batch
        except StopIteration:
            self.close()
            raise
        except tf.errors.OpError as e:
            failure = self._failure(e)
        # Raised outside the handler: the TensorFlow error, whose traceback
        # holds the iterator, is dropped now rather than at exit.
        self.close()
        raise failure

    def _failure(self, error: tf.errors.OpError) -> Exception:
        """The loader's own error, or TensorFlow's in one line as ValueError."""
        return self._source.take_error() or ValueError(
            tfds_coco.error_line(error, "input pipeline")
        )

    def close(self) -> None:
        """Releases the tf.data iterator and its threads."""
        self._iterator = None

    @classmethod
    def close_all(cls) -> None:
        for batches in list(cls._open):
            batches.close()


def _gt_masks(
    config: ml_collections.ConfigDict, source: source_lib.Source
) -> gt_masks.GtMasks:
    """The training batches' GT masks: the layout the model's mask target
    rule reads, and whether the source has masks."""
    return gt_masks.GtMasks(data_config.mask_layout(config), source.has_masks)


def _batch_train(
    positions: tf.data.Dataset,
    source: source_lib.Source,
    masks: gt_masks.GtMasks,
    seed: int,
    data: ml_collections.ConfigDict,
    batch: int,
) -> tf.data.Dataset:
    """This process's (position, record) rows -> its augmented batches on
    `data.image_size`, GT masks as `masks`."""
    truncations = transforms.TruncationLog(data.max_instances)

    @tf.autograph.experimental.do_not_convert
    def example(g, record):
        loaded = transforms.limit_instances(
            source.decode_train(record), truncations
        )
        key = source_lib.stream_key(seed, source_lib.AUGMENT_STREAM, g)
        return augment.AUGMENTS[data.augment](loaded, key, data, masks)

    dataset = positions.map(
        example, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    return dataset.batch(batch, drop_remainder=True).prefetch(data.prefetch)


class TrainBatches:
    """Training batches (an iterator), and the canvases they use."""

    def __init__(
        self,
        batches: Iterator[dict[str, np.ndarray]],
        used: tuple[canvases.Canvas, ...],
    ):
        self._batches = batches
        # canvases.canvases' of an orientation the split has images of,
        # in that order: the train programs to compile.
        self.canvases = used

    def __iter__(self) -> "TrainBatches":
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self._batches)


def train_batches(
    config: ml_collections.ConfigDict,
    *,
    start_step: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
) -> TrainBatches:
    """Infinite training batches of this process, from step `start_step`.

    Deterministic given config.seed; see the module docstring for resume.
    """
    source_class = _source_class(config)
    process = _processes(process_index, process_count)
    batch = _per_process(
        config.train.batch_size, process[1], "train.batch_size"
    )
    if start_step < 0:
        raise ValueError(f"start_step={start_step} must be >= 0")
    _set_up_tensorflow()
    source = source_class(config, config.data.train_split)
    if config.data.group_orientations:
        grouped, used = _grouped_batches(
            source, config, start_step, batch, process
        )
        return TrainBatches(_NumpyBatches(grouped, source), used)
    records = iter(
        source.train_records(config.seed, start_step, batch, process)
    )
    placed = canvases.training(config.data)
    data = canvases.on_canvas(config.data, placed[0])
    masks = _gt_masks(config, source)

    def numpy_batches() -> _NumpyBatches:
        return _NumpyBatches(
            _batch_train(
                next(records),
                source,
                masks,
                config.seed,
                data,
                batch,
            ),
            source,
        )

    def batches(first: _NumpyBatches) -> Iterator[dict[str, np.ndarray]]:
        yield from first
        while True:
            yield from numpy_batches()

    # The first dataset is built right away.
    return TrainBatches(batches(numpy_batches()), placed)


def _grouped_batches(
    source: source_lib.Source,
    config: ml_collections.ConfigDict,
    start_step: int,
    batch: int,
    process: tuple[int, int],
) -> tuple[tf.data.Dataset, tuple[canvases.Canvas, ...]]:
    """Steps start_step, ... of one orientation each, the schedule's, on
    that orientation's canvas (docs/architecture.md, "Data sources"), and
    the canvases of the orientations with images (the only ones drawn)."""
    counts = source.orientation_counts()
    placed = canvases.canvases(config.data)
    schedule = orientation_schedule.OrientationSchedule(
        config.seed, counts, config.train.batch_size
    )
    logging.info(
        "One orientation per step: %s",
        ", ".join(
            f"{count} {name} images on {height}x{width}"
            for count, name, (height, width) in zip(
                counts, canvases.NAMES, placed, strict=True
            )
        ),
    )
    records = source.grouped_train_records(schedule, start_step, batch, process)
    masks = _gt_masks(config, source)
    per_orientation = [
        _batch_train(
            rows,
            source,
            masks,
            config.seed,
            canvases.on_canvas(config.data, canvas),
            batch,
        )
        for rows, canvas in zip(records, placed, strict=True)
    ]

    def orientation(step: np.int64) -> np.int64:
        return np.int64(schedule.orientation(int(step)))

    choices = tf.data.Dataset.range(start_step, np.iinfo(np.int64).max).map(
        lambda step: tf.ensure_shape(
            tf.numpy_function(orientation, [step], tf.int64, stateful=False),
            [],
        )
    )
    used = tuple(c for c, n in zip(placed, counts, strict=True) if n)
    return tf.data.Dataset.choose_from_datasets(per_orientation, choices), used


@dataclasses.dataclass
class EvalSplit:
    """An evaluation split: ground truth and this process's image batches.

    `coco` holds the ground truth of every evaluated image (all processes),
    crowd regions included; `image_ids` are this process's images in the
    order its batches yield them. Every process yields `num_batches`
    batches: with data.group_orientations, the landscape canvas's and then
    the portrait canvas's, as many of each on every process.
    """

    coco: coco_lib.COCO
    category_ids: list[int]
    image_ids: list[int]
    has_masks: bool
    num_batches: int
    # The canvases its batches are on (canvases.canvases' with images, in
    # that order): the predict programs to compile.
    canvases: tuple[canvases.Canvas, ...]
    _make_dataset: Callable[[], tf.data.Dataset] = dataclasses.field(repr=False)
    _source: source_lib.Source | None = dataclasses.field(
        default=None, repr=False
    )

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The batches, in order, once; call again for another pass."""
        return _NumpyBatches(self._make_dataset(), self._source)


@dataclasses.dataclass(frozen=True)
class _EvalBlock:
    """This process's images of one canvas: positions in ground-truth order,
    and the batches every process yields on that canvas."""

    canvas: canvases.Canvas
    positions: list[int]
    num_batches: int


def _eval_blocks(
    data: ml_collections.ConfigDict,
    ground_truth: coco_lib.COCO,
    image_ids: list[int],
    process: tuple[int, int],
    batch: int,
) -> list[_EvalBlock]:
    """Each canvas's images, split in contiguous per-process blocks.

    An image's canvas follows its size in the ground truth (the size once
    turned by its EXIF orientation, as decoded).
    """
    index, count = process
    placed = canvases.canvases(data)
    kinds = [canvases.LANDSCAPE] * len(image_ids)
    if data.group_orientations:
        kinds = canvases.orientations(
            [
                (ground_truth.imgs[i]["height"], ground_truth.imgs[i]["width"])
                for i in image_ids
            ]
        )
    blocks = []
    # Without grouping every image is LANDSCAPE, on the one canvas.
    for canvas, positions in zip(placed, canvases.group(kinds), strict=False):
        share = math.ceil(len(positions) / count)
        begin = min(index * share, len(positions))
        end = min(begin + share, len(positions))
        blocks.append(
            _EvalBlock(canvas, positions[begin:end], math.ceil(share / batch))
        )
    return blocks


def _eval_dataset(
    images: tf.data.Dataset,
    data: ml_collections.ConfigDict,
    count: int,
    batch: int,
    num_batches: int,
) -> tf.data.Dataset:
    """Decoded examples -> fixed-size eval batches with padding rows, on
    `data`'s one canvas."""
    examples = images.map(
        lambda e: transforms.transform(e, None, data, False, None),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    padding = tf.data.Dataset.from_tensors(
        transforms.padding_example(data)
    ).repeat(num_batches * batch - count)
    return examples.concatenate(padding).batch(batch)


def eval_split(
    config: ml_collections.ConfigDict,
    split: str | None = None,
    max_images: int = 0,
    *,
    process_index: int | None = None,
    process_count: int | None = None,
) -> EvalSplit:
    """The evaluation split `split` (default data.eval_split), sliceable.

    `max_images` > 0 keeps the first `max_images` images of the split. Each
    process reads a contiguous block of each canvas's images.
    """
    source_class = _source_class(config)
    split = split or config.data.eval_split
    process = _processes(process_index, process_count)
    batch = _per_process(config.eval.batch_size, process[1], "eval.batch_size")
    _set_up_tensorflow()
    source = source_class(config, split, max_images)
    ground_truth, all_ids = source.ground_truth()
    blocks = [
        block
        for block in _eval_blocks(
            config.data, ground_truth, all_ids, process, batch
        )
        if block.num_batches
    ]

    def make_dataset() -> tf.data.Dataset:
        datasets = [
            _eval_dataset(
                source.eval_images(block.positions),
                canvases.on_canvas(config.data, block.canvas),
                len(block.positions),
                batch,
                block.num_batches,
            )
            for block in blocks
        ]
        joined = functools.reduce(tf.data.Dataset.concatenate, datasets)
        return joined.prefetch(config.data.prefetch)

    return EvalSplit(
        coco=ground_truth,
        category_ids=source.category_ids,
        image_ids=[all_ids[k] for block in blocks for k in block.positions],
        has_masks=source.has_masks,
        num_batches=sum(block.num_batches for block in blocks),
        canvases=tuple(block.canvas for block in blocks),
        _make_dataset=make_dataset,
        _source=source,
    )
