"""An evaluation split read as predict.py reads files: each image decoded
(by imaging's decoder for a COCO-format folder and the shapes set, a large
JPEG reduced as predict reduces it; by the source's tf.data for TFDS),
resized by the config's rule and placed on
the canvas of its orientation in numpy (`imaging.images`), in threads;
this process's blocks of each canvas, in fixed-size batches. No TensorFlow
but for the TFDS source (docs/architecture.md, "Inference")."""

import collections
import concurrent.futures
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterator

import ml_collections
import numpy as np
from pycocotools import coco as coco_lib

from detector.data import coco_folder, shapes_dataset, shares, sources
from detector.imaging import canvases, image_file, images
from detector.imaging.canvases import Canvas

# Threads that decode, resize and place eval images (PIL and numpy, much
# of it outside the GIL) while the device predicts.
_THREADS = 4


# An image to read: a call that returns {"image": u8[h', w', 3] (a large
# JPEG decoded reduced), "size": the whole image's (h, w), "image_id"}.
Read = Callable[[], dict[str, np.ndarray]]


@dataclasses.dataclass
class Images:
    """A split's ground truth and a way to read its images."""

    coco: coco_lib.COCO  # every image's, crowd regions included
    image_ids: list[int]  # in ground-truth order
    category_ids: list[int]
    has_masks: bool
    # positions (ascending) -> a Read per position, in order
    reads: Callable[[list[int]], Iterator[Read]]


def _folder_read(
    folder: coco_folder.CocoFolder, position: int, needed: image_file.Needed
) -> dict:
    """Image `position` of a COCO-format folder; an error raises one line
    naming the file."""
    decoded = folder.load_image(position, needed)
    return {
        "image": decoded.pixels,
        "size": decoded.size,
        "image_id": folder.images[position]["id"],
    }


def _coco_json(
    config: ml_collections.ConfigDict, split: str, max_images: int
) -> Images:
    """A COCO-format folder's images, a JPEG decoded reduced to no less than
    the size it is resized to, as predict.py decodes a file."""
    folder = coco_folder.of_config(config.data, split, max_images)
    needed = functools.partial(
        images.fitted_on,
        rule=images.Resize.of(config.data),
        choices=canvases.canvases(config.data),
    )
    return Images(
        folder.coco(),
        folder.image_ids,
        list(folder.category_ids),
        folder.has_masks,
        lambda positions: (
            functools.partial(_folder_read, folder, p, needed)
            for p in positions
        ),
    )


def _shapes(
    config: ml_collections.ConfigDict, split: str, max_images: int
) -> Images:
    if config.data.root:  # else of_config names the empty key
        shapes_dataset.ensure_dataset(config)
    return _coco_json(config, split, max_images)


def _tfds(
    config: ml_collections.ConfigDict, split: str, max_images: int
) -> Images:
    """TFDS records decoded by the source's tf.data (TFDS needs
    TensorFlow); resized and placed in numpy like the others."""
    from detector.data import pipeline  # TensorFlow, for TFDS only

    source = pipeline.eval_source(config, split, max_images)
    coco, image_ids = source.ground_truth()

    def reads(positions: list[int]) -> Iterator[Read]:
        decoded = pipeline.numpy_examples(
            source.eval_images(positions).prefetch(config.data.prefetch),
            source,
        )
        return (
            (lambda e=example: {**e, "size": e["image"].shape[:2]})
            for example in decoded
        )

    return Images(coco, image_ids, source.category_ids, source.has_masks, reads)


# data.source -> its eval images.
READERS: dict[str, Callable[[ml_collections.ConfigDict, str, int], Images]] = {
    "shapes": _shapes,
    "coco_json": _coco_json,
    "tfds": _tfds,
}
assert tuple(READERS) == sources.NAMES


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
    canvases: tuple[Canvas, ...]
    _make_batches: Callable[[], Iterator[dict[str, np.ndarray]]] = (
        dataclasses.field(repr=False)
    )

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The batches, in order, once; call again for another pass.

        A batch holds image f32[B, H, W, 3] (pixels resized and placed as
        predict places them, `imaging.images`; not normalised), image_id,
        orig_size, image_size and image_valid (False: a padding row).
        """
        return self._make_batches()


@dataclasses.dataclass(frozen=True)
class _EvalBlock:
    """This process's images of one canvas: positions in ground-truth order,
    and the batches every process yields on that canvas."""

    canvas: Canvas
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


def _placed(read: Read, resize: images.Resize, canvas: Canvas) -> dict:
    """An eval image read and placed on `canvas` as predict places a file
    (`images.fitted_size`, `images.place`): float pixels, not normalised."""
    example = read()
    size = tuple(int(v) for v in example["size"])
    fitted = images.fitted_size(size, resize, canvas)
    return {
        "image": images.place(example["image"], fitted, canvas),
        "image_id": np.int64(example["image_id"]),
        "orig_size": np.asarray(size, np.int32),
        "image_size": np.asarray(fitted, np.int32),
        "image_valid": np.bool_(True),
    }


def _padding_row(canvas: Canvas) -> dict[str, np.ndarray]:
    """An eval padding row: zero image, image_id -1, image_valid False."""
    return {
        "image": np.zeros((*canvas, 3), np.float32),
        "image_id": np.int64(-1),
        "orig_size": np.zeros(2, np.int32),
        "image_size": np.asarray(canvas, np.int32),
        "image_valid": np.bool_(False),
    }


def _in_order(
    pool: concurrent.futures.Executor, fn: Callable, items: Iterator, ahead: int
) -> Iterator:
    """fn(item) of each item, computed up to `ahead` items ahead on `pool`,
    in order (an error is raised at its item)."""
    pending = collections.deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _eval_batches(
    split: Images,
    blocks: list[_EvalBlock],
    data: ml_collections.ConfigDict,
    batch: int,
) -> Iterator[dict[str, np.ndarray]]:
    """Each block's images read and placed on its canvas in threads, in
    batches of `batch` rows padded with `_padding_row`."""
    resize = images.Resize.of(data)
    with concurrent.futures.ThreadPoolExecutor(_THREADS) as pool:
        for block in blocks:
            placed = _in_order(
                pool,
                functools.partial(_placed, resize=resize, canvas=block.canvas),
                split.reads(block.positions),
                ahead=2 * batch,
            )
            padding = _padding_row(block.canvas)
            for _ in range(block.num_batches):
                rows = list(itertools.islice(placed, batch))
                rows += [padding] * (batch - len(rows))
                yield {k: np.stack([r[k] for r in rows]) for k in padding}


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
    sources.check_name(config.data.source, "data.source")
    split = split or config.data.eval_split
    process = shares.processes(process_index, process_count)
    batch = shares.per_process(
        config.eval.batch_size, process[1], "eval.batch_size"
    )
    read = READERS[config.data.source](config, split, max_images)
    blocks = [
        block
        for block in _eval_blocks(
            config.data, read.coco, read.image_ids, process, batch
        )
        if block.num_batches
    ]
    return EvalSplit(
        coco=read.coco,
        category_ids=read.category_ids,
        image_ids=[
            read.image_ids[k] for block in blocks for k in block.positions
        ],
        has_masks=read.has_masks,
        num_batches=sum(block.num_batches for block in blocks),
        canvases=tuple(block.canvas for block in blocks),
        _make_batches=functools.partial(
            _eval_batches, read, blocks, config.data, batch
        ),
    )
