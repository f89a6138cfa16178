"""Norms of the FPN and heads, and cross-replica (masked) BatchNorm.

Shapes: N rows (images, or rois flattened over the batch), H, W spatial,
F channels.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from ops import names

# He (fan-out) init for convolutions followed by ReLU (backbone.conv_init).
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


# name -> (channels, groups, dtype, rngs) -> norm layer, or None for 'none'.
HEAD_NORMS: dict[str, Callable[..., nnx.Module | None]] = {
    "none": lambda channels, groups, dtype, rngs: None,
    "batch": lambda channels, groups, dtype, rngs: BatchNorm(
        channels, dtype=dtype, rngs=rngs
    ),
    "sync_batch": lambda channels, groups, dtype, rngs: BatchNorm(
        channels, cross_replica_axis=DATA_AXIS, dtype=dtype, rngs=rngs
    ),
    "group": lambda channels, groups, dtype, rngs: GroupNorm(
        channels, num_groups=groups, epsilon=1e-5, dtype=dtype, rngs=rngs
    ),
}


def check_name(name: str, key: str, *, auto: bool = False) -> None:
    """Raises one ValueError line naming config `key` for an unknown head
    norm; `auto` also admits 'auto' (the config's 2017 layouts)."""
    known = (("auto",) if auto else ()) + tuple(HEAD_NORMS)
    names.check_known(name, key, known, "norm")


class ConvNorm(nnx.Module):
    """Conv (no bias) -> norm (statistics over the masked rows) -> ReLU?"""

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


def conv_norm(
    in_channels: int,
    out_channels: int,
    kernel: int,
    *,
    norm: str,
    groups: int,
    dtype: jnp.dtype,
    rngs: nnx.Rngs,
    relu: bool = True,
    kernel_init: Callable = conv_init,
) -> nnx.Module:
    """A conv layer with head norm `norm` (a key of HEAD_NORMS): with a
    norm, a biasless conv then the norm; with 'none', a conv with a bias
    (its kernel and bias at the layer's top, as nnx.Conv's). Either is
    called as layer(x, mask)."""
    kwargs = dict(kernel_init=kernel_init, dtype=dtype, rngs=rngs)
    if norm == "none":
        if kernel == 1:
            return Linear(in_channels, out_channels, relu=relu, **kwargs)
        return Conv(in_channels, out_channels, kernel, relu=relu, **kwargs)
    # A 1x1 conv is a Linear layer over channels (a cheaper gradient on CPU).
    if kernel == 1:
        conv = nnx.Linear(in_channels, out_channels, use_bias=False, **kwargs)
    else:
        pad = kernel // 2
        conv = nnx.Conv(
            in_channels,
            out_channels,
            (kernel, kernel),
            padding=((pad, pad), (pad, pad)),
            use_bias=False,
            **kwargs,
        )
    layer_norm = HEAD_NORMS[norm](out_channels, groups, dtype, rngs)
    return ConvNorm(conv, layer_norm, relu)
