"""Tiled greedy NMS kernel for Hopper and newer GPUs (Pallas Mosaic GPU): one
warpgroup per image (docs/architecture.md, "The NMS operator")."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from ops.nms import common

try:
    from jax.experimental.pallas import mosaic_gpu as plgpu
except ImportError:  # a JAX without Pallas' Mosaic GPU backend
    plgpu = None
try:  # not public in JAX 0.10: Pallas' GPU interpret mode (runs on CPU)
    from jax._src.pallas.mosaic_gpu.interpret.params import (
        InterpretGPUParams,
    )
except ImportError:
    InterpretGPUParams = None

# Whether this JAX lowers Pallas kernels with Mosaic GPU (CUDA GPUs of
# compute capability 9.0 or newer), and runs them in interpret mode on CPU.
MOSAIC_GPU_AVAILABLE = plgpu is not None
INTERPRET_AVAILABLE = MOSAIC_GPU_AVAILABLE and InterpretGPUParams is not None
# The kept boxes live in shared memory, 24 bytes a slot: K + 2 tiles of
# slots for K = 8192 take 193.5 KiB of the 227 KiB a Hopper block can have.
MAX_OUTPUT_SIZE = 8192
TILE = 64  # the rows of one MMA accumulator block of a warpgroup

# Rows of the per-box input: the five fields, the class (int32 bits), the
# candidate flag and one row of padding (a tile is 8 x 64 = 4 x 128 words,
# as the warpgroup's strided copies need). The kept buffer holds the first
# six rows.
_NUM_FIELDS = 5  # x1, y1, x2, y2, area
_CLASS, _CANDIDATE = 5, 6
_ROWS, _KEPT_ROWS = 8, 6


def _kernel(
    rows_ref,
    keep_ref,
    tile_ref,
    kept_ref,
    *,
    tile,
    num_tiles,
    max_output_size,
    iou_threshold,
    class_aware,
    layout,
):
    """Kernel body for one image (grid axis 'image').

    Refs: rows f32[B, 8, N_pad] in global memory (rows as in the module
    constants, boxes sorted); output keep i32[B, N_pad]; shared-memory
    scratch: the current tile f32[8, tile] and the kept buffer
    f32[6, K_buf]. `layout(x, form)` puts x in the MMA accumulator layout
    ('matrix') or its row or column vector layout ('row': index along the
    rows of a matrix, 'col': along its columns).
    """
    image = lax.axis_index("image")
    shape = (tile, tile)
    sub = layout(lax.broadcasted_iota(jnp.int32, shape, 0), "matrix")
    lane = layout(lax.broadcasted_iota(jnp.int32, shape, 1), "matrix")
    row_index = layout(lax.iota(jnp.int32, tile), "row")
    col_index = layout(lax.iota(jnp.int32, tile), "col")

    def along_rows(v):  # v[r] at (r, l): free for a 'row' vector
        return lax.broadcast_in_dim(v, shape, (0,))

    def along_cols(v):  # v[l] at (r, l): free for a 'col' vector
        return lax.broadcast_in_dim(v, shape, (1,))

    def load_boxes(ref, start, form):
        """Fields and classes of boxes start, ..., start + tile - 1 of
        `ref`, each spread over a tile x tile matrix along its rows or
        columns (form 'row' or 'col')."""
        spread = along_rows if form == "row" else along_cols

        def row(k):
            return layout(ref[k, pl.ds(start, tile)], form)

        fields = tuple(spread(row(k)) for k in range(_NUM_FIELDS))
        classes = lax.bitcast_convert_type(row(_CLASS), jnp.int32)
        return fields, spread(classes)

    def hits(a, b):
        """bool[tile, tile]: box a[r] would suppress box b[l] (any order)."""
        (a_fields, a_classes), (b_fields, b_classes) = a, b
        hit = common.overlap_exceeds(a_fields, b_fields, iou_threshold)
        return hit & (a_classes == b_classes) if class_aware else hit

    def load_tile(start):
        """Copies the tile to shared memory; its boxes as rows and columns."""
        tile_ref[...] = rows_ref[image, :, pl.ds(start, tile)]
        return load_boxes(tile_ref, 0, "row"), load_boxes(tile_ref, 0, "col")

    def suppressed_by_kept(tile_cols, count):
        """f32 'col' vector: 1 where a kept box suppresses the tile's box."""

        def chunk(c, suppressed):
            start = c * tile
            live = along_rows(start + row_index < count)
            hit = hits(load_boxes(kept_ref, start, "row"), tile_cols) & live
            return jnp.maximum(
                suppressed, jnp.max(jnp.where(hit, 1.0, 0.0), axis=0)
            )

        num_chunks = (count + tile - 1) // tile
        none = layout(jnp.zeros((tile,), jnp.float32), "col")
        return lax.fori_loop(0, num_chunks, chunk, none)

    def resolve_tile(alive0_col, tile_rows, tile_cols):
        """The tile's kept boxes as 'col' and 'row' vectors.

        The fixed-point iteration of ops/nms/pallas_gpu.py, its passes
        alternating between the two vector layouts (as in
        ops/nms/pallas_tpu.py), so no value changes layout.
        """
        # The diagonal of alive0 spread along the columns, as a row vector.
        alive0_row = jnp.max(
            jnp.where(sub == lane, along_cols(alive0_col), 0.0), axis=1
        )
        within = hits(tile_rows, tile_cols)
        row_first = jnp.where(within & (sub < lane), 1.0, 0.0)
        col_first = jnp.where(within & (lane < sub), 1.0, 0.0)

        def step(state):
            alive_col, _, _ = state
            alive_row = alive0_row * (
                1.0 - jnp.max(along_cols(alive_col) * col_first, axis=1)
            )
            new_col = alive0_col * (
                1.0 - jnp.max(along_rows(alive_row) * row_first, axis=0)
            )
            return new_col, alive_row, jnp.max(jnp.abs(new_col - alive_col))

        alive_col, alive_row, _ = lax.while_loop(
            lambda s: s[2] > 0.0,
            step,
            (alive0_col, alive0_row, jnp.float32(1.0)),
        )
        return alive_col, alive_row

    def store_rotated(k, value, block, first):
        """Writes the rotated 'col' vector `value` as two aligned blocks of
        row k of the kept buffer, keeping the slots before `first`."""
        old = layout(kept_ref[k, pl.ds(block, tile)], "col")
        kept_ref[k, pl.ds(block, tile)] = jnp.where(
            col_index >= first, value, old
        )
        kept_ref[k, pl.ds(block + tile, tile)] = value

    def append_kept(alive_col, alive_row, tile_rows, count):
        """Appends the kept boxes at slots count, count + 1, ... with a
        one-hot compaction that also rotates them to their slot's lane."""
        rank_row = jnp.sum(
            jnp.where(lane < sub, along_cols(alive_col), 0.0), axis=1
        ).astype(jnp.int32)
        first = count % tile
        block = count - first
        dest = rank_row + first
        dest = jnp.where(dest >= tile, dest - tile, dest)
        onehot = (along_rows(alive_row) > 0.0) & (along_rows(dest) == lane)
        fields, classes = tile_rows
        for k in range(_NUM_FIELDS):
            value = jnp.sum(jnp.where(onehot, fields[k], 0.0), axis=0)
            store_rotated(k, value, block, first)
        value = jnp.sum(jnp.where(onehot, classes, 0), axis=0)
        store_rotated(
            _CLASS, lax.bitcast_convert_type(value, jnp.float32), block, first
        )

    def process_tile(state):
        t, count = state
        start = t * tile
        tile_rows, tile_cols = load_tile(start)
        candidate = layout(tile_ref[_CANDIDATE, pl.ds(0, tile)], "col")
        alive0_col = candidate * (1.0 - suppressed_by_kept(tile_cols, count))
        alive_col, alive_row = resolve_tile(alive0_col, tile_rows, tile_cols)
        keep_ref[image, pl.ds(start, tile)] = alive_row.astype(jnp.int32)
        append_kept(alive_col, alive_row, tile_rows, count)
        return t + 1, count + jnp.sum(alive_row).astype(jnp.int32)

    done, _ = lax.while_loop(
        lambda s: (s[0] < num_tiles) & (s[1] < max_output_size),
        process_tile,
        (jnp.int32(0), jnp.int32(0)),
    )

    def clear_tile(t, carry):
        zeros = layout(jnp.zeros((tile,), jnp.int32), "row")
        keep_ref[image, pl.ds(t * tile, tile)] = zeros
        return carry

    lax.fori_loop(done, num_tiles, clear_tile, 0)


def _layouts():
    """The layout casts of the kernel body (module docstring of _kernel)."""
    matrix = plgpu.Layout.WGMMA
    forms = {"matrix": matrix, "row": matrix.reduce(1), "col": matrix.reduce(0)}
    return lambda x, form: plgpu.layout_cast(x, forms[form])


def keep_mask(
    fields: jax.Array,
    classes: jax.Array,
    candidate: jax.Array,
    *,
    blocks: common.BlockSizes,
    max_output_size: int,
    iou_threshold: float,
    class_aware: bool,
    interpret: bool = False,
) -> jax.Array:
    """Runs the kernel: fields f32[B, 5, N_pad] -> keep int32[B, N_pad].

    N_pad must be a multiple of `blocks.tile`, which must be TILE, as
    `blocks.kept_chunk`; max_output_size at most MAX_OUTPUT_SIZE.
    `interpret` runs it on CPU in Pallas' GPU interpret mode, without the
    layout casts (JAX 0.10's GPU interpreter has no rule for them).
    """
    tile = blocks.tile
    if tile != TILE or blocks.kept_chunk != tile:
        raise ValueError(
            f"{blocks}: the Mosaic GPU kernel needs tile == kept_chunk == "
            f"{TILE}"
        )
    if max_output_size > MAX_OUTPUT_SIZE:
        raise ValueError(
            f"max_output_size={max_output_size}: the Mosaic GPU kernel keeps "
            f"at most {MAX_OUTPUT_SIZE} boxes in shared memory"
        )
    batch, _, n_pad = fields.shape
    rows = jnp.concatenate(
        [
            fields,
            lax.bitcast_convert_type(classes, jnp.float32)[:, None],
            candidate[:, None].astype(jnp.float32),
            jnp.zeros((batch, 1, n_pad), jnp.float32),
        ],
        axis=1,
    )
    k_buf = ((max_output_size - 1) // tile + 2) * tile
    kernel = functools.partial(
        _kernel,
        tile=tile,
        num_tiles=n_pad // tile,
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        class_aware=class_aware,
        layout=(lambda x, form: x) if interpret else _layouts(),
    )
    return plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct((batch, n_pad), jnp.int32),
        scratch_types=[
            plgpu.SMEM((_ROWS, tile), jnp.float32),
            plgpu.SMEM((_KEPT_ROWS, k_buf), jnp.float32),
        ],
        grid=(batch,),
        grid_names=("image",),
        kernel_name="nms_tiled_mosaic_gpu",
        interpret=InterpretGPUParams() if interpret else None,
    )(rows)
