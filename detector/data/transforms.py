"""Per-example TensorFlow transforms: flip, resize, crop, pad, and the
targets (their GT masks in gt_masks.py's layouts).
Shapes: h, w original image; H, W model input; N instances; M
data.max_instances (docs/architecture.md, "Resizing").
"""

from collections.abc import Callable

import ml_collections
import numpy as np
import tensorflow as tf
from absl import logging

from detector.config import data as data_config
from detector.data import gt_masks
from detector.data.gt_masks import flip_x
from detector.imaging import resize


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


def place_image(
    image: tf.Tensor,
    resized_hw: tf.Tensor,
    offset: tf.Tensor,
    flip: tf.Tensor,
    data: ml_collections.ConfigDict,
) -> tf.Tensor:
    """Flip, resize, crop at `offset`, normalise, zero-pad: f32 [H, W, 3]."""
    height, width = data.image_size
    image = flip_x(image, flip, 1)
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


def pad_rows(tensor: tf.Tensor, rows: int) -> tf.Tensor:
    """Zero-pads the leading dimension to `rows`."""
    pad = rows - tf.shape(tensor)[0]
    paddings = [[0, pad]] + [[0, 0]] * (tensor.shape.rank - 1)
    return tf.pad(tensor, paddings)


def flip_boxes(
    boxes: tf.Tensor, flip: tf.Tensor, width: tf.Tensor
) -> tf.Tensor:
    """f32[N, 4] boxes mirrored left-right in an image `width` wide, when
    `flip`."""
    x1, y1, x2, y2 = tf.unstack(boxes, axis=1)
    return tf.stack(
        [
            tf.where(flip, width - x2, x1),
            y1,
            tf.where(flip, width - x1, x2),
            y2,
        ],
        axis=1,
    )


def _flip(key: tf.Tensor, data: ml_collections.ConfigDict) -> tf.Tensor:
    """bool[]: flip left-right (half the time when data.hflip)."""
    return tf.logical_and(
        tf.constant(bool(data.hflip)),
        tf.random.stateless_uniform([], key) < 0.5,
    )


def _scale_and_size(
    rule: str,
    hw: tf.Tensor,
    canvas: tuple[int, int],
    jitter: tf.Tensor | float = resize.DEFAULTS.jitter,
    min_size: tf.Tensor | float = resize.DEFAULTS.min_size,
    max_size: float = resize.DEFAULTS.max_size,
) -> tuple[tf.Tensor, tf.Tensor]:
    """(scale f32[], resized f32[2]) by `resize.RULES[rule]`, on the host."""
    canvas = tuple(int(v) for v in canvas)

    def size(hw, jitter, min_size):
        options = resize.Options(jitter, min_size, float(max_size))
        return resize.scale_and_size(rule, hw, canvas, options)

    scale, resized = tf.numpy_function(
        size,
        [hw, tf.cast(jitter, tf.float32), tf.cast(min_size, tf.float64)],
        [tf.float32, tf.float32],
        stateful=False,
    )
    return tf.ensure_shape(scale, []), tf.ensure_shape(resized, [2])


def letterbox_geometry(
    hw: tf.Tensor,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
    jitter: tuple[float, float],
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """'letterbox': a jitter factor in `jitter` drawn from `key`, then a
    random crop where the image exceeds H x W; at eval (no key) neither."""
    height, width = data.image_size
    if key is None:
        scale, resized = _scale_and_size("letterbox", hw, data.image_size)
        return tf.constant(False), scale, resized, tf.zeros([2], tf.int32)
    flip_key, jitter_key, crop_key = tf.unstack(
        tf.random.experimental.stateless_split(key, 3)
    )
    flip = _flip(flip_key, data)
    low, high = jitter
    factor = tf.random.stateless_uniform([], jitter_key, low, high)
    scale, resized = _scale_and_size(
        "letterbox", hw, data.image_size, jitter=factor
    )
    room = tf.maximum(resized - tf.constant([height, width], tf.float32), 0.0)
    offset = tf.cast(
        tf.floor(tf.random.stateless_uniform([2], crop_key) * (room + 1.0)),
        tf.int32,
    )
    return flip, scale, resized, offset


def _shortest_edge_geometry(
    hw: tf.Tensor,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """'shortest_edge': one of `data.min_size` drawn from `key` (the last
    at eval); no jitter, no crop."""
    sides = tf.constant(data.min_size, tf.float64)
    if key is None:
        flip, side = tf.constant(False), sides[-1]
    else:
        flip_key, size_key = tf.unstack(
            tf.random.experimental.stateless_split(key, 2)
        )
        flip = _flip(flip_key, data)
        pick = tf.random.stateless_uniform(
            [], size_key, 0, len(data.min_size), tf.int32
        )
        side = sides[pick]
    scale, resized = _scale_and_size(
        "shortest_edge",
        hw,
        data.image_size,
        min_size=side,
        max_size=data.max_size,
    )
    return flip, scale, resized, tf.zeros([2], tf.int32)


# data.resize -> (hw, key or None, data) -> (flip, scale, resized, offset):
# each rule's training draws; resize.RULES sizes the image.
GEOMETRIES = {
    "letterbox": lambda hw, key, data: letterbox_geometry(
        hw, key, data, data.scale_jitter
    ),
    "shortest_edge": _shortest_edge_geometry,
}


def sample_geometry(
    hw: tf.Tensor,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
    training: bool,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(flip bool[], scale f32[], resized f32[2], crop offset i32[2]).

    Training draws them from the stateless `key`; eval uses no flip, no
    jitter and no crop. Boxes map with the per-axis factor resized / hw.
    """
    return GEOMETRIES[data.resize](hw, key if training else None, data)


def transform(
    example: dict,
    key: tf.Tensor | None,
    data: ml_collections.ConfigDict,
    training: bool,
    masks: gt_masks.GtMasks | None,
) -> dict:
    """One example -> fixed-shape model input (and targets when training).

    `example`: image uint8 [h, w, 3], image_id int64 and, when training,
    boxes f32 [N, 4], classes i32 [N], masks uint8 [N, h, w]
    (masks.present). `key`: int64 [2] stateless seed and `masks` the GT
    masks' layout (training only).
    """
    hw = tf.cast(tf.shape(example["image"])[:2], tf.float32)
    flip, scale, resized, offset = sample_geometry(hw, key, data, training)
    out = model_input(example, hw, flip, scale, resized, offset, data)
    if training:
        out.update(
            training_targets(example, hw, flip, resized, offset, data, masks)
        )
    return out


def model_input(
    example: dict,
    hw: tf.Tensor,
    flip: tf.Tensor,
    scale: tf.Tensor,
    resized: tf.Tensor,
    offset: tf.Tensor,
    data: ml_collections.ConfigDict,
) -> dict:
    """The input keys of an example placed by its geometry (no targets)."""
    return {
        "image": place_image(
            example["image"], tf.cast(resized, tf.int32), offset, flip, data
        ),
        "image_id": tf.cast(example["image_id"], tf.int64),
        "orig_size": tf.cast(hw, tf.int32),
        "scale": tf.cast(scale, tf.float32),
        "image_size": visible_size(resized, offset, data),
        "image_valid": tf.constant(True),
    }


def visible_size(
    resized: tf.Tensor, offset: tf.Tensor, data: ml_collections.ConfigDict
) -> tf.Tensor:
    """i32[2]: the image's (height, width) on the canvas, past the crop."""
    return tf.minimum(
        tf.cast(resized, tf.int32) - offset,
        tf.constant(data.image_size, tf.int32),
    )


def _clipped_boxes(
    example: dict, geometry: tuple[tf.Tensor, ...]
) -> tuple[tf.Tensor, tf.Tensor]:
    """The instances' boxes mapped and clipped to the input, and the rows
    kept (not empty there)."""
    hw, flip, factor, shift, limit = geometry
    boxes = flip_boxes(example["boxes"], flip, hw[1]) * factor - shift
    boxes = tf.clip_by_value(boxes, 0.0, limit)
    keep = tf.where((boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))[
        :, 0
    ]
    return boxes, keep


def training_targets(
    example: dict,
    hw: tf.Tensor,
    flip: tf.Tensor,
    resized: tf.Tensor,
    offset: tf.Tensor,
    data: ml_collections.ConfigDict,
    masks: gt_masks.GtMasks,
    kept_boxes: Callable[..., tuple[tf.Tensor, tf.Tensor]] = _clipped_boxes,
) -> dict:
    """Maps boxes and masks through the geometry; pads them to M.

    `kept_boxes(example, (hw, flip, factor, shift, limit))` gives the
    input boxes f32[N, 4] and the rows kept (`_clipped_boxes`; lsj.py
    recomputes them from the masks).
    """
    factor, shift, limit = box_map(hw, resized, offset, data)
    boxes, keep = kept_boxes(example, (hw, flip, factor, shift, limit))
    return targets(
        example,
        tf.gather(boxes, keep),
        keep,
        (hw, flip, factor, shift),
        data,
        masks,
    )


def box_map(
    hw: tf.Tensor,
    resized: tf.Tensor,
    offset: tf.Tensor,
    data: ml_collections.ConfigDict,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(factor, shift, limit), each f32[4] in (x, y, x, y) order: a flipped
    original box maps to the input as box * factor - shift, clipped to
    [0, limit]."""
    height, width = data.image_size
    # Per-axis factors keep the boxes on the (integer-sized) resized image.
    factor = tf.tile(tf.reverse(resized / hw, [0]), [2])
    shift = tf.cast(tf.tile(tf.reverse(offset, [0]), [2]), tf.float32)
    limit = tf.minimum(
        tf.tile(tf.reverse(resized, [0]), [2]) - shift,
        tf.constant([width, height] * 2, tf.float32),
    )
    return factor, shift, limit


def targets(
    example: dict,
    boxes: tf.Tensor,
    keep: tf.Tensor,
    geometry: gt_masks.Geometry,
    data: ml_collections.ConfigDict,
    masks: gt_masks.GtMasks,
) -> dict:
    """The kept instances (`keep`, at input `boxes` f32[K, 4]) padded to M:
    boxes, classes, valid, and masks in `masks.layout` (gt_masks.py).
    `geometry` is (hw, flip, factor, shift): the input size, the flip and
    `box_map`'s factor and shift."""
    hw, flip, factor, shift = geometry
    shape = data_config.gt_masks_shape(masks.layout, data)
    rows = shape[0]
    valid = tf.range(rows) < tf.shape(boxes)[0]
    out = {
        "boxes": tf.ensure_shape(pad_rows(boxes, rows), [rows, 4]),
        "classes": tf.ensure_shape(
            pad_rows(tf.gather(example["classes"], keep), rows), [rows]
        ),
        "valid": valid,
    }
    if not masks.present:
        out["masks"] = tf.zeros(shape, tf.uint8)
        out["mask_valid"] = tf.zeros([rows], tf.bool)
        return out
    source = flip_boxes((boxes + shift) / factor, flip, hw[1])  # original
    made = gt_masks.LAYOUTS[masks.layout](
        example["masks"], keep, source, geometry, data
    )
    padded = tf.ensure_shape(pad_rows(made, rows), shape)
    out["masks"] = padded
    out["mask_valid"] = valid & tf.reduce_any(padded > 0, axis=[1, 2])
    return out
