"""The mask head (convs, a 2x deconv, per-class mask logits) and its
targets: GT masks resampled over the sampled rois.

Shapes: B batch, G GT per image, Rm mask rois, N = B * Rm, C classes,
F channels, Q pool size, S GT crop size, M mask size, K detections.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from detector.modeling import norms


class Deconv2x(nnx.Module):
    """Transposed conv, kernel 2 and stride 2, as one matmul.

    The 2x2 stride-2 windows do not overlap, so out[2i + a, 2j + b] =
    x[i, j] @ kernel[a, b] + bias (PyTorch's ConvTranspose2d form; lax's
    conv_transpose flips the kernel). Its weight gradient is a plain matmul:
    XLA CPU's transposed-conv weight gradient is ~30x slower at mask head
    sizes.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.kernel = nnx.Param(
            norms.conv_init(
                rngs.params(), (2, 2, in_channels, out_channels), jnp.float32
            )
        )
        self.bias = nnx.Param(jnp.zeros((out_channels,), jnp.float32))
        self.dtype = dtype

    def unshuffled(self, x: jax.Array) -> jax.Array:
        """[N, H, W, F_in] -> [N, H, W, 2 (a), 2 (b), F_out], pre-interleave.

        Pointwise layers commute with the interleave, so a head can apply
        them here and interleave only its (narrower) final output.
        """
        kernel = self.kernel[...].astype(self.dtype)
        y = jnp.einsum("nhwc,abcd->nhwabd", x.astype(self.dtype), kernel)
        return y + self.bias[...].astype(self.dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        """[N, H, W, F_in] -> [N, 2H, 2W, F_out]."""
        return pixel_shuffle(self.unshuffled(x))


def pixel_shuffle(x: jax.Array) -> jax.Array:
    """[N, H, W, 2 (a), 2 (b), F] -> [N, 2H, 2W, F], out[2i + a, 2j + b]."""
    batch, height, width, _, _, channels = x.shape
    x = jnp.transpose(x, (0, 1, 3, 2, 4, 5))
    return x.reshape(batch, 2 * height, 2 * width, channels)


class MaskHeadOptions(NamedTuple):
    """What the mask head is built from (config model.roi.mask_head_*)."""

    in_channels: int  # F
    pool_size: int  # Q
    conv_dim: int  # channels of its convs and deconv
    num_convs: int
    norm: str  # a key of norms.HEAD_NORMS
    groups: int  # GroupNorm groups
    mask_size: int  # M = 2Q, the side of its logits and targets


class MaskHead(nnx.Module):
    """conv3x3 stack, 2x deconv, then one mask logit map per class.

    Each conv + ReLU carries the norm `norm` of norms.HEAD_NORMS ('none':
    a conv with a bias, torchvision's v1 MaskRCNNHeads; 'batch':
    its v2 MaskRCNNHeads(norm_layer=BatchNorm2d); detectron2's
    MaskRCNNConvUpsampleHead(conv_norm=...)).
    """

    def __init__(
        self,
        options: MaskHeadOptions,
        num_classes: int,
        *,
        dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        in_channels, hidden = options.in_channels, options.conv_dim
        num_convs = options.num_convs
        self.pool_size = options.pool_size
        self.mask_size = options.mask_size
        self.convs = nnx.List(
            [
                norms.conv_norm(
                    in_channels if i == 0 else hidden,
                    hidden,
                    3,
                    norm=norms.NormOptions(options.norm, options.groups),
                    dtype=dtype,
                    rngs=rngs,
                )
                for i in range(num_convs)
            ]
        )
        self.upsample = Deconv2x(
            hidden if num_convs else in_channels, hidden, dtype=dtype, rngs=rngs
        )
        # A 1x1 conv as a Linear over channels (a cheaper gradient on CPU).
        self.logits = nnx.Linear(
            hidden,
            num_classes,
            kernel_init=nnx.initializers.normal(0.001),
            dtype=dtype,
            rngs=rngs,
        )

    @jax.named_scope("mask_head")
    def __call__(
        self, features: jax.Array, valid: jax.Array | None = None
    ) -> jax.Array:
        """[B, R, Q, Q, F], valid bool[B, R] or None (all) -> mask logits
        f32[B, R, M, M, C], M = 2Q; a norm counts the valid rows only."""
        batch, rois = features.shape[:2]
        x = features.reshape((batch * rois,) + features.shape[2:])
        mask = None if valid is None else valid.reshape(-1)
        for conv in self.convs:
            x = conv(x, mask)
        # ReLU and the 1x1 logits are pointwise: apply them before the 2x
        # interleave, which then moves C channels instead of `hidden`.
        x = jax.nn.relu(self.upsample.unshuffled(x))
        x = pixel_shuffle(self.logits(x).astype(jnp.float32))
        return x.reshape((batch, rois) + x.shape[1:])


def class_mask_logits(mask_logits: jax.Array, classes: jax.Array) -> jax.Array:
    """The mask logits [B, R, M, M] of each roi's class 1..C (any for 0)."""
    index = jnp.maximum(classes - 1, 0)[..., None, None, None]
    return jnp.take_along_axis(mask_logits, index, axis=-1)[..., 0]
