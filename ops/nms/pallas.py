"""The Pallas NMS backend: sort outside, a sequential tiled greedy kernel
inside, picked per platform as the program is lowered (docs/architecture.md,
"The NMS operator")."""

import functools

import jax
import jax.numpy as jnp
from absl import logging
from jax import lax

from ops.nms import common, dispatch, pallas_gpu, pallas_mosaic_gpu, pallas_tpu

# Block sizes per kernel. TPU: lane-dense tiles of 128, the kept buffer
# scanned a tile at a time. Mosaic GPU: the 64 rows of a warpgroup's MMA
# accumulator layout, so a tile x tile block takes 32 registers a thread.
# Triton: power-of-two blocks small enough that the tile x tile matrices
# stay in registers with 4 warps. CPU (the Triton kernel in interpret
# mode): the fastest setting of a sweep with benchmarks/nms_bench.py
# (numbers in benchmarks/README.md, "Pallas block sizes on CPU").
BLOCK_SIZES = {
    "tpu": common.BlockSizes(tile=128, kept_chunk=128),
    "mosaic_gpu": common.BlockSizes(
        tile=pallas_mosaic_gpu.TILE, kept_chunk=pallas_mosaic_gpu.TILE
    ),
    "triton": common.BlockSizes(tile=64, kept_chunk=64, num_warps=4),
    "cpu": common.BlockSizes(tile=32, kept_chunk=64),
}
# The CUDA kernels, in the order `pick_cuda_kernel` tries them: the Triton
# kernel, compiled, checked and timed on an H100 (benchmarks/README.md, "GPU
# results"), before the Mosaic GPU kernel, which has run only in Pallas' GPU
# interpret mode on a CPU. Put "mosaic_gpu" first once a row there shows it
# compiled, correct and timed on a Hopper GPU (benchmarks/gpu_check.sh).
CUDA_KERNELS = ("triton", "mosaic_gpu")
# What the log line of `pallas` on a GPU says of each kernel it picks.
_KERNEL_NOTES = {
    "triton": (
        "the Triton kernel, measured on an H100 (benchmarks/README.md); the "
        "Mosaic GPU kernel has not yet run on a GPU (--nms=pallas_mosaic_gpu "
        "runs it)"
    ),
    "mosaic_gpu": (
        "the Mosaic GPU kernel, which has not yet run on a GPU (JAX "
        f"{jax.__version__} has no Pallas Triton backend)"
    ),
}


def _cuda_kernel_problem(kernel: str, max_output_size: int | None):
    """Why `kernel` cannot run on the CUDA GPU being lowered for (one
    clause), or None where it can."""
    version = jax.__version__
    if kernel == "triton":
        if pallas_gpu.TRITON_AVAILABLE:
            return None
        return f"JAX {version} has no Pallas Triton backend"
    if not pallas_mosaic_gpu.MOSAIC_GPU_AVAILABLE:
        return f"JAX {version} has no Pallas Mosaic GPU backend"
    device = dispatch.lowering_device("cuda")
    capability = dispatch.compute_capability(device)
    if capability is None or capability < (9, 0):
        found = "unknown" if capability is None else "%d.%d" % capability
        return (
            "the Mosaic GPU kernel needs compute capability 9.0 or newer "
            f"({device.device_kind}: {found})"
        )
    if (
        max_output_size is not None
        and max_output_size > pallas_mosaic_gpu.MAX_OUTPUT_SIZE
    ):
        return (
            f"the Mosaic GPU kernel keeps at most "
            f"{pallas_mosaic_gpu.MAX_OUTPUT_SIZE} boxes "
            f"(max_output_size={max_output_size})"
        )
    return None


def pick_cuda_kernel(
    max_output_size: int | None, kernel: str | None = None
) -> tuple[str | None, tuple[str, ...]]:
    """The kernel the pallas backend runs on the CUDA GPU being lowered for
    (`dispatch.lowering_device("cuda")`).

    The first of CUDA_KERNELS that can run (Triton where this JAX has it);
    `kernel` ('mosaic_gpu' or 'triton') names one instead. max_output_size
    None: any K that fits.

    Returns:
      (kernel, ()) or, where none can run, (None, why: one clause each).
    """
    problems = []
    for name in (kernel,) if kernel else CUDA_KERNELS:
        problem = _cuda_kernel_problem(name, max_output_size)
        if problem is None:
            return name, ()
        problems.append(problem)
    return None, tuple(problems)


@functools.cache
def log_cuda_kernel(kernel: str, device_kind: str) -> None:
    """Says once which CUDA kernel `pallas` runs on `device_kind`, and why."""
    logging.info(
        "nms backend 'pallas' on %s: %s", device_kind, _KERNEL_NOTES[kernel]
    )


def no_cuda_kernel_message(backend: str, problems: tuple[str, ...]) -> str:
    """The error of a pallas backend lowered for a GPU it cannot run on."""
    return (
        f"the {backend} NMS backend cannot run on this CUDA GPU: "
        f"{' and '.join(problems)}; use --nms=while_loop (or --nms=auto, "
        f"which picks what runs there)"
    )


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


def _pick_kernel(platform, kernel, backend, max_output_size):
    """(name, keep_mask function) of the kernel `platform` runs; `kernel`
    names the CUDA one ('mosaic_gpu' also runs in interpret mode on CPU)."""
    if platform == "tpu":
        return "tpu", pallas_tpu.keep_mask
    if platform == "cuda":
        name, problems = pick_cuda_kernel(max_output_size, kernel)
        if name is None:
            raise ValueError(no_cuda_kernel_message(backend, problems))
        if kernel is None and jax.default_backend() == "gpu":
            log_cuda_kernel(name, dispatch.lowering_device("cuda").device_kind)
    elif kernel == "mosaic_gpu":
        if not pallas_mosaic_gpu.INTERPRET_AVAILABLE:
            raise ValueError(
                f"the {backend} NMS backend runs the Mosaic GPU kernel in "
                f"Pallas' GPU interpret mode off the GPU, which JAX "
                f"{jax.__version__} does not have"
            )
        return "mosaic_gpu", functools.partial(
            pallas_mosaic_gpu.keep_mask, interpret=True
        )
    else:
        return "cpu", functools.partial(pallas_gpu.keep_mask, platform="cpu")
    if name == "mosaic_gpu":
        return name, pallas_mosaic_gpu.keep_mask
    return name, functools.partial(pallas_gpu.keep_mask, platform="gpu")


def _keep_mask(
    fields, classes, candidate, *, platform, kernel, backend, **params
):
    """keep int32[B, N] from the kernel of the platform being lowered."""
    n = candidate.shape[-1]
    name, keep_mask = _pick_kernel(
        platform, kernel, backend, params["max_output_size"]
    )
    blocks = BLOCK_SIZES[name]
    n_pad = _round_up(n, blocks.tile)
    fields, classes, candidate = (
        _pad_last(x, n_pad) for x in (fields, classes, candidate)
    )
    run = functools.partial(keep_mask, blocks=blocks, **params)
    if name in CUDA_KERNELS and not isinstance(fields.shape[0], int):
        # Their grids are static: with a symbolic batch (an exported
        # program), one kernel call per image in a loop.
        keep = lax.map(
            lambda row: run(*(x[None] for x in row))[0],
            (fields, classes, candidate),
        )
    else:
        keep = run(fields, classes, candidate)
    return keep[:, :n]


def _as_tuple(kernel, **params):
    """kernel(*args, **params) as a one-output branch of platform_switch."""
    return lambda *args: (kernel(*args, **params),)


def nms(
    boxes: jax.Array,
    scores: jax.Array,
    classes: jax.Array | None,
    params: common.Params,
    cuda_kernel: str | None = None,
):
    """The tiled kernel of the platform being lowered on sorted candidates.

    `cuda_kernel` ('mosaic_gpu' or 'triton') names the CUDA kernel instead
    of `pick_cuda_kernel`'s pick; 'mosaic_gpu' then runs in Pallas' GPU
    interpret mode on CPU too.
    """
    class_aware = classes is not None
    if classes is None:
        classes = jnp.zeros(scores.shape, jnp.int32)
    order, fields, sorted_classes, candidate = _sorted_inputs(
        boxes, scores, classes, params.score_threshold
    )
    kernel = functools.partial(
        _keep_mask,
        max_output_size=params.max_output_size,
        iou_threshold=params.iou_threshold,
        class_aware=class_aware,
        kernel=cuda_kernel,
        backend="pallas" if cuda_kernel is None else f"pallas_{cuda_kernel}",
    )
    (keep,) = dispatch.platform_switch(
        fields,
        sorted_classes,
        candidate,
        tpu=_as_tuple(kernel, platform="tpu"),
        cuda=_as_tuple(kernel, platform="cuda"),
        default=_as_tuple(kernel, platform="cpu"),
    )
    return common.indices_from_keep_mask(
        keep > 0, order, params.max_output_size
    )
