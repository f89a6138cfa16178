"""Non-maximum suppression with interchangeable backends: `nms`, `BACKENDS`
and 'auto'; the contract and the backends are in docs/architecture.md ("The
NMS operator"), and ops/nms/reference.py states it in numpy."""

import functools
import numbers

import jax
import jax.numpy as jnp
from absl import logging
from jax import lax
from jax.typing import ArrayLike

from ops import host_audit
from ops.nms import common, cpu, dispatch, pallas, topk, while_loop

# The pallas backends: the CUDA kernel each runs (None: pallas picks it per
# GPU). On TPU they all run the Mosaic kernel; on CPU pallas_mosaic_gpu runs
# the Mosaic GPU kernel in interpret mode, the others the Triton kernel.
_PALLAS_CUDA_KERNELS = {
    "pallas": None,
    "pallas_mosaic_gpu": "mosaic_gpu",
    "pallas_triton": "triton",
}
_IMPLEMENTATIONS = {
    "cpu": cpu.nms,
    "while_loop": while_loop.nms,
    **{
        name: functools.partial(pallas.nms, cuda_kernel=kernel)
        for name, kernel in _PALLAS_CUDA_KERNELS.items()
    },
}
BACKENDS = ("auto",) + tuple(_IMPLEMENTATIONS)
# (platform, backend) -> why its program cannot run under a transfer guard
# that disallows host transfers (eval's predict runs under one): Pallas' GPU
# interpret mode runs the kernel in host callbacks.
HOST_CALLBACKS = {
    ("cpu", "pallas_mosaic_gpu"): (
        "runs the Mosaic GPU kernel in Pallas' GPU interpret mode, whose "
        "host callbacks"
    ),
}
# Not NMS: top-K with no suppression, to measure what NMS costs in a step.
BASELINES = {"topk": topk.nms}

# 'auto' per platform. The measurements behind each pick are in
# benchmarks/README.md and benchmarks/results/ (GPU: results/h100/):
# - cpu, tpu: pallas, the fastest on CPU (interpret mode) at every workload
#   and in the train step, and on TPU.
# - cuda: pallas_triton, the kernel these numbers measured. On one H100
#   80GB (JAX 0.11.2, CUDA 13), median ms of 50 synchronised calls, the
#   Triton kernel vs while_loop: W1 0.274 vs 2.18, W2 (6000 boxes) 0.573
#   vs 26.1, W3 0.597 vs 25.4, W4 (class-aware) 0.156 vs 2.73; train step
#   (configs/shapes.py, batch 8) 5.8 ms vs 12.3 ms; R50-FPN at 1024x1024,
#   batch 8: 92.0 ms vs 116.3 ms. The Mosaic GPU kernel is not yet
#   measured on a GPU (pallas.CUDA_KERNELS). Where the pick cannot run (no
#   Pallas Triton in this JAX), the first of _CUDA_FALLBACKS that can
#   (`auto_backend`).
AUTO_BACKEND = {"cpu": "pallas", "tpu": "pallas", "cuda": "pallas_triton"}
_CUDA_FALLBACKS = ("pallas", "while_loop")


def check_backend(
    backend: str, *, name: str = "backend", baselines: bool = True
) -> None:
    """Raises ValueError naming `name` unless `backend` is a known backend.

    The one check of a backend name (the API, the config and --nms all use
    it); `baselines` also admits BASELINES.
    """
    if backend in BACKENDS or (baselines and backend in BASELINES):
        return
    raise ValueError(
        f"{name}={backend!r} is not a known NMS backend; "
        f"known backends: {', '.join(BACKENDS)}"
    )


def _check_arrays(boxes, scores, classes):
    """Raises ValueError naming the argument for a malformed input array."""
    if not jnp.issubdtype(boxes.dtype, jnp.floating):
        raise ValueError(
            f"boxes must be floating point, got dtype "
            f"{boxes.dtype} with shape {boxes.shape}"
        )
    if not jnp.issubdtype(scores.dtype, jnp.floating):
        raise ValueError(
            f"scores must be floating point, got dtype "
            f"{scores.dtype} with shape {scores.shape}"
        )
    if boxes.ndim < 2 or boxes.shape[-1] != 4:
        raise ValueError(
            f"boxes must have shape [..., N, 4], got {boxes.shape}"
        )
    if scores.shape != boxes.shape[:-1]:
        raise ValueError(
            f"scores shape {scores.shape} does not match boxes "
            f"shape {boxes.shape}: expected {boxes.shape[:-1]}"
        )
    if classes is not None:
        if not jnp.issubdtype(classes.dtype, jnp.integer):
            raise ValueError(
                f"classes must be integer, got dtype "
                f"{classes.dtype} with shape {classes.shape}"
            )
        if classes.shape != scores.shape:
            raise ValueError(
                f"classes shape {classes.shape} does not match "
                f"scores shape {scores.shape}"
            )


def _check_params(max_output_size, iou_threshold, score_threshold):
    """Raises ValueError naming the argument for a malformed setting."""
    if (
        isinstance(max_output_size, bool)
        or not isinstance(max_output_size, numbers.Integral)
        or max_output_size < 1
    ):
        raise ValueError(
            f"max_output_size must be an int >= 1, got {max_output_size!r}"
        )
    if (
        not isinstance(iou_threshold, numbers.Real)
        or not 0.0 <= iou_threshold <= 1.0
    ):
        raise ValueError(
            f"iou_threshold must be a number in [0, 1], got {iou_threshold!r}"
        )
    if score_threshold is not None and not isinstance(
        score_threshold, numbers.Real
    ):
        raise ValueError(
            f"score_threshold must be a number or None, got {score_threshold!r}"
        )


@functools.cache
def _log_cuda_fallback(backend: str, why: str) -> None:
    logging.warning(
        "nms backend 'auto' on CUDA: %s, so %s runs instead of %s",
        why,
        backend,
        AUTO_BACKEND["cuda"],
    )


def cuda_problems(backend: str, max_output_size: int | None) -> tuple[str, ...]:
    """Why `backend` cannot run on the CUDA GPU being lowered for, one
    clause each: () where it can, and for a backend without a CUDA
    kernel."""
    if backend not in _PALLAS_CUDA_KERNELS:
        return ()
    _, problems = pallas.pick_cuda_kernel(
        max_output_size, _PALLAS_CUDA_KERNELS[backend]
    )
    return problems


def auto_backend(platform: str, max_output_size: int | None = None) -> str:
    """What 'auto' runs on `platform` ('cpu', 'tpu', 'cuda' or 'gpu').

    AUTO_BACKEND's pick, except on CUDA where it cannot run on the GPU
    being lowered for (ops/nms/pallas.py, `pick_cuda_kernel`; K is
    `max_output_size`, None for any that fits): then the first of
    _CUDA_FALLBACKS that can, said once in the log of a process whose
    default device is a GPU.
    """
    platform = "cuda" if platform == "gpu" else platform
    name = AUTO_BACKEND.get(platform, AUTO_BACKEND["cpu"])
    if platform != "cuda":
        return name
    why = []
    for backend in (name, *_CUDA_FALLBACKS):
        problems = cuda_problems(backend, max_output_size)
        if not problems:
            break
        why += [p for p in problems if p not in why]
    if why and jax.default_backend() == "gpu":
        _log_cuda_fallback(backend, " and ".join(why))
    return backend


def resolve_backend(backend: str, platform: str | None = None) -> str:
    """The backend that runs: 'auto' becomes the default platform's pick."""
    if backend != "auto":
        return backend
    return auto_backend(platform or jax.default_backend())


def backend_name(rpn: str, detection: str) -> str:
    """The backends of the two NMS sites for a log line, 'auto' with what it
    resolves to on this host: 'pallas', or 'rpn=cpu,detection=auto
    (pallas)' where they differ."""
    rpn, detection = _resolved(rpn), _resolved(detection)
    return rpn if rpn == detection else f"rpn={rpn},detection={detection}"


def _resolved(backend: str) -> str:
    name = resolve_backend(backend)
    return backend if name == backend else f"{backend} ({name})"


def host_advice(finding: host_audit.HostRoundTrip) -> str:
    """What to do about a host round-trip the audit found: for an NMS op,
    the backends that keep NMS on the device ('' for any other op)."""
    if "nms" not in finding.op_name:
        return ""
    return (
        "the NMS backend 'cpu' runs on the host; use --nms=pallas or "
        "--nms=while_loop"
    )


def _auto(boxes, scores, classes, params):
    """Dispatches per platform at lowering time (see AUTO_BACKEND); each
    platform's backend is lowered for that platform only
    (ops/nms/dispatch.py), so a multi-platform export never lowers a
    kernel where it cannot run."""
    extra = () if classes is None else (classes,)

    def branch(platform):
        def run(boxes, scores, *classes):
            # Picked as the branch lowers: on its platform's device.
            backend = auto_backend(platform, params.max_output_size)
            impl = _IMPLEMENTATIONS[backend]
            return tuple(
                impl(boxes, scores, classes[0] if classes else None, params)
            )

        return run

    return tuple(
        dispatch.platform_switch(
            boxes,
            scores,
            *extra,
            default=branch("cpu"),
            **{platform: branch(platform) for platform in AUTO_BACKEND},
        )
    )


@functools.cache
def _batched_call(backend: str, has_classes: bool, params: common.Params):
    """The backend on [B, N] inputs; vmap folds into the native batch dim."""
    impl = (
        _auto
        if backend == "auto"
        else _IMPLEMENTATIONS.get(backend) or BASELINES[backend]
    )

    def run(boxes, scores, classes):
        return impl(boxes, scores, classes if has_classes else None, params)

    @jax.custom_batching.custom_vmap
    def call(boxes, scores, classes):
        return run(boxes, scores, classes)

    @call.def_vmap
    def _vmap_rule(axis_size, in_batched, boxes, scores, classes):
        def fold(x, batched):
            x = x if batched else jnp.broadcast_to(x, (axis_size,) + x.shape)
            return x.reshape((-1,) + x.shape[2:])

        args = [
            fold(x, b)
            for x, b in zip((boxes, scores, classes), in_batched, strict=True)
        ]
        indices, num_valid = call(*args)
        batch = boxes.shape[1] if in_batched[0] else boxes.shape[0]
        return (
            (
                indices.reshape(axis_size, batch, -1),
                num_valid.reshape(axis_size, batch),
            ),
            (True, True),
        )

    return call


def nms(
    boxes: ArrayLike,
    scores: ArrayLike,
    *,
    max_output_size: int,
    iou_threshold: float,
    score_threshold: float | None = None,
    classes: ArrayLike | None = None,
    backend: str = "auto",
) -> tuple[jax.Array, jax.Array]:
    """Greedy non-maximum suppression; see docs/architecture.md ("The NMS
    operator").

    Args:
      boxes: f32[..., N, 4] as (x1, y1, x2, y2).
      scores: f32[..., N].
      max_output_size: K, the most boxes kept per image.
      iou_threshold: a box is suppressed when its IoU with a kept box of
        the same class exceeds this, in [0, 1].
      score_threshold: scores <= this are never selected (None: no bound).
      classes: optional int[..., N]; a box then only suppresses its class.
      backend: a name of BACKENDS (or BASELINES).

    Returns:
      indices int32[..., K] in selection order, padded with -1, and
      num_valid int32[...].
    """
    boxes = jnp.asarray(boxes)
    scores = jnp.asarray(scores)
    classes = None if classes is None else jnp.asarray(classes)
    check_backend(backend)
    _check_arrays(boxes, scores, classes)
    _check_params(max_output_size, iou_threshold, score_threshold)
    batch_shape, n = scores.shape[:-1], scores.shape[-1]
    if n == 0 or 0 in batch_shape:
        return (
            jnp.full(batch_shape + (max_output_size,), -1, jnp.int32),
            jnp.zeros(batch_shape, jnp.int32),
        )
    boxes = lax.stop_gradient(boxes.astype(jnp.float32)).reshape(-1, n, 4)
    scores = lax.stop_gradient(scores.astype(jnp.float32)).reshape(-1, n)
    has_classes = classes is not None
    classes = (
        classes.astype(jnp.int32).reshape(-1, n)
        if has_classes
        else jnp.zeros(scores.shape, jnp.int32)
    )
    params = common.Params(
        max_output_size=int(max_output_size),
        iou_threshold=float(iou_threshold),
        score_threshold=(
            None if score_threshold is None else float(score_threshold)
        ),
    )
    call = _batched_call(backend, has_classes, params)
    with jax.named_scope("nms"):
        indices, num_valid = call(boxes, scores, classes)
    return (
        indices.reshape(batch_shape + (max_output_size,)),
        num_valid.reshape(batch_shape),
    )
