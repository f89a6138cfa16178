"""Per-example TensorFlow transforms: augment, resize, pad, crop GT masks.

Shapes: h, w original image; H, W model input (`data.image_size`); N
instances of the example; M `data.max_instances`; S `data.gt_mask_size`.

Geometry (the contract the model relies on): the image is optionally flipped
left-right, resized by the rule `data.resize` names (`GEOMETRIES`), cropped
at a random offset when it exceeds H x W (letterbox's jitter), placed at
the top left and padded bottom/right. 'letterbox' resizes by
`scale = min(H / h, W / w) * jitter` (jitter = 1 at eval) to
max(round([h, w] * scale), 1) per axis (float32, half to even);
'shortest_edge' is torchvision's rule (`_shortest_edge_geometry`). Boxes
follow the same map, are clipped to the visible image and dropped when
empty. Each kept instance's mask is resampled from the full-resolution
original mask over exactly its final box, S x S. Boxes scale by
resized / [h, w] per axis; evaluation maps them back with that same factor
from the example's `image_size` (its visible height and width on the
canvas, i32[2]) and `orig_size`.
"""

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging


class TruncationLog:
    """Host-side log of images cut to max_instances: first few, then quiet."""

    def __init__(self, max_instances: int, max_logged: int = 10):
        self.max_instances = max_instances
        self.max_logged = max_logged
        self.count = 0

    def __call__(self, image_id: np.int64, num_instances: np.int32) -> np.int64:
        self.count += 1
        if self.count <= self.max_logged:
            logging.warning(
                "image %d has %d instances > data.max_instances=%d; "
                "keeping the %d largest%s",
                image_id,
                num_instances,
                self.max_instances,
                self.max_instances,
                " (further cuts are not logged)"
                if self.count == self.max_logged
                else "",
            )
        return np.int64(self.count)


def limit_instances(example: dict, log: TruncationLog) -> dict:
    """Keeps the `log.max_instances` largest boxes, in order; logs a cut."""
    boxes = example["boxes"]
    num = tf.shape(boxes)[0]
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = tf.sort(
        tf.math.top_k(areas, tf.minimum(num, log.max_instances)).indices
    )

    def report():
        return tf.numpy_function(
            log, [example["image_id"], num], tf.int64, stateful=True
        )

    logged = tf.cond(
        num > log.max_instances, report, lambda: tf.constant(0, tf.int64)
    )
    with tf.control_dependencies([logged]):
        keep = tf.identity(keep)
    out = dict(example)
    for key in ("boxes", "classes", "masks"):
        if key in example:
            out[key] = tf.gather(example[key], keep)
    return out


def _place_image(
    image: tf.Tensor,
    resized_hw: tf.Tensor,
    offset: tf.Tensor,
    flip: tf.Tensor,
    data: ml_collections.ConfigDict,
) -> tf.Tensor:
    """Flip, resize, crop at `offset`, normalise, zero-pad: f32 [H, W, 3]."""
    height, width = data.image_size
    image = tf.where(flip, tf.reverse(image, axis=[1]), image)
    image = tf.image.resize(image, resized_hw, method="bilinear")
    image = image[offset[0] : offset[0] + height, offset[1] : offset[1] + width]
    mean = tf.constant(data.pixel_mean, tf.float32)
    std = tf.constant(data.pixel_std, tf.float32)
    image = (image - mean) / std
    shape = tf.shape(image)
    image = tf.pad(
        image, [[0, height - shape[0]], [0, width - shape[1]], [0, 0]]
    )
    return tf.ensure_shape(image, [height, width, 3])


def _crop_masks(
    masks: tf.Tensor,
    source_boxes: tf.Tensor,
    indices: tf.Tensor,
    flip: tf.Tensor,
    size: int,
) -> tf.Tensor:
    """Resamples masks[indices] over their (original-pixel) boxes: [K, S, S].

    Samples sit at the centres of an S x S grid over each box, so the crop
    covers the box exactly; flipped examples mirror the crops.
    """
    # One replicated pixel around each mask lets samples between the last
    # pixel centre and the image edge read the edge pixel, not zero.
    masks = tf.pad(masks, [[0, 0], [1, 1], [1, 1]], mode="SYMMETRIC")
    x1, y1, x2, y2 = tf.unstack(source_boxes, axis=1)
    half_x = 0.5 * (x2 - x1) / size
    half_y = 0.5 * (y2 - y1) / size
    # crop_and_resize puts normalised coordinate c at pixel index c*(n - 1);
    # continuous coordinate p is at index p - 0.5 + 1 of the padded mask.
    norm_y = tf.cast(tf.shape(masks)[1] - 1, tf.float32)
    norm_x = tf.cast(tf.shape(masks)[2] - 1, tf.float32)
    crop_boxes = tf.stack(
        [
            (y1 + half_y + 0.5) / norm_y,
            (x1 + half_x + 0.5) / norm_x,
            (y2 - half_y + 0.5) / norm_y,
            (x2 - half_x + 0.5) / norm_x,
        ],
        axis=1,
    )
    crops = tf.image.crop_and_resize(
        masks[..., None], crop_boxes, tf.cast(indices, tf.int32), [size, size]
    )
    crops = tf.where(flip, tf.reverse(crops, axis=[2]), crops)
    return tf.cast(crops[..., 0] >= 0.5, tf.uint8)


def _pad_rows(tensor: tf.Tensor, rows: int) -> tf.Tensor:
    """Zero-pads the leading dimension to `rows`."""
    pad = rows - tf.shape(tensor)[0]
    paddings = [[0, pad]] + [[0, 0]] * (tensor.shape.rank - 1)
    return tf.pad(tensor, paddings)


def _letterbox_geometry(
    hw: tf.Tensor,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
    training: bool,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """'letterbox': the long side fitted to H x W, jittered and cropped.

    Training scales by `data.scale_jitter` and crops at a random offset;
    the size is max(round(hw * scale), 1) in float32 (half to even).
    """
    height, width = data.image_size
    base = tf.minimum(height / hw[0], width / hw[1])
    if not training:
        resized = tf.maximum(tf.round(hw * base), 1.0)
        return tf.constant(False), base, resized, tf.zeros([2], tf.int32)
    flip_key, jitter_key, crop_key = tf.unstack(
        tf.random.experimental.stateless_split(key, 3)
    )
    flip = _flip(flip_key, data)
    low, high = data.scale_jitter
    scale = base * tf.random.stateless_uniform([], jitter_key, low, high)
    resized = tf.maximum(tf.round(hw * scale), 1.0)
    room = tf.maximum(resized - tf.constant([height, width], tf.float32), 0.0)
    offset = tf.cast(
        tf.floor(tf.random.stateless_uniform([2], crop_key) * (room + 1.0)),
        tf.int32,
    )
    return flip, scale, resized, offset


def _flip(key: tf.Tensor, data: ml_collections.ConfigDict) -> tf.Tensor:
    """bool[]: flip left-right (half the time when data.hflip)."""
    return tf.logical_and(
        tf.constant(bool(data.hflip)),
        tf.random.stateless_uniform([], key) < 0.5,
    )


def _shortest_edge_geometry(
    hw: tf.Tensor,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
    training: bool,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """'shortest_edge': torchvision's and detectron2's resize.

    scale = min(s / short, data.max_size / long) with s one of
    `data.min_size` drawn per image in training (the last one at eval),
    size floor(hw * scale) in float64 (`images.shortest_edge_size`). An
    image larger than H x W is letterboxed onto it. No jitter, no crop.
    """
    sides = tf.constant(data.min_size, tf.float64)
    if training:
        flip_key, size_key = tf.unstack(
            tf.random.experimental.stateless_split(key, 2)
        )
        flip = _flip(flip_key, data)
        pick = tf.random.stateless_uniform(
            [], size_key, 0, len(data.min_size), tf.int32
        )
        side = sides[pick]
    else:
        flip, side = tf.constant(False), sides[-1]
    hw64 = tf.cast(hw, tf.float64)
    scale = tf.minimum(
        side / tf.reduce_min(hw64),
        float(data.max_size) / tf.reduce_max(hw64),
    )
    resized = tf.cast(tf.maximum(tf.floor(hw64 * scale), 1.0), tf.float32)
    canvas = tf.constant(data.image_size, tf.float32)
    fit = tf.reduce_min(canvas / hw)
    over = tf.reduce_any(resized > canvas)
    resized = tf.where(over, tf.maximum(tf.round(hw * fit), 1.0), resized)
    scale = tf.where(over, fit, tf.cast(scale, tf.float32))
    return flip, scale, resized, tf.zeros([2], tf.int32)


# data.resize -> (hw, key, data, training) -> (flip, scale, resized,
# offset); imaging/images.py's RESIZE_RULES computes the same sizes.
GEOMETRIES = {
    "letterbox": _letterbox_geometry,
    "shortest_edge": _shortest_edge_geometry,
}


def sample_geometry(
    hw: tf.Tensor,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
    training: bool,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(flip, scale, resized [h', w'], crop offset [y, x]) of an example.

    flip bool[], scale f32[], resized f32[2] (by the rule `data.resize`
    of `GEOMETRIES`), offset i32[2]. Training draws them from the
    stateless `key`; eval uses no flip, no jitter and no crop. Boxes map
    with the per-axis factor resized / hw, not with `scale`.
    """
    return GEOMETRIES[data.resize](hw, key, data, training)


def transform(
    example: dict,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
    training: bool,
    has_masks: bool,
) -> dict:
    """One example -> fixed-shape model input (and targets when training).

    `example`: image uint8 [h, w, 3], image_id int64 and, when training,
    boxes f32 [N, 4], classes i32 [N], masks uint8 [N, h, w] (has_masks).
    `key`: int64 [2] stateless seed (training only).
    """
    hw = tf.cast(tf.shape(example["image"])[:2], tf.float32)
    flip, scale, resized, offset = sample_geometry(hw, key, data, training)
    out = {
        "image": _place_image(
            example["image"], tf.cast(resized, tf.int32), offset, flip, data
        ),
        "image_id": tf.cast(example["image_id"], tf.int64),
        "orig_size": tf.cast(hw, tf.int32),
        "scale": tf.cast(scale, tf.float32),
        "image_size": _visible_size(resized, offset, data),
        "image_valid": tf.constant(True),
    }
    if training:
        out.update(
            _transform_targets(
                example, hw, flip, resized, offset, data, has_masks
            )
        )
    return out


def _visible_size(
    resized: tf.Tensor, offset: tf.Tensor, data: ml_collections.ConfigDict
) -> tf.Tensor:
    """i32[2]: the image's (height, width) on the canvas, past the crop."""
    return tf.minimum(
        tf.cast(resized, tf.int32) - offset,
        tf.constant(data.image_size, tf.int32),
    )


def _transform_targets(
    example: dict,
    hw: tf.Tensor,
    flip: tf.Tensor,
    resized: tf.Tensor,
    offset: tf.Tensor,
    data: ml_collections.ConfigDict,
    has_masks: bool,
) -> dict:
    """Maps boxes and masks through the geometry; pads them to M."""
    height, width = data.image_size
    rows, size = data.max_instances, data.gt_mask_size
    x1, y1, x2, y2 = tf.unstack(example["boxes"], axis=1)
    x1, x2 = (tf.where(flip, hw[1] - x2, x1), tf.where(flip, hw[1] - x1, x2))
    # Per-axis factors keep the boxes on the (integer-sized) resized image.
    factor = tf.tile(tf.reverse(resized / hw, [0]), [2])  # sx, sy, sx, sy
    shift = tf.cast(tf.tile(tf.reverse(offset, [0]), [2]), tf.float32)
    limit = tf.minimum(
        tf.tile(tf.reverse(resized, [0]), [2]) - shift,
        tf.constant([width, height] * 2, tf.float32),
    )
    boxes = tf.stack([x1, y1, x2, y2], axis=1) * factor - shift
    boxes = tf.clip_by_value(boxes, 0.0, limit)
    keep = tf.where((boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))[
        :, 0
    ]
    boxes = tf.gather(boxes, keep)
    count = tf.shape(boxes)[0]
    valid = tf.range(rows) < count
    out = {
        "boxes": tf.ensure_shape(_pad_rows(boxes, rows), [rows, 4]),
        "classes": tf.ensure_shape(
            _pad_rows(tf.gather(example["classes"], keep), rows), [rows]
        ),
        "valid": valid,
    }
    if has_masks:
        source = (boxes + shift) / factor  # flipped original pixels
        sx1, sy1, sx2, sy2 = tf.unstack(source, axis=1)
        sx1, sx2 = (
            tf.where(flip, hw[1] - sx2, sx1),
            tf.where(flip, hw[1] - sx1, sx2),
        )
        crops = _crop_masks(
            example["masks"],
            tf.stack([sx1, sy1, sx2, sy2], axis=1),
            keep,
            flip,
            size,
        )
        masks = tf.ensure_shape(_pad_rows(crops, rows), [rows, size, size])
        out["masks"] = masks
        out["mask_valid"] = valid & tf.reduce_any(masks > 0, axis=[1, 2])
    else:
        out["masks"] = tf.zeros([rows, size, size], tf.uint8)
        out["mask_valid"] = tf.zeros([rows], tf.bool)
    return out


def padding_example(data: ml_collections.ConfigDict) -> dict:
    """An eval padding row: zero image, image_id -1, image_valid False."""
    height, width = data.image_size
    return {
        "image": tf.zeros([height, width, 3], tf.float32),
        "image_id": tf.constant(-1, tf.int64),
        "orig_size": tf.zeros([2], tf.int32),
        "scale": tf.constant(1.0, tf.float32),
        "image_size": tf.constant(data.image_size, tf.int32),
        "image_valid": tf.constant(False),
    }
