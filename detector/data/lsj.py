"""Large-scale jitter (data.augment='lsj'): detectron2's new baselines'
ResizeScale(0.1, 2.0) + FixedSizeCrop + flip, with boxes recomputed from
the cropped masks.

The image is flipped (data.hflip), resized by min(H / h, W / w) * s with
s uniform in [data.lsj_min, data.lsj_max] (the input size scaled, aspect
kept), cropped at a uniform random offset where it exceeds H x W and
padded bottom/right where it is smaller (transforms.py's placement). With
masks, each instance's box is its mask's tight box inside the crop (the
mask pixels that the visible window overlaps, in original pixels, mapped
like the image), as detectron2's recompute_boxes; without masks the boxes
are clipped. Instances whose box is narrower or shorter than
data.lsj_min_box_size input pixels after the crop are dropped; an example
left with none trains on negatives only (valid all False). The example's
image_size is the image's extent on the canvas past the crop, as in
transforms.py. This is the training geometry whatever data.resize names;
evaluation resizes by data.resize.

Shapes: h, w original image; H, W model input; N instances; M
data.max_instances; S data.gt_mask_size.
"""

import ml_collections
import tensorflow as tf

from detector.data import transforms


def sample_geometry(
    hw: tf.Tensor, key: tf.Tensor, data: ml_collections.ConfigDict
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(flip, scale, resized [h', w'], crop offset [y, x]):
    transforms.sample_geometry's letterbox rule with its jitter in
    [lsj_min, lsj_max], whatever data.resize (the rule evaluation uses)."""
    jittered = ml_collections.ConfigDict(data.to_dict())
    jittered.resize = "letterbox"
    jittered.scale_jitter = (data.lsj_min, data.lsj_max)
    return transforms.sample_geometry(hw, key, jittered, True)


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


def transform(
    example: dict,
    key: tf.Tensor,
    data: ml_collections.ConfigDict,
    has_masks: bool,
) -> dict:
    """One training example -> fixed-shape model input and targets (the
    keys of transforms.transform)."""
    height, width = data.image_size
    rows, size = data.max_instances, data.gt_mask_size
    hw = tf.cast(tf.shape(example["image"])[:2], tf.float32)
    flip, scale, resized, offset = sample_geometry(hw, key, data)
    factor = tf.tile(tf.reverse(resized / hw, [0]), [2])  # sx, sy, sx, sy
    shift = tf.cast(tf.tile(tf.reverse(offset, [0]), [2]), tf.float32)
    limit = tf.minimum(
        tf.tile(tf.reverse(resized, [0]), [2]) - shift,
        tf.constant([width, height] * 2, tf.float32),
    )
    if has_masks:
        masks = example["masks"]
        flipped = tf.where(flip, tf.reverse(masks, axis=[2]), masks)
        # The visible input [0, limit) in flipped original pixels.
        visible = tf.concat([tf.zeros([2]), limit[2:]], axis=0)
        window = (visible + shift) / factor
        source, found = _mask_boxes(flipped, window)
        boxes = tf.clip_by_value(source * factor - shift, 0.0, limit)
    else:
        x1, y1, x2, y2 = tf.unstack(example["boxes"], axis=1)
        x1, x2 = (
            tf.where(flip, hw[1] - x2, x1),
            tf.where(flip, hw[1] - x1, x2),
        )
        boxes = tf.stack([x1, y1, x2, y2], axis=1) * factor - shift
        boxes = tf.clip_by_value(boxes, 0.0, limit)
        found = tf.ones(tf.shape(boxes)[:1], tf.bool)
    minimum = float(data.lsj_min_box_size)
    keep = tf.where(
        found
        & (boxes[:, 2] - boxes[:, 0] >= minimum)
        & (boxes[:, 3] - boxes[:, 1] >= minimum)
        & (boxes[:, 2] > boxes[:, 0])
        & (boxes[:, 3] > boxes[:, 1])
    )[:, 0]
    keep = keep[:rows]
    boxes = tf.gather(boxes, keep)
    valid = tf.range(rows) < tf.shape(boxes)[0]
    out = {
        "image": transforms._place_image(
            example["image"], tf.cast(resized, tf.int32), offset, flip, data
        ),
        "image_id": tf.cast(example["image_id"], tf.int64),
        "orig_size": tf.cast(hw, tf.int32),
        "scale": tf.cast(scale, tf.float32),
        "image_size": transforms._visible_size(resized, offset, data),
        "image_valid": tf.constant(True),
        "boxes": tf.ensure_shape(transforms._pad_rows(boxes, rows), [rows, 4]),
        "classes": tf.ensure_shape(
            transforms._pad_rows(tf.gather(example["classes"], keep), rows),
            [rows],
        ),
        "valid": valid,
    }
    if has_masks:
        kept = (boxes + shift) / factor  # flipped original pixels
        sx1, sy1, sx2, sy2 = tf.unstack(kept, axis=1)
        sx1, sx2 = (
            tf.where(flip, hw[1] - sx2, sx1),
            tf.where(flip, hw[1] - sx1, sx2),
        )
        crops = transforms._crop_masks(
            example["masks"],
            tf.stack([sx1, sy1, sx2, sy2], axis=1),
            keep,
            flip,
            size,
        )
        masks = tf.ensure_shape(
            transforms._pad_rows(crops, rows), [rows, size, size]
        )
        out["masks"] = masks
        out["mask_valid"] = valid & tf.reduce_any(masks > 0, axis=[1, 2])
    else:
        out["masks"] = tf.zeros([rows, size, size], tf.uint8)
        out["mask_valid"] = tf.zeros([rows], tf.bool)
    return out
