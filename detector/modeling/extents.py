"""Activations past each image's extent zeroed before every convolution.

    with extents.zero_outside(padded_sizes, canvas):
        features = backbone(images)   # its convolutions call masked(x)

An image on a canvas larger than itself is, to every layer, an image with
more pixels: past the image's extent (its size rounded up to 32, the
tensor torchvision runs) the input is zero, but each layer's activations
there are not (biases, norms), and a convolution near the extent's bottom
and right edges reads them where torchvision reads its zero padding.
`masked` zeroes a feature map [B, H_l, W_l, F] past the extent scaled to
its stride (canvas / H_l), which makes every convolution see what it sees
in torchvision's tensor; a max-pool after a ReLU too (its inputs are >= 0).
The modules that convolve the canvas (backbone, FPN output, RPN head) call
`masked` on their inputs; outside a `zero_outside` block it returns x
unchanged (a module run on its own, or with no sizes given).

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
