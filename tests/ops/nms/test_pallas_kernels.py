"""The Pallas kernels beyond CPU interpret mode.

- The Mosaic (TPU) kernel runs on CPU under TPU interpret mode and matches the
  reference; it is also lowered for a real TPU target with jax.export, so a
  Mosaic lowering error fails here.
- The Triton (GPU) kernel is lowered for CUDA with jax.export on any machine,
  and runs for real where a GPU is present.
"""

import functools
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from ops import nms as nms_lib
from ops.nms import common, pallas, pallas_gpu, pallas_tpu, reference
from tests.ops.nms.helpers import assert_matches_reference, random_boxes

_TRITON_CALL = "__gpu$xla.gpu.triton"


def _mosaic_nms(
    boxes,
    scores,
    classes=None,
    *,
    max_output_size,
    iou_threshold,
    score_threshold=None,
):
    """The pallas backend with the TPU kernel forced into interpret mode."""
    boxes, scores = jnp.asarray(boxes), jnp.asarray(scores)
    class_aware = classes is not None
    classes = (
        jnp.asarray(classes, jnp.int32)
        if class_aware
        else jnp.zeros(scores.shape, jnp.int32)
    )
    order, fields, sorted_classes, candidate = pallas._sorted_inputs(
        boxes, scores, classes, score_threshold
    )
    n = scores.shape[-1]
    blocks = pallas.BLOCK_SIZES["tpu"]
    n_pad = pallas._round_up(n, blocks.tile)
    keep = pallas_tpu.keep_mask(
        *(
            pallas._pad_last(x, n_pad)
            for x in (fields, sorted_classes, candidate)
        ),
        blocks=blocks,
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        class_aware=class_aware,
        interpret=pltpu.InterpretParams(),
    )
    return common.indices_from_keep_mask(
        keep[:, :n] > 0, order, max_output_size
    )


@pytest.mark.parametrize(
    "n,max_output_size,iou_threshold",
    [
        (1, 4, 0.5),
        (129, 40, 0.1),  # tiles not a multiple of 128; heavy suppression
        (300, 200, 0.7),  # kept buffer crosses 128-slot blocks
        (300, 3, 0.5),  # early stop after the first tile
    ],
)
def test_mosaic_kernel_in_tpu_interpret_mode(n, max_output_size, iou_threshold):
    rng = np.random.default_rng(n + max_output_size)
    boxes, scores = random_boxes(rng, (2, n))
    scores[:, ::11] = np.nan
    assert_matches_reference(
        boxes,
        scores,
        backend="pallas",
        max_output_size=max_output_size,
        iou_threshold=iou_threshold,
        call=lambda b, s, classes, backend, **p: _mosaic_nms(b, s, **p),
    )


def test_mosaic_kernel_class_aware_with_score_threshold():
    rng = np.random.default_rng(12)
    boxes, scores = random_boxes(rng, (1, 260))
    classes = rng.integers(0, 4, (1, 260)).astype(np.int32)
    params = dict(max_output_size=150, iou_threshold=0.3, score_threshold=0.2)
    got = _mosaic_nms(boxes, scores, classes, **params)
    want = reference.nms(boxes, scores, classes=classes, **params)
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])
    np.testing.assert_array_equal(np.asarray(got[1]), want[1])


def _export_args(n=1000):
    return (
        jax.ShapeDtypeStruct((2, n, 4), jnp.float32),
        jax.ShapeDtypeStruct((2, n), jnp.float32),
        jax.ShapeDtypeStruct((2, n), jnp.int32),
    )


def _pallas_nms(boxes, scores, classes):
    return nms_lib.nms(
        boxes,
        scores,
        classes=classes,
        max_output_size=100,
        iou_threshold=0.5,
        score_threshold=0.05,
        backend="pallas",
    )


@pytest.mark.parametrize("device_kind", ["TPU v5 lite", "TPU v4"])
def test_lowers_to_mosaic_for_tpu(device_kind):
    mesh = jax.sharding.AbstractMesh(
        (1,),
        ("x",),
        (jax.sharding.AxisType.Auto,),
        abstract_device=jax.sharding.AbstractDevice(
            device_kind=device_kind, num_cores=1, platform="tpu"
        ),
    )
    with jax.sharding.use_abstract_mesh(mesh):
        exported = jax.export.export(jax.jit(_pallas_nms), platforms=["tpu"])(
            *_export_args()
        )
    module = exported.mlir_module()
    assert "tpu_custom_call" in module
    assert "nms_tiled_tpu" in module
    assert _TRITON_CALL not in module


def test_lowers_to_triton_for_cuda():
    exported = jax.export.export(
        jax.jit(_pallas_nms),
        platforms=["cuda"],
        disabled_checks=[
            jax.export.DisabledSafetyCheck.custom_call(_TRITON_CALL)
        ],
    )(*_export_args())
    module = exported.mlir_module()
    assert _TRITON_CALL in module
    assert "tpu_custom_call" not in module


def test_cpu_lowering_has_no_custom_kernel_call():
    # Lowered for the CPU whatever the default device (interpret mode).
    module = jax.export.export(jax.jit(_pallas_nms), platforms=["cpu"])(
        *_export_args(300)
    ).mlir_module()
    assert _TRITON_CALL not in module and "tpu_custom_call" not in module


def test_without_pallas_triton_pallas_fails_on_cuda_and_auto_falls_back(
    monkeypatch, caplog
):
    """A JAX with no Pallas Triton backend (pallas_gpu.TRITON_AVAILABLE):
    'pallas' lowered for CUDA is one error naming the JAX version; 'auto'
    runs while_loop there and says so once; CPU lowering is unaffected."""
    monkeypatch.setattr(pallas_gpu, "TRITON_AVAILABLE", False)
    nms_lib._log_triton_fallback.cache_clear()

    def export(backend, platform):  # a new function: traced afresh
        def fn(boxes, scores, classes):
            return nms_lib.nms(
                boxes,
                scores,
                classes=classes,
                max_output_size=100,
                iou_threshold=0.5,
                backend=backend,
            )

        return jax.export.export(jax.jit(fn), platforms=[platform])(
            *_export_args()
        ).mlir_module()

    with pytest.raises(
        ValueError,
        match=(
            rf"the pallas NMS backend needs Pallas' Triton backend on CUDA "
            rf"GPUs, which JAX {re.escape(jax.__version__)} does not have; "
            rf"use --nms=while_loop"
        ),
    ):
        export("pallas", "cuda")
    module = export("auto", "cuda")
    assert _TRITON_CALL not in module and "stablehlo.while" in module
    assert "nms_tiled" in export("pallas", "cpu")  # interpret mode as ever
    # The fallback is logged once (on a GPU host already by the export
    # above), where the default device is a GPU.
    monkeypatch.setattr(nms_lib.jax, "default_backend", lambda: "gpu")
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert nms_lib.resolve_backend("auto") == "while_loop"
    lines = [
        r.getMessage()
        for r in caplog.records
        if "no Pallas Triton backend" in r.getMessage()
    ]
    assert lines == [
        f"nms backend 'auto' on CUDA: JAX {jax.__version__} has "
        "no Pallas Triton backend, so while_loop runs instead "
        "of pallas"
    ]
    nms_lib._log_triton_fallback.cache_clear()


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [1, 129, 1000, 6000])
def test_triton_kernel_on_gpu(n):
    rng = np.random.default_rng(n)
    boxes, scores = random_boxes(rng, (3, n), extent=800.0, max_size=200.0)
    classes = rng.integers(0, 5, (3, n)).astype(np.int32)
    gpu = jax.devices("gpu")[0]
    for iou_threshold in (0.1, 0.5, 0.7):
        for cls in (None, classes):
            call = jax.jit(
                functools.partial(
                    nms_lib.nms,
                    max_output_size=min(n, 1000),
                    iou_threshold=iou_threshold,
                    backend="pallas",
                )
            )
            args = jax.device_put((boxes, scores, cls), gpu)
            assert_matches_reference(
                boxes,
                scores,
                backend="pallas",
                classes=cls,
                max_output_size=min(n, 1000),
                iou_threshold=iou_threshold,
                call=lambda b, s, classes, backend, call=call, args=args, **_: (
                    call(args[0], args[1], classes=args[2])
                ),
            )
