"""The Pallas NMS backend: sort outside, sequential tiled greedy kernel inside.

The boxes are sorted by score (ops/nms/common.py) and handed to a kernel that
walks them tile by tile, tests each tile against the boxes kept so far,
resolves the tile against itself, and stops once `max_output_size` boxes are
kept. The kernel is picked when the program is lowered, per platform:
- TPU: Mosaic (ops/nms/pallas_tpu.py), batch as a parallel grid axis;
- GPU: Triton (ops/nms/pallas_gpu.py), one program per image;
- anything else (CPU): the GPU kernel in Pallas interpret mode.
Where the installed JAX has no Pallas Triton backend, lowering the kernel
for a CUDA GPU is a ValueError naming the JAX version (use while_loop).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core
from jax.interpreters import mlir

from ops.nms import common, dispatch, pallas_gpu, pallas_tpu

# Block sizes per platform. TPU: lane-dense tiles of 128, the kept buffer
# scanned a tile at a time. GPU: power-of-two blocks small enough that the
# tile x tile matrices stay in registers with 4 warps. CPU (interpret mode):
# the fastest setting of a sweep with benchmarks/nms_bench.py (numbers in
# benchmarks/README.md, "Pallas block sizes on CPU").
BLOCK_SIZES = {
    "tpu": common.BlockSizes(tile=128, kept_chunk=128),
    "gpu": common.BlockSizes(tile=64, kept_chunk=64, num_warps=4),
    "cpu": common.BlockSizes(tile=32, kept_chunk=64),
}


def triton_missing_message() -> str:
    """The error of the pallas backend on CUDA without Pallas Triton."""
    return (
        f"the pallas NMS backend needs Pallas' Triton backend on CUDA "
        f"GPUs, which JAX {jax.__version__} does not have; use "
        f"--nms=while_loop (or --nms=auto, which picks it there)"
    )


# Stands in for the Triton kernel where JAX has none: it traces like the
# kernel (keep int32[B, N_pad]) on every platform, and only lowering it for
# a CUDA GPU, where it would run, raises.
_triton_missing_p = jex_core.Primitive("nms_triton_missing")
_triton_missing_p.def_abstract_eval(
    lambda fields, classes, candidate: jax.core.ShapedArray(
        candidate.shape, jnp.int32
    )
)


def _raise_triton_missing(ctx, *args):
    raise ValueError(triton_missing_message())


mlir.register_lowering(_triton_missing_p, _raise_triton_missing)


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def _sorted_inputs(boxes, scores, classes, score_threshold):
    """Sorted candidates: (order, fields f32[B, 5, N], classes, candidate)."""
    order, is_candidate = common.candidate_order(boxes, scores, score_threshold)
    fields = jnp.stack(
        common.box_fields(common.gather_sorted(boxes, order)), axis=1
    )
    sorted_classes = common.gather_sorted(classes, order)
    return order, fields, sorted_classes, is_candidate.astype(jnp.int32)


def _pad_last(x: jax.Array, size: int) -> jax.Array:
    pad = [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])]
    return jnp.pad(x, pad)


def _keep_mask(fields, classes, candidate, *, platform, **params):
    """keep int32[B, N] from one platform's kernel."""
    n = candidate.shape[-1]
    blocks = BLOCK_SIZES[platform]
    n_pad = _round_up(n, blocks.tile)
    fields, classes, candidate = (
        _pad_last(x, n_pad) for x in (fields, classes, candidate)
    )
    if platform == "tpu":
        keep = pallas_tpu.keep_mask(
            fields, classes, candidate, blocks=blocks, **params
        )
    elif platform == "gpu" and not pallas_gpu.TRITON_AVAILABLE:
        keep = _triton_missing_p.bind(fields, classes, candidate)
    else:
        gpu_kernel = functools.partial(
            pallas_gpu.keep_mask, blocks=blocks, platform=platform, **params
        )
        if platform == "gpu" and not isinstance(fields.shape[0], int):
            # A Triton grid is static: with a symbolic batch (an exported
            # program), one kernel call per image in a loop.
            keep = lax.map(
                lambda row: gpu_kernel(*(x[None] for x in row))[0],
                (fields, classes, candidate),
            )
        else:
            keep = gpu_kernel(fields, classes, candidate)
    return keep[:, :n]


def _as_tuple(kernel, **params):
    """kernel(*args, **params) as a one-output branch of platform_switch."""
    return lambda *args: (kernel(*args, **params),)


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
    class_aware = classes is not None
    if classes is None:
        classes = jnp.zeros(scores.shape, jnp.int32)
    order, fields, sorted_classes, candidate = _sorted_inputs(
        boxes, scores, classes, score_threshold
    )
    kernel = functools.partial(
        _keep_mask,
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        class_aware=class_aware,
    )
    (keep,) = dispatch.platform_switch(
        fields,
        sorted_classes,
        candidate,
        tpu=_as_tuple(kernel, platform="tpu"),
        cuda=_as_tuple(kernel, platform="gpu"),
        default=_as_tuple(kernel, platform="cpu"),
    )
    return common.indices_from_keep_mask(keep > 0, order, max_output_size)
