"""Input generators and the backend-vs-reference check of the NMS tests."""

import jax
import numpy as np
import pytest

from ops import nms as nms_lib
from ops.nms import pallas_mosaic_gpu, reference

ON_DEVICE_BACKENDS = (
    "while_loop",
    "pallas",
    "pallas_mosaic_gpu",
    "pallas_triton",
)
ALL_BACKENDS = ("cpu",) + ON_DEVICE_BACKENDS


def skip_reason(backend: str) -> str | None:
    """Why the suite skips `backend` on the default device; None: it runs.

    On a CUDA GPU, a pallas backend whose kernel cannot run there (the
    Mosaic GPU kernel below compute capability 9.0, Triton missing from
    JAX). Elsewhere pallas_triton, and pallas_mosaic_gpu off the CPU, run
    what pallas runs; on CPU, pallas_mosaic_gpu runs the Mosaic GPU kernel
    in Pallas' GPU interpret mode, where JAX has it.
    """
    platform = jax.default_backend()
    if platform == "gpu":
        return " and ".join(nms_lib.cuda_problems(backend, None)) or None
    if backend == "pallas_triton" or (
        backend == "pallas_mosaic_gpu" and platform != "cpu"
    ):
        return f"{backend} runs what pallas runs off a CUDA GPU"
    if (
        backend == "pallas_mosaic_gpu"
        and not pallas_mosaic_gpu.INTERPRET_AVAILABLE
    ):
        return f"JAX {jax.__version__} has no Pallas GPU interpret mode"
    return None


def backend_params(backends=ALL_BACKENDS, slow=()) -> list:
    """`backends` as pytest params, each skipped with its skip_reason; those
    in `slow` are also marked slow."""
    return [
        pytest.param(
            name,
            marks=[
                pytest.mark.skipif(
                    skip_reason(name) is not None,
                    reason=str(skip_reason(name)),
                ),
                *([pytest.mark.slow] if name in slow else []),
            ],
        )
        for name in backends
    ]


def cuda_mesh(device_kind: str) -> jax.sharding.AbstractMesh:
    """A one-device abstract mesh of a CUDA GPU of `device_kind`: the CUDA
    kernels lower for it (ops/nms/dispatch.py, `lowering_device`)."""
    return jax.sharding.AbstractMesh(
        (1,),
        ("x",),
        (jax.sharding.AxisType.Auto,),
        abstract_device=jax.sharding.AbstractDevice(
            device_kind=device_kind, num_cores=None, platform="cuda"
        ),
    )


def random_boxes(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    extent: float = 100.0,
    max_size: float = 40.0,
):
    """Random boxes f32[*shape, 4] and uniform scores f32[*shape]."""
    top_left = rng.uniform(0.0, extent, shape + (2,))
    size = rng.uniform(1.0, max_size, shape + (2,))
    boxes = np.concatenate([top_left, top_left + size], axis=-1)
    return boxes.astype(np.float32), rng.random(shape, dtype=np.float32)


def assert_matches_reference(
    boxes, scores, *, backend, classes=None, call=None, **params
):
    """Runs one backend and asserts index-for-index equality."""
    call = call or nms_lib.nms
    indices, num_valid = call(
        boxes, scores, classes=classes, backend=backend, **params
    )
    want_indices, want_num = reference.nms(
        boxes, scores, classes=classes, **params
    )
    np.testing.assert_array_equal(
        np.asarray(num_valid), want_num, err_msg=f"num_valid, backend={backend}"
    )
    np.testing.assert_array_equal(
        np.asarray(indices), want_indices, err_msg=f"indices, backend={backend}"
    )
    return want_indices, want_num
