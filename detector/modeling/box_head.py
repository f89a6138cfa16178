"""The box head registry: '2fc' (the 2017 head) and '4conv1fc'; every
head ends in class logits and class-specific box deltas.

Shapes: B batch, R rois per image, N = B * R, Q pool size, F channels of
the pooled features, D conv channels, H fc width, C classes.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import norms
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


def add_class_layers(
    head: nnx.Module,
    hidden: int,
    num_classes: int,
    *,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> None:
    """The layers every box head ends in: `classes` (C + 1 logits, drawn
    from N(0, 0.01)) and `deltas` (4 per class, N(0, 0.001))."""
    head.classes = nnx.Linear(
        hidden,
        num_classes + 1,
        dtype=dtype,
        rngs=rngs,
        kernel_init=nnx.initializers.normal(0.01),
    )
    head.deltas = nnx.Linear(
        hidden,
        4 * num_classes,
        dtype=dtype,
        rngs=rngs,
        kernel_init=nnx.initializers.normal(0.001),
    )


class BoxHead(nnx.Module):
    """A box head: `hidden` features of the pooled rois, then the class
    layers (`add_class_layers`)."""

    pool_size: int  # Q

    def hidden(self, features: jax.Array, valid: jax.Array | None) -> jax.Array:
        """[B, R, Q, Q, F], valid bool[B, R] or None (all) -> [B, R, H]."""
        raise NotImplementedError

    @jax.named_scope("box_head")
    def __call__(
        self, features: jax.Array, valid: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """[B, R, Q, Q, F], valid bool[B, R] or None (all rois; what a norm
        counts) -> logits f32[B, R, C + 1], deltas f32[B, R, C, 4]."""
        x = self.hidden(features, valid)
        deltas = self.deltas(x).astype(jnp.float32)
        return (
            self.classes(x).astype(jnp.float32),
            deltas.reshape(x.shape[:2] + (-1, 4)),
        )


class TwoFCHead(BoxHead):
    """Two fully connected layers, then class logits and class deltas."""

    def __init__(
        self,
        options: BoxHeadOptions,
        num_classes: int,
        *,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        in_features = options.pool_size**2 * options.in_channels
        self.pool_size = options.pool_size
        self.fc1 = nnx.Linear(
            in_features, options.fc_dim, dtype=dtype, rngs=rngs
        )
        self.fc2 = nnx.Linear(
            options.fc_dim, options.fc_dim, dtype=dtype, rngs=rngs
        )
        add_class_layers(
            self, options.fc_dim, num_classes, dtype=dtype, rngs=rngs
        )

    def hidden(self, features: jax.Array, valid: jax.Array | None) -> jax.Array:
        """No norm here: `valid` changes nothing."""
        del valid
        x = features.reshape(features.shape[:2] + (-1,))
        x = jax.nn.relu(self.fc1(x))
        return jax.nn.relu(self.fc2(x))


class ConvFCHead(BoxHead):
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
        self.pool_size = options.pool_size
        self.convs = nnx.List(
            [
                norms.conv_norm(
                    options.in_channels if i == 0 else options.conv_dim,
                    options.conv_dim,
                    3,
                    norm=norms.NormOptions(options.norm, options.groups),
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
        add_class_layers(
            self, options.fc_dim, num_classes, dtype=dtype, rngs=rngs
        )

    def hidden(self, features: jax.Array, valid: jax.Array | None) -> jax.Array:
        """The convs' norms count the valid rois only."""
        batch, rois = features.shape[:2]
        x = features.reshape((batch * rois,) + features.shape[2:])
        mask = None if valid is None else valid.reshape(-1)
        for conv in self.convs:
            x = conv(x, mask)
        return jax.nn.relu(self.fc(x.reshape(batch, rois, -1)))


def _conv_fc(num_convs: int) -> Callable[..., ConvFCHead]:
    def build(
        options: BoxHeadOptions,
        num_classes: int,
        *,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ) -> ConvFCHead:
        return ConvFCHead(
            options, num_classes, num_convs=num_convs, dtype=dtype, rngs=rngs
        )

    return build


# name -> (BoxHeadOptions, num_classes, *, dtype, rngs) -> head.
BOX_HEADS: dict[str, Callable[..., nnx.Module]] = {
    "2fc": TwoFCHead,
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
