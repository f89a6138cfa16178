"""One program lowered for cpu, cuda and tpu holds each platform's NMS
kernel (ops/nms/dispatch.py), with a symbolic batch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ops import nms as nms_lib
from ops.nms import dispatch, pallas_gpu, pallas_mosaic_gpu, reference

_TRITON_CALL = "__gpu$xla.gpu.triton"
_MOSAIC_GPU_CALL = "mosaic_gpu_v2"


def _pallas_nms(boxes, scores, backend="pallas"):
    return nms_lib.nms(
        boxes,
        scores,
        max_output_size=20,
        iou_threshold=0.5,
        backend=backend,
    )


def _export_symbolic_batch(backend: str, platforms: tuple[str, ...]):
    (b,) = jax.export.symbolic_shape("b")
    return jax.export.export(
        jax.jit(lambda boxes, scores: _pallas_nms(boxes, scores, backend)),
        platforms=platforms,
        disabled_checks=[
            jax.export.DisabledSafetyCheck.custom_call(_TRITON_CALL)
        ],
    )(
        jax.ShapeDtypeStruct((b, 64, 4), jnp.float32),
        jax.ShapeDtypeStruct((b, 64), jnp.float32),
    )


def test_multi_platform_export_with_symbolic_batch_runs_on_cpu():
    """lax.platform_dependent would lower the Mosaic kernel for the CPU too
    and fail; the CUDA branch (the Triton kernel, for the H100 of
    DEFAULT_KINDS) loops over images (GPU kernel grids are static). No mesh
    is needed: each kernel lowers for its platform's device."""
    exported = _export_symbolic_batch("pallas", ("cpu", "cuda", "tpu"))
    module = exported.mlir_module()
    assert "tpu_custom_call" in module and _TRITON_CALL in module
    assert _MOSAIC_GPU_CALL not in module
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        xy = rng.uniform(0, 50, (batch, 64, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + 10], axis=-1)
        scores = rng.random((batch, 64)).astype(np.float32)
        with jax.default_device(jax.devices("cpu")[0]):
            indices, count = exported.call(boxes, scores)
        expected = reference.nms(
            boxes, scores, max_output_size=20, iou_threshold=0.5
        )
        np.testing.assert_array_equal(indices, expected[0])
        np.testing.assert_array_equal(count, expected[1])


def test_mosaic_gpu_branch_exports_with_symbolic_batch():
    """pallas_mosaic_gpu's CUDA branch loops over the images of a symbolic
    batch too (its grid is static)."""
    module = _export_symbolic_batch(
        "pallas_mosaic_gpu", ("cuda",)
    ).mlir_module()
    assert _MOSAIC_GPU_CALL in module and _TRITON_CALL not in module
    assert "stablehlo.while" in module


@pytest.mark.parametrize("mosaic_gpu", [True, False])
def test_auto_exports_for_every_platform_without_pallas_triton(
    monkeypatch, mosaic_gpu
):
    """'auto' on a JAX with no Pallas Triton: on CUDA the Mosaic GPU kernel
    (pallas, for the H100 of DEFAULT_KINDS), or while_loop where JAX has
    no Mosaic GPU either; the Mosaic kernel on TPU; in one program (the
    CUDA branch never lowers a missing kernel)."""
    monkeypatch.setattr(pallas_gpu, "TRITON_AVAILABLE", False)
    monkeypatch.setattr(pallas_mosaic_gpu, "MOSAIC_GPU_AVAILABLE", mosaic_gpu)

    def fn(boxes, scores):
        return nms_lib.nms(
            boxes, scores, max_output_size=20, iou_threshold=0.5, backend="auto"
        )

    module = (
        jax.export.export(jax.jit(fn), platforms=("cpu", "cuda", "tpu"))(
            jax.ShapeDtypeStruct((2, 64, 4), jnp.float32),
            jax.ShapeDtypeStruct((2, 64), jnp.float32),
        )
    ).mlir_module()
    assert "tpu_custom_call" in module and _TRITON_CALL not in module
    assert (_MOSAIC_GPU_CALL in module) == mosaic_gpu
    if not mosaic_gpu:
        assert "stablehlo.while" in module  # while_loop's


def test_eager_call_runs_the_default_devices_branch():
    out = dispatch.platform_switch(
        jnp.ones(3),
        default=lambda x: (x + 1,),
        tpu=lambda x: (x + 2,),
    )
    np.testing.assert_array_equal(out[0], np.full(3, 2.0))
