"""tf.data input pipelines: per-host numpy batches for training and eval.

Shapes: B per-process batch, H x W `data.image_size`, M `data.max_instances`,
S `data.gt_mask_size`.

Train batch: image f32[B,H,W,3], boxes f32[B,M,4] (x1,y1,x2,y2 in input
pixels), classes i32[B,M], valid bool[B,M], masks u8[B,M,S,S], mask_valid
bool[B,M], image_id i64[B], orig_size i32[B,2], scale f32[B], image_valid
bool[B]. Eval batch: image, image_id, orig_size, scale, image_valid; the last
batch is padded with image_valid=False rows (image_id -1).

Order, determinism and resume. Every training example has a global position
g = step * global_batch + j; process p of P takes the rows j in
[p * B, (p + 1) * B). Its augmentation (flip, scale jitter, crop) comes from
stateless random ops keyed by (config.seed, g), never from iterator state.
- Folder sources (shapes, coco_json): position g is image
  perm_e[g mod n] of epoch e = g // n, where perm_e is a stateless shuffle
  keyed by (config.seed, e); epochs run into each other. Resuming at step s
  starts the position stream at s * global_batch: nothing is decoded to get
  there.
- TFDS: each epoch reads the split with its file order and a shuffle buffer
  seeded by (config.seed, epoch), and keeps the first
  steps_per_epoch = n // global_batch batches. Resuming at step s opens epoch
  s // steps_per_epoch and skips the earlier records of that epoch with the
  image still encoded (reading, no decoding).
Either way the batch of step s is the same whether the run started at 0 or
resumed at any start_step <= s.
"""

import atexit
from collections.abc import Callable, Iterator
import dataclasses
import math
import time
import weakref

from absl import logging
import jax
import ml_collections
import numpy as np
from pycocotools import coco as coco_lib
import tensorflow as tf

from detector.data import coco
from detector.data import shapes
from detector.data import tfds_coco
from detector.data import transforms

SOURCES = ("shapes", "coco_json", "tfds")
# How long processes other than 0 wait for it to write the shapes dataset.
SHAPES_WAIT_S = 1800.0
# Independent stateless random streams derived from config.seed.
_ORDER_STREAM, _AUGMENT_STREAM = 1, 2


def _hide_gpus_from_tensorflow() -> None:
    """Keeps TensorFlow off the accelerators; JAX owns them."""
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # TF already initialised its devices
        if tf.config.get_visible_devices("GPU"):
            logging.warning("TensorFlow was initialised before the data "
                            "pipeline and can see a GPU")


_hide_gpus_from_tensorflow()


def _processes(process_index: int | None,
               process_count: int | None) -> tuple[int, int]:
    """(index, count) of this process, from JAX unless given."""
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ValueError(f"process_index={index} is not in [0, {count})")
    return index, count


def _per_process(global_size: int, count: int, key: str) -> int:
    """The per-process share of a global batch size; it must divide evenly."""
    if global_size <= 0 or global_size % count:
        raise ValueError(f"{key}={global_size} must be a positive multiple "
                         f"of the process count {count}")
    return global_size // count


def _check_source(data: ml_collections.ConfigDict) -> None:
    if data.source not in SOURCES:
        raise ValueError(f"data.source={data.source!r} is not one of "
                         f"{', '.join(SOURCES)}")


def ensure_shapes_dataset(config: ml_collections.ConfigDict, *,
                          process_index: int | None = None,
                          timeout_s: float = SHAPES_WAIT_S) -> None:
    """Writes the shapes dataset under `data.root` when it is missing/stale.

    Process 0 writes; the other processes wait up to `timeout_s` seconds for
    its JSON files (TimeoutError after). An instances JSON under data.root
    that the shapes writer did not write is never replaced (ValueError).
    """
    data = config.data
    if data.source != "shapes":
        return
    if not data.root:
        raise ValueError("data.root is empty; set it to the folder that "
                         "holds (or will hold) the shapes dataset")
    if data.shapes.image_size < shapes.MIN_IMAGE_SIZE:
        raise ValueError(f"data.shapes.image_size={data.shapes.image_size} "
                         f"is below the minimum {shapes.MIN_IMAGE_SIZE}")
    counts = {"train": data.shapes.num_train, "val": data.shapes.num_val}
    stale = {split: count for split, count in counts.items()
             if not shapes.split_is_current(data.root, split, count,
                                            data.shapes.image_size,
                                            data.shapes.seed)}
    for split in stale:
        shapes.check_can_write(data.root, split)
    index = jax.process_index() if process_index is None else process_index
    if index != 0:
        _wait_for_shapes(data, stale, timeout_s)
        return
    for split, count in stale.items():
        logging.info("Writing the shapes %s split (%d images) to %s",
                     split, count, data.root)
        shapes.write_split(data.root, split, count, data.shapes.image_size,
                           data.shapes.seed)


def _wait_for_shapes(data: ml_collections.ConfigDict, pending: dict[str, int],
                     timeout_s: float) -> None:
    """Waits until process 0 has written the `pending` splits' JSON files."""
    deadline = time.monotonic() + timeout_s
    if pending:
        logging.info("Waiting for process 0 to write the shapes splits %s "
                     "to %s", ", ".join(pending), data.root)
    while pending:
        pending = {split: count for split, count in pending.items()
                   if not shapes.split_is_current(data.root, split, count,
                                                  data.shapes.image_size,
                                                  data.shapes.seed)}
        if pending and time.monotonic() > deadline:
            split = next(iter(pending))
            raise TimeoutError(
                    f"{shapes.annotation_path(data.root, split)}: process 0 "
                    f"did not write the shapes {split} split within "
                    f"{timeout_s:g} s")
        if pending:
            time.sleep(min(1.0, timeout_s / 10))


def _open_folder(config: ml_collections.ConfigDict, split: str,
                 max_images: int = 0) -> coco.CocoFolder:
    """The COCO-format folder split of a shapes / coco_json config."""
    data = config.data
    if not data.root:
        raise ValueError(f"data.root is empty; data.source={data.source!r} "
                         "reads a COCO-format folder")
    ensure_shapes_dataset(config)
    return coco.CocoFolder(data.root, split, data.num_classes, max_images,
                           cache=data.cache)


def _options() -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = True
    options.threading.max_intra_op_parallelism = 1
    return options


class _NumpyBatches:
    """Iterates a dataset as numpy; loader errors surface as raised.

    A folder loader that fails keeps its error (one line, naming the file)
    and hands tf.data a blank stand-in, so TensorFlow neither wraps nor
    logs it; the error is raised here with the next batch. Iterators still open at interpreter exit are closed
    first: a tf.data iterator whose threads call back into Python would
    otherwise hang the exit.
    """

    _open: "weakref.WeakSet[_NumpyBatches]" = weakref.WeakSet()

    def __init__(self, dataset: tf.data.Dataset,
                 folder: coco.CocoFolder | None):
        self._iterator = dataset.with_options(_options()).as_numpy_iterator()
        self._folder = folder
        _NumpyBatches._open.add(self)

    def __iter__(self) -> "_NumpyBatches":
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._iterator is None:
            raise StopIteration
        try:
            batch = next(self._iterator)
            failure = self._loader_error()
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

    def _loader_error(self) -> Exception | None:
        """The folder loader's first error (taken), or None."""
        if self._folder is None or self._folder.error is None:
            return None
        failure, self._folder.error = self._folder.error, None
        return failure

    def _failure(self, error: tf.errors.OpError) -> Exception:
        """The loader's own error, or TensorFlow's in one line as ValueError."""
        return self._loader_error() or ValueError(
            tfds_coco.error_line(error, "input pipeline"))

    def close(self) -> None:
        """Releases the tf.data iterator and its threads."""
        self._iterator = None

    @classmethod
    def close_all(cls) -> None:
        for batches in list(cls._open):
            batches.close()


atexit.register(_NumpyBatches.close_all)


def _key(seed: int, stream: int, position: tf.Tensor) -> tf.Tensor:
    """Stateless seed for (config.seed, stream, position): int64 [2]."""
    base = tf.constant([seed, stream], tf.int64)
    return tf.random.experimental.stateless_fold_in(base, position)


def _folder_example(folder: coco.CocoFolder, index: tf.Tensor) -> dict:
    """Loads image `index` of a folder (and its targets) inside tf.data."""
    image, boxes, classes, masks, image_id = tf.numpy_function(
            folder.load_example, [index],
            [tf.uint8, tf.float32, tf.int32, tf.uint8, tf.int64],
            stateful=False)
    return {"image": tf.ensure_shape(image, [None, None, 3]),
            "boxes": tf.ensure_shape(boxes, [None, 4]),
            "classes": tf.ensure_shape(classes, [None]),
            "masks": tf.ensure_shape(masks, [None, None, None]),
            "image_id": tf.ensure_shape(image_id, [])}


def _folder_image(folder: coco.CocoFolder, index: tf.Tensor) -> dict:
    """Loads image `index` of a folder without targets (evaluation)."""
    image, image_id = tf.numpy_function(folder.load_image, [index],
                                        [tf.uint8, tf.int64], stateful=False)
    return {"image": tf.ensure_shape(image, [None, None, 3]),
            "image_id": tf.ensure_shape(image_id, [])}


def _folder_positions(num_images: int, seed: int,
                      start: int) -> tf.data.Dataset:
    """(position, image index) from global position `start` on, forever."""
    first_epoch = start // num_images

    def epoch(e):
        order = tf.random.experimental.stateless_shuffle(
                tf.range(num_images, dtype=tf.int64),
                _key(seed, _ORDER_STREAM, e))
        positions = e * num_images + tf.range(num_images, dtype=tf.int64)
        return tf.data.Dataset.from_tensor_slices((positions, order))

    epochs = tf.data.Dataset.range(first_epoch, np.iinfo(np.int64).max)
    return epochs.flat_map(epoch).skip(start - first_epoch * num_images)


def _batch_train(positions: tf.data.Dataset,
                 load: Callable[[tf.Tensor], dict], config, has_masks: bool,
                 process: tuple[int, int], batch: int) -> tf.data.Dataset:
    """(position, reference) stream -> this process's augmented batches."""
    index, count = process
    data = config.data
    positions = positions.filter(lambda g, _: (g // batch) % count == index)
    truncations = transforms.TruncationLog(data.max_instances)

    @tf.autograph.experimental.do_not_convert
    def example(g, reference):
        loaded = transforms.limit_instances(load(reference), truncations)
        return transforms.transform(loaded, _key(config.seed, _AUGMENT_STREAM,
                                                 g), data, True, has_masks)

    dataset = positions.map(example, num_parallel_calls=tf.data.AUTOTUNE,
                            deterministic=True)
    return dataset.batch(batch, drop_remainder=True).prefetch(data.prefetch)


def _tfds_train(config, source: tfds_coco.TfdsCoco, start_step: int,
                process: tuple[int, int], batch: int) -> Iterator[dict]:
    """TFDS training batches, epoch by epoch (see the module docstring)."""
    data = config.data
    global_batch = batch * process[1]
    num_examples = source.num_examples(data.train_split)
    steps_per_epoch = num_examples // global_batch
    if steps_per_epoch == 0:
        raise ValueError(f"split {data.train_split!r} of tfds {source.name} "
                         f"has {num_examples} examples, fewer than one global "
                         f"batch ({global_batch})")

    def epochs(epoch: int, step: int) -> Iterator[dict]:
        while True:
            epoch_seed = int(np.random.SeedSequence(
                    [config.seed, _ORDER_STREAM, epoch]).generate_state(1)[0])
            records = source.raw(data.train_split, shuffle_seed=epoch_seed)
            records = records.shuffle(max(data.shuffle_buffer, 1),
                                      seed=epoch_seed)
            records = records.take(steps_per_epoch * global_batch)
            first = epoch * steps_per_epoch * global_batch
            positions = records.enumerate(first).skip(step * global_batch)
            dataset = _batch_train(positions,
                                   lambda r: source.decode(r, training=True),
                                   config, False, process, batch)
            yield from _NumpyBatches(dataset, None)
            epoch, step = epoch + 1, 0

    return epochs(*divmod(start_step, steps_per_epoch))


def train_batches(config: ml_collections.ConfigDict, *, start_step: int = 0,
                  process_index: int | None = None,
                  process_count: int | None = None
                  ) -> Iterator[dict[str, np.ndarray]]:
    """Infinite training batches of this process, from step `start_step`.

    Deterministic given config.seed; see the module docstring for resume.
    """
    data = config.data
    _check_source(data)
    process = _processes(process_index, process_count)
    batch = _per_process(config.train.batch_size, process[1],
                         "train.batch_size")
    if start_step < 0:
        raise ValueError(f"start_step={start_step} must be >= 0")
    if data.source == "tfds":
        return _tfds_train(config, tfds_coco.TfdsCoco(data), start_step,
                           process, batch)
    folder = _open_folder(config, data.train_split)
    positions = _folder_positions(len(folder.images), config.seed,
                                  start_step * batch * process[1])
    dataset = _batch_train(positions,
                           lambda index: _folder_example(folder, index),
                           config, folder.has_masks, process, batch)
    return _NumpyBatches(dataset, folder)


@dataclasses.dataclass
class EvalSplit:
    """An evaluation split: ground truth and this process's image batches.

    `coco` holds the ground truth of every evaluated image (all processes),
    crowd regions included; `image_ids` are this process's images in the
    order its batches yield them. Every process yields `num_batches` batches.
    """
    coco: coco_lib.COCO
    category_ids: list[int]
    image_ids: list[int]
    has_masks: bool
    num_batches: int
    _make_dataset: Callable[[], tf.data.Dataset] = dataclasses.field(
            repr=False)
    _folder: coco.CocoFolder | None = dataclasses.field(default=None,
                                                        repr=False)

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The batches, in order, once; call again for another pass."""
        return _NumpyBatches(self._make_dataset(), self._folder)


def _eval_dataset(images: tf.data.Dataset, config, count: int, batch: int,
                  num_batches: int) -> tf.data.Dataset:
    """Decoded examples -> fixed-size eval batches with padding rows."""
    data = config.data
    examples = images.map(
            lambda e: transforms.transform(e, None, data, False, False),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    padding = tf.data.Dataset.from_tensors(
            transforms.padding_example(data)).repeat(num_batches * batch
                                                     - count)
    return examples.concatenate(padding).batch(batch).prefetch(data.prefetch)


def eval_split(config: ml_collections.ConfigDict, split: str | None = None,
               max_images: int = 0, *, process_index: int | None = None,
               process_count: int | None = None) -> EvalSplit:
    """The evaluation split `split` (default data.eval_split), sliceable.

    `max_images` > 0 keeps the first `max_images` images of the split. Each
    process reads a contiguous block of the images.
    """
    data = config.data
    _check_source(data)
    split = split or data.eval_split
    index, count = _processes(process_index, process_count)
    batch = _per_process(config.eval.batch_size, count, "eval.batch_size")
    folder = source = None
    if data.source == "tfds":
        source = tfds_coco.TfdsCoco(data)
        ground_truth, all_ids = source.ground_truth(split, max_images)
        if not all_ids:
            raise ValueError(f"split {split!r} of tfds {data.tfds_name} "
                             "selects no images")
        gt, category_ids, has_masks = (coco.build_coco(ground_truth),
                                       source.category_ids, False)
    else:
        folder = _open_folder(config, split, max_images)
        all_ids = folder.image_ids
        gt, category_ids, has_masks = (folder.coco(), folder.category_ids,
                                       folder.has_masks)
    per_process = math.ceil(len(all_ids) / count)
    begin = min(index * per_process, len(all_ids))
    end = min(begin + per_process, len(all_ids))
    num_batches = max(1, math.ceil(per_process / batch))

    def make_dataset() -> tf.data.Dataset:
        if source is not None:
            records = source.raw(split)
            images = records.skip(begin).take(end - begin).map(
                    lambda r: source.decode(r, training=False))
        else:
            images = tf.data.Dataset.range(begin, end).map(
                    lambda i: _folder_image(folder, i))
        return _eval_dataset(images, config, end - begin, batch, num_batches)

    return EvalSplit(coco=gt, category_ids=list(category_ids),
                     image_ids=list(all_ids[begin:end]), has_masks=has_masks,
                     num_batches=num_batches, _make_dataset=make_dataset,
                     _folder=folder)
