"""ops/box_ops.py against brute-force Python arithmetic."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from ops import box_ops


def _iou_by_hand(a, b):
    iw = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0)
    ih = max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    inter = iw * ih
    area_a = max(a[2] - a[0], 0.0) * max(a[3] - a[1], 0.0)
    area_b = max(b[2] - b[0], 0.0) * max(b[3] - b[1], 0.0)
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def test_pairwise_iou_matches_brute_force_with_batch_dims():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 50, (2, 7, 2))
    wh = rng.uniform(-5, 30, (2, 7, 2))  # some inverted boxes
    a = np.concatenate([xy, xy + wh], -1).astype(np.float32)
    b = a[:, ::-1][:, :5] + 3.0
    iou = np.asarray(jax.jit(box_ops.pairwise_iou)(a, b))
    assert iou.shape == (2, 7, 5)
    for n, i, j in itertools.product(range(2), range(7), range(5)):
        np.testing.assert_allclose(
            iou[n, i, j], _iou_by_hand(a[n, i], b[n, j]), rtol=1e-5, atol=1e-6
        )


def test_iou_of_worked_pairs():
    a = jnp.array([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 0.0, 0.0]])
    b = jnp.array(
        [
            [5.0, 0.0, 15.0, 10.0],
            [0.0, 0.0, 10.0, 10.0],
            [20.0, 20.0, 30.0, 30.0],
        ]
    )
    iou = np.asarray(jax.jit(box_ops.pairwise_iou)(a, b))
    np.testing.assert_allclose(iou[0], [50.0 / 150.0, 1.0, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(iou[1], [0.0, 0.0, 0.0])  # empty box


def test_clip_area_and_size_mask():
    boxes = jnp.array([[-5.0, 2.0, 70.0, 40.0], [10.0, 10.0, 10.5, 30.0]])
    clipped = box_ops.clip_boxes(boxes, 32.0, 64.0)
    np.testing.assert_array_equal(clipped[0], [0.0, 2.0, 64.0, 32.0])
    np.testing.assert_allclose(box_ops.area(clipped), [64.0 * 30.0, 10.0])
    np.testing.assert_array_equal(
        box_ops.is_larger_than(clipped, 1.0), [True, False]
    )
    np.testing.assert_array_equal(
        box_ops.is_larger_than(jnp.array([[3.0, 3.0, 3.0, 9.0]]), 0.0), [False]
    )


def test_iou_is_differentiable_and_finite_for_empty_boxes():
    grad = jax.jit(jax.grad(lambda a: jnp.sum(box_ops.pairwise_iou(a, a))))(
        jnp.zeros((2, 4))
    )
    assert np.all(np.isfinite(grad))
