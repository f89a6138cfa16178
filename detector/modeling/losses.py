"""Loss terms of Mask R-CNN: elementwise losses and their masked means.

Shapes: B batch, S sampled anchors, R sampled rois, C classes, M mask size.
"""

import jax
import jax.numpy as jnp

from ops import names

TERM_NAMES = ("rpn_cls", "rpn_box", "cls", "box", "mask")
LOSS_NAMES = TERM_NAMES + ("total",)


def sigmoid_bce(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Elementwise binary cross-entropy of logits against targets in [0, 1]."""
    logits = logits.astype(jnp.float32)
    return (
        jnp.maximum(logits, 0.0)
        - logits * targets
        + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    )


def smooth_l1(diff: jax.Array, beta: float) -> jax.Array:
    """Elementwise smooth-L1 (Huber / beta): quadratic inside |x| < beta."""
    abs_diff = jnp.abs(diff.astype(jnp.float32))
    if beta <= 0.0:
        return abs_diff
    return jnp.where(
        abs_diff < beta, 0.5 * abs_diff**2 / beta, abs_diff - 0.5 * beta
    )


def softmax_cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Cross-entropy [...] of logits [..., C + 1] against int labels [...]."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def masked_sum(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Sum of values where mask (mask broadcasts over trailing dims)."""
    mask = mask.reshape(mask.shape + (1,) * (values.ndim - mask.ndim))
    return jnp.sum(jnp.where(mask, values, 0.0))


def count(mask: jax.Array) -> jax.Array:
    """max(1, number of True entries) as float32: a safe normaliser."""
    return jnp.maximum(jnp.sum(mask.astype(jnp.float32)), 1.0)


def slots(is_valid: jax.Array) -> jax.Array:
    """B * S, the sample slots, empty ones included (detectron2's RPN):
    images with few valid samples are not up-weighted."""
    return jnp.asarray(float(is_valid.size), jnp.float32)


# model.loss.rpn_normaliser: what the RPN's summed losses are divided by.
RPN_NORMALISERS = {
    "slots": slots,
    "sampled": count,  # the anchors sampled in the batch (torchvision's)
}


def check_rpn_normaliser(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown
    normaliser."""
    names.check_known(name, key, RPN_NORMALISERS, "RPN loss normaliser")


def rpn_losses(
    logits: jax.Array,
    deltas: jax.Array,
    is_positive: jax.Array,
    is_valid: jax.Array,
    box_targets: jax.Array,
    *,
    beta: float,
    normaliser: str = "slots",
) -> dict[str, jax.Array]:
    """RPN objectness BCE and box smooth-L1 over the sampled anchors, both
    summed and divided by RPN_NORMALISERS[normaliser](is_valid).

    Args:
      logits: [B, S] objectness of the sampled anchors.
      deltas: [B, S, 4] predicted deltas of the sampled anchors.
      is_positive, is_valid: bool[B, S] from the sampler.
      box_targets: f32[B, S, 4] encoded matched GT boxes.
      beta: smooth-L1 beta.
      normaliser: a name of RPN_NORMALISERS.
    """
    normaliser = RPN_NORMALISERS[normaliser](is_valid)
    cls = masked_sum(
        sigmoid_bce(logits, is_positive.astype(jnp.float32)), is_valid
    )
    box = masked_sum(
        smooth_l1(deltas - box_targets, beta), is_positive & is_valid
    )
    return {"rpn_cls": cls / normaliser, "rpn_box": box / normaliser}


def box_head_losses(
    class_logits: jax.Array,
    deltas: jax.Array,
    class_targets: jax.Array,
    box_targets: jax.Array,
    is_valid: jax.Array,
    *,
    beta: float,
) -> dict[str, jax.Array]:
    """Classification CE and class-specific box smooth-L1 over sampled rois.

    Args:
      class_logits: [B, R, C + 1].
      deltas: [B, R, C, 4] class-specific deltas for classes 1..C.
      class_targets: int32[B, R], 0 for background.
      box_targets: f32[B, R, 4] encoded matched GT boxes.
      is_valid: bool[B, R] sampled slots.
      beta: smooth-L1 beta.

    Returns:
      {'cls': mean CE over valid rois, 'box': smooth-L1 summed over the
      foreground rois' coordinates / number of valid rois}.
    """
    normaliser = count(is_valid)
    cls = (
        masked_sum(softmax_cross_entropy(class_logits, class_targets), is_valid)
        / normaliser
    )
    foreground = is_valid & (class_targets > 0)
    class_index = jnp.maximum(class_targets - 1, 0)[..., None, None]
    class_deltas = jnp.take_along_axis(deltas, class_index, axis=-2)[..., 0, :]
    box = (
        masked_sum(smooth_l1(class_deltas - box_targets, beta), foreground)
        / normaliser
    )
    return {"cls": cls, "box": box}


def mask_loss(
    logits: jax.Array, targets: jax.Array, is_valid: jax.Array
) -> jax.Array:
    """Per-pixel BCE of the GT class's mask, mean over pixels and valid rois.

    Args:
      logits: [B, R, M, M] mask logits of each roi's GT class.
      targets: f32[B, R, M, M] binary targets.
      is_valid: bool[B, R] rois with a foreground match and a GT mask.
    """
    per_roi = jnp.mean(sigmoid_bce(logits, targets), axis=(-2, -1))
    return masked_sum(per_roi, is_valid) / count(is_valid)


def total_loss(
    terms: dict[str, jax.Array], weights: dict[str, float]
) -> dict[str, jax.Array]:
    """Adds 'total', the weighted sum of the named terms, as float32."""
    terms = {name: value.astype(jnp.float32) for name, value in terms.items()}
    terms["total"] = sum(weights[name] * terms[name] for name in TERM_NAMES)
    return terms
