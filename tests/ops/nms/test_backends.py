"""Every backend equals the numpy reference, index for index."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ops import host_audit
from ops import nms as nms_lib
from ops.nms import reference
from tests.ops.nms.helpers import (
    assert_matches_reference,
    backend_params,
    random_boxes,
)

# Each size with the IoU thresholds it is checked at. Every (backend, size,
# threshold, K) is a compile of its own (the threshold is static), and on
# the Pallas backends in interpret mode a compile takes seconds: each
# threshold is checked at several sizes and each size at a dense and a
# light suppression, 1000 boxes (many tiles) too. 0 boxes never reach a
# backend and 1 box is kept at any threshold: one each. 3000 boxes (47
# tiles) run behind -m slow at every threshold: 1000 already walk many
# tiles, and the interpret-mode kernels take most of a minute at 3000.
THRESHOLDS = (0.1, 0.5, 0.7, 0.9)
SIZES = (
    pytest.param(0, (0.5,), id="0"),
    pytest.param(1, (0.5,), id="1"),
    pytest.param(7, (0.1, 0.7), id="7"),
    pytest.param(127, (0.5, 0.9), id="127"),
    pytest.param(128, (0.1, 0.7), id="128"),
    pytest.param(129, (0.5, 0.9), id="129"),
    pytest.param(1000, (0.1, 0.7), id="1000"),
    pytest.param(3000, THRESHOLDS, id="3000", marks=pytest.mark.slow),
)


@functools.cache
def _jitted(backend, max_output_size, iou_threshold, score_threshold=None):
    return jax.jit(
        functools.partial(
            nms_lib.nms,
            max_output_size=max_output_size,
            iou_threshold=iou_threshold,
            score_threshold=score_threshold,
            backend=backend,
        )
    )


def _check(boxes, scores, backend, classes=None, **params):
    call = _jitted(backend, **params)
    return assert_matches_reference(
        boxes,
        scores,
        backend=backend,
        classes=classes,
        call=lambda b, s, classes, backend, **_: call(b, s, classes=classes),
        **params,
    )


@pytest.mark.parametrize("n, thresholds", SIZES)
def test_random_inputs(backend, n, thresholds):
    # Dense boxes, so every threshold suppresses a lot; two images per call
    # and a fresh seed per size.
    for iou_threshold in thresholds:
        rng = np.random.default_rng([n, int(iou_threshold * 10)])
        for _ in range(2):
            boxes, scores = random_boxes(rng, (2, n), extent=100.0)
            _check(
                boxes,
                scores,
                backend,
                max_output_size=min(max(n, 1), 300),
                iou_threshold=iou_threshold,
            )


@pytest.mark.parametrize("n, iou_threshold", ((129, 0.3), (1000, 0.6)))
def test_random_class_aware(backend, n, iou_threshold):
    rng = np.random.default_rng(n)
    boxes, scores = random_boxes(rng, (3, n))
    classes = rng.integers(0, 5, (3, n)).astype(np.int32)
    _check(
        boxes,
        scores,
        backend,
        classes=classes,
        max_output_size=200,
        iou_threshold=iou_threshold,
    )


def test_pair_just_above_and_below_threshold(backend):
    # [0, 0, 3, 1] against [1, 0, 4, 1] has IoU exactly 0.5 (inter 2, union
    # 4). Moving the second box by one or two float steps, or the threshold
    # by one, puts the pair just above or just below the threshold; the
    # reference decides each case and every backend must follow it.
    one, three = np.float32(1.0), np.float32(3.0)
    shifts = [
        one,
        np.nextafter(one, three),
        np.nextafter(np.nextafter(one, three), three),
        np.nextafter(one, np.float32(0)),
    ]
    boxes = np.array(
        [[[0, 0, 3, 1], [x, 0, x + three, 1]] for x in shifts]
        + [[[0, 0, 3, 1], [1, 0, 4, np.nextafter(one, three)]]],
        np.float32,
    )
    scores = np.tile(np.array([1.0, 0.5], np.float32), (len(boxes), 1))
    decisions = set()
    half = np.float32(0.5)
    for threshold in (
        half,
        np.nextafter(half, np.float32(0)),
        np.nextafter(half, one),
    ):
        _, num = _check(
            boxes,
            scores,
            backend,
            max_output_size=2,
            iou_threshold=float(threshold),
        )
        decisions.update(num.tolist())
    assert decisions == {1, 2}, "the cases must straddle the threshold"
    # At exactly 0.5 the untouched pair is not suppressed (0.5 > 0.5 fails).
    _, num = reference.nms(
        boxes[:1], scores[:1], max_output_size=2, iou_threshold=0.5
    )
    assert num.tolist() == [2]


def test_equal_scores_and_duplicate_boxes(backend):
    rng = np.random.default_rng(7)
    boxes, _ = random_boxes(rng, (300,))
    boxes = np.concatenate([boxes, boxes, boxes[:50]])  # duplicates
    scores = np.repeat(np.float32([0.5, 0.25, 0.0, -0.0]), len(boxes) // 4 + 1)[
        : len(boxes)
    ]
    rng.shuffle(scores)
    for iou_threshold in (0.5, 1.0):
        _check(
            boxes,
            scores,
            backend,
            max_output_size=400,
            iou_threshold=iou_threshold,
        )


def test_zero_area_inverted_and_non_finite(backend):
    rng = np.random.default_rng(3)
    boxes, scores = random_boxes(rng, (200,))
    boxes[::7, 2] = boxes[::7, 0]  # zero width
    boxes[1::7, [1, 3]] = boxes[1::7, [3, 1]]  # inverted
    boxes[2::11, 0] = np.inf
    boxes[3::13, 3] = np.nan
    boxes[4::17, 1] = -np.inf
    for iou_threshold in (0.0, 0.3):
        _check(
            boxes,
            scores,
            backend,
            max_output_size=200,
            iou_threshold=iou_threshold,
        )


def test_nan_scores_and_score_threshold(backend):
    rng = np.random.default_rng(4)
    boxes, scores = random_boxes(rng, (2, 500))
    scores[:, ::5] = np.nan
    scores[:, 1::9] = 0.5  # exactly at the threshold: never selected
    scores[:, 2::9] = -np.inf
    _check(boxes, scores, backend, max_output_size=100, iou_threshold=0.5)
    _check(
        boxes,
        scores,
        backend,
        max_output_size=100,
        iou_threshold=0.5,
        score_threshold=0.5,
    )


def test_max_output_size_larger_than_n(backend):
    rng = np.random.default_rng(5)
    boxes, scores = random_boxes(rng, (2, 40))
    indices, num = _check(
        boxes, scores, backend, max_output_size=64, iou_threshold=0.5
    )
    assert indices.shape == (2, 64) and np.all(indices[:, 40:] == -1)


def test_max_output_size_stops_early(backend):
    rng = np.random.default_rng(6)
    # 400 boxes: 13 tiles of the CPU kernel, 7 of the Mosaic GPU kernel.
    boxes, scores = random_boxes(rng, (2, 400), extent=1000.0)
    for k in (1, 5, 129):
        _check(boxes, scores, backend, max_output_size=k, iou_threshold=0.5)


@pytest.mark.parametrize("max_output_size", [1000, 20000])
def test_pallas_at_20000_boxes(max_output_size):
    # O(N) memory: 20000 boxes need no 20000 x 20000 matrix. K=20000 walks
    # every tile; K=1000 stops early.
    rng = np.random.default_rng(20000)
    boxes, scores = random_boxes(rng, (1, 20000), extent=800.0, max_size=200.0)
    _, num = _check(
        boxes,
        scores,
        "pallas",
        max_output_size=max_output_size,
        iou_threshold=0.5,
    )
    assert 1000 <= num[0] < 20000


def test_batch_dims(wrapper_backend):
    rng = np.random.default_rng(8)
    boxes, scores = random_boxes(rng, (2, 3, 150))
    classes = rng.integers(0, 3, (2, 3, 150)).astype(np.int32)
    indices, num = assert_matches_reference(
        boxes,
        scores,
        backend=wrapper_backend,
        classes=classes,
        max_output_size=50,
        iou_threshold=0.4,
    )
    assert indices.shape == (2, 3, 50) and num.shape == (2, 3)


def test_vmap_and_jit(wrapper_backend):
    rng = np.random.default_rng(9)
    boxes, scores = random_boxes(rng, (4, 2, 130))
    classes = rng.integers(0, 3, (4, 2, 130)).astype(np.int32)
    per_image = functools.partial(
        nms_lib.nms,
        max_output_size=60,
        iou_threshold=0.5,
        backend=wrapper_backend,
    )
    want = reference.nms(
        boxes, scores, max_output_size=60, iou_threshold=0.5, classes=classes
    )
    got = jax.jit(
        jax.vmap(jax.vmap(lambda b, s, c: per_image(b, s, classes=c)))
    )(boxes, scores, classes)
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])
    np.testing.assert_array_equal(np.asarray(got[1]), want[1])
    # Batched boxes with shared scores: vmap broadcasts the unbatched side.
    got = jax.vmap(lambda b: per_image(b, scores[0, 0]))(boxes[:, 0])
    want = reference.nms(
        boxes[:, 0],
        np.broadcast_to(scores[0, 0], (4, 130)),
        max_output_size=60,
        iou_threshold=0.5,
    )
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])


def test_only_the_cpu_backend_goes_through_the_host(backend):
    """The compiled program of a jitted call: the cpu backend's
    pure_callback in the nms scope; no host callback or transfer on the
    device backends. (On CPU, pallas_mosaic_gpu's GPU interpret mode runs
    the kernel through io_callbacks: host work by design, there only.)"""
    rng = np.random.default_rng(5)
    boxes, scores = random_boxes(rng, (2, 40))
    jitted = _jitted(backend, max_output_size=64, iou_threshold=0.5)
    findings = host_audit.audit(jitted, boxes, scores)
    if backend == "cpu":
        assert findings, "the cpu backend runs on the host"
        assert all(f.op_name == "nms/pure_callback" for f in findings), findings
    elif backend == "pallas_mosaic_gpu" and jax.default_backend() == "cpu":
        assert all(
            f.op_name.startswith("nms/nms_tiled_mosaic_gpu/")
            and f.op_type == "io_callback"
            for f in findings
        ), findings
    else:
        assert not findings, findings


def test_stays_out_of_autodiff(wrapper_backend):
    rng = np.random.default_rng(10)
    boxes, scores = random_boxes(rng, (64,))

    def loss(b, s):
        indices, _ = nms_lib.nms(
            b, s, max_output_size=8, iou_threshold=0.5, backend=wrapper_backend
        )
        return jnp.sum(jnp.take(s, jnp.maximum(indices, 0)))

    grad_boxes, grad_scores = jax.grad(loss, argnums=(0, 1))(boxes, scores)
    assert np.all(np.asarray(grad_boxes) == 0)
    # Gradients still flow through the gathered scores, not through NMS.
    assert np.count_nonzero(np.asarray(grad_scores)) > 0


def test_bfloat16_inputs_are_computed_in_float32(wrapper_backend):
    rng = np.random.default_rng(11)
    boxes, scores = random_boxes(rng, (100,))
    boxes16 = jnp.asarray(boxes, jnp.bfloat16)
    scores16 = jnp.asarray(scores, jnp.bfloat16)
    indices, num = nms_lib.nms(
        boxes16,
        scores16,
        max_output_size=30,
        iou_threshold=0.5,
        backend=wrapper_backend,
    )
    want = reference.nms(
        np.asarray(boxes16.astype(jnp.float32)),
        np.asarray(scores16.astype(jnp.float32)),
        max_output_size=30,
        iou_threshold=0.5,
    )
    np.testing.assert_array_equal(np.asarray(indices), want[0])


@pytest.mark.parametrize("backend_name", backend_params())
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_property_small_grid_boxes(backend_name, data):
    # Coordinates on a coarse grid make ties, duplicates, degenerate and
    # exactly-at-threshold boxes common.
    grid = st.integers(0, 6).map(float)
    boxes = np.array(
        data.draw(
            st.lists(
                st.tuples(grid, grid, grid, grid), min_size=24, max_size=24
            )
        ),
        np.float32,
    )
    scores = np.array(
        data.draw(
            st.lists(
                st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, float("nan")]),
                min_size=24,
                max_size=24,
            )
        ),
        np.float32,
    )
    classes = np.array(
        data.draw(st.lists(st.integers(0, 1), min_size=24, max_size=24)),
        np.int32,
    )
    iou_threshold = data.draw(st.sampled_from([0.0, 1 / 3, 0.5, 1.0]))
    _check(
        boxes,
        scores,
        backend_name,
        max_output_size=10,
        iou_threshold=iou_threshold,
    )
    _check(
        boxes,
        scores,
        backend_name,
        classes=classes,
        max_output_size=10,
        iou_threshold=iou_threshold,
        score_threshold=0.25,
    )
