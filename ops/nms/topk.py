"""A measurement baseline, not an NMS: the top K candidates, no suppression
(benchmarks/step_bench.py swaps it in to measure what NMS costs)."""

import jax
import jax.numpy as jnp
from jax import lax

from ops.nms import common, reference


def nms(
    boxes: jax.Array,
    scores: jax.Array,
    classes: jax.Array | None,
    params: common.Params,
):
    """The top K candidates by score, with no overlap test."""
    del classes  # no suppression
    max_output_size = params.max_output_size
    valid = reference.is_candidate(
        boxes, scores, params.score_threshold, xp=jnp
    )
    k = min(max_output_size, scores.shape[-1])
    _, indices = lax.top_k(jnp.where(valid, scores, -jnp.inf), k)
    indices = jnp.where(
        jnp.take_along_axis(valid, indices, axis=-1), indices, -1
    ).astype(jnp.int32)
    indices = jnp.pad(
        indices, ((0, 0), (0, max_output_size - k)), constant_values=-1
    )
    return indices, jnp.sum(indices >= 0, axis=-1, dtype=jnp.int32)
