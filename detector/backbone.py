"""ResNet backbones (18, 50 and a CPU-sized 'tiny') with selectable norms.

Norms: 'group' (GroupNorm; the default, for training from scratch), 'batch'
(BatchNorm; train/eval follows nnx's model.train() / model.eval()) and
'frozen_batch' (an affine transform from running statistics, all held as
non-trainable `FrozenStat` variables so an optimizer over nnx.Param never
touches them; for pretrained weights).

Activations run in the module's dtype (float32 or bfloat16); parameters
are float32.

Shapes: B batch, H, W input size; F_l channels of the output at level l
(stride 2**l; the FPN paper's feature map C_l).
Output: {2: [B, H/4, W/4, F_2], 3: ..., 4: ..., 5: [B, H/32, W/32, F_5]}
(up to the top level the model uses).
"""

import jax
import jax.numpy as jnp
from flax import nnx

BACKBONES = ("resnet18", "resnet50", "tiny")
NORMS = ("group", "batch", "frozen_batch")

# name -> (blocks per stage, bottleneck?)
_ARCHITECTURES = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet50": ((3, 4, 6, 3), True),
    "tiny": ((1, 1, 1, 1), False),
}
_BOTTLENECK_EXPANSION = 4

# He (fan-out) init for convolutions followed by ReLU.
conv_init = nnx.initializers.variance_scaling(2.0, "fan_out", "normal")


class FrozenStat(nnx.Variable):
    """A frozen normalisation statistic or affine term (not an nnx.Param)."""


class FrozenBatchNorm(nnx.Module):
    """BatchNorm with fixed statistics and affine terms: y = x * a + b."""

    def __init__(self, num_features: int, *, epsilon: float = 1e-5,
                 dtype: jnp.dtype = jnp.float32):
        self.scale = FrozenStat(jnp.ones((num_features,), jnp.float32))
        self.bias = FrozenStat(jnp.zeros((num_features,), jnp.float32))
        self.mean = FrozenStat(jnp.zeros((num_features,), jnp.float32))
        self.var = FrozenStat(jnp.ones((num_features,), jnp.float32))
        self.epsilon = epsilon
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        multiplier = self.scale[...] * jax.lax.rsqrt(self.var[...] +
                                                     self.epsilon)
        offset = self.bias[...] - self.mean[...] * multiplier
        return (x * multiplier.astype(self.dtype) +
                offset.astype(self.dtype)).astype(self.dtype)


def make_norm(kind: str, channels: int, *, groups: int, dtype: jnp.dtype,
              rngs: nnx.Rngs) -> nnx.Module:
    """A normalisation layer over the channel (last) axis."""
    if kind == "group":
        return nnx.GroupNorm(channels, num_groups=groups, epsilon=1e-5,
                             dtype=dtype, rngs=rngs)
    if kind == "batch":
        return nnx.BatchNorm(channels, momentum=0.9, epsilon=1e-5,
                             dtype=dtype, rngs=rngs)
    if kind == "frozen_batch":
        return FrozenBatchNorm(channels, dtype=dtype)
    raise ValueError(f"unknown norm {kind!r}; known: {', '.join(NORMS)}")


class ConvNorm(nnx.Module):
    """Conv (no bias) -> norm -> optional ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, *,
                 stride: int = 1, relu: bool = True, norm: str, groups: int,
                 dtype: jnp.dtype, rngs: nnx.Rngs):
        pad = kernel // 2
        self.conv = nnx.Conv(in_channels, out_channels, (kernel, kernel),
                             strides=stride, padding=((pad, pad), (pad, pad)),
                             use_bias=False, kernel_init=conv_init,
                             dtype=dtype, rngs=rngs)
        self.norm = make_norm(norm, out_channels, groups=groups, dtype=dtype,
                              rngs=rngs)
        self.relu = relu

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.norm(self.conv(x))
        return jax.nn.relu(x) if self.relu else x


class ResidualBlock(nnx.Module):
    """A basic (two 3x3) or bottleneck (1x1, 3x3, 1x1) residual block."""

    def __init__(self, in_channels: int, width: int, *, stride: int,
                 bottleneck: bool, **layer_kwargs):
        if bottleneck:
            out_channels = width * _BOTTLENECK_EXPANSION
            self.layers = nnx.List([
                ConvNorm(in_channels, width, 1, **layer_kwargs),
                ConvNorm(width, width, 3, stride=stride, **layer_kwargs),
                ConvNorm(width, out_channels, 1, relu=False, **layer_kwargs),
            ])
        else:
            out_channels = width
            self.layers = nnx.List([
                ConvNorm(in_channels, width, 3, stride=stride, **layer_kwargs),
                ConvNorm(width, width, 3, relu=False, **layer_kwargs),
            ])
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = (ConvNorm(in_channels, out_channels, 1,
                                  stride=stride, relu=False, **layer_kwargs)
                         if needs_projection else None)
        self.out_channels = out_channels

    def __call__(self, x: jax.Array) -> jax.Array:
        residual = x if self.shortcut is None else self.shortcut(x)
        for layer in self.layers:
            x = layer(x)
        return jax.nn.relu(x + residual)


class ResNet(nnx.Module):
    """ResNet stem + stages; returns C2..C_top keyed by level.

    Stages past `top_level` (<= 5) are not built: a pyramid that stops at
    level 4 has no use for C5.
    """

    def __init__(self, name: str, *, width: int, norm: str, groups: int,
                 dtype: jnp.dtype, rngs: nnx.Rngs, top_level: int = 5):
        if name not in _ARCHITECTURES:
            raise ValueError(f"unknown backbone {name!r}; known: "
                             f"{', '.join(BACKBONES)}")
        depths, bottleneck = _ARCHITECTURES[name]
        layer_kwargs = dict(norm=norm, groups=groups, dtype=dtype, rngs=rngs)
        self.stem = ConvNorm(3, width, 7, stride=2, **layer_kwargs)
        self.dtype = dtype
        stages = []
        channels = width
        self.out_channels = {}
        for stage, depth in enumerate(depths[:top_level - 1]):
            blocks = []
            for block in range(depth):
                stride = 2 if stage > 0 and block == 0 else 1
                blocks.append(ResidualBlock(
                    channels, width * 2**stage, stride=stride,
                    bottleneck=bottleneck, **layer_kwargs))
                channels = blocks[-1].out_channels
            stages.append(nnx.List(blocks))
            self.out_channels[stage + 2] = channels
        self.stages = nnx.List(stages)

    def __call__(self, images: jax.Array) -> dict[int, jax.Array]:
        x = self.stem(images.astype(self.dtype))
        x = nnx.max_pool(x, (3, 3), strides=(2, 2),
                         padding=((1, 1), (1, 1)))
        features = {}
        for level, stage in enumerate(self.stages, start=2):
            for block in stage:
                x = block(x)
            features[level] = x
        return features
