"""Tiled greedy NMS kernel for TPU (Mosaic).

Grid (batch, tile): the batch axis is parallel (split across cores), the tile
axis is a sequential ("arbitrary") walk over the score-sorted boxes in
lane-dense tiles of 128. VMEM scratch holds the kept boxes so far (a compact
buffer of K + 256 slots) and SMEM the count, so device memory is O(N + K).

Per tile, in both layouts the VPU likes (boxes along lanes as rows of a
(8, 128) block, and along sublanes as columns of a (128, 8) block):
1. test the tile against the kept buffer, 128 kept boxes at a time;
2. resolve the tile against itself by the fixed-point iteration of
   ops/nms/pallas_gpu.py, alternating row and column form so no transpose is
   needed (each half-step is one pass of the iteration);
3. append the tile's kept boxes to the buffer with a one-hot compaction that
   also rotates them to their lane, so the store is two aligned blocks;
4. once K boxes are kept, later tiles only write zeros.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ops.nms import common

TILE = 128
_NUM_FIELDS = 5  # x1, y1, x2, y2, area; row 5 is the candidate flag


def _kernel(rows_ref, cols_ref, class_row_ref, class_col_ref, keep_ref,
            kept_ref, kept_class_ref, count_ref, *, max_output_size,
            iou_threshold, class_aware):
    """One (image, tile) grid step; see the module docstring."""
    sub = lax.broadcasted_iota(jnp.int32, (TILE, TILE), 0)
    lane = lax.broadcasted_iota(jnp.int32, (TILE, TILE), 1)
    lane_row = lax.broadcasted_iota(jnp.int32, (1, TILE), 1)

    @pl.when(pl.program_id(1) == 0)
    def _():
        count_ref[0] = 0

    count = count_ref[0]

    @pl.when(count >= max_output_size)
    def _():
        keep_ref[...] = jnp.zeros((1, TILE), jnp.int32)

    @pl.when(count < max_output_size)
    def _():
        row_fields = tuple(rows_ref[k:k + 1, :] for k in range(_NUM_FIELDS))
        col_fields = tuple(cols_ref[:, k:k + 1] for k in range(_NUM_FIELDS))
        class_row = class_row_ref[...]
        class_col = class_col_ref[...]

        def hits(a_fields, a_class, b_fields, b_class):
            hit = common.overlap_exceeds(a_fields, b_fields, iou_threshold)
            return hit & (a_class == b_class) if class_aware else hit

        # 1. Against the kept buffer: column result, one entry per tile box.
        def chunk(c, suppressed):
            start = pl.multiple_of(c * TILE, TILE)
            kept = tuple(kept_ref[k:k + 1, pl.ds(start, TILE)]
                         for k in range(_NUM_FIELDS))
            kept_class = kept_class_ref[:, pl.ds(start, TILE)]
            live = start + lane_row < count
            hit = hits(col_fields, class_col, kept, kept_class) & live
            return jnp.maximum(suppressed, jnp.max(
                jnp.where(hit, 1.0, 0.0), axis=1, keepdims=True))

        num_chunks = (count + TILE - 1) // TILE
        suppressed = lax.fori_loop(0, num_chunks, chunk,
                                   jnp.zeros((TILE, 1), jnp.float32))
        alive0_col = cols_ref[:, _NUM_FIELDS:_NUM_FIELDS + 1] * (
            1.0 - suppressed)
        alive0_row = jnp.max(jnp.where(sub == lane, alive0_col, 0.0),
                             axis=0, keepdims=True)

        # 2. Within the tile: entry (r, l) is box r against box l.
        within = hits(col_fields, class_col, row_fields, class_row)
        row_first = jnp.where(within & (sub < lane), 1.0, 0.0)
        lane_first = jnp.where(within & (lane < sub), 1.0, 0.0)

        def step(state):
            alive_col, _, _ = state
            alive_row = alive0_row * (1.0 - jnp.max(
                alive_col * row_first, axis=0, keepdims=True))
            new_col = alive0_col * (1.0 - jnp.max(
                alive_row * lane_first, axis=1, keepdims=True))
            changed = jnp.max(jnp.abs(new_col - alive_col))
            return new_col, alive_row, changed

        alive_col, alive_row, _ = lax.while_loop(
            lambda s: s[2] > 0.0, step,
            (alive0_col, alive0_row, jnp.float32(1.0)))
        keep_ref[...] = alive_row.astype(jnp.int32)

        # 3. Append the kept boxes at slots count, count + 1, ...
        rank_col = jnp.sum(jnp.where(lane < sub, alive_row, 0.0), axis=1,
                           keepdims=True).astype(jnp.int32)
        first_lane = count % TILE
        block = pl.multiple_of((count // TILE) * TILE, TILE)
        dest = rank_col + first_lane
        dest = jnp.where(dest >= TILE, dest - TILE, dest)
        onehot = (alive_col > 0.0) & (dest == lane)
        for k in range(_NUM_FIELDS):
            value = jnp.sum(jnp.where(onehot, col_fields[k], 0.0), axis=0,
                            keepdims=True)
            old = kept_ref[k:k + 1, pl.ds(block, TILE)]
            kept_ref[k:k + 1, pl.ds(block, TILE)] = jnp.where(
                lane_row >= first_lane, value, old)
            kept_ref[k:k + 1, pl.ds(block + TILE, TILE)] = value
        value = jnp.sum(jnp.where(onehot, class_col, 0), axis=0,
                        keepdims=True)
        old = kept_class_ref[:, pl.ds(block, TILE)]
        kept_class_ref[:, pl.ds(block, TILE)] = jnp.where(
            lane_row >= first_lane, value, old)
        kept_class_ref[:, pl.ds(block + TILE, TILE)] = value
        count_ref[0] = count + jnp.sum(alive_row).astype(jnp.int32)


def keep_mask(fields: jax.Array, classes: jax.Array, candidate: jax.Array,
              *, max_output_size: int, iou_threshold: float,
              class_aware: bool, interpret=False) -> jax.Array:
    """Runs the kernel: fields f32[B, 5, N_pad] -> keep int32[B, N_pad].

    N_pad must be a multiple of TILE. `interpret` takes
    `pltpu.InterpretParams()` to run the kernel on CPU.
    """
    batch, _, n_pad = fields.shape
    rows = jnp.concatenate(
        [fields, candidate[:, None, :].astype(jnp.float32),
         jnp.zeros((batch, 2, n_pad), jnp.float32)], axis=1)
    cols = jnp.swapaxes(rows, 1, 2)
    k_buf = ((max_output_size - 1) // TILE + 2) * TILE
    kernel = functools.partial(
        _kernel, max_output_size=max_output_size,
        iou_threshold=iou_threshold, class_aware=class_aware)
    keep = pl.pallas_call(
        kernel,
        grid=(batch, n_pad // TILE),
        in_specs=[
            pl.BlockSpec((None, 8, TILE), lambda b, t: (b, 0, t)),
            pl.BlockSpec((None, TILE, 8), lambda b, t: (b, t, 0)),
            pl.BlockSpec((None, 1, TILE), lambda b, t: (b, 0, t)),
            pl.BlockSpec((None, TILE, 1), lambda b, t: (b, t, 0)),
        ],
        out_specs=pl.BlockSpec((None, 1, TILE), lambda b, t: (b, 0, t)),
        out_shape=jax.ShapeDtypeStruct((batch, 1, n_pad), jnp.int32),
        scratch_shapes=[
            pltpu.VMEM((8, k_buf), jnp.float32),
            pltpu.VMEM((1, k_buf), jnp.int32),
            pltpu.SMEM((1,), jnp.int32),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret,
        name="nms_tiled_tpu",
    )(rows, cols, classes[:, None, :], classes[:, :, None])
    return keep[:, 0, :]
