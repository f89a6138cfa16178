"""The backbone registry, and ResNets (18, 50, 101 and a CPU-sized 'tiny').

Shapes: B batch, H, W input size; F_l channels of the output at level l
(stride 2**l); output {level: [B, H / 2**l, W / 2**l, F_l]}.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import extents, norms
from ops import names

NORMS = ("group", "batch", "sync_batch", "frozen_batch")

# name -> (blocks per stage, bottleneck?)
RESNETS = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
    "tiny": ((1, 1, 1, 1), False),
}
_BOTTLENECK_EXPANSION = 4

# He (fan-out) init for convolutions followed by ReLU.
conv_init = nnx.initializers.variance_scaling(2.0, "fan_out", "normal")


class FrozenStat(nnx.Variable):
    """A frozen normalisation statistic or affine term (not an nnx.Param)."""


class FrozenBatchNorm(nnx.Module):
    """BatchNorm with fixed statistics and affine terms: y = x * a + b."""

    def __init__(
        self,
        num_features: int,
        *,
        epsilon: float = 1e-5,
        dtype: jnp.dtype = jnp.float32,
    ):
        self.scale = FrozenStat(jnp.ones((num_features,), jnp.float32))
        self.bias = FrozenStat(jnp.zeros((num_features,), jnp.float32))
        self.mean = FrozenStat(jnp.zeros((num_features,), jnp.float32))
        self.var = FrozenStat(jnp.ones((num_features,), jnp.float32))
        self.epsilon = epsilon
        self.dtype = dtype

    def __call__(self, x: jax.Array) -> jax.Array:
        multiplier = self.scale[...] * jax.lax.rsqrt(
            self.var[...] + self.epsilon
        )
        offset = self.bias[...] - self.mean[...] * multiplier
        return (
            x * multiplier.astype(self.dtype) + offset.astype(self.dtype)
        ).astype(self.dtype)


# kind -> (channels, groups, dtype, rngs, frozen_epsilon) -> layer.
_NORM_LAYERS = {
    "group": lambda channels, groups, dtype, rngs, _: nnx.GroupNorm(
        channels, num_groups=groups, epsilon=1e-5, dtype=dtype, rngs=rngs
    ),
    "batch": lambda channels, groups, dtype, rngs, _: nnx.BatchNorm(
        channels, momentum=0.9, epsilon=1e-5, dtype=dtype, rngs=rngs
    ),
    "sync_batch": lambda channels, groups, dtype, rngs, _: norms.BatchNorm(
        channels,
        cross_replica_axis=norms.DATA_AXIS,
        momentum=0.9,
        epsilon=1e-5,
        dtype=dtype,
        rngs=rngs,
    ),
    "frozen_batch": lambda channels, groups, dtype, rngs, eps: FrozenBatchNorm(
        channels, epsilon=eps, dtype=dtype
    ),
}
assert tuple(_NORM_LAYERS) == NORMS


def make_norm(
    kind: str,
    channels: int,
    *,
    groups: int,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
    frozen_epsilon: float = 1e-5,
) -> nnx.Module:
    """A normalisation layer over the channel (last) axis.

    `frozen_epsilon` is the FrozenBatchNorm epsilon (torchvision's 1e-5; its
    legacy COCO Mask R-CNN weights were trained with 0).
    """
    if kind not in _NORM_LAYERS:
        raise ValueError(f"unknown norm {kind!r}; known: {', '.join(NORMS)}")
    return _NORM_LAYERS[kind](channels, groups, dtype, rngs, frozen_epsilon)


class ConvNorm(nnx.Module):
    """Conv (no bias) -> norm -> optional ReLU."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        *,
        stride: int = 1,
        relu: bool = True,
        norm: str,
        groups: int,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
        frozen_epsilon: float = 1e-5,
    ):
        pad = kernel // 2
        self.conv = nnx.Conv(
            in_channels,
            out_channels,
            (kernel, kernel),
            strides=stride,
            padding=((pad, pad), (pad, pad)),
            use_bias=False,
            kernel_init=conv_init,
            dtype=dtype,
            rngs=rngs,
        )
        self.norm = make_norm(
            norm,
            out_channels,
            groups=groups,
            dtype=dtype,
            rngs=rngs,
            frozen_epsilon=frozen_epsilon,
        )
        self.relu = relu

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.norm(self.conv(extents.masked(x)))
        return jax.nn.relu(x) if self.relu else x


class ResidualBlock(nnx.Module):
    """A basic (two 3x3) or bottleneck (1x1, 3x3, 1x1) residual block."""

    def __init__(
        self,
        in_channels: int,
        width: int,
        *,
        stride: int,
        bottleneck: bool,
        **layer_kwargs,
    ):
        if bottleneck:
            out_channels = width * _BOTTLENECK_EXPANSION
            self.layers = nnx.List(
                [
                    ConvNorm(in_channels, width, 1, **layer_kwargs),
                    ConvNorm(width, width, 3, stride=stride, **layer_kwargs),
                    ConvNorm(
                        width, out_channels, 1, relu=False, **layer_kwargs
                    ),
                ]
            )
        else:
            out_channels = width
            self.layers = nnx.List(
                [
                    ConvNorm(
                        in_channels, width, 3, stride=stride, **layer_kwargs
                    ),
                    ConvNorm(width, width, 3, relu=False, **layer_kwargs),
                ]
            )
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = (
            ConvNorm(
                in_channels,
                out_channels,
                1,
                stride=stride,
                relu=False,
                **layer_kwargs,
            )
            if needs_projection
            else None
        )
        self.out_channels = out_channels

    def __call__(self, x: jax.Array) -> jax.Array:
        residual = x if self.shortcut is None else self.shortcut(x)
        for layer in self.layers:
            x = layer(x)
        return jax.nn.relu(x + residual)


class ResNet(nnx.Module):
    """ResNet stem + stages; returns C2..C_top keyed by level.

    Stages past `top_level` (<= 5) are not built: a pyramid that stops at
    level 4 has no use for C5. `freeze_at` (0: nothing) stops gradients at
    the output of the stem (1) or of stage freeze_at - 1 (C_freeze_at).
    """

    def __init__(
        self,
        name: str,
        *,
        width: int,
        norm: str,
        groups: int,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
        top_level: int = 5,
        freeze_at: int = 0,
        frozen_epsilon: float = 1e-5,
    ):
        if name not in RESNETS:
            raise ValueError(
                f"unknown backbone {name!r}; known: {', '.join(RESNETS)}"
            )
        depths, bottleneck = RESNETS[name]
        frozen_norm = (
            "frozen_batch" if norm in ("batch", "sync_batch") else norm
        )
        layer_kwargs = {
            "groups": groups,
            "dtype": dtype,
            "rngs": rngs,
            "frozen_epsilon": frozen_epsilon,
        }
        self.stem = ConvNorm(
            3,
            width,
            7,
            stride=2,
            **layer_kwargs,
            norm=frozen_norm if freeze_at >= 1 else norm,
        )
        self.dtype = dtype
        self.freeze_at = freeze_at
        stages = []
        channels = width
        self.out_channels = {}
        for stage, depth in enumerate(depths[: top_level - 1]):
            level = stage + 2
            stage_norm = frozen_norm if level <= freeze_at else norm
            blocks = []
            for block in range(depth):
                stride = 2 if stage > 0 and block == 0 else 1
                blocks.append(
                    ResidualBlock(
                        channels,
                        width * 2**stage,
                        stride=stride,
                        bottleneck=bottleneck,
                        norm=stage_norm,
                        **layer_kwargs,
                    )
                )
                channels = blocks[-1].out_channels
            stages.append(nnx.List(blocks))
            self.out_channels[level] = channels
        self.stages = nnx.List(stages)

    def _frozen(self, x: jax.Array, level: int) -> jax.Array:
        """x, with gradients stopped when level (1: stem) is frozen."""
        return jax.lax.stop_gradient(x) if level <= self.freeze_at else x

    def __call__(self, images: jax.Array) -> dict[int, jax.Array]:
        x = self._frozen(self.stem(images.astype(self.dtype)), 1)
        x = nnx.max_pool(
            extents.masked(x), (3, 3), strides=(2, 2), padding=((1, 1), (1, 1))
        )
        features = {}
        for level, stage in enumerate(self.stages, start=2):
            for block in stage:
                x = block(x)
            x = features[level] = self._frozen(x, level)
        return features


class BackboneOptions(NamedTuple):
    """What a backbone is built from (config model.backbone, ...)."""

    name: str  # a key of BACKBONES
    width: int  # channels of the stem
    norm: str  # one of NORMS
    groups: int  # GroupNorm groups
    freeze_at: int  # 0 none, 1 the stem, 2 the stem and C2, ...
    frozen_epsilon: float  # epsilon of the frozen BatchNorm layers


def _build_resnet(
    name: str,
    options: BackboneOptions,
    *,
    top_level: int,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> ResNet:
    return ResNet(
        name,
        width=options.width,
        norm=options.norm,
        groups=options.groups,
        dtype=dtype,
        rngs=rngs,
        top_level=top_level,
        freeze_at=options.freeze_at,
        frozen_epsilon=options.frozen_epsilon,
    )


def _resnet_frozen_parts(freeze_at: int) -> tuple[str, ...]:
    """Module paths (inside the backbone) that `freeze_at` freezes."""
    parts = ("stem",) if freeze_at >= 1 else ()
    return parts + tuple(f"stages/{s}" for s in range(freeze_at - 1))


class BackboneEntry(NamedTuple):
    """How to build one backbone and what it provides."""

    # (BackboneOptions, *, top_level, dtype, rngs) -> module with out_channels
    build: Callable[..., nnx.Module]
    min_level: int  # the finest feature level (stride 2**min_level)
    max_level: int  # the coarsest
    # freeze_at -> module paths inside the backbone it freezes
    frozen_parts: Callable[[int], tuple[str, ...]]


BACKBONES: dict[str, BackboneEntry] = {
    name: BackboneEntry(
        functools.partial(_build_resnet, name), 2, 5, _resnet_frozen_parts
    )
    for name in RESNETS
}
MAX_FREEZE_AT = 5  # stem + four stages


def check_name(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown
    backbone."""
    names.check_known(name, key, BACKBONES, "backbone")


def check_norm(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown
    backbone norm."""
    names.check_known(name, key, NORMS, "norm")


def check_freeze_at(freeze_at: int, key: str) -> None:
    """Raises one ValueError line naming config `key` unless `freeze_at`
    names parts the backbones have (0 to MAX_FREEZE_AT)."""
    if not 0 <= freeze_at <= MAX_FREEZE_AT:
        raise ValueError(
            f"config.{key}={freeze_at!r}: must be in [0, {MAX_FREEZE_AT}] "
            "(0: nothing frozen, 1: the stem, 2: the stem and stage 1, ...)"
        )


def entry(name: str) -> BackboneEntry:
    """The registry entry of `name` (ValueError naming model.backbone)."""
    check_name(name, "model.backbone")
    return BACKBONES[name]


def build(
    options: BackboneOptions,
    *,
    max_level: int,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> tuple[nnx.Module, dict[int, int]]:
    """(module, channels per level) of the backbone `options.name`.

    The module maps images [B, H, W, 3] to {level: [B, H / 2**level,
    W / 2**level, channels[level]]} for its levels up to
    min(max_level, the backbone's coarsest level).
    """
    spec = entry(options.name)
    module = spec.build(
        options,
        top_level=min(max_level, spec.max_level),
        dtype=dtype,
        rngs=rngs,
    )
    return module, dict(module.out_channels)


def frozen_prefixes(name: str, freeze_at: int) -> tuple[str, ...]:
    """Param path prefixes ('backbone/stem', ...) that `freeze_at` freezes
    in the backbone `name`; the optimizer leaves them untouched."""
    parts = entry(name).frozen_parts(freeze_at)
    return tuple(f"backbone/{part}" for part in parts)
