"""The predict function served in process or exported: resized float images
-> detections in original pixels (`serving_fn`), and its form that takes the
weights as an argument (`weighted_fn`; docs/export-and-predict.md).
Shapes: b batch, H, W model input, K detection slots, T mask size.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from detector.imaging import images as images_lib
from detector.predict import artifact as artifact_lib


def resize_of(config: ml_collections.ConfigDict) -> images_lib.Resize:
    """The resize rule of `config.data` as predict applies it (eval's: the
    last of data.min_size), against each image's canvas."""
    data = config.data
    return images_lib.Resize(
        rule=data.resize,
        min_size=int(data.min_size[-1]),
        max_size=int(data.max_size),
    )


def normalise(
    images: jax.Array,
    image_sizes: jax.Array,
    pixel_mean: tuple[float, ...],
    pixel_std: tuple[float, ...],
) -> jax.Array:
    """f32[b, H, W, 3] pixels -> normalised, zero outside each image."""
    mean = jnp.asarray(pixel_mean, jnp.float32)
    std = jnp.asarray(pixel_std, jnp.float32)
    x = (images.astype(jnp.float32) - mean) / std
    rows = jnp.arange(images.shape[1], dtype=jnp.int32)
    cols = jnp.arange(images.shape[2], dtype=jnp.int32)
    inside = (rows[None, :, None] < image_sizes[:, 0, None, None]) & (
        cols[None, None, :] < image_sizes[:, 1, None, None]
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
    back = hw / resized.astype(jnp.float32)  # (y, x) per image
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


def drop_empty(outputs: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """Detections with a box of zero width or height (in original pixels)
    leave: the rest move to the front in order, num_valid counts them."""
    boxes = outputs["boxes"]
    slots = jnp.arange(boxes.shape[1])
    keep = (
        (slots[None] < outputs["num_valid"][:, None])
        & (boxes[..., 2] > boxes[..., 0])
        & (boxes[..., 3] > boxes[..., 1])
    )
    # Kept slots first, each group in slot order (a stable sort).
    order = jnp.argsort(~keep, axis=1, stable=True)
    count = keep.sum(axis=1).astype(jnp.int32)
    filled = slots[None] < count[:, None]
    out = {}
    for name, value in outputs.items():
        if name == "num_valid":
            continue
        index = order.reshape(order.shape + (1,) * (value.ndim - 2))
        moved = jnp.take_along_axis(value, index, axis=1)
        mask = filled.reshape(filled.shape + (1,) * (value.ndim - 2))
        out[name] = jnp.where(mask, moved, jnp.zeros((), value.dtype))
    out["num_valid"] = count
    return {name: out[name] for name in outputs}


# (images f32[b, H, W, 3], image_sizes i32[b, 2], orig_sizes i32[b, 2])
# -> OUTPUTS.
ServingFn = Callable[[jax.Array, jax.Array, jax.Array], dict[str, jax.Array]]


def serving_fn(
    config: ml_collections.ConfigDict,
    graphdef: nnx.GraphDef,
    params: nnx.State,
    rest: nnx.State,
    category_ids: list[int],
) -> ServingFn:
    """(images, image_sizes, orig_sizes) -> `artifact.OUTPUTS`, with
    `graphdef` (eval mode) and the weights closed over (constants of the
    program where they are concrete; `weighted_fn` passes them traced).

    images f32[b, H, W, 3] are resized in float by the config's rule
    (`images.fitted_size` and `place`: eval's resize, unrounded) at the top
    left of one of the config's canvases (traced once per canvas);
    image_sizes i32[b, 2] their resized (height, width), orig_sizes
    i32[b, 2] the originals'. Inside: normalise and zero the padding (as
    eval pads after normalising), predict with each image's size, map
    boxes back with eval's per-axis factor, drop boxes left empty there
    (`drop_empty`), map classes to category ids.
    """
    mean, std = tuple(config.data.pixel_mean), tuple(config.data.pixel_std)
    id_of_class = jnp.asarray([0, *category_ids], jnp.int32)

    def serve(
        images: jax.Array, image_sizes: jax.Array, orig_sizes: jax.Array
    ) -> dict[str, jax.Array]:
        model = nnx.merge(graphdef, params, rest)
        out = model.predict(
            normalise(images, image_sizes, mean, std), image_sizes
        )
        outputs = {
            "boxes": to_original(out["boxes"], image_sizes, orig_sizes),
            "scores": out["scores"],
            "category_ids": id_of_class[out["classes"]],
            "masks": out["masks"],
            "num_valid": out["num_detections"],
        }
        assert tuple(outputs) == artifact_lib.OUTPUTS
        return drop_empty(outputs)

    return serve


# (weights, images, image_sizes, orig_sizes) -> OUTPUTS, weights the flat
# leaves of (params, rest) in jax.tree order.
WeightedFn = Callable[
    [list[jax.Array], jax.Array, jax.Array, jax.Array], dict[str, jax.Array]
]


def weighted_fn(
    config: ml_collections.ConfigDict,
    graphdef: nnx.GraphDef,
    params: nnx.State,
    rest: nnx.State,
    category_ids: list[int],
) -> tuple[WeightedFn, list]:
    """`serving_fn` with the weights as its first argument, and the weights:
    the leaves of (params, rest) (BatchNorm statistics in `rest`), in the
    fixed order of `jax.tree.leaves`."""
    weights, treedef = jax.tree.flatten((params, rest))

    def serve(
        weights: list[jax.Array],
        images: jax.Array,
        image_sizes: jax.Array,
        orig_sizes: jax.Array,
    ) -> dict[str, jax.Array]:
        params, rest = jax.tree.unflatten(treedef, weights)
        fn = serving_fn(config, graphdef, params, rest, category_ids)
        return fn(images, image_sizes, orig_sizes)

    return serve, weights
