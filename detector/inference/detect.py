"""The one inference function: placed float pixels, each image's size on
the canvas and its original size -> normalise -> `MaskRCNN.predict` ->
boxes in original pixels -> empty boxes dropped -> category ids, the
outputs of `detector.imaging.detections.OUTPUTS`.
Shapes: b batch, H, W canvas, K detection slots.
"""

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from detector.imaging import detections


@dataclasses.dataclass(frozen=True)
class Weights:
    """A model to run, and what it is (recorded in eval results)."""

    graphdef: nnx.GraphDef  # eval mode
    params: nnx.State
    rest: nnx.State  # norm statistics and the other non-trainable state
    step: int | None = None
    # The checkpoint folder or file it came from; None: unsaved weights.
    checkpoint: str | None = None


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
    """f32[b, K, 4] canvas-pixel boxes -> original pixels, clipped.

    Each axis is multiplied by original / resized size (the factor the
    image was resized by, not the rule's unrounded scale): a product XLA
    compiles alike for a static and a symbolic batch.
    """
    hw = orig_sizes.astype(jnp.float32)
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


# (params, rest, images f32[b, H, W, 3], image_sizes i32[b, 2],
# orig_sizes i32[b, 2]) -> detections.OUTPUTS.
DetectFn = Callable[
    [nnx.State, nnx.State, jax.Array, jax.Array, jax.Array],
    dict[str, jax.Array],
]


def detect_fn(
    config: ml_collections.ConfigDict,
    graphdef: nnx.GraphDef,
    category_ids: list[int],
) -> DetectFn:
    """The inference function of `graphdef` (eval mode) for `config.data`'s
    pixel statistics and `category_ids` (class c -> category_ids[c - 1]).

    images f32[b, H, W, 3] are resized in float by the config's rule
    (`imaging.images.fitted_size` and `place`) at the top left of one of
    the config's canvases; image_sizes their resized (height, width),
    orig_sizes the originals'. Inside: normalise and zero the padding,
    predict with each image's size, map boxes back to original pixels,
    drop boxes left empty there (`drop_empty`), map classes to category
    ids. Returns `detections.OUTPUTS` (`imaging/detections.py` says each).
    """
    mean, std = tuple(config.data.pixel_mean), tuple(config.data.pixel_std)
    ids = (0, *category_ids)

    def detect(
        params: nnx.State,
        rest: nnx.State,
        images: jax.Array,
        image_sizes: jax.Array,
        orig_sizes: jax.Array,
    ) -> dict[str, jax.Array]:
        model = nnx.merge(graphdef, params, rest)
        out = model.predict(
            normalise(images, image_sizes, mean, std), image_sizes
        )
        outputs = {
            "boxes": to_original(out["boxes"], image_sizes, orig_sizes),
            "scores": out["scores"],
            "category_ids": jnp.asarray(ids, jnp.int32)[out["classes"]],
            "masks": out["masks"],
            "num_valid": out["num_detections"],
        }
        assert tuple(outputs) == detections.OUTPUTS
        return drop_empty(outputs)

    return detect


def sharded(detect: DetectFn, mesh: Mesh) -> jax.stages.Wrapped:
    """jit(shard_map(`detect`)) over the mesh's data axis: the weights
    replicated, the batch split by rows."""
    rows = P("data")
    return jax.jit(
        jax.shard_map(
            detect,
            mesh=mesh,
            in_specs=(P(), P(), rows, rows, rows),
            out_specs=rows,
            check_vma=False,
        )
    )
