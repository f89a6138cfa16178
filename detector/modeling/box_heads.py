"""The box head registry: '2fc' (the 2017 head) and '4conv1fc'.

Shapes: B batch, R rois per image, N = B * R, Q pool size, F channels of
the pooled features, D conv channels, H fc width, C classes.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import norms, roi_heads
from ops import names


class BoxHeadOptions(NamedTuple):
    """What a box head is built from (config model.roi.box_head, ...)."""

    name: str  # a key of BOX_HEADS
    in_channels: int  # F
    pool_size: int  # Q
    fc_dim: int  # H
    conv_dim: int  # D (conv heads)
    norm: str  # a key of norms.HEAD_NORMS (conv heads)
    groups: int  # GroupNorm groups


class ConvFCBoxHead(nnx.Module):
    """`num_convs` 3x3 convs with a norm, one fc, class logits and deltas."""

    def __init__(
        self,
        options: BoxHeadOptions,
        num_classes: int,
        *,
        num_convs: int,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.convs = nnx.List(
            [
                norms.conv_norm(
                    options.in_channels if i == 0 else options.conv_dim,
                    options.conv_dim,
                    3,
                    norm=options.norm,
                    groups=options.groups,
                    dtype=dtype,
                    rngs=rngs,
                )
                for i in range(num_convs)
            ]
        )
        channels = options.conv_dim if num_convs else options.in_channels
        self.fc = nnx.Linear(
            options.pool_size**2 * channels,
            options.fc_dim,
            dtype=dtype,
            rngs=rngs,
        )
        roi_heads.add_class_layers(
            self, options.fc_dim, num_classes, dtype=dtype, rngs=rngs
        )

    @jax.named_scope("box_head")
    def __call__(
        self, features: jax.Array, valid: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """[B, R, Q, Q, F], valid bool[B, R] or None (all) -> logits
        f32[B, R, C + 1], deltas f32[B, R, C, 4]."""
        batch, rois = features.shape[:2]
        x = features.reshape((batch * rois,) + features.shape[2:])
        mask = None if valid is None else valid.reshape(-1)
        for conv in self.convs:
            x = conv(x, mask)
        x = jax.nn.relu(self.fc(x.reshape(batch, rois, -1)))
        deltas = self.deltas(x).astype(jnp.float32)
        return (
            self.classes(x).astype(jnp.float32),
            deltas.reshape(batch, rois, -1, 4),
        )


def _two_fc(
    options: BoxHeadOptions,
    num_classes: int,
    *,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> roi_heads.BoxHead:
    return roi_heads.BoxHead(
        options.pool_size**2 * options.in_channels,
        options.fc_dim,
        num_classes,
        dtype=dtype,
        rngs=rngs,
    )


def _conv_fc(num_convs: int) -> Callable[..., ConvFCBoxHead]:
    def build(
        options: BoxHeadOptions,
        num_classes: int,
        *,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ) -> ConvFCBoxHead:
        return ConvFCBoxHead(
            options, num_classes, num_convs=num_convs, dtype=dtype, rngs=rngs
        )

    return build


# name -> (BoxHeadOptions, num_classes, *, dtype, rngs) -> head.
BOX_HEADS: dict[str, Callable[..., nnx.Module]] = {
    "2fc": _two_fc,
    "4conv1fc": _conv_fc(4),
}


def check_name(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown box
    head."""
    names.check_known(name, key, BOX_HEADS, "box head")


def build(
    options: BoxHeadOptions,
    num_classes: int,
    *,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> nnx.Module:
    """The box head `options.name` (ValueError naming model.roi.box_head)."""
    check_name(options.name, "model.roi.box_head")
    return BOX_HEADS[options.name](options, num_classes, dtype=dtype, rngs=rngs)
