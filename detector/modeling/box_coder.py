"""Faster R-CNN box deltas: encode boxes against reference boxes and back.

Shapes: boxes, references, deltas f32[..., 4] (broadcasting).
"""

import math
from typing import Sequence

import jax
import jax.numpy as jnp

# Largest dw, dh decoded: a box at most 1000/16 times its reference.
MAX_LOG_SCALE = math.log(1000.0 / 16.0)


def _centres_sizes(boxes: jax.Array):
    width = boxes[..., 2] - boxes[..., 0]
    height = boxes[..., 3] - boxes[..., 1]
    return (
        boxes[..., 0] + 0.5 * width,
        boxes[..., 1] + 0.5 * height,
        width,
        height,
    )


def encode(
    boxes: jax.Array, references: jax.Array, weights: Sequence[float]
) -> jax.Array:
    """Deltas f32[..., 4] that turn references into boxes.

    References must have positive sizes; boxes with non-positive sizes
    (padding) give finite deltas.
    """
    x, y, w, h = _centres_sizes(boxes)
    xa, ya, wa, ha = _centres_sizes(references)
    wa, ha = jnp.maximum(wa, 1e-6), jnp.maximum(ha, 1e-6)
    wx, wy, ww, wh = weights
    return jnp.stack(
        [
            wx * (x - xa) / wa,
            wy * (y - ya) / ha,
            ww * jnp.log(jnp.maximum(w, 1e-6) / wa),
            wh * jnp.log(jnp.maximum(h, 1e-6) / ha),
        ],
        axis=-1,
    )


def decode(
    deltas: jax.Array, references: jax.Array, weights: Sequence[float]
) -> jax.Array:
    """Boxes f32[..., 4]: deltas applied to references (encode's inverse)."""
    deltas = deltas.astype(jnp.float32)
    xa, ya, wa, ha = _centres_sizes(references)
    wx, wy, ww, wh = weights
    x = deltas[..., 0] / wx * wa + xa
    y = deltas[..., 1] / wy * ha + ya
    w = jnp.exp(jnp.minimum(deltas[..., 2] / ww, MAX_LOG_SCALE)) * wa
    h = jnp.exp(jnp.minimum(deltas[..., 3] / wh, MAX_LOG_SCALE)) * ha
    return jnp.stack(
        [x - 0.5 * w, y - 0.5 * h, x + 0.5 * w, y + 0.5 * h], axis=-1
    )
