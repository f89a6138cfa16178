"""The predict function served to users, in-process or exported.

    fn = serving_fn(config, graphdef, params, rest, category_ids)
    outputs = jax.jit(fn)(images, orig_sizes)

images u8[b, H, W, 3] letterboxed as eval letterboxes
(`detector.runtime.images.letterbox`), orig_sizes i32[b, 2] (height,
width of each original image). Inside: normalise with data.pixel_mean/std,
zero the padding (as the eval pipeline pads after normalising), run the
model's predict, map boxes back to original pixels with eval's per-axis
factor resized / original (`detector.evaluation.postprocess`), classes to
category ids. Outputs are `detector.runtime.artifact.OUTPUTS`. The weights
are closed over, so they are constants of the program (and inside an
exported artifact).

Shapes: b batch, H, W model input, K detection slots, T mask size.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from detector.runtime import artifact as artifact_lib


def resized_sizes(
    orig_sizes: jax.Array, image_size: tuple[int, int]
) -> jax.Array:
    """f32[b, 2] resized (height, width), as the eval pipeline computes them
    (float32, half to even; `detector.runtime.images.letterbox_size`)."""
    hw = orig_sizes.astype(jnp.float32)
    height, width = image_size
    scale = jnp.minimum(height / hw[:, 0], width / hw[:, 1])
    return jnp.maximum(jnp.round(hw * scale[:, None]), 1.0)


def normalise(
    images: jax.Array,
    resized: jax.Array,
    pixel_mean: tuple[float, ...],
    pixel_std: tuple[float, ...],
) -> jax.Array:
    """u8[b, H, W, 3] -> f32 normalised, zero outside each resized image."""
    mean = jnp.asarray(pixel_mean, jnp.float32)
    std = jnp.asarray(pixel_std, jnp.float32)
    x = (images.astype(jnp.float32) - mean) / std
    rows = jnp.arange(images.shape[1], dtype=jnp.float32)
    cols = jnp.arange(images.shape[2], dtype=jnp.float32)
    inside = (rows[None, :, None] < resized[:, 0, None, None]) & (
        cols[None, None, :] < resized[:, 1, None, None]
    )
    return jnp.where(inside[..., None], x, 0.0)


def to_original(
    boxes: jax.Array, resized: jax.Array, orig_sizes: jax.Array
) -> jax.Array:
    """f32[b, K, 4] input-pixel boxes -> original pixels, clipped."""
    hw = orig_sizes.astype(jnp.float32)
    # Multiplied by original / resized (eval divides by resized / original
    # in float64): the same to float32 rounding, and a product XLA compiles
    # alike for a static and a symbolic batch.
    back = hw / resized  # (y, x) per image
    sy, sx = back[:, 0, None], back[:, 1, None]
    h, w = hw[:, 0, None], hw[:, 1, None]
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    return jnp.stack(
        [
            jnp.clip(x1 * sx, 0.0, w),
            jnp.clip(y1 * sy, 0.0, h),
            jnp.clip(x2 * sx, 0.0, w),
            jnp.clip(y2 * sy, 0.0, h),
        ],
        axis=-1,
    )


# (images u8[b, H, W, 3], orig_sizes i32[b, 2]) -> OUTPUTS.
ServingFn = Callable[[jax.Array, jax.Array], dict[str, jax.Array]]


def serving_fn(
    config: ml_collections.ConfigDict,
    graphdef: nnx.GraphDef,
    params: nnx.State,
    rest: nnx.State,
    category_ids: list[int],
) -> ServingFn:
    """(images u8[b, H, W, 3], orig_sizes i32[b, 2]) -> OUTPUTS (module
    docstring), with `graphdef` (eval mode) and the weights closed over."""
    image_size = tuple(config.data.image_size)
    mean, std = tuple(config.data.pixel_mean), tuple(config.data.pixel_std)
    id_of_class = jnp.asarray([0, *category_ids], jnp.int32)

    def serve(images: jax.Array, orig_sizes: jax.Array) -> dict[str, jax.Array]:
        resized = resized_sizes(orig_sizes, image_size)
        model = nnx.merge(graphdef, params, rest)
        out = model.predict(normalise(images, resized, mean, std))
        outputs = {
            "boxes": to_original(out["boxes"], resized, orig_sizes),
            "scores": out["scores"],
            "category_ids": id_of_class[out["classes"]],
            "masks": out["masks"],
            "num_valid": out["num_detections"],
        }
        assert tuple(outputs) == artifact_lib.OUTPUTS
        return outputs

    return serve
