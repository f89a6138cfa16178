"""The training augmentations by name (`data.augment`): an example and its
stateless key -> model input and targets (transforms.transform's keys); a
new one is also named in config/data.py AUGMENTS."""

from collections.abc import Callable

import ml_collections
import tensorflow as tf

from detector.data import gt_masks, lsj, transforms


def _jitter(
    example: dict,
    key: tf.Tensor,
    data: ml_collections.ConfigDict,
    masks: gt_masks.GtMasks,
) -> dict:
    """Flip, data.scale_jitter, crop (transforms.py)."""
    return transforms.transform(example, key, data, True, masks)


AUGMENTS: dict[str, Callable[..., dict]] = {
    "jitter": _jitter,
    "lsj": lsj.transform,
}
