"""The data a config names, checked where a run starts, before JAX does:
a COCO folder's layout for each split the run reads (a missing folder is
one line in a second, not after the compiles), and `data.num_classes=0`
made the count of categories of the annotation file (docs/coco.md)."""

import json
from collections.abc import Callable, Mapping

import ml_collections

from detector.data import coco_layout, shapes_writer
from detector.utils import files

# The most bytes of an annotation file read here for its categories (COCO
# 2017's train file is 470 MB).
MAX_ANNOTATION_BYTES = 4 * 2**30
# Config key ('data.eval_split') -> the split a run reads for it.
Splits = Mapping[str, str]


def _category_count(annotation_file: str) -> int:
    """The number of categories `annotation_file` lists."""
    data = files.read_regular(annotation_file, MAX_ANNOTATION_BYTES)
    try:
        categories = json.loads(data).get("categories")
    except (ValueError, AttributeError, RecursionError):
        categories = None
    if not isinstance(categories, list) or not categories:
        raise ValueError(
            f"{annotation_file}: lists no categories (a 'categories' list "
            "of {'id', 'name'}) to take config.data.num_classes=0 from; "
            "set --config.data.num_classes"
        )
    return len(categories)


def _coco_json(config: ml_collections.ConfigDict, splits: Splits) -> None:
    data = config.data
    found = [
        coco_layout.locate(data.root, split, key)
        for key, split in splits.items()
    ]
    if data.num_classes == 0:
        with config.unlocked():
            data.num_classes = _category_count(found[0].annotation_file)


def _no_annotation_file(config: ml_collections.ConfigDict) -> None:
    if config.data.num_classes == 0:
        raise ValueError(
            "config.data.num_classes=0: takes the count from a COCO "
            "folder's annotation file, and "
            f"config.data.source={config.data.source!r} reads none; set "
            "--config.data.num_classes"
        )


def _shapes(config: ml_collections.ConfigDict, splits: Splits) -> None:
    """The shapes set is written on first use: it must fit on the disk."""
    del splits
    _no_annotation_file(config)
    data = config.data
    if data.root:  # an empty one is the source's to name
        stale = shapes_writer.stale_splits(data.root, data.shapes)
        shapes_writer.check_space(data.root, stale, data.shapes.image_size)


def _tfds(config: ml_collections.ConfigDict, splits: Splits) -> None:
    del splits  # TFDS finds or downloads its own
    _no_annotation_file(config)


# data.source -> its check before JAX starts.
CHECKS: dict[str, Callable[[ml_collections.ConfigDict, Splits], None]] = {
    "coco_json": _coco_json,
    "shapes": _shapes,
    "tfds": _tfds,
}


def check(
    config: ml_collections.ConfigDict, splits: Splits | None = None
) -> None:
    """Checks that the data of `splits` (config key -> split; default: the
    config's training and eval splits) is there, and sets
    `data.num_classes=0` to the first split's category count.

    Raises:
      FileNotFoundError, NotADirectoryError, ValueError: one line naming
        the config key, what is missing, and the layout expected.
    """
    if splits is None:
        splits = {
            "data.train_split": config.data.train_split,
            "data.eval_split": config.data.eval_split,
        }
    run = CHECKS.get(config.data.source)
    if run is not None:  # an unknown source is validate()'s to name
        run(config, splits)
