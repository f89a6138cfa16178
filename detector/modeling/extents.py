"""Activations past each image's extent on the canvas zeroed before every
convolution, as torchvision's zero padding reads them (docs/model.md).

Shapes: B batch, H_l, W_l a feature map's height and width, F channels.
"""

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import jax.numpy as jnp

# (extents int32[B, 2], canvas (H, W)) while a zero_outside block runs.
_ACTIVE: contextvars.ContextVar[tuple[jax.Array, tuple[int, int]] | None] = (
    contextvars.ContextVar("extents", default=None)
)


@contextlib.contextmanager
def zero_outside(
    extents: jax.Array | None, canvas: tuple[int, int]
) -> Iterator[None]:
    """Within the block, `masked` zeroes past `extents` (int32[B, 2], each
    image's padded (height, width) on the (H, W) canvas); None: nothing."""
    token = _ACTIVE.set(None if extents is None else (extents, canvas))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def masked(x: jax.Array) -> jax.Array:
    """x [B, H_l, W_l, F] with zeros past each image's extent at its
    stride; x itself outside a `zero_outside` block."""
    active = _ACTIVE.get()
    if active is None:
        return x
    extents, (height, width) = active
    stride_y, stride_x = height // x.shape[1], width // x.shape[2]
    rows = jnp.arange(x.shape[1], dtype=jnp.int32) * stride_y
    cols = jnp.arange(x.shape[2], dtype=jnp.int32) * stride_x
    inside = (rows[None, :, None] < extents[:, 0, None, None]) & (
        cols[None, None, :] < extents[:, 1, None, None]
    )
    return jnp.where(inside[..., None], x, jnp.zeros((), x.dtype))
