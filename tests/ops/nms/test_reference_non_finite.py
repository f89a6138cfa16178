"""The numpy reference on non-finite boxes: no numpy warning, and the same
selection (a non-finite box is never a candidate)."""

import warnings

import numpy as np

from ops.nms import reference

BOXES = np.array(
    [
        [0.0, 5.0, np.inf, 5.0],  # inf * 0 in its area
        [0.0, 0.0, 10.0, 10.0],
        [np.nan, 0.0, 5.0, 5.0],
        [-np.inf, -np.inf, np.inf, np.inf],
        [1.0, 1.0, 10.0, 10.0],
        [20.0, 20.0, 30.0, 30.0],
    ],
    np.float32,
)
SCORES = np.array([0.9, 0.8, 0.95, 0.99, 0.7, 0.6], np.float32)


def test_non_finite_boxes_raise_no_numpy_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        indices, num_valid = reference.nms(
            BOXES, SCORES, max_output_size=4, iou_threshold=0.5
        )
    assert indices.tolist() == [1, 5, -1, -1]
    assert int(num_valid) == 2
