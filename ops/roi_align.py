"""Gather-based ROIAlign over feature maps flattened into one array per image.

Every map an ROI may read from (the FPN levels, or the per-instance GT mask
crops) lives in one array f32[B, X, F]: map after map, each row-major. An ROI
names its map by an offset and a height and width, so every ROI of every
level is pooled by one gather; nothing depends on data-dependent shapes and
the same program runs on TPU, GPU and CPU. Gradients w.r.t. the features are
the scatter-add transpose of that gather.

Sampling follows ROIAlign with the aligned (half-pixel) convention: pixel i
covers [i, i + 1) and its centre is i + 0.5; each of the Q x Q bins averages
s x s bilinear samples placed at the bin's sub-cell centres; a sample more
than one pixel outside the map reads 0 and one up to a pixel outside reads
the border.

Shapes: B batch, R rois per image, X pixels of all maps together, F channels,
Q output (pool) size, s sampling ratio, L pyramid levels.
"""

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ops import box_ops


class FlatPyramid(NamedTuple):
    """Feature levels flattened into one gatherable array.

    features: [B, X, F], levels min_level..max_level, each row-major.
    level_shapes: static ((H, W), ...) per level, from min_level up.
    min_level: the level of level_shapes[0] (its stride is 2**min_level).
    """
    features: jax.Array
    level_shapes: tuple[tuple[int, int], ...]
    min_level: int

    @property
    def max_level(self) -> int:
        return self.min_level + len(self.level_shapes) - 1


def flatten_pyramid(features: Sequence[jax.Array],
                    min_level: int) -> FlatPyramid:
    """Concatenates levels [B, H_l, W_l, C] (min_level first) into one."""
    batch, channels = features[0].shape[0], features[0].shape[-1]
    flat = jnp.concatenate(
        [f.reshape(batch, -1, channels) for f in features], axis=1)
    shapes = tuple((int(f.shape[1]), int(f.shape[2])) for f in features)
    return FlatPyramid(flat, shapes, int(min_level))


def roi_levels(boxes: jax.Array, min_level: int, max_level: int,
               canonical_size: float, canonical_level: int) -> jax.Array:
    """FPN level per box: floor(k0 + log2(sqrt(area) / s0)), clipped.

    Args:
      boxes: f32[..., 4] in input pixels.
      min_level, max_level: the clip range.
      canonical_size, canonical_level: s0 and k0 (224 and 4 in the FPN paper).

    Returns:
      int32[...] levels.
    """
    sqrt_area = jnp.sqrt(box_ops.area(boxes))
    level = jnp.floor(canonical_level + jnp.log2(
        jnp.maximum(sqrt_area, 1e-6) / canonical_size + 1e-8))
    return jnp.clip(level, min_level, max_level).astype(jnp.int32)


def _sample_coords(start: jax.Array, length: jax.Array, output_size: int,
                   sampling_ratio: int) -> jax.Array:
    """Sample positions f32[..., Q * s] along one axis, in index space.

    Sample t = j * s + k of a box sits at start + (j + (k + 0.5) / s) * bin,
    i.e. start + (t + 0.5) / s * bin; index space puts pixel centres at
    integers (hence the - 0.5).
    """
    steps = (np.arange(output_size * sampling_ratio, dtype=np.float32) +
             0.5) / sampling_ratio
    bin_size = length / output_size
    return start[..., None] + steps * bin_size[..., None] - 0.5


def _bilinear_taps(coord: jax.Array,
                   size: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The two taps of linear interpolation along one axis.

    Args:
      coord: f32[..., Q * s] sample positions in index space.
      size: int32[...] the map's extent along this axis.

    Returns:
      (index int32[..., Q * s, 2], weight f32[..., Q * s, 2]); samples outside
      [-1, size] get zero weights.
    """
    size = size[..., None].astype(jnp.float32)
    inside = (coord >= -1.0) & (coord <= size)
    coord = jnp.clip(coord, 0.0, size - 1.0)
    low = jnp.floor(coord)
    high = jnp.minimum(low + 1.0, size - 1.0)
    frac = coord - low
    index = jnp.stack([low, high], axis=-1).astype(jnp.int32)
    weight = jnp.stack([1.0 - frac, frac], axis=-1) * inside[..., None]
    return index, weight


def roi_align(features: jax.Array, boxes: jax.Array, offsets: jax.Array,
              heights: jax.Array, widths: jax.Array, *, output_size: int,
              sampling_ratio: int) -> jax.Array:
    """ROIAlign of every box from its own map inside a flat feature array.

    Args:
      features: [B, X, F] maps laid out one after another, row-major.
      boxes: f32[B, R, 4] (x1, y1, x2, y2) in the pixel units of each box's
        map (pixel i covers [i, i + 1)).
      offsets: int32[B, R] index in X of each box's map's first pixel.
      heights, widths: int32[B, R] each box's map's extent.
      output_size: Q, the pooled grid is Q x Q.
      sampling_ratio: s >= 1 samples per bin along each axis.

    Returns:
      [B, R, Q, Q, F] in the features' dtype.
    """
    batch, rois = boxes.shape[:2]
    size, ratio = output_size, sampling_ratio
    ys = _sample_coords(boxes[..., 1], boxes[..., 3] - boxes[..., 1], size,
                        ratio)
    xs = _sample_coords(boxes[..., 0], boxes[..., 2] - boxes[..., 0], size,
                        ratio)
    y_index, y_weight = _bilinear_taps(ys, heights)  # [B, R, Q * s, 2]
    x_index, x_weight = _bilinear_taps(xs, widths)
    # Every tap of every sample, ordered [B, R, Q (y), Q (x), then the
    # s (y) x s (x) samples of the bin and their 2 (y) x 2 (x) corners], so
    # one contraction over the last axis pools a bin.
    y_shape = (batch, rois, size, 1, ratio, 1, 2, 1)
    x_shape = (batch, rois, 1, size, 1, ratio, 1, 2)
    per_roi = (batch, rois, 1, 1, 1, 1, 1, 1)
    row_start = (offsets.reshape(per_roi) +
                 y_index.reshape(y_shape) * widths.reshape(per_roi))
    flat_index = (row_start + x_index.reshape(x_shape)).reshape(batch, -1)
    taps = ratio * ratio * 4
    weight = (y_weight.reshape(y_shape) * x_weight.reshape(x_shape) /
              (ratio * ratio)).reshape(batch, rois, size, size, taps)
    values = jax.vmap(lambda f, i: jnp.take(f, i, axis=0, mode="clip"))(
        features, flat_index)
    values = values.reshape(batch, rois, size, size, taps, -1)
    pooled = jnp.einsum("brpqkc,brpqk->brpqc", values,
                        weight.astype(values.dtype),
                        preferred_element_type=jnp.float32)
    return pooled.astype(features.dtype)


def multilevel_roi_align(pyramid: FlatPyramid, boxes: jax.Array, *,
                         output_size: int, sampling_ratio: int,
                         canonical_size: float,
                         canonical_level: int) -> jax.Array:
    """ROIAlign of boxes in input pixels, each from its FPN level.

    Args:
      pyramid: the flattened levels (see flatten_pyramid).
      boxes: f32[B, R, 4] in input pixels.
      output_size, sampling_ratio: as in roi_align.
      canonical_size, canonical_level: the level rule (see roi_levels).

    Returns:
      [B, R, Q, Q, F] in the features' dtype.
    """
    boxes = boxes.astype(jnp.float32)
    levels = roi_levels(boxes, pyramid.min_level, pyramid.max_level,
                        canonical_size, canonical_level)
    shapes = np.asarray(pyramid.level_shapes, np.int32)  # [L, 2]
    sizes = shapes[:, 0] * shapes[:, 1]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
    rel = levels - pyramid.min_level
    scale = jnp.exp2(-levels.astype(jnp.float32))[..., None]
    return roi_align(pyramid.features, boxes * scale,
                     jnp.asarray(offsets)[rel], jnp.asarray(shapes[:, 0])[rel],
                     jnp.asarray(shapes[:, 1])[rel], output_size=output_size,
                     sampling_ratio=sampling_ratio)
