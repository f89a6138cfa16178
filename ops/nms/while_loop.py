"""The classic on-device NMS: an N x N suppression mask (O(N^2) memory per
image) and a `lax.while_loop` that keeps the best remaining box each step."""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from ops.nms import common


def _suppression_mask(boxes, classes, iou_threshold):
    """bool[N, N]: entry (i, j) is True when box i would suppress box j."""
    coords = common.box_fields(boxes)
    rows = tuple(c[:, None] for c in coords)
    cols = tuple(c[None, :] for c in coords)
    mask = common.overlap_exceeds(rows, cols, iou_threshold)
    if classes is not None:
        mask &= classes[:, None] == classes[None, :]
    return mask


def _greedy_single(
    boxes, classes, is_candidate, *, max_output_size, iou_threshold
):
    """Sorted positions kept for one image: (int32[K] padded with -1, count)."""
    mask = _suppression_mask(boxes, classes, iou_threshold)
    selected = jnp.full((max_output_size,), -1, jnp.int32)

    def cond(state):
        alive, _, count = state
        return (count < max_output_size) & jnp.any(alive)

    def body(state):
        alive, selected, count = state
        pick = jnp.argmax(alive).astype(jnp.int32)  # first alive: best score
        alive = alive & ~mask[pick]
        alive = alive.at[pick].set(False)
        return alive, selected.at[count].set(pick), count + 1

    _, selected, count = lax.while_loop(
        cond, body, (is_candidate, selected, jnp.int32(0))
    )
    return selected, count


def nms(
    boxes: jax.Array,
    scores: jax.Array,
    classes: jax.Array | None,
    params: common.Params,
):
    """Greedy selection per image by `lax.while_loop` over the N x N mask."""
    order, is_candidate = common.candidate_order(
        boxes, scores, params.score_threshold
    )
    sorted_boxes = common.gather_sorted(boxes, order)
    sorted_classes = (
        None if classes is None else common.gather_sorted(classes, order)
    )
    greedy = functools.partial(
        _greedy_single,
        max_output_size=params.max_output_size,
        iou_threshold=params.iou_threshold,
    )
    positions, count = jax.vmap(greedy)(
        sorted_boxes, sorted_classes, is_candidate
    )
    indices = jnp.where(
        positions >= 0,
        jnp.take_along_axis(order, jnp.maximum(positions, 0), axis=-1),
        -1,
    )
    return indices.astype(jnp.int32), count
