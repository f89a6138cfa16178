"""Pieces every on-device backend shares: candidate order, the overlap test,
and turning a keep mask over sorted candidates into output indices; they
round exactly like ops/nms/reference.py."""

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ops.nms import reference


class Params(NamedTuple):
    """The settings of one NMS call, as every backend entry takes them.

    A backend entry is `nms(boxes, scores, classes, params)`: f32[B, N, 4],
    f32[B, N], int32[B, N] or None -> (int32[B, K], int32[B]), K being
    `max_output_size`.
    """

    max_output_size: int
    iou_threshold: float
    score_threshold: float | None


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Block sizes of the tiled Pallas NMS kernels on one platform.

    Attributes:
      tile: boxes per tile of the walk over the sorted boxes (the kernels
        build tile x tile suppression blocks).
      kept_chunk: kept boxes read per step of the scan of the kept buffer.
      num_warps: Triton warps per program (GPU only; None elsewhere).
    """

    tile: int
    kept_chunk: int
    num_warps: int | None = None


def nonneg_product(a: jax.Array, b: jax.Array) -> jax.Array:
    """a * b for a, b >= 0; the max() keeps compilers from forming an FMA."""
    return jnp.maximum(a * b, 0.0)


def box_areas(x1, y1, x2, y2):
    """Areas from coordinates; inverted boxes have zero area."""
    return nonneg_product(jnp.maximum(x2 - x1, 0.0), jnp.maximum(y2 - y1, 0.0))


def box_fields(boxes: jax.Array) -> tuple[jax.Array, ...]:
    """(x1, y1, x2, y2, area) of f32[..., 4] boxes, each f32[...].

    The operand form of `overlap_exceeds`; the Pallas kernels read the same
    five fields stacked as rows.
    """
    x1, y1, x2, y2 = (boxes[..., i] for i in range(4))
    return x1, y1, x2, y2, box_areas(x1, y1, x2, y2)


def overlap_exceeds(a, b, iou_threshold: float) -> jax.Array:
    """IoU(a, b) > iou_threshold as `inter > t * union`, broadcasting.

    Args:
      a, b: tuples (x1, y1, x2, y2, area) of broadcast-compatible f32 arrays.
      iou_threshold: the threshold as a Python float.
    """
    ax1, ay1, ax2, ay2, a_area = a
    bx1, by1, bx2, by2, b_area = b
    iw = jnp.maximum(jnp.minimum(ax2, bx2) - jnp.maximum(ax1, bx1), 0.0)
    ih = jnp.maximum(jnp.minimum(ay2, by2) - jnp.maximum(ay1, by1), 0.0)
    inter = nonneg_product(iw, ih)
    union = (a_area + b_area) - inter
    return inter > jnp.float32(iou_threshold) * union


def _descending_key(scores: jax.Array, valid: jax.Array) -> jax.Array:
    """int32 keys whose ascending order is descending score, invalid last.

    An int32 sort is cheaper than a float one with a validity key (about 30%
    on XLA CPU). The float bits are mapped to integers of the same order
    (-0.0 first folded into 0.0 so the two tie), then complemented.
    """
    scores = jnp.where(scores == 0.0, 0.0, scores)
    bits = lax.bitcast_convert_type(scores, jnp.int32)
    ascending = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return jnp.where(valid, ~ascending, jnp.iinfo(jnp.int32).max)


def candidate_order(
    boxes: jax.Array, scores: jax.Array, score_threshold: float | None
):
    """Sorts the candidates of every image into visiting order.

    Args:
      boxes: f32[B, N, 4].
      scores: f32[B, N].
      score_threshold: scores <= this are not candidates (None: no bound).

    Returns:
      order int32[B, N] (candidates first, by descending score, ties by
      index; non-candidates after them) and is_candidate bool[B, N] in
      that order.
    """
    valid = reference.is_candidate(boxes, scores, score_threshold, xp=jnp)
    index = lax.broadcasted_iota(jnp.int32, scores.shape, scores.ndim - 1)
    _, order = lax.sort(
        (_descending_key(scores, valid), index),
        dimension=scores.ndim - 1,
        num_keys=1,
        is_stable=True,
    )
    return order, jnp.take_along_axis(valid, order, axis=-1)


def gather_sorted(x: jax.Array, order: jax.Array) -> jax.Array:
    """x[b, order[b, n], ...] for x of shape [B, N, ...]."""
    extra = x.ndim - order.ndim
    idx = order.reshape(order.shape + (1,) * extra)
    return jnp.take_along_axis(x, idx, axis=1)


def indices_from_keep_mask(
    keep: jax.Array, order: jax.Array, max_output_size: int
):
    """Output indices from a keep mask over sorted candidates.

    Greedy NMS keeps boxes in visiting order, so the selection order is the
    sorted order of the kept candidates.

    Args:
      keep: bool[B, N] over sorted positions.
      order: int32[B, N], the sort permutation.
      max_output_size: K.

    Returns:
      indices int32[B, K] padded with -1, and num_valid int32[B].
    """
    batch, _ = keep.shape
    rank = jnp.cumsum(keep.astype(jnp.int32), axis=-1) - 1
    slot = jnp.where(keep & (rank < max_output_size), rank, max_output_size)
    rows = lax.broadcasted_iota(jnp.int32, keep.shape, 0)
    out = jnp.full((batch, max_output_size + 1), -1, jnp.int32)
    out = out.at[rows, slot].set(order, mode="drop")
    num_valid = jnp.minimum(
        jnp.sum(keep, axis=-1, dtype=jnp.int32), max_output_size
    )
    return out[:, :max_output_size], num_valid
