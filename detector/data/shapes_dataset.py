"""The shapes set made ready before it is read: written by process 0
where missing or stale, waited for by the others (no TensorFlow: eval.py
reads the set without it)."""

import time

import jax
import ml_collections
from absl import logging

from detector.data import shapes_writer as shapes

# How long processes other than 0 wait for it to write the shapes dataset.
SHAPES_WAIT_S = 1800.0


def ensure_dataset(
    config: ml_collections.ConfigDict,
    *,
    process_index: int | None = None,
    timeout_s: float = SHAPES_WAIT_S,
) -> None:
    """Writes the shapes dataset under `data.root` when it is missing/stale.

    Process 0 writes; the other processes wait up to `timeout_s` seconds for
    its JSON files (TimeoutError after). An instances JSON under data.root
    that the shapes writer did not write is never replaced (ValueError).
    """
    data = config.data
    if not data.root:
        raise ValueError(
            "data.root is empty; set it to the folder that "
            "holds (or will hold) the shapes dataset"
        )
    if data.shapes.image_size < shapes.MIN_IMAGE_SIZE:
        raise ValueError(
            f"data.shapes.image_size={data.shapes.image_size} "
            f"is below the minimum {shapes.MIN_IMAGE_SIZE}"
        )
    stale = shapes.stale_splits(data.root, data.shapes)
    for split in stale:
        shapes.check_can_write(data.root, split)
    shapes.check_space(data.root, stale, data.shapes.image_size)
    shapes.check_root(data.root)  # a COCO folder named by mistake
    index = jax.process_index() if process_index is None else process_index
    if index != 0:
        _wait_for_shapes(data, stale, timeout_s)
        return
    for split, count in stale.items():
        logging.info(
            "Writing the shapes %s split (%d images) to %s",
            split,
            count,
            data.root,
        )
        shapes.write_split(
            data.root, split, count, data.shapes.image_size, data.shapes.seed
        )


def _wait_for_shapes(
    data: ml_collections.ConfigDict, pending: dict[str, int], timeout_s: float
) -> None:
    """Waits until process 0 has written the `pending` splits' JSON files."""
    deadline = time.monotonic() + timeout_s
    if pending:
        logging.info(
            "Waiting for process 0 to write the shapes splits %s to %s",
            ", ".join(pending),
            data.root,
        )
    while pending:
        pending = {
            split: count
            for split, count in pending.items()
            if not shapes.split_is_current(
                data.root,
                split,
                count,
                data.shapes.image_size,
                data.shapes.seed,
            )
        }
        if pending and time.monotonic() > deadline:
            split = next(iter(pending))
            raise TimeoutError(
                f"{shapes.annotation_path(data.root, split)}: process 0 "
                f"did not write the shapes {split} split within "
                f"{timeout_s:g} s"
            )
        if pending:
            time.sleep(min(1.0, timeout_s / 10))
