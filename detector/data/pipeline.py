"""tf.data input pipelines: per-process numpy batches for training and eval,
each step's batch a function of its position (docs/architecture.md, "Data
flow" and "Data sources")."""

import atexit
import functools
import weakref
from collections.abc import Iterator

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

from detector.config import data as data_config
from detector.data import (
    augment,
    gt_masks,
    orientation_schedule,
    shares,
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
    process = shares.processes(process_index, process_count)
    batch = shares.per_process(
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


def eval_source(
    config: ml_collections.ConfigDict, split: str, max_images: int
) -> source_lib.Source:
    """`data.source`'s reader of `split`, TensorFlow set up first (the
    tfds source's eval images: data/eval_split.py)."""
    _set_up_tensorflow()
    return _source_class(config)(config, split, max_images)


def numpy_examples(
    dataset: tf.data.Dataset, source: source_lib.Source
) -> Iterator[dict[str, np.ndarray]]:
    """A dataset's elements as numpy, a loader's error raised as itself
    (`_NumpyBatches`)."""
    return _NumpyBatches(dataset, source)
