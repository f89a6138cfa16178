"""The public API: bad input gets a ValueError naming the argument and the
shapes; empty inputs, auto dispatch and the top-k baseline."""

import jax
import numpy as np
import pytest

from ops import host_audit
from ops import nms as nms_lib
from ops.nms import pallas, pallas_gpu, pallas_mosaic_gpu
from tests.ops.nms.helpers import cuda_mesh

_BOXES = np.zeros((2, 5, 4), np.float32)
_SCORES = np.zeros((2, 5), np.float32)


def _call(boxes=_BOXES, scores=_SCORES, **params):
    params = {"max_output_size": 3, "iou_threshold": 0.5, **params}
    return nms_lib.nms(boxes, scores, **params)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(scores=np.zeros((2, 6), np.float32)),
            r"scores shape \(2, 6\) does not match boxes shape \(2, 5, 4\)",
        ),
        (
            dict(scores=np.zeros((3, 5), np.float32)),
            r"scores shape \(3, 5\) does not match boxes shape \(2, 5, 4\)",
        ),
        (
            dict(boxes=np.zeros((2, 5, 5), np.float32)),
            r"boxes must have shape \[\.\.\., N, 4\], got \(2, 5, 5\)",
        ),
        (
            dict(boxes=np.zeros((4,), np.float32)),
            r"boxes must have shape \[\.\.\., N, 4\], got \(4,\)",
        ),
        (
            dict(boxes=np.zeros((2, 5, 4), np.int32)),
            r"boxes must be floating point, got dtype int32 "
            r"with shape \(2, 5, 4\)",
        ),
        (
            dict(scores=np.zeros((2, 5), np.int32)),
            r"scores must be floating point, got dtype int32",
        ),
        (
            dict(iou_threshold=1.5),
            r"iou_threshold must be a number in \[0, 1\]",
        ),
        (
            dict(iou_threshold=-0.1),
            r"iou_threshold must be a number in \[0, 1\]",
        ),
        (
            dict(iou_threshold=float("nan")),
            r"iou_threshold must be a number in",
        ),
        (
            dict(max_output_size=0),
            r"max_output_size must be an int >= 1, got 0",
        ),
        (dict(max_output_size=2.5), r"max_output_size must be an int >= 1"),
        (
            dict(score_threshold="0.1"),
            r"score_threshold must be a number or None",
        ),
        (
            dict(backend="gpu"),
            r"backend='gpu' is not a known NMS backend; known "
            r"backends: auto, cpu, while_loop, pallas, pallas_mosaic_gpu, "
            r"pallas_triton",
        ),
        (
            dict(classes=np.zeros((2, 5), np.float32)),
            r"classes must be integer, got dtype float32",
        ),
        (
            dict(classes=np.zeros((2, 4), np.int32)),
            r"classes shape \(2, 4\) does not match scores shape \(2, 5\)",
        ),
    ],
)
def test_bad_input_names_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _call(**kwargs)


def test_empty_inputs_return_padding():
    for boxes, scores in [
        (np.zeros((2, 0, 4), np.float32), np.zeros((2, 0), np.float32)),
        (np.zeros((0, 5, 4), np.float32), np.zeros((0, 5), np.float32)),
    ]:
        for backend in nms_lib.BACKENDS:
            indices, num = _call(boxes, scores, backend=backend)
            assert indices.shape == scores.shape[:-1] + (3,)
            assert np.all(np.asarray(indices) == -1)
            assert np.all(np.asarray(num) == 0)


def test_auto_resolves_per_platform():
    assert set(nms_lib.AUTO_BACKEND.values()) <= set(nms_lib.BACKENDS)
    rng = np.random.default_rng(0)
    boxes = rng.uniform(0, 50, (1, 40, 4)).astype(np.float32)
    boxes[..., 2:] += boxes[..., :2]
    scores = rng.random((1, 40), dtype=np.float32)
    got = _call(boxes, scores, backend="auto", max_output_size=10)
    want = _call(boxes, scores, backend="while_loop", max_output_size=10)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))


def test_resolve_backend_names_what_auto_runs():
    assert nms_lib.resolve_backend("cpu") == "cpu"
    assert nms_lib.resolve_backend("auto", "tpu") == "pallas"
    assert nms_lib.resolve_backend("auto", "cpu") == "pallas"
    # jax.default_backend() says 'gpu' where AUTO_BACKEND says 'cuda'; the
    # measured Triton kernel where JAX has it, else pallas (Mosaic GPU on
    # the H100 the CUDA branch lowers for without a GPU).
    cuda = "pallas_triton" if pallas_gpu.TRITON_AVAILABLE else "pallas"
    assert nms_lib.resolve_backend("auto", "gpu") == cuda
    assert nms_lib.resolve_backend("auto", "cuda") == cuda
    assert nms_lib.resolve_backend("auto") == nms_lib.resolve_backend(
        "auto", jax.default_backend()
    )


def test_backend_name_says_what_auto_runs_at_each_site():
    auto = f"auto ({nms_lib.resolve_backend('auto')})"
    assert nms_lib.backend_name("auto", "auto") == auto
    assert nms_lib.backend_name("cpu", "cpu") == "cpu"
    assert nms_lib.backend_name("cpu", "auto") == f"rpn=cpu,detection={auto}"


def test_host_advice_only_for_an_nms_op():
    def finding(op_name):
        return host_audit.HostRoundTrip(
            "host callback", "xla_ffi_python_cpu_callback", op_name, ""
        )

    assert "--nms=pallas" in nms_lib.host_advice(
        finding("rpn/nms/pure_callback")
    )
    assert nms_lib.host_advice(finding("losses/debug_print")) == ""


def test_auto_on_cuda_without_triton(monkeypatch):
    monkeypatch.setattr(pallas_gpu, "TRITON_AVAILABLE", False)
    # Hopper: pallas, whose Mosaic GPU kernel runs there.
    assert nms_lib.resolve_backend("auto", "gpu") == "pallas"
    assert nms_lib.auto_backend("cuda", max_output_size=8192) == "pallas"
    # More boxes than the Mosaic GPU kernel keeps, or an Ampere GPU: no
    # kernel runs, so while_loop.
    assert nms_lib.auto_backend("cuda", max_output_size=8193) == "while_loop"
    with jax.sharding.use_abstract_mesh(cuda_mesh("NVIDIA A100-SXM4-80GB")):
        assert nms_lib.resolve_backend("auto", "gpu") == "while_loop"
    assert nms_lib.resolve_backend("auto", "tpu") == "pallas"
    assert nms_lib.resolve_backend("pallas", "gpu") == "pallas"
    monkeypatch.setattr(pallas_mosaic_gpu, "MOSAIC_GPU_AVAILABLE", False)
    assert nms_lib.resolve_backend("auto", "gpu") == "while_loop"


def test_pallas_picks_its_cuda_kernel_by_compute_capability():
    pick = pallas.pick_cuda_kernel
    # The H100 of DEFAULT_KINDS: Triton, the kernel measured on a GPU, first
    # (pallas.CUDA_KERNELS); Mosaic GPU when named.
    assert pick(100) == ("triton", ())
    assert pick(100, "mosaic_gpu") == ("mosaic_gpu", ())
    assert pick(100, "triton") == ("triton", ())
    for kind in ("NVIDIA A100-SXM4-80GB", "an unknown GPU"):
        with jax.sharding.use_abstract_mesh(cuda_mesh(kind)):
            assert pick(100) == ("triton", ())
            kernel, problems = pick(100, "mosaic_gpu")
        found = "8.0" if kind.startswith("NVIDIA") else "unknown"
        assert kernel is None and problems == (
            "the Mosaic GPU kernel needs compute capability 9.0 or newer "
            f"({kind}: {found})",
        )
    assert pick(8193) == ("triton", ())


def test_topk_baseline_keeps_best_scores_without_suppression():
    boxes = np.tile(np.float32([0, 0, 10, 10]), (6, 1))  # all identical
    scores = np.float32([0.1, 0.9, np.nan, 0.5, 0.7, 0.05])
    indices, num = _call(
        boxes, scores, backend="topk", max_output_size=8, score_threshold=0.08
    )
    assert np.asarray(indices).tolist() == [1, 4, 3, 0, -1, -1, -1, -1]
    assert int(num) == 4
