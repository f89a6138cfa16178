"""Host-offload NMS: the numpy reference on the host via `jax.pure_callback`,
a device -> host -> device round-trip per call (the offload baseline)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ops.nms import reference


def _host_nms(
    boxes, scores, classes, *, max_output_size, iou_threshold, score_threshold
):
    indices, num_valid = reference.nms(
        np.asarray(boxes),
        np.asarray(scores),
        classes=None if classes is None else np.asarray(classes),
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        score_threshold=score_threshold,
    )
    return indices, num_valid


def nms(
    boxes: jax.Array,
    scores: jax.Array,
    classes: jax.Array | None,
    *,
    max_output_size: int,
    iou_threshold: float,
    score_threshold: float | None,
):
    """Backend entry: f32[B, N, 4], f32[B, N] -> (int32[B, K], int32[B])."""
    batch_shape = scores.shape[:-1]
    out_shapes = (
        jax.ShapeDtypeStruct(batch_shape + (max_output_size,), jnp.int32),
        jax.ShapeDtypeStruct(batch_shape, jnp.int32),
    )
    callback = functools.partial(
        _host_nms,
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        score_threshold=score_threshold,
    )
    # The numpy side loops over any leading dims, so vmap adds one more.
    return jax.pure_callback(
        callback,
        out_shapes,
        boxes,
        scores,
        classes,
        vmap_method="broadcast_all",
    )
