"""The Pallas kernels beyond CPU interpret mode.

- The Mosaic (TPU) kernel runs on CPU under TPU interpret mode and matches the
  reference; it is also lowered for a real TPU target with jax.export, so a
  Mosaic lowering error fails here.
- The CUDA kernels are lowered with jax.export on any machine: `pallas`
  lowers Triton (Mosaic GPU for Hopper, the H100 of dispatch.DEFAULT_KINDS,
  where this JAX has no Triton), `pallas_mosaic_gpu` Mosaic GPU; each runs
  for real where a GPU it fits is present. (The Mosaic GPU kernel
  also runs the whole backend suite on CPU in GPU interpret mode, as
  pallas_mosaic_gpu: tests/ops/nms/test_backends.py.)
"""

import contextlib
import functools
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from ops import nms as nms_lib
from ops.nms import (
    common,
    dispatch,
    pallas,
    pallas_gpu,
    pallas_mosaic_gpu,
    pallas_tpu,
    reference,
)
from tests.ops.nms.helpers import (
    assert_matches_reference,
    cuda_mesh,
    random_boxes,
    skip_reason,
)

_TRITON_CALL = "__gpu$xla.gpu.triton"
_MOSAIC_GPU_CALL = "mosaic_gpu_v2"
_AMPERE = "NVIDIA A100-SXM4-80GB"


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


def _pallas_nms(boxes, scores, classes, backend="pallas", max_output_size=100):
    return nms_lib.nms(
        boxes,
        scores,
        classes=classes,
        max_output_size=max_output_size,
        iou_threshold=0.5,
        score_threshold=0.05,
        backend=backend,
    )


def _export(
    backend="pallas", platform="cuda", device_kind=None, max_output_size=100
) -> str:
    """`backend` exported for `platform` (on a CUDA GPU of `device_kind`;
    None: the one kernels lower for without a GPU), from a new function:
    traced afresh."""

    def fn(boxes, scores, classes):
        return _pallas_nms(boxes, scores, classes, backend, max_output_size)

    mesh = (
        contextlib.nullcontext()
        if device_kind is None
        else jax.sharding.use_abstract_mesh(cuda_mesh(device_kind))
    )
    with mesh:
        exported = jax.export.export(
            jax.jit(fn),
            platforms=[platform],
            disabled_checks=[
                jax.export.DisabledSafetyCheck.custom_call(_TRITON_CALL)
            ],
        )(*_export_args())
    return exported.mlir_module()


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


def test_pallas_lowers_the_measured_triton_kernel_for_hopper():
    """Until a Hopper GPU has run the Mosaic GPU kernel (pallas.CUDA_KERNELS),
    `pallas` lowers the Triton kernel for the exporter's H100 target."""
    assert dispatch.DEFAULT_KINDS["cuda"] == "NVIDIA H100 80GB HBM3"
    assert pallas.CUDA_KERNELS[0] == "triton"
    module = _export()
    assert _TRITON_CALL in module
    assert _MOSAIC_GPU_CALL not in module and "tpu_custom_call" not in module


def test_pallas_mosaic_gpu_lowers_to_mosaic_gpu_for_hopper():
    module = _export("pallas_mosaic_gpu")
    assert _MOSAIC_GPU_CALL in module and "nms_tiled_mosaic_gpu" in module
    assert _TRITON_CALL not in module and "tpu_custom_call" not in module
    # jax.export lists Mosaic GPU kernels as stable: no check disabled.
    jax.export.export(
        jax.jit(functools.partial(_pallas_nms, backend="pallas_mosaic_gpu")),
        platforms=["cuda"],
    )(*_export_args())


def test_pallas_on_a_gpu_says_which_cuda_kernel_it_runs_once(
    monkeypatch, caplog
):
    """Where the default device is a GPU, `pallas` lowered for CUDA logs its
    kernel in one line, once: Triton where this JAX has it, else Mosaic GPU;
    a named kernel (`pallas_triton`) and lowering on a CPU host log none."""
    pallas.log_cuda_kernel.cache_clear()
    with caplog.at_level(logging.INFO, logger="absl"):
        _export()
    assert not _kernel_lines(caplog)
    monkeypatch.setattr(nms_lib.jax, "default_backend", lambda: "gpu")
    with caplog.at_level(logging.INFO, logger="absl"):
        for _ in range(2):
            _export()
        _export("pallas_triton")
    assert _kernel_lines(caplog) == [
        "nms backend 'pallas' on NVIDIA H100 80GB HBM3: the Triton kernel, "
        "measured on an H100 (benchmarks/README.md); the Mosaic GPU kernel "
        "has not yet run on a GPU (--nms=pallas_mosaic_gpu runs it)"
    ]
    caplog.clear()
    monkeypatch.setattr(pallas_gpu, "TRITON_AVAILABLE", False)
    with caplog.at_level(logging.INFO, logger="absl"):
        _export()
    assert _kernel_lines(caplog) == [
        "nms backend 'pallas' on NVIDIA H100 80GB HBM3: the Mosaic GPU "
        f"kernel, which has not yet run on a GPU (JAX {jax.__version__} has "
        "no Pallas Triton backend)"
    ]
    pallas.log_cuda_kernel.cache_clear()


def _kernel_lines(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("nms backend 'pallas' on ")
    ]


@pytest.mark.parametrize(
    "device_kind,params",
    [
        (_AMPERE, {}),  # compute capability 8.0
        (None, {"backend": "pallas_triton"}),
        # More kept boxes than the Mosaic GPU kernel's shared memory holds.
        (None, {"max_output_size": pallas_mosaic_gpu.MAX_OUTPUT_SIZE + 1}),
    ],
)
def test_lowers_to_triton_below_hopper_or_when_named(device_kind, params):
    module = _export(device_kind=device_kind, **params)
    assert _TRITON_CALL in module
    assert _MOSAIC_GPU_CALL not in module and "tpu_custom_call" not in module


def test_pallas_mosaic_gpu_below_hopper_is_one_error():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "the pallas_mosaic_gpu NMS backend cannot run on this CUDA GPU: "
            "the Mosaic GPU kernel needs compute capability 9.0 or newer "
            f"({_AMPERE}: 8.0); use --nms=while_loop"
        ),
    ):
        _export("pallas_mosaic_gpu", device_kind=_AMPERE)


def test_cpu_lowering_has_no_custom_kernel_call():
    # Lowered for the CPU whatever the default device (interpret mode).
    module = jax.export.export(jax.jit(_pallas_nms), platforms=["cpu"])(
        *_export_args(300)
    ).mlir_module()
    for call in (_TRITON_CALL, _MOSAIC_GPU_CALL, "tpu_custom_call"):
        assert call not in module


def _fallback_lines(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("nms backend 'auto' on CUDA")
    ]


def test_without_pallas_triton_hopper_runs_mosaic_gpu_and_ampere_falls_back(
    monkeypatch, caplog
):
    """A JAX with no Pallas Triton backend (pallas_gpu.TRITON_AVAILABLE):
    on Hopper 'pallas' and 'auto' lower the Mosaic GPU kernel; on Ampere
    'pallas' lowered for CUDA is one error saying why, and 'auto' runs
    while_loop there and says so once; CPU lowering is unaffected."""
    monkeypatch.setattr(pallas_gpu, "TRITON_AVAILABLE", False)
    nms_lib._log_cuda_fallback.cache_clear()
    for backend in ("pallas", "auto"):
        module = _export(backend)
        assert _MOSAIC_GPU_CALL in module and _TRITON_CALL not in module
    no_triton = f"JAX {jax.__version__} has no Pallas Triton backend"
    ampere = (
        "the Mosaic GPU kernel needs compute capability 9.0 or newer "
        f"({_AMPERE}: 8.0)"
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "the pallas NMS backend cannot run on this CUDA GPU: "
            f"{no_triton} and {ampere}; use --nms=while_loop"
        ),
    ):
        _export(device_kind=_AMPERE)
    module = _export("auto", device_kind=_AMPERE)
    assert _TRITON_CALL not in module and _MOSAIC_GPU_CALL not in module
    assert "stablehlo.while" in module
    assert "nms_tiled" in _export(platform="cpu")  # interpret mode
    # Each fallback is logged once (on a GPU host already by the exports
    # above), where the default device is a GPU.
    monkeypatch.setattr(nms_lib.jax, "default_backend", lambda: "gpu")
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert nms_lib.resolve_backend("auto") == "pallas"
            with jax.sharding.use_abstract_mesh(cuda_mesh(_AMPERE)):
                assert nms_lib.resolve_backend("auto") == "while_loop"
    assert _fallback_lines(caplog) == [
        f"nms backend 'auto' on CUDA: {no_triton}, so pallas runs instead "
        "of pallas_triton",
        f"nms backend 'auto' on CUDA: {no_triton} and {ampere}, so "
        "while_loop runs instead of pallas_triton",
    ]
    nms_lib._log_cuda_fallback.cache_clear()


def _has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def _check_on_gpu(backend: str, n: int) -> None:
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
                    backend=backend,
                )
            )
            args = jax.device_put((boxes, scores, cls), gpu)
            assert_matches_reference(
                boxes,
                scores,
                backend=backend,
                classes=cls,
                max_output_size=min(n, 1000),
                iou_threshold=iou_threshold,
                call=lambda b, s, classes, backend, call=call, args=args, **_: (
                    call(args[0], args[1], classes=args[2])
                ),
            )


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [1, 129, 1000, 6000])
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            name,
            marks=pytest.mark.skipif(
                _has_gpu() and skip_reason(name) is not None,
                reason=str(_has_gpu() and skip_reason(name)),
            ),
        )
        for name in ("pallas_triton", "pallas_mosaic_gpu")
    ],
)
def test_cuda_kernel_on_gpu(backend, n):
    _check_on_gpu(backend, n)
