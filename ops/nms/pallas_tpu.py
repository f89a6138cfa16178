"""Tiled greedy NMS kernel for TPU (Mosaic): a parallel batch grid axis and
a sequential walk over lane-dense tiles, O(N + K) device memory
(docs/architecture.md, "The NMS operator")."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from ops.nms import common

_NUM_FIELDS = 5  # x1, y1, x2, y2, area; row 5 is the candidate flag


def _kernel(
    rows_ref,
    cols_ref,
    class_row_ref,
    class_col_ref,
    keep_ref,
    kept_ref,
    kept_class_ref,
    count_ref,
    *,
    tile,
    max_output_size,
    iou_threshold,
    class_aware,
):
    """One (image, tile) grid step; see docs/architecture.md ("The NMS
    operator").

    Refs: rows f32[8, tile] (fields as rows, then the candidate flag), cols
    f32[tile, 8] (the same as columns), classes i32[1, tile] and
    i32[tile, 1]; output keep i32[1, tile]; scratch: the kept buffer
    f32[8, K_buf] and i32[1, K_buf], and the kept count in SMEM.
    """
    sub = lax.broadcasted_iota(jnp.int32, (tile, tile), 0)
    lane = lax.broadcasted_iota(jnp.int32, (tile, tile), 1)
    lane_row = lax.broadcasted_iota(jnp.int32, (1, tile), 1)

    def hits(a_fields, a_class, b_fields, b_class):
        hit = common.overlap_exceeds(a_fields, b_fields, iou_threshold)
        return hit & (a_class == b_class) if class_aware else hit

    def load_tile():
        """The tile's fields and classes, as rows and as columns."""
        rows = tuple(rows_ref[k : k + 1, :] for k in range(_NUM_FIELDS))
        cols = tuple(cols_ref[:, k : k + 1] for k in range(_NUM_FIELDS))
        return rows, cols, class_row_ref[...], class_col_ref[...]

    def suppressed_by_kept(col_fields, class_col, count):
        """f32[tile, 1]: 1 where a kept box suppresses the tile's box."""

        def chunk(c, suppressed):
            start = pl.multiple_of(c * tile, tile)
            kept = tuple(
                kept_ref[k : k + 1, pl.ds(start, tile)]
                for k in range(_NUM_FIELDS)
            )
            kept_class = kept_class_ref[:, pl.ds(start, tile)]
            live = start + lane_row < count
            hit = hits(col_fields, class_col, kept, kept_class) & live
            return jnp.maximum(
                suppressed,
                jnp.max(jnp.where(hit, 1.0, 0.0), axis=1, keepdims=True),
            )

        num_chunks = (count + tile - 1) // tile
        return lax.fori_loop(
            0, num_chunks, chunk, jnp.zeros((tile, 1), jnp.float32)
        )

    def resolve_tile(alive0_col, tile_fields):
        """(alive column, alive row): the tile's kept boxes, both layouts."""
        row_fields, col_fields, class_row, class_col = tile_fields
        alive0_row = jnp.max(
            jnp.where(sub == lane, alive0_col, 0.0), axis=0, keepdims=True
        )
        # Entry (r, l) is box r against box l.
        within = hits(col_fields, class_col, row_fields, class_row)
        row_first = jnp.where(within & (sub < lane), 1.0, 0.0)
        lane_first = jnp.where(within & (lane < sub), 1.0, 0.0)

        def step(state):
            alive_col, _, _ = state
            alive_row = alive0_row * (
                1.0 - jnp.max(alive_col * row_first, axis=0, keepdims=True)
            )
            new_col = alive0_col * (
                1.0 - jnp.max(alive_row * lane_first, axis=1, keepdims=True)
            )
            changed = jnp.max(jnp.abs(new_col - alive_col))
            return new_col, alive_row, changed

        alive_col, alive_row, _ = lax.while_loop(
            lambda s: s[2] > 0.0,
            step,
            (alive0_col, alive0_row, jnp.float32(1.0)),
        )
        return alive_col, alive_row

    def store_rotated(ref, row, value, block, first_lane):
        """Writes `value` (already rotated by first_lane) at two blocks."""
        old = ref[row : row + 1, pl.ds(block, tile)]
        ref[row : row + 1, pl.ds(block, tile)] = jnp.where(
            lane_row >= first_lane, value, old
        )
        ref[row : row + 1, pl.ds(block + tile, tile)] = value

    def append_kept(alive_col, alive_row, col_fields, class_col, count):
        """Appends the kept boxes at slots count, count + 1, ..."""
        rank_col = jnp.sum(
            jnp.where(lane < sub, alive_row, 0.0), axis=1, keepdims=True
        ).astype(jnp.int32)
        first_lane = count % tile
        block = pl.multiple_of((count // tile) * tile, tile)
        dest = rank_col + first_lane
        dest = jnp.where(dest >= tile, dest - tile, dest)
        onehot = (alive_col > 0.0) & (dest == lane)
        for k in range(_NUM_FIELDS):
            value = jnp.sum(
                jnp.where(onehot, col_fields[k], 0.0), axis=0, keepdims=True
            )
            store_rotated(kept_ref, k, value, block, first_lane)
        value = jnp.sum(jnp.where(onehot, class_col, 0), axis=0, keepdims=True)
        store_rotated(kept_class_ref, 0, value, block, first_lane)

    @pl.when(pl.program_id(1) == 0)
    def reset_count():
        count_ref[0] = 0

    count = count_ref[0]

    @pl.when(count >= max_output_size)
    def clear_tile():
        keep_ref[...] = jnp.zeros((1, tile), jnp.int32)

    @pl.when(count < max_output_size)
    def process_tile():
        tile_fields = load_tile()
        _, col_fields, _, class_col = tile_fields
        alive0_col = cols_ref[:, _NUM_FIELDS : _NUM_FIELDS + 1] * (
            1.0 - suppressed_by_kept(col_fields, class_col, count)
        )
        alive_col, alive_row = resolve_tile(alive0_col, tile_fields)
        keep_ref[...] = alive_row.astype(jnp.int32)
        append_kept(alive_col, alive_row, col_fields, class_col, count)
        count_ref[0] = count + jnp.sum(alive_row).astype(jnp.int32)


def keep_mask(
    fields: jax.Array,
    classes: jax.Array,
    candidate: jax.Array,
    *,
    blocks: common.BlockSizes,
    max_output_size: int,
    iou_threshold: float,
    class_aware: bool,
    interpret=False,
) -> jax.Array:
    """Runs the kernel: fields f32[B, 5, N_pad] -> keep int32[B, N_pad].

    N_pad must be a multiple of `blocks.tile`, a multiple of 128 (the lane
    count); the kept buffer is scanned one tile at a time, so
    `blocks.kept_chunk` must equal `blocks.tile`. `interpret` takes
    `pltpu.InterpretParams()` to run the kernel on CPU.
    """
    tile = blocks.tile
    if tile % 128 or blocks.kept_chunk != tile:
        raise ValueError(
            f"{blocks}: the TPU kernel needs tile a multiple "
            "of 128 and kept_chunk == tile"
        )
    batch, _, n_pad = fields.shape
    rows = jnp.concatenate(
        [
            fields,
            candidate[:, None, :].astype(jnp.float32),
            jnp.zeros((batch, 2, n_pad), jnp.float32),
        ],
        axis=1,
    )
    cols = jnp.swapaxes(rows, 1, 2)
    k_buf = ((max_output_size - 1) // tile + 2) * tile
    kernel = functools.partial(
        _kernel,
        tile=tile,
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        class_aware=class_aware,
    )
    keep = pl.pallas_call(
        kernel,
        grid=(batch, n_pad // tile),
        in_specs=[
            pl.BlockSpec((None, 8, tile), lambda b, t: (b, 0, t)),
            pl.BlockSpec((None, tile, 8), lambda b, t: (b, t, 0)),
            pl.BlockSpec((None, 1, tile), lambda b, t: (b, 0, t)),
            pl.BlockSpec((None, tile, 1), lambda b, t: (b, t, 0)),
        ],
        out_specs=pl.BlockSpec((None, 1, tile), lambda b, t: (b, 0, t)),
        out_shape=jax.ShapeDtypeStruct((batch, 1, n_pad), jnp.int32),
        scratch_shapes=[
            pltpu.VMEM((8, k_buf), jnp.float32),
            pltpu.VMEM((1, k_buf), jnp.int32),
            pltpu.SMEM((1,), jnp.int32),
        ],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "arbitrary")
        ),
        interpret=interpret,
        name="nms_tiled_tpu",
    )(rows, cols, classes[:, None, :], classes[:, :, None])
    return keep[:, 0, :]
