"""Large-scale jitter (data.augment='lsj'): detectron2's ResizeScale,
FixedSizeCrop and flip, boxes recomputed from the cropped masks
(docs/modern-recipe.md).
"""

import functools

import ml_collections
import tensorflow as tf

from detector.data import gt_masks, transforms


def sample_geometry(
    hw: tf.Tensor, key: tf.Tensor, data: ml_collections.ConfigDict
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(flip, scale, resized [h', w'], crop offset [y, x]): the letterbox
    rule jittered in [lsj_min, lsj_max], whatever data.resize."""
    return transforms.letterbox_geometry(
        hw, key, data, (data.lsj_min, data.lsj_max)
    )


def _mask_boxes(
    masks: tf.Tensor, window: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Tight boxes f32[N, 4] (x1, y1, x2, y2, original pixels) of the mask
    pixels that overlap `window` (x1, y1, x2, y2), clipped to it, and
    whether any pixel is there, bool[N]."""
    height, width = tf.shape(masks)[1], tf.shape(masks)[2]
    ys = tf.range(tf.cast(height, tf.float32))
    xs = tf.range(tf.cast(width, tf.float32))
    row_in = (ys + 1.0 > window[1]) & (ys < window[3])
    col_in = (xs + 1.0 > window[0]) & (xs < window[2])
    inside = (
        (masks > 0) & row_in[None, :, None] & col_in[None, None, :]
    )  # [N, h, w]
    rows = tf.reduce_any(inside, axis=2)  # [N, h]
    cols = tf.reduce_any(inside, axis=1)  # [N, w]
    found = tf.reduce_any(cols, axis=1)

    def span(hits: tf.Tensor, size: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        first = tf.argmax(tf.cast(hits, tf.int32), axis=1)
        last = size - 1 - tf.argmax(tf.cast(hits[:, ::-1], tf.int32), axis=1)
        return tf.cast(first, tf.float32), tf.cast(last + 1, tf.float32)

    x1, x2 = span(cols, tf.cast(width, tf.int64))
    y1, y2 = span(rows, tf.cast(height, tf.int64))
    boxes = tf.stack(
        [
            tf.maximum(x1, window[0]),
            tf.maximum(y1, window[1]),
            tf.minimum(x2, window[2]),
            tf.minimum(y2, window[3]),
        ],
        axis=1,
    )
    return boxes, found


def _kept_boxes(
    example: dict,
    geometry: tuple[tf.Tensor, ...],
    *,
    data: ml_collections.ConfigDict,
    has_masks: bool,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Input boxes f32[N, 4] recomputed from the cropped masks (from the
    box annotations without masks), and the rows kept: found, at least
    data.lsj_min_box_size wide and tall, at most data.max_instances."""
    hw, flip, factor, shift, limit = geometry
    if has_masks:
        flipped = gt_masks.flip_x(example["masks"], flip, 2)
        # The visible input [0, limit) in flipped original pixels.
        visible = tf.concat([tf.zeros([2]), limit[2:]], axis=0)
        window = (visible + shift) / factor
        source, found = _mask_boxes(flipped, window)
        boxes = tf.clip_by_value(source * factor - shift, 0.0, limit)
    else:
        boxes = transforms.flip_boxes(example["boxes"], flip, hw[1])
        boxes = tf.clip_by_value(boxes * factor - shift, 0.0, limit)
        found = tf.ones(tf.shape(boxes)[:1], tf.bool)
    minimum = float(data.lsj_min_box_size)
    keep = tf.where(
        found
        & (boxes[:, 2] - boxes[:, 0] >= minimum)
        & (boxes[:, 3] - boxes[:, 1] >= minimum)
        & (boxes[:, 2] > boxes[:, 0])
        & (boxes[:, 3] > boxes[:, 1])
    )[:, 0]
    return boxes, keep[: data.max_instances]


def transform(
    example: dict,
    key: tf.Tensor,
    data: ml_collections.ConfigDict,
    masks: gt_masks.GtMasks,
) -> dict:
    """One training example -> fixed-shape model input and targets (the
    keys of transforms.transform)."""
    hw = tf.cast(tf.shape(example["image"])[:2], tf.float32)
    flip, scale, resized, offset = sample_geometry(hw, key, data)
    kept_boxes = functools.partial(
        _kept_boxes, data=data, has_masks=masks.present
    )
    targets = transforms.training_targets(
        example, hw, flip, resized, offset, data, masks, kept_boxes
    )
    model_input = transforms.model_input(
        example, hw, flip, scale, resized, offset, data
    )
    return model_input | targets
