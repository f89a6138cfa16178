"""A training example's GT masks in the layout its mask target rule reads
(config/data.py MASK_LAYOUTS; docs/training.md "Training conventions").

- `crop`: each mask resampled over its box, S x S, binary at >= 0.5;
- `canvas`: each mask at its image's resized size, placed on the canvas as
  the image is (flip, nearest resize, crop, zero padding), eight pixels a
  byte along x in numpy's packbits order (the first pixel the high bit).
  The resize is torchvision's for masks (GeneralizedRCNNTransform:
  `interpolate(mode='nearest')` with its recomputed scale): output pixel i
  reads source pixel min(floor(i * (n / n')), n - 1) in float32.

Shapes: N instances of the source, K kept, h, w the original image, H, W
the canvas (data.image_size), S data.gt_mask_size.
"""

from collections.abc import Callable
from typing import NamedTuple

import ml_collections
import tensorflow as tf

# A geometry: (hw f32[2], flip bool[], factor f32[4], shift f32[4]), the
# original size, the flip and transforms.box_map's factor and shift.
Geometry = tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]


class GtMasks(NamedTuple):
    """What a training example's masks become.

    Attributes:
      layout: a value of config/data.py MASK_LAYOUTS.
      present: whether the source has masks (else zero masks, none valid).
    """

    layout: str
    present: bool


def flip_x(tensor: tf.Tensor, flip: tf.Tensor, axis: int) -> tf.Tensor:
    """`tensor` reversed along its x `axis` when `flip` (images, masks)."""
    return tf.cond(flip, lambda: tf.reverse(tensor, [axis]), lambda: tensor)


def crop(
    masks: tf.Tensor,
    keep: tf.Tensor,
    source_boxes: tf.Tensor,
    geometry: Geometry,
    data: ml_collections.ConfigDict,
) -> tf.Tensor:
    """u8[K, S, S]: masks[keep] resampled over their (original-pixel,
    unflipped) boxes f32[K, 4].

    Samples sit at the centres of an S x S grid over each box, so the crop
    covers the box exactly; flipped examples mirror the crops.
    """
    flip = geometry[1]
    size = data.gt_mask_size
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
        masks[..., None], crop_boxes, tf.cast(keep, tf.int32), [size, size]
    )
    crops = flip_x(crops, flip, 2)
    return tf.cast(crops[..., 0] >= 0.5, tf.uint8)


def nearest_rows(
    source: tf.Tensor, resized: tf.Tensor, start: tf.Tensor, count: tf.Tensor
) -> tf.Tensor:
    """i32[count]: the source index of resized pixels start .. start +
    count - 1 along one axis of `source` pixels resized to `resized`
    (torch's nearest rule, float32)."""
    scale = tf.cast(source, tf.float32) / tf.cast(resized, tf.float32)
    index = tf.cast(tf.range(start, start + count), tf.float32)
    rows = tf.cast(tf.floor(index * scale), tf.int32)
    return tf.minimum(rows, tf.cast(source, tf.int32) - 1)


def pack_bits(masks: tf.Tensor) -> tf.Tensor:
    """u8[K, H, W / 8] of binary u8[K, H, W] (W a multiple of 8), as
    numpy's packbits along the last axis."""
    shape = tf.shape(masks)
    octets = tf.reshape(
        tf.cast(masks > 0, tf.uint8), [shape[0], shape[1], shape[2] // 8, 8]
    )
    packed = octets[..., 0] * 128
    for bit in range(1, 8):  # distinct bits: no carry
        packed += octets[..., bit] * (128 >> bit)
    return packed


def canvas(
    masks: tf.Tensor,
    keep: tf.Tensor,
    source_boxes: tf.Tensor,
    geometry: Geometry,
    data: ml_collections.ConfigDict,
) -> tf.Tensor:
    """u8[K, H, ceil(W / 8)]: masks[keep] flipped, resized to the image's
    size by the nearest rule, cropped at its offset and zero-padded to the
    canvas, bit-packed. Only the visible pixels are resampled."""
    del source_boxes
    hw, flip, factor, shift = geometry
    height, width = data.image_size
    packed_width = -(-width // 8) * 8
    resized = tf.cast(tf.round(hw * tf.stack([factor[1], factor[0]])), tf.int32)
    offset = tf.cast(tf.stack([shift[1], shift[0]]), tf.int32)
    visible = tf.maximum(
        tf.minimum(resized - offset, tf.constant([height, width])), 0
    )
    source = tf.shape(masks)[1:3]
    rows = nearest_rows(source[0], resized[0], offset[0], visible[0])
    cols = nearest_rows(source[1], resized[1], offset[1], visible[1])
    kept = flip_x(tf.gather(masks, keep), flip, 2)
    # Columns first (a gather per pixel) on the source's rows, then whole
    # rows.
    placed = tf.gather(tf.gather(kept, cols, axis=2), rows, axis=1)
    # Packed where the image is, then zero bytes to the canvas.
    octets = -(-visible[1] // 8)
    packed = pack_bits(
        tf.pad(placed, [[0, 0], [0, 0], [0, octets * 8 - visible[1]]])
    )
    return tf.pad(
        packed,
        [[0, 0], [0, height - visible[0]], [0, packed_width // 8 - octets]],
    )


# config/data.py MASK_LAYOUTS value -> (masks u8[N, h, w], keep i64[K],
# source boxes f32[K, 4], geometry, data) -> u8[K, ...].
LAYOUTS: dict[str, Callable[..., tf.Tensor]] = {
    "crop": crop,
    "canvas": canvas,
}
