"""The numpy specification, checked on small cases worked out by hand."""

import numpy as np

from ops.nms import reference


def _nms(boxes, scores, **params):
    params.setdefault("max_output_size", 10)
    params.setdefault("iou_threshold", 0.5)
    indices, num = reference.nms(
        np.asarray(boxes, np.float32), np.asarray(scores, np.float32), **params
    )
    return indices[:num].tolist()


def test_keeps_best_of_overlapping_pair_and_far_box():
    # Boxes 0 and 1 overlap with IoU 81 / 119 = 0.68; box 2 is far away.
    boxes = [[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]]
    assert _nms(boxes, [0.9, 0.8, 0.7]) == [0, 2]
    assert _nms(boxes, [0.8, 0.9, 0.7]) == [1, 2]
    # IoU 0.68 is not above 0.7: nothing is suppressed.
    assert _nms(boxes, [0.9, 0.8, 0.7], iou_threshold=0.7) == [0, 1, 2]


def test_iou_equal_to_threshold_is_not_suppressed():
    # inter 2, union 4: IoU is exactly 0.5, and 2 > 0.5 * 4 is false.
    boxes = [[0, 0, 3, 1], [1, 0, 4, 1]]
    assert _nms(boxes, [1.0, 0.5], iou_threshold=0.5) == [0, 1]
    assert _nms(boxes, [1.0, 0.5], iou_threshold=0.49) == [0]


def test_suppression_is_greedy_not_pairwise():
    # 0 suppresses 1 (IoU 0.68); 1 would suppress 2 (IoU 0.68) but 1 is
    # gone, and 0 vs 2 is IoU 0.47, so 2 survives.
    boxes = [[0, 0, 10, 10], [1, 1, 11, 11], [2, 2, 12, 12]]
    assert _nms(boxes, [0.9, 0.8, 0.7], iou_threshold=0.5) == [0, 2]


def test_equal_scores_visit_lower_index_first():
    boxes = [[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]]
    assert _nms(boxes, [0.5, 0.5, 0.5]) == [0]
    assert _nms(boxes, [0.5, 0.7, 0.7]) == [1]
    # -0.0 and 0.0 are equal scores.
    assert _nms(boxes, [0.0, -0.0, 0.0]) == [0]
    assert _nms(boxes, [-0.0, 0.0, 0.0]) == [0]


def test_zero_area_and_inverted_boxes_never_suppress():
    boxes = [[5, 5, 5, 9], [8, 0, 2, 10], [0, 0, 10, 10], [5, 5, 5, 9]]
    # Zero area: IoU is 0 with everything, even with an identical box.
    assert _nms(boxes, [0.9, 0.8, 0.7, 0.6], iou_threshold=0.0) == [0, 1, 2, 3]


def test_nan_scores_non_finite_boxes_and_score_threshold():
    boxes = [
        [0, 0, 1, 1],
        [2, 2, 3, 3],
        [4, 4, 5, 5],
        [6, 6, np.inf, 7],
        [8, 8, 9, np.nan],
    ]
    scores = [np.nan, 0.2, 0.3, 0.9, 0.9]
    assert _nms(boxes, scores) == [2, 1]
    assert _nms(boxes, scores, score_threshold=0.2) == [2]
    assert _nms(boxes, scores, score_threshold=0.3) == []
    # -inf is a score like any other unless a threshold excludes it.
    assert _nms(boxes[:3], [-np.inf, 0.1, -np.inf]) == [1, 0, 2]


def test_max_output_size_and_classes():
    boxes = [[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10], [20, 20, 30, 30]]
    scores = [0.9, 0.8, 0.7, 0.6]
    assert _nms(boxes, scores, classes=np.array([1, 2, 1, 1])) == [0, 1, 3]
    assert _nms(
        boxes, scores, classes=np.array([1, 2, 1, 1]), max_output_size=2
    ) == [0, 1]
    indices, num = reference.nms(
        np.asarray(boxes, np.float32),
        np.asarray(scores, np.float32),
        max_output_size=6,
        iou_threshold=0.5,
    )
    assert num == 2 and indices.tolist() == [0, 3, -1, -1, -1, -1]


def test_batch_dims_are_independent_images():
    boxes = np.array(
        [[[0, 0, 10, 10], [1, 1, 11, 11]], [[0, 0, 10, 10], [20, 20, 30, 30]]],
        np.float32,
    )
    scores = np.array([[0.1, 0.2], [0.1, 0.2]], np.float32)
    indices, num = reference.nms(
        boxes[None], scores[None], max_output_size=3, iou_threshold=0.5
    )
    assert indices.shape == (1, 2, 3) and num.shape == (1, 2)
    assert indices[0].tolist() == [[1, -1, -1], [1, 0, -1]]
    assert num[0].tolist() == [1, 2]


def test_empty_input():
    indices, num = reference.nms(
        np.zeros((0, 4), np.float32),
        np.zeros((0,), np.float32),
        max_output_size=3,
        iou_threshold=0.5,
    )
    assert indices.tolist() == [-1, -1, -1] and num == 0
