"""Box arithmetic on (x1, y1, x2, y2) boxes, x2 and y2 exclusive; jit-, vmap-
and grad-safe, broadcasting over leading batch dimensions.
Shapes: boxes f32[..., N, 4]; pairwise results f32[..., N, N2].
"""

import jax
import jax.numpy as jnp


def widths_heights(boxes: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Non-negative widths and heights of boxes f32[..., 4]."""
    width = jnp.maximum(boxes[..., 2] - boxes[..., 0], 0.0)
    height = jnp.maximum(boxes[..., 3] - boxes[..., 1], 0.0)
    return width, height


def area(boxes: jax.Array) -> jax.Array:
    """Areas f32[...] of boxes f32[..., 4]."""
    width, height = widths_heights(boxes)
    return width * height


def pairwise_intersection(a: jax.Array, b: jax.Array) -> jax.Array:
    """Intersection areas [..., N, N2] of a [..., N, 4] and b [..., N2, 4]."""
    a = a[..., :, None, :]
    b = b[..., None, :, :]
    iw = jnp.minimum(a[..., 2], b[..., 2]) - jnp.maximum(a[..., 0], b[..., 0])
    ih = jnp.minimum(a[..., 3], b[..., 3]) - jnp.maximum(a[..., 1], b[..., 1])
    return jnp.maximum(iw, 0.0) * jnp.maximum(ih, 0.0)


def pairwise_iou(a: jax.Array, b: jax.Array) -> jax.Array:
    """IoU f32[..., N, N2] of a f32[..., N, 4] and b f32[..., N2, 4].

    Pairs whose union is empty (two zero-area boxes) have IoU 0.
    """
    inter = pairwise_intersection(a, b)
    union = area(a)[..., :, None] + area(b)[..., None, :] - inter
    return jnp.where(union > 0.0, inter / jnp.maximum(union, 1e-12), 0.0)


def clip_boxes(boxes: jax.Array, height: float, width: float) -> jax.Array:
    """Clips boxes f32[..., 4] to the image [0, width] x [0, height]."""
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    return jnp.stack(
        [
            jnp.clip(x1, 0.0, width),
            jnp.clip(y1, 0.0, height),
            jnp.clip(x2, 0.0, width),
            jnp.clip(y2, 0.0, height),
        ],
        axis=-1,
    )


def is_larger_than(boxes: jax.Array, min_size: float) -> jax.Array:
    """bool[...]: width > min_size and height > min_size (non-empty at 0)."""
    width, height = widths_heights(boxes)
    return (width > min_size) & (height > min_size)
