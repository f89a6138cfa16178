"""Mask targets of the sampled rois, one rule per name (`RULES`,
config model.loss.mask_target; docs/training.md).

- `crop`: detectron2's BitMasks.crop_and_resize rule on the GT mask stored
  cropped to its box (data.gt_mask_size): an aligned ROIAlign of the crop
  at the roi, then binary, >= 0.5 (a value exactly 0.5 is foreground, as
  detectron2's);
- `torchvision`: torchvision's maskrcnn_loss rule on the GT mask at its
  image's size: roi_align(aligned=False, adaptive sampling: ceil(roi side /
  M) samples per bin and axis), soft values kept. The masks come on the
  canvas, bit-packed along x (data/gt_masks.py 'canvas').

Every rule is called as rule(rois, matched, gt_boxes, gt_masks, image_sizes,
*, mask_size, sampling_ratio) -> f32[B, Rm, M, M]; the layout of gt_masks
each reads is config/data.py MASK_LAYOUTS.

Shapes: B batch, G GT per image, Rm mask rois, S GT crop size, H, W the
canvas, M mask size.
"""

import jax
import jax.numpy as jnp

from ops import box_ops, names, roi_align


@jax.named_scope("mask_targets")
def crop_targets(
    rois: jax.Array,
    matched: jax.Array,
    gt_boxes: jax.Array,
    gt_masks: jax.Array,
    image_sizes: jax.Array | None,
    *,
    mask_size: int,
    sampling_ratio: int,
) -> jax.Array:
    """Binary targets f32[B, Rm, M, M] of rois [B, Rm, 4] from GT crops.

    Every crop is zero-padded by one pixel on each side, so samples outside
    its GT box read 0 (bilinear inside, blending to 0 across the box edge),
    as TF Model Garden's crop-and-resize with extrapolation value 0; without
    the padding, ROIAlign's border rule would copy the crop's edge up to half
    a crop pixel outside the box.

    Args:
      rois: f32[B, Rm, 4] in input pixels.
      matched: int32[B, Rm] the GT index of each roi.
      gt_boxes: f32[B, G, 4] GT boxes in input pixels.
      gt_masks: uint8[B, G, S, S] GT masks, each cropped to its box.
      image_sizes: unused (the crops carry their boxes' extents).
      mask_size: M.
      sampling_ratio: ROIAlign samples per bin and axis.
    """
    del image_sizes
    batch, num_gt, size = gt_masks.shape[:3]
    gt = jnp.take_along_axis(
        gt_boxes.astype(jnp.float32), matched[..., None], axis=1
    )  # [B, Rm, 4]
    origin = jnp.concatenate([gt[..., :2], gt[..., :2]], axis=-1)
    gt_w, gt_h = box_ops.widths_heights(gt)
    scale = size / jnp.maximum(jnp.stack([gt_w, gt_h, gt_w, gt_h], -1), 1e-6)
    # Crop pixels, shifted by the one-pixel zero border.
    boxes_in_mask = (rois - origin) * scale + 1.0
    padded = size + 2
    masks = jnp.pad(
        gt_masks.astype(jnp.float32), ((0, 0), (0, 0), (1, 1), (1, 1))
    )  # [B, G, S+2, S+2]
    flat = masks.reshape(batch, num_gt * padded * padded, 1)
    sizes = jnp.full(matched.shape, padded, jnp.int32)
    resampled = roi_align.roi_align(
        flat,
        boxes_in_mask,
        matched * (padded * padded),
        sizes,
        sizes,
        output_size=mask_size,
        sampling_ratio=sampling_ratio,
    )
    return (resampled[..., 0] >= 0.5).astype(jnp.float32)


def _adaptive_weights(
    start: jax.Array,
    length: jax.Array,
    extent: jax.Array,
    size: int,
    pixels: int,
) -> jax.Array:
    """f32[..., M, pixels]: each of the M bins' mean bilinear weight on the
    first `pixels` pixels of one axis, torchvision's roi_align
    (aligned=False, sampling_ratio=-1) along an roi starting at `start` of
    `length` in an image `extent` pixels long (samples past it clamp to its
    last pixel, as roi_align's on the image-sized mask)."""
    length = jnp.maximum(length, 1.0)[..., None]
    extent = extent.astype(jnp.float32)[..., None]
    step = length / size
    grid = jnp.ceil(length / size)  # samples per bin
    first = start[..., None] + jnp.arange(size, dtype=jnp.float32) * step
    grid_pixels = jnp.arange(pixels, dtype=jnp.float32)

    def add_sample(s, total):
        coord = first + (s + 0.5) * step / grid  # [..., M]
        inside = (coord >= -1.0) & (coord <= extent) & (s < grid)
        coord = jnp.clip(coord, 0.0, extent - 1.0)[..., None]
        hat = jnp.maximum(1.0 - jnp.abs(coord - grid_pixels), 0.0)
        return total + jnp.where(inside[..., None], hat, 0.0)

    most = -(-pixels // size) + 1  # ceil(pixels / M) + 1 >= any grid
    total = jax.lax.fori_loop(
        0,
        most,
        add_sample,
        jnp.zeros(first.shape + (pixels,), jnp.float32),
    )
    return total / grid[..., None]


def unpack_bits(packed: jax.Array) -> jax.Array:
    """f32[..., 8 x W8] of bit-packed u8[..., W8] (numpy's packbits order:
    the first pixel the high bit)."""
    shifts = jnp.arange(7, -1, -1, dtype=jnp.uint8)
    bits = (packed[..., None] >> shifts) & 1
    return bits.reshape(*packed.shape[:-1], -1).astype(jnp.float32)


@jax.named_scope("mask_targets")
def soft_targets(
    rois: jax.Array,
    matched: jax.Array,
    gt_boxes: jax.Array,
    gt_masks: jax.Array,
    image_sizes: jax.Array | None,
    *,
    mask_size: int,
    sampling_ratio: int,
) -> jax.Array:
    """Soft targets f32[B, Rm, M, M] in [0, 1]: torchvision's
    roi_align(gt_mask, roi, M, spatial_scale=1, sampling_ratio=-1,
    aligned=False) on the image-sized mask, written separably (the weights
    of a bin's samples factor into a row and a column part): A_y @ mask @
    A_x^T per roi.

    Args:
      rois: f32[B, Rm, 4] in input pixels.
      matched: int32[B, Rm] the GT index of each roi.
      gt_boxes: unused (the masks are in canvas pixels).
      gt_masks: uint8[B, G, H, ceil(W / 8)] GT masks on the canvas, eight
        pixels a byte along x; W is the canvas width.
      image_sizes: int32[B, 2] each image's (height, width) on the canvas:
        the extent its samples clamp to (None: the canvas).
      mask_size: M.
      sampling_ratio: unused (adaptive sampling).
    """
    del gt_boxes, sampling_ratio
    height = gt_masks.shape[2]
    width = gt_masks.shape[3] * 8
    rois = rois.astype(jnp.float32)
    if image_sizes is None:
        image_sizes = jnp.asarray([[height, width]], jnp.int32)
    sizes = jnp.broadcast_to(
        jnp.asarray(image_sizes)[:, None, :], rois.shape[:2] + (2,)
    )  # [B, Rm, 2]
    rows = _adaptive_weights(
        rois[..., 1],
        rois[..., 3] - rois[..., 1],
        sizes[..., 0],
        mask_size,
        height,
    )  # [B, Rm, M, H]
    cols = _adaptive_weights(
        rois[..., 0],
        rois[..., 2] - rois[..., 0],
        sizes[..., 1],
        mask_size,
        width,
    )  # [B, Rm, M, W]

    def one_image(masks, index, row, col):
        def one_roi(args):
            g, a_y, a_x = args
            mask = unpack_bits(masks[g])
            return jnp.einsum(
                "mh,hw,nw->mn",
                a_y,
                mask,
                a_x,
                precision=jax.lax.Precision.HIGHEST,
            )

        return jax.lax.map(one_roi, (index, row, col))

    return jax.vmap(one_image)(gt_masks, matched, rows, cols)


RULES = {"crop": crop_targets, "torchvision": soft_targets}


def check_name(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown rule."""
    names.check_known(name, key, RULES, "mask target rule")
