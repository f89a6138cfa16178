"""Input generators and the backend-vs-reference check of the NMS tests."""

import numpy as np

from ops import nms as nms_lib
from ops.nms import reference

ON_DEVICE_BACKENDS = ("while_loop", "pallas")
ALL_BACKENDS = ("cpu",) + ON_DEVICE_BACKENDS


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
