"""Feature pyramid network: P_min..P_max from backbone levels C_min..C_top.

Shapes: B batch, H, W input size, F fpn channels.
Output: [P_l f[B, H / 2**l, W / 2**l, F] for l in min_level..max_level].
"""

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import extents, norms


def upsample2x(x: jax.Array) -> jax.Array:
    """Nearest-neighbour 2x upsampling of [B, H, W, C]."""
    batch, height, width, channels = x.shape
    x = jnp.broadcast_to(
        x[:, :, None, :, None, :], (batch, height, 2, width, 2, channels)
    )
    return x.reshape(batch, 2 * height, 2 * width, channels)


class FPN(nnx.Module):
    """Top-down feature pyramid with lateral connections."""

    def __init__(
        self,
        in_channels: dict[int, int],
        *,
        channels: int,
        min_level: int,
        max_level: int,
        lateral_norm: norms.NormOptions,
        output_norm: norms.NormOptions,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.min_level, self.max_level = min_level, max_level
        # The coarsest backbone level used; levels above it are pooled.
        self.top_level = min(max_level, max(in_channels))
        levels = range(min_level, self.top_level + 1)

        def layers(in_channels_of, kernel, norm):
            """One conv (no ReLU) per level to `channels`."""
            return nnx.List(
                [
                    norms.conv_norm(
                        in_channels_of(level),
                        channels,
                        norms.ConvOptions(kernel, relu=False),
                        norm=norm,
                        dtype=dtype,
                        rngs=rngs,
                    )
                    for level in levels
                ]
            )

        # Lateral 1x1 convs as Linear layers over channels (cheaper
        # gradients on CPU than a 1x1 convolution).
        self.lateral = layers(in_channels.__getitem__, 1, lateral_norm)
        self.output = layers(lambda level: channels, 3, output_norm)

    def __call__(self, features: dict[int, jax.Array]) -> list[jax.Array]:
        levels = list(range(self.min_level, self.top_level + 1))
        laterals = [
            conv(features[level])
            for conv, level in zip(self.lateral, levels, strict=True)
        ]
        merged = [laterals[-1]]
        for lateral in reversed(laterals[:-1]):
            merged.insert(0, lateral + upsample2x(merged[0]))
        outputs = [
            conv(extents.masked(x))
            for conv, x in zip(self.output, merged, strict=True)
        ]
        for _ in range(self.top_level + 1, self.max_level + 1):
            outputs.append(outputs[-1][:, ::2, ::2, :])
        return outputs
