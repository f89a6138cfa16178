"""The backbone registry, and ResNets (18, 50, 101 and a CPU-sized 'tiny').

Shapes: B batch, H, W input size; F_l channels of the output at level l
(stride 2**l); output {level: [B, H / 2**l, W / 2**l, F_l]}.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import extents, norms
from ops import names

# name -> (blocks per stage, bottleneck?)
RESNETS = {
    "resnet18": ((2, 2, 2, 2), False),
    "resnet50": ((3, 4, 6, 3), True),
    "resnet101": ((3, 4, 23, 3), True),
    "tiny": ((1, 1, 1, 1), False),
}
_BOTTLENECK_EXPANSION = 4


def _conv(kernel: int, stride: int = 1, relu: bool = True):
    """A backbone conv: nnx.Conv at every kernel size (its weights' shape);
    the caller zeroes its input past each image's extent."""
    return norms.ConvOptions(kernel, stride, relu, linear_1x1=False)


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
                    norms.conv_norm(
                        in_channels, width, _conv(1), **layer_kwargs
                    ),
                    norms.conv_norm(
                        width, width, _conv(3, stride), **layer_kwargs
                    ),
                    norms.conv_norm(
                        width,
                        out_channels,
                        _conv(1, relu=False),
                        **layer_kwargs,
                    ),
                ]
            )
        else:
            out_channels = width
            self.layers = nnx.List(
                [
                    norms.conv_norm(
                        in_channels, width, _conv(3, stride), **layer_kwargs
                    ),
                    norms.conv_norm(
                        width, width, _conv(3, relu=False), **layer_kwargs
                    ),
                ]
            )
        needs_projection = stride != 1 or in_channels != out_channels
        self.shortcut = (
            norms.conv_norm(
                in_channels,
                out_channels,
                _conv(1, stride, relu=False),
                **layer_kwargs,
            )
            if needs_projection
            else None
        )
        self.out_channels = out_channels

    def __call__(self, x: jax.Array) -> jax.Array:
        residual = (
            x if self.shortcut is None else self.shortcut(extents.masked(x))
        )
        for layer in self.layers:
            x = layer(extents.masked(x))
        return jax.nn.relu(x + residual)


class BackboneOptions(NamedTuple):
    """What a backbone is built from (config model.backbone, ...)."""

    name: str  # a key of BACKBONES
    width: int  # channels of the stem
    norm: str  # one of norms.BACKBONE_NORMS
    groups: int  # GroupNorm groups
    freeze_at: int  # 0 none, 1 the stem, 2 the stem and C2, ...
    frozen_epsilon: float  # epsilon of the frozen BatchNorm layers


class ResNet(nnx.Module):
    """ResNet stem + stages; returns C2..C_top keyed by level.

    Stages past `top_level` (<= 5) are not built: a pyramid that stops at
    level 4 has no use for C5. `freeze_at` (0: nothing) stops gradients at
    the output of the stem (1) or of stage freeze_at - 1 (C_freeze_at).
    """

    def __init__(
        self,
        options: BackboneOptions,
        *,
        top_level: int = 5,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        if options.name not in RESNETS:
            raise ValueError(
                f"unknown backbone {options.name!r}; known: "
                f"{', '.join(RESNETS)}"
            )
        depths, bottleneck = RESNETS[options.name]
        width, freeze_at = options.width, options.freeze_at
        norm = norms.NormOptions(
            options.norm, options.groups, options.frozen_epsilon
        )
        frozen_norm = norm._replace(
            name="frozen_batch"
            if norm.name in ("batch", "sync_batch")
            else norm.name
        )
        layer_kwargs = {"dtype": dtype, "rngs": rngs}
        self.stem = norms.conv_norm(
            3,
            width,
            _conv(7, 2),
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
        x = self.stem(extents.masked(images.astype(self.dtype)))
        x = self._frozen(x, 1)
        x = nnx.max_pool(
            extents.masked(x), (3, 3), strides=(2, 2), padding=((1, 1), (1, 1))
        )
        features = {}
        for level, stage in enumerate(self.stages, start=2):
            for block in stage:
                x = block(x)
            x = features[level] = self._frozen(x, level)
        return features


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
    name: BackboneEntry(ResNet, 2, 5, _resnet_frozen_parts) for name in RESNETS
}
MAX_FREEZE_AT = 5  # stem + four stages


def check_name(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown
    backbone."""
    names.check_known(name, key, BACKBONES, "backbone")


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
