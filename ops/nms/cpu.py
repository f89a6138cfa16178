"""Host-offload NMS: the numpy reference on the host via `jax.pure_callback`,
a device -> host -> device round-trip per call (the offload baseline)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ops.nms import common, reference


def _host_nms(boxes, scores, classes, *, params):
    indices, num_valid = reference.nms(
        np.asarray(boxes),
        np.asarray(scores),
        classes=None if classes is None else np.asarray(classes),
        **params._asdict(),
    )
    return indices, num_valid


def nms(
    boxes: jax.Array,
    scores: jax.Array,
    classes: jax.Array | None,
    params: common.Params,
):
    """The numpy reference on the host, one callback for the batch."""
    batch_shape = scores.shape[:-1]
    k = params.max_output_size
    out_shapes = (
        jax.ShapeDtypeStruct(batch_shape + (k,), jnp.int32),
        jax.ShapeDtypeStruct(batch_shape, jnp.int32),
    )
    callback = functools.partial(_host_nms, params=params)
    # The numpy side loops over any leading dims, so vmap adds one more.
    return jax.pure_callback(
        callback,
        out_shapes,
        boxes,
        scores,
        classes,
        vmap_method="broadcast_all",
    )
