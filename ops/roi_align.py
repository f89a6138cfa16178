"""Gather-based ROIAlign over feature maps flattened into one array per image.

Shapes: B batch, R rois per image, X pixels of all maps, F channels, Q pool
size, s sampling ratio, L levels, T = 2 s Q taps per axis (matmul).
"""

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ops import box_ops


class FlatPyramid(NamedTuple):
    """Feature levels flattened into one gatherable array.

    features: [B, X, F], levels min_level..max_level, each row-major.
    level_shapes: static ((H, W), ...) per level, from min_level up.
    min_level: the level of level_shapes[0] (its stride is 2**min_level).
    extents: int32[B, 2] each image's (height, width) in input pixels at
      the maps' top left: at a level of stride t a roi samples as from a
      map of ceil(extent / t) cells (roi_align's limits); None: the whole
      maps.
    """

    features: jax.Array
    level_shapes: tuple[tuple[int, int], ...]
    min_level: int
    extents: jax.Array | None = None

    @property
    def max_level(self) -> int:
        return self.min_level + len(self.level_shapes) - 1


def flatten_pyramid(
    features: Sequence[jax.Array],
    min_level: int,
    extents: jax.Array | None = None,
) -> FlatPyramid:
    """Concatenates levels [B, H_l, W_l, C] (min_level first) into one;
    `extents` as FlatPyramid's."""
    batch, channels = features[0].shape[0], features[0].shape[-1]
    flat = jnp.concatenate(
        [f.reshape(batch, -1, channels) for f in features], axis=1
    )
    shapes = tuple((int(f.shape[1]), int(f.shape[2])) for f in features)
    return FlatPyramid(flat, shapes, int(min_level), extents)


def roi_levels(
    boxes: jax.Array,
    min_level: int,
    max_level: int,
    canonical_size: float,
    canonical_level: int,
    eps: float = 0.0,
) -> jax.Array:
    """FPN level per box: floor(k0 + log2(sqrt(area) / s0) + eps), clipped.

    Args:
      boxes: f32[..., 4] in input pixels.
      min_level, max_level: the clip range.
      canonical_size, canonical_level: s0 and k0 (224 and 4 in the FPN paper).
      eps: added before the floor (torchvision's LevelMapper adds 1e-6, so
        a box of exactly 112 x 112 maps to level 3 despite rounding).

    Returns:
      int32[...] levels.
    """
    sqrt_area = jnp.sqrt(box_ops.area(boxes))
    level = jnp.floor(
        canonical_level
        + jnp.log2(jnp.maximum(sqrt_area, 1e-6) / canonical_size + 1e-8)
        + eps
    )
    return jnp.clip(level, min_level, max_level).astype(jnp.int32)


def _sample_coords(
    start: jax.Array,
    length: jax.Array,
    output_size: int,
    sampling_ratio: int,
    aligned: bool = True,
) -> jax.Array:
    """Sample positions f32[..., Q * s] along one axis, in index space.

    Sample t = j * s + k of a box sits at start + (j + (k + 0.5) / s) * bin,
    i.e. start + (t + 0.5) / s * bin; index space puts pixel centres at
    integers (hence the - 0.5 when aligned). Not aligned: no shift, and the
    length is at least 1.
    """
    steps = (
        np.arange(output_size * sampling_ratio, dtype=np.float32) + 0.5
    ) / sampling_ratio
    if not aligned:
        length = jnp.maximum(length, 1.0)
    bin_size = length / output_size
    shift = 0.5 if aligned else 0.0
    return start[..., None] + steps * bin_size[..., None] - shift


def _bilinear_taps(
    coord: jax.Array, size: jax.Array
) -> tuple[jax.Array, jax.Array]:
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


@jax.custom_vjp
def take_rows(features: jax.Array, index: jax.Array) -> jax.Array:
    """features [B, X, F] at index int32[B, N] -> [B, N, F] (clipped).

    The gradient scatter-adds in float32 whatever the features' dtype, then
    casts: bfloat16 accumulation loses the small contributions of many rois
    to one pixel, and a bfloat16 scatter-add is emulated on GPUs.
    """
    return jax.vmap(lambda f, i: jnp.take(f, i, axis=0, mode="clip"))(
        features, index
    )


def _take_rows_fwd(features, index):
    # An empty [X, 0] array carries the features' row count and dtype.
    carrier = jnp.zeros((features.shape[1], 0), features.dtype)
    return take_rows(features, index), (index, carrier)


def _take_rows_bwd(residual, cotangent):
    index, carrier = residual
    rows = carrier.shape[0]
    index = jnp.clip(index, 0, rows - 1)
    grad = jax.vmap(
        lambda i, g: (
            jnp.zeros((rows, g.shape[-1]), jnp.float32)
            .at[i]
            .add(g.astype(jnp.float32))
        )
    )(index, cotangent)
    return grad.astype(carrier.dtype), None


take_rows.defvjp(_take_rows_fwd, _take_rows_bwd)


def _gather_pool(features, offsets, widths, taps, *, size: int, ratio: int):
    """Every bin's s x s x 4 taps gathered, then one weighted sum per bin."""
    (y_index, y_weight), (x_index, x_weight) = taps
    batch, rois = offsets.shape
    # Every tap of every sample, ordered [B, R, Q (y), Q (x), then the
    # s (y) x s (x) samples of the bin and their 2 (y) x 2 (x) corners], so
    # one contraction over the last axis pools a bin.
    y_shape = (batch, rois, size, 1, ratio, 1, 2, 1)
    x_shape = (batch, rois, 1, size, 1, ratio, 1, 2)
    per_roi = (batch, rois, 1, 1, 1, 1, 1, 1)
    row_start = offsets.reshape(per_roi) + y_index.reshape(
        y_shape
    ) * widths.reshape(per_roi)
    flat_index = (row_start + x_index.reshape(x_shape)).reshape(batch, -1)
    num_taps = ratio * ratio * 4
    weight = (
        y_weight.reshape(y_shape) * x_weight.reshape(x_shape) / (ratio * ratio)
    ).reshape(batch, rois, size, size, num_taps)
    values = take_rows(features, flat_index)
    values = values.reshape(batch, rois, size, size, num_taps, -1)
    return jnp.einsum(
        "brpqkc,brpqk->brpqc",
        values,
        weight.astype(values.dtype),
        preferred_element_type=jnp.float32,
    )


def _axis_kernel(weight: jax.Array, size: int, ratio: int) -> jax.Array:
    """Bin-by-tap interpolation matrix f32[B, R, Q, T], T = Q * s * 2.

    Row p holds the weights (divided by s) of the 2s taps of bin p's s
    samples along one axis, zero elsewhere.
    """
    batch, rois = weight.shape[:2]
    per_bin = weight.reshape(batch, rois, size, 1, 2 * ratio) / ratio
    eye = jnp.eye(size, dtype=weight.dtype)[:, :, None]  # [Q, Q, 1]
    return (eye * per_bin).reshape(batch, rois, size, size * 2 * ratio)


def _matmul_pool(features, offsets, widths, taps, *, size: int, ratio: int):
    """TPU-style: gather the T x T tap grid, interpolate by two matmuls.

    The grid rows and columns are the 2s taps of every bin along y and x
    (T = 2 s Q each); the bilinear weights become one [Q, T] matrix per
    axis and roi, so the interpolation runs on the matrix units.
    """
    (y_index, y_weight), (x_index, x_weight) = taps
    batch, rois = offsets.shape
    grid = (
        offsets[..., None, None]
        + y_index.reshape(batch, rois, -1, 1) * widths[..., None, None]
        + x_index.reshape(batch, rois, 1, -1)
    )  # [B, R, T, T]
    values = take_rows(features, grid.reshape(batch, -1))
    num_taps = grid.shape[-1]
    values = values.reshape(batch, rois, num_taps, num_taps, -1)
    dtype = values.dtype
    rows = jnp.einsum(
        "brpi,brijc->brpjc",
        _axis_kernel(y_weight, size, ratio).astype(dtype),
        values,
        preferred_element_type=jnp.float32,
    )
    return jnp.einsum(
        "brqj,brpjc->brpqc",
        _axis_kernel(x_weight, size, ratio).astype(dtype),
        rows.astype(dtype),
        preferred_element_type=jnp.float32,
    )


# How the taps are pooled: both read the same taps, with the same weights,
# and differ only in how the weighted sums are laid out for the hardware.
IMPLEMENTATIONS = {"gather": _gather_pool, "matmul": _matmul_pool}
# 'auto' per jax.default_backend(). On a 2-core x86 CPU 'gather' pooled
# the rois of configs/shapes.py:runlocal (forward and backward) in 8.7 ms
# and 'matmul' in 78 ms (`benchmarks/step_bench.py --parts`,
# benchmarks/README.md). GPU and TPU keep 'gather' until the same rows are
# measured there; platforms not listed use 'gather'.
AUTO_IMPLEMENTATION = {"cpu": "gather", "gpu": "gather", "tpu": "gather"}


def resolve_implementation(name: str) -> str:
    """The implementation `name` runs: 'auto' resolves per platform.

    Raises:
      ValueError: one line naming the unknown implementation.
    """
    check_implementation(name)
    if name == "auto":
        return AUTO_IMPLEMENTATION.get(jax.default_backend(), "gather")
    return name


def check_implementation(name: str, label: str = "implementation") -> None:
    """Raises one ValueError line naming `label` (an argument, or a config
    key given in full) unless `name` is 'auto' or in IMPLEMENTATIONS."""
    if name != "auto" and name not in IMPLEMENTATIONS:
        raise ValueError(
            f"{label}={name!r}: unknown ROIAlign implementation; known: "
            f"auto, {', '.join(IMPLEMENTATIONS)}"
        )


def roi_align(
    features: jax.Array,
    boxes: jax.Array,
    offsets: jax.Array,
    heights: jax.Array,
    widths: jax.Array,
    *,
    output_size: int,
    sampling_ratio: int,
    implementation: str = "auto",
    aligned: bool = True,
    limits: tuple[jax.Array, jax.Array] | None = None,
) -> jax.Array:
    """ROIAlign of every box from its own map inside a flat feature array.

    Args:
      features: [B, X, F] maps laid out one after another, row-major.
      boxes: f32[B, R, 4] (x1, y1, x2, y2) in the pixel units of each box's
        map (pixel i covers [i, i + 1)).
      offsets: int32[B, R] index in X of each box's map's first pixel.
      heights, widths: int32[B, R] each box's map's extent.
      output_size: Q, the pooled grid is Q x Q.
      sampling_ratio: s >= 1 samples per bin along each axis.
      implementation: a key of IMPLEMENTATIONS, or 'auto'.
      aligned: the half-pixel convention (docs/model.md); False is the
        original Mask R-CNN's.
      limits: int32[B, R] heights and widths, at most the map's, that the
        samples clamp to and read 0 past (docs/model.md); None: the
        map's.

    Returns:
      [B, R, Q, Q, F] in the features' dtype.
    """
    pool = IMPLEMENTATIONS[resolve_implementation(implementation)]
    limit_h, limit_w = (heights, widths) if limits is None else limits
    size, ratio = output_size, sampling_ratio
    ys = _sample_coords(
        boxes[..., 1], boxes[..., 3] - boxes[..., 1], size, ratio, aligned
    )
    xs = _sample_coords(
        boxes[..., 0], boxes[..., 2] - boxes[..., 0], size, ratio, aligned
    )
    taps = (
        _bilinear_taps(ys, limit_h),  # each [B, R, Q * s, 2]
        _bilinear_taps(xs, limit_w),
    )
    pooled = pool(features, offsets, widths, taps, size=size, ratio=ratio)
    return pooled.astype(features.dtype)


def multilevel_roi_align(
    pyramid: FlatPyramid,
    boxes: jax.Array,
    *,
    output_size: int,
    sampling_ratio: int,
    canonical_size: float,
    canonical_level: int,
    implementation: str = "auto",
    aligned: bool = True,
    level_eps: float = 0.0,
) -> jax.Array:
    """ROIAlign of boxes in input pixels, each from its FPN level.

    Args:
      pyramid: the flattened levels (see flatten_pyramid).
      boxes: f32[B, R, 4] in input pixels.
      output_size, sampling_ratio: as in roi_align.
      canonical_size, canonical_level: the level rule (see roi_levels).
      implementation, aligned: as in roi_align.
      level_eps: roi_levels' eps.

    Returns:
      [B, R, Q, Q, F] in the features' dtype.
    """
    boxes = boxes.astype(jnp.float32)
    levels = roi_levels(
        boxes,
        pyramid.min_level,
        pyramid.max_level,
        canonical_size,
        canonical_level,
        level_eps,
    )
    shapes = np.asarray(pyramid.level_shapes, np.int32)  # [L, 2]
    sizes = shapes[:, 0] * shapes[:, 1]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
    rel = levels - pyramid.min_level
    scale = jnp.exp2(-levels.astype(jnp.float32))[..., None]
    heights = jnp.asarray(shapes[:, 0])[rel]
    widths = jnp.asarray(shapes[:, 1])[rel]
    limits = None
    if pyramid.extents is not None:
        stride = jnp.left_shift(1, levels)  # int32[B, R]
        extents = pyramid.extents.astype(jnp.int32)
        limits = (
            jnp.minimum(-(-extents[:, 0, None] // stride), heights),
            jnp.minimum(-(-extents[:, 1, None] // stride), widths),
        )
    return roi_align(
        pyramid.features,
        boxes * scale,
        jnp.asarray(offsets)[rel],
        heights,
        widths,
        output_size=output_size,
        sampling_ratio=sampling_ratio,
        implementation=implementation,
        aligned=aligned,
        limits=limits,
    )
