"""The norm layers of the backbone, FPN and heads, in one registry
(NORMS): frozen BatchNorm, BatchNorm with masked and cross-replica
statistics, GroupNorm, or none; ConvNorm, a conv followed by one.

Shapes: N rows (images, or rois flattened over the batch), H, W spatial,
F channels.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from ops import names

# He (fan-out) init for convolutions followed by ReLU.
conv_init = nnx.initializers.variance_scaling(2.0, "fan_out", "normal")
DATA_AXIS = "data"


def axis_bound(name: str) -> bool:
    """Whether the mesh axis `name` is bound here (inside a shard_map)."""
    try:
        jax.lax.axis_size(name)
    except NameError:
        return False
    return True


class BatchNorm(nnx.BatchNorm):
    """nnx.BatchNorm with masked and cross-replica statistics (module doc)."""

    def __init__(
        self,
        num_features: int,
        *,
        cross_replica_axis: str | None = None,
        momentum: float = 0.9,
        epsilon: float = 1e-5,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        super().__init__(
            num_features,
            momentum=momentum,
            epsilon=epsilon,
            dtype=dtype,
            rngs=rngs,
        )
        self.cross_replica_axis = cross_replica_axis

    def __call__(
        self,
        x: jax.Array,
        use_running_average: bool | None = None,
        *,
        mask: jax.Array | None = None,
    ) -> jax.Array:
        """x [N, ..., F], mask bool[N] or None (every row) -> [N, ..., F]."""
        running = (
            self.use_running_average
            if use_running_average is None
            else use_running_average
        )
        synced = self.cross_replica_axis is not None and axis_bound(
            self.cross_replica_axis
        )
        if running or (mask is None and not synced):
            return super().__call__(x, use_running_average=running)
        mean, var, count = self.statistics(x, mask)
        updated = count > 0
        momentum = self.momentum
        self.mean[...] = jnp.where(
            updated,
            momentum * self.mean[...] + (1 - momentum) * mean,
            self.mean[...],
        )
        self.var[...] = jnp.where(
            updated,
            momentum * self.var[...] + (1 - momentum) * var,
            self.var[...],
        )
        multiplier = self.scale[...] * jax.lax.rsqrt(var + self.epsilon)
        offset = self.bias[...] - mean * multiplier
        y = x.astype(jnp.float32) * multiplier + offset
        return y.astype(self.dtype or x.dtype)

    def statistics(
        self, x: jax.Array, mask: jax.Array | None
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(mean f32[F], biased var f32[F], count) over the valid rows of
        every replica; mean 0 and var 0 where the count is 0."""
        x = x.astype(jnp.float32)
        weights = jnp.ones(x.shape[:1], jnp.float32)
        if mask is not None:
            weights = mask.astype(jnp.float32)
        weights = weights.reshape((-1,) + (1,) * (x.ndim - 1))
        axes = tuple(range(x.ndim - 1))
        per_row = x[0, ..., 0].size  # positions per row
        sums = (
            jnp.sum(x * weights, axis=axes),
            jnp.sum(jnp.square(x) * weights, axis=axes),
            jnp.sum(weights) * per_row,
        )
        if self.cross_replica_axis is not None and axis_bound(
            self.cross_replica_axis
        ):
            sums = jax.lax.psum(sums, self.cross_replica_axis)
        total, squares, count = sums
        safe = jnp.maximum(count, 1.0)
        mean = total / safe
        var = jnp.maximum(squares / safe - jnp.square(mean), 0.0)
        return mean, var, count


class GroupNorm(nnx.GroupNorm):
    """nnx.GroupNorm (per row: a mask changes nothing)."""

    def __call__(
        self, x: jax.Array, *, mask: jax.Array | None = None
    ) -> jax.Array:
        del mask
        return super().__call__(x)


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

    def __call__(
        self, x: jax.Array, *, mask: jax.Array | None = None
    ) -> jax.Array:
        """x [N, ..., F] -> [N, ..., F]; a mask changes nothing."""
        del mask
        multiplier = self.scale[...] * jax.lax.rsqrt(
            self.var[...] + self.epsilon
        )
        offset = self.bias[...] - self.mean[...] * multiplier
        return (
            x * multiplier.astype(self.dtype) + offset.astype(self.dtype)
        ).astype(self.dtype)


class NormOptions(NamedTuple):
    """Which norm a layer carries and how it is set up."""

    name: str  # a key of NORMS
    groups: int = 32  # GroupNorm groups
    # FrozenBatchNorm epsilon (torchvision's 1e-5; its legacy COCO Mask
    # R-CNN weights were trained with 0).
    frozen_epsilon: float = 1e-5


NO_NORM = NormOptions("none")

# name -> (channels, NormOptions, dtype, rngs) -> a layer called as
# layer(x, mask=None) (mask: the rows whose statistics count), or None for
# 'none' (the conv before it keeps its bias).
NORMS: dict[str, Callable[..., nnx.Module | None]] = {
    "none": lambda channels, options, dtype, rngs: None,
    "batch": lambda channels, options, dtype, rngs: BatchNorm(
        channels, dtype=dtype, rngs=rngs
    ),
    "sync_batch": lambda channels, options, dtype, rngs: BatchNorm(
        channels, cross_replica_axis=DATA_AXIS, dtype=dtype, rngs=rngs
    ),
    "group": lambda channels, options, dtype, rngs: GroupNorm(
        channels,
        num_groups=options.groups,
        epsilon=1e-5,
        dtype=dtype,
        rngs=rngs,
    ),
    "frozen_batch": lambda channels, options, dtype, rngs: FrozenBatchNorm(
        channels, epsilon=options.frozen_epsilon, dtype=dtype
    ),
}
# The backbone's norms (every conv of it has one) and the FPN's and
# heads' (frozen statistics only where weights are loaded: the backbone).
BACKBONE_NORMS = ("group", "batch", "sync_batch", "frozen_batch")
HEAD_NORMS = ("none", "batch", "sync_batch", "group")
assert set(BACKBONE_NORMS + HEAD_NORMS) == set(NORMS)


def make_norm(
    options: NormOptions, channels: int, *, dtype: jnp.dtype, rngs: nnx.Rngs
) -> nnx.Module | None:
    """The norm layer `options.name` over the channel (last) axis."""
    if options.name not in NORMS:
        raise ValueError(
            f"unknown norm {options.name!r}; known: {', '.join(NORMS)}"
        )
    return NORMS[options.name](channels, options, dtype, rngs)


def check_name(name: str, key: str, *, auto: bool = False) -> None:
    """Raises one ValueError line naming config `key` for an unknown head
    norm; `auto` also admits 'auto' (the config's 2017 layouts)."""
    known = (("auto",) if auto else ()) + HEAD_NORMS
    names.check_known(name, key, known, "norm")


def check_backbone_norm(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown
    backbone norm."""
    names.check_known(name, key, BACKBONE_NORMS, "norm")


class ConvNorm(nnx.Module):
    """Conv (no bias) -> norm (statistics over the masked rows) -> ReLU?

    The backbone's convs and those of the FPN and heads with a norm.
    """

    def __init__(self, conv: nnx.Module, norm: nnx.Module, relu: bool):
        self.conv = conv
        self.norm = norm
        self.relu = relu

    def __call__(
        self, x: jax.Array, mask: jax.Array | None = None
    ) -> jax.Array:
        """x [N, H, W, F_in], mask bool[N] or None -> [N, H, W, F_out]."""
        x = self.norm(self.conv(x), mask=mask)
        return jax.nn.relu(x) if self.relu else x


class _ThenReLU:
    """`relu` after the wrapped layer; a mask changes nothing."""

    relu: bool

    def __call__(
        self, x: jax.Array, mask: jax.Array | None = None
    ) -> jax.Array:
        del mask
        x = super().__call__(x)  # type: ignore[misc]
        return jax.nn.relu(x) if self.relu else x


class Conv(_ThenReLU, nnx.Conv):
    """nnx.Conv (with a bias, 'same' padding) -> ReLU?"""

    def __init__(self, in_channels, out_channels, kernel: int, *, relu, **kw):
        super().__init__(in_channels, out_channels, (kernel, kernel), **kw)
        self.relu = relu


class Linear(_ThenReLU, nnx.Linear):
    """A 1x1 conv with a bias as nnx.Linear over channels -> ReLU?"""

    def __init__(self, in_channels, out_channels, *, relu, **kw):
        super().__init__(in_channels, out_channels, **kw)
        self.relu = relu


class ConvOptions(NamedTuple):
    """A conv layer's shape: kernel side, stride, ReLU after it, init."""

    kernel: int
    stride: int = 1
    relu: bool = True
    kernel_init: Callable = conv_init
    # A 1x1 stride-1 conv as nnx.Linear over channels (a cheaper gradient
    # on CPU): the FPN's and heads'; the backbone's stay nnx.Conv.
    linear_1x1: bool = True


def conv_norm(
    in_channels: int,
    out_channels: int,
    conv: int | ConvOptions,
    *,
    norm: NormOptions,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
) -> nnx.Module:
    """A conv layer (`conv`: its options, or its kernel side) with the norm
    `norm`: with a norm, a biasless conv then the norm; with 'none', a conv
    with a bias (its kernel and bias at the layer's top, as nnx.Conv's).
    Either is called as layer(x, mask)."""
    if isinstance(conv, int):
        conv = ConvOptions(conv)
    kwargs = dict(kernel_init=conv.kernel_init, dtype=dtype, rngs=rngs)
    as_linear = conv.kernel == 1 and conv.stride == 1 and conv.linear_1x1
    if norm.name == "none":
        if as_linear:
            return Linear(in_channels, out_channels, relu=conv.relu, **kwargs)
        return Conv(
            in_channels,
            out_channels,
            conv.kernel,
            relu=conv.relu,
            strides=conv.stride,
            **kwargs,
        )
    if as_linear:
        layer = nnx.Linear(in_channels, out_channels, use_bias=False, **kwargs)
    else:
        pad = conv.kernel // 2
        layer = nnx.Conv(
            in_channels,
            out_channels,
            (conv.kernel, conv.kernel),
            strides=conv.stride,
            padding=((pad, pad), (pad, pad)),
            use_bias=False,
            **kwargs,
        )
    layer_norm = make_norm(norm, out_channels, dtype=dtype, rngs=rngs)
    return ConvNorm(layer, layer_norm, conv.relu)
