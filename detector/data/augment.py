"""The training augmentations by name (config data.augment).

    example = AUGMENTS[data.augment](example, key, data, has_masks)

Each maps one decoded training example and its stateless key to the
fixed-shape model input and targets (transforms.transform's keys);
adding one is a function and one entry (and its name in
config/data.py AUGMENTS, which is read without TensorFlow).
"""

from collections.abc import Callable

import ml_collections
import tensorflow as tf

from detector.data import lsj, transforms


def _jitter(
    example: dict,
    key: tf.Tensor,
    data: ml_collections.ConfigDict,
    has_masks: bool,
) -> dict:
    """Flip, data.scale_jitter, crop (transforms.py)."""
    return transforms.transform(example, key, data, True, has_masks)


AUGMENTS: dict[str, Callable[..., dict]] = {
    "jitter": _jitter,
    "lsj": lsj.transform,
}
