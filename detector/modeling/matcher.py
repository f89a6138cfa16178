"""IoU matching of boxes (anchors or ROIs) to ground truth, static shapes.

Shapes: N boxes, G GT boxes per image; leading batch dims broadcast.
"""

import jax
import jax.numpy as jnp

FOREGROUND, BACKGROUND, IGNORED = 1, 0, -1


def match(
    iou: jax.Array,
    gt_valid: jax.Array,
    *,
    fg_iou: float,
    bg_iou_low: float,
    bg_iou_high: float,
    low_quality: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Labels and matched GT index of each box.

    Args:
      iou: f32[..., N, G] IoU of every box with every GT box.
      gt_valid: bool[..., G] which GT rows are real (padding is False).
      fg_iou: foreground when the best IoU >= this.
      bg_iou_low, bg_iou_high: background when the best IoU is in
        [bg_iou_low, bg_iou_high).
      low_quality: also make each valid GT's best box(es) foreground.

    Returns:
      labels int32[..., N] in {1, 0, -1} and matched int32[..., N], the GT
      index of the best IoU (meaningful where labels == 1).
    """
    iou = jnp.where(gt_valid[..., None, :], iou, 0.0)
    best_iou = jnp.max(iou, axis=-1)
    matched = jnp.argmax(iou, axis=-1).astype(jnp.int32)
    labels = jnp.full(best_iou.shape, IGNORED, jnp.int32)
    labels = jnp.where(
        (best_iou >= bg_iou_low) & (best_iou < bg_iou_high), BACKGROUND, labels
    )
    labels = jnp.where(best_iou >= fg_iou, FOREGROUND, labels)
    if low_quality:
        best_per_gt = jnp.max(iou, axis=-2, keepdims=True)  # [..., 1, G]
        is_best = (iou == best_per_gt) & (best_per_gt > 0.0)
        labels = jnp.where(jnp.any(is_best, axis=-1), FOREGROUND, labels)
    return labels, matched
