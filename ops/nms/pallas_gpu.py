"""Tiled greedy NMS kernel for GPU (Triton) and CPU (Pallas interpret mode):
one program per image, O(N + K) device memory (docs/architecture.md)."""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from ops.nms import common

try:
    from jax.experimental.pallas import triton as pltr
except ImportError:  # a JAX whose Pallas no longer has the Triton backend
    pltr = None

# Whether this JAX lowers Pallas kernels with Triton (CUDA GPUs). Without it
# pallas has only its Mosaic GPU kernel on CUDA (ops/nms/pallas.py).
TRITON_AVAILABLE = pltr is not None

_NUM_FIELDS = 5  # x1, y1, x2, y2, area


def _kernel(
    fields_ref,
    classes_ref,
    candidate_ref,
    keep_ref,
    kept_ref,
    kept_classes_ref,
    *,
    tile,
    kept_chunk,
    num_tiles,
    max_output_size,
    iou_threshold,
    class_aware,
    barrier,
):
    """Kernel body for one image.

    Refs (one image each): fields f32[5, N_pad] (x1, y1, x2, y2, area of the
    sorted boxes), classes i32[N_pad], candidate i32[N_pad]; outputs keep
    i32[N_pad] and the kept-box buffer f32[5, K_buf], i32[K_buf].
    """
    chunk_lanes = lax.broadcasted_iota(jnp.int32, (kept_chunk,), 0)
    row_index = lax.broadcasted_iota(jnp.int32, (tile, tile), 0)
    col_index = lax.broadcasted_iota(jnp.int32, (tile, tile), 1)
    earlier = row_index < col_index

    def same_class(a, b):
        return a[:, None] == b[None, :] if class_aware else True

    def suppression(a_fields, a_classes, b_fields, b_classes):
        """int32[tile, tile]: 1 where box a[i] would suppress box b[j]."""
        rows = tuple(f[:, None] for f in a_fields)
        cols = tuple(f[None, :] for f in b_fields)
        hit = common.overlap_exceeds(rows, cols, iou_threshold)
        return (hit & same_class(a_classes, b_classes)).astype(jnp.int32)

    def load_fields(ref, start, size):
        return tuple(ref[k, pl.ds(start, size)] for k in range(_NUM_FIELDS))

    def suppressed_by_kept(fields, classes, count):
        def chunk(c, suppressed):
            start = c * kept_chunk
            kept = load_fields(kept_ref, start, kept_chunk)
            kept_classes = kept_classes_ref[pl.ds(start, kept_chunk)]
            live = (start + chunk_lanes < count).astype(jnp.int32)
            hit = suppression(kept, kept_classes, fields, classes)
            return jnp.maximum(suppressed, jnp.max(hit * live[:, None], axis=0))

        num_chunks = (count + kept_chunk - 1) // kept_chunk
        return lax.fori_loop(
            0, num_chunks, chunk, jnp.zeros((tile,), jnp.int32)
        )

    def resolve_tile(alive0, fields, classes):
        within = suppression(fields, classes, fields, classes)
        within = within * earlier.astype(jnp.int32)

        def step(state):
            alive, _ = state
            hit = jnp.max(alive[:, None] * within, axis=0)
            new_alive = alive0 * (1 - hit)
            return new_alive, jnp.max(jnp.abs(new_alive - alive))

        alive, _ = lax.while_loop(
            lambda s: s[1] > 0, step, (alive0, jnp.int32(1))
        )
        return alive

    def append_kept(alive, fields, classes, count):
        # One-hot compaction: kept box i goes to slot rank[i] of this tile.
        rank = jnp.cumsum(alive) - alive
        onehot = (alive[:, None] > 0) & (rank[:, None] == col_index)
        for k in range(_NUM_FIELDS):
            kept_ref[k, pl.ds(count, tile)] = jnp.sum(
                jnp.where(onehot, fields[k][:, None], 0.0), axis=0
            )
        kept_classes_ref[pl.ds(count, tile)] = jnp.sum(
            jnp.where(onehot, classes[:, None], 0), axis=0
        )
        barrier()

    def process_tile(state):
        t, count = state
        start = t * tile
        fields = load_fields(fields_ref, start, tile)
        classes = classes_ref[pl.ds(start, tile)]
        alive0 = candidate_ref[pl.ds(start, tile)] * (
            1 - suppressed_by_kept(fields, classes, count)
        )
        alive = resolve_tile(alive0, fields, classes)
        keep_ref[pl.ds(start, tile)] = alive
        append_kept(alive, fields, classes, count)
        return t + 1, count + jnp.sum(alive)

    done, _ = lax.while_loop(
        lambda s: (s[0] < num_tiles) & (s[1] < max_output_size),
        process_tile,
        (jnp.int32(0), jnp.int32(0)),
    )

    def clear_tile(t, carry):
        keep_ref[pl.ds(t * tile, tile)] = jnp.zeros((tile,), jnp.int32)
        return carry

    lax.fori_loop(done, num_tiles, clear_tile, 0)


def keep_mask(
    fields: jax.Array,
    classes: jax.Array,
    candidate: jax.Array,
    *,
    blocks: common.BlockSizes,
    max_output_size: int,
    iou_threshold: float,
    class_aware: bool,
    platform: str,
) -> jax.Array:
    """Runs the kernel: fields f32[B, 5, N_pad] -> keep int32[B, N_pad].

    `platform` is 'gpu' (Triton) or 'cpu' (interpret mode); N_pad must be a
    multiple of `blocks.tile`.
    """
    tile, kept_chunk = blocks.tile, blocks.kept_chunk
    batch, _, n_pad = fields.shape
    num_tiles = n_pad // tile
    k_buf = max(
        max_output_size + tile, -(-max_output_size // kept_chunk) * kept_chunk
    )
    kernel = functools.partial(
        _kernel,
        tile=tile,
        kept_chunk=kept_chunk,
        num_tiles=num_tiles,
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        class_aware=class_aware,
        barrier=pltr.debug_barrier if platform == "gpu" else lambda: None,
    )

    def image(b):
        return b, 0

    fields_spec = pl.BlockSpec((None, _NUM_FIELDS, n_pad), lambda b: (b, 0, 0))
    vector_spec = pl.BlockSpec((None, n_pad), image)
    keep, _, _ = pl.pallas_call(
        kernel,
        grid=(batch,),
        in_specs=[fields_spec, vector_spec, vector_spec],
        out_specs=[
            vector_spec,
            pl.BlockSpec((None, _NUM_FIELDS, k_buf), lambda b: (b, 0, 0)),
            pl.BlockSpec((None, k_buf), image),
        ],
        out_shape=[
            jax.ShapeDtypeStruct((batch, n_pad), jnp.int32),
            jax.ShapeDtypeStruct((batch, _NUM_FIELDS, k_buf), jnp.float32),
            jax.ShapeDtypeStruct((batch, k_buf), jnp.int32),
        ],
        interpret=platform == "cpu",
        compiler_params=(
            pltr.CompilerParams(num_warps=blocks.num_warps)
            if platform == "gpu"
            else None
        ),
        name="nms_tiled",
    )(fields, classes, candidate)
    return keep
