"""detector/modeling/matcher.py: thresholds, low-quality matches, padded GT."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from detector.modeling import matcher

_rpn_match = jax.jit(
    functools.partial(
        matcher.match,
        fg_iou=0.7,
        bg_iou_low=0.0,
        bg_iou_high=0.3,
        low_quality=True,
    )
)
_roi_match = jax.jit(
    functools.partial(
        matcher.match, fg_iou=0.5, bg_iou_low=0.1, bg_iou_high=0.5
    )
)


def test_thresholds_and_low_quality_matches():
    iou = jnp.array(
        [
            [0.8, 0.1],  # fg, GT 0
            [0.5, 0.2],  # in between: ignored
            [0.1, 0.25],  # below bg: negative
            [0.0, 0.6],  # GT 1's best (0.6 < 0.7): low-quality fg
            [0.2, 0.6],
        ]
    )  # ties with it: fg too
    labels, matched = _rpn_match(iou, jnp.array([True, True]))
    np.testing.assert_array_equal(labels, [1, -1, 0, 1, 1])
    np.testing.assert_array_equal(np.asarray(matched)[[0, 3, 4]], [0, 1, 1])


def test_padded_gt_never_matches():
    iou = jnp.array([[0.9, 0.2], [0.1, 0.8]])
    labels, matched = _rpn_match(iou, jnp.array([False, True]))
    np.testing.assert_array_equal(labels, [0, 1])
    assert int(matched[1]) == 1
    labels, _ = _rpn_match(iou, jnp.array([False, False]))
    np.testing.assert_array_equal(labels, [0, 0])  # no GT: all negative


def test_roi_background_range_and_no_gt():
    iou = jnp.array([[0.55], [0.3], [0.05], [0.5]])
    labels, _ = _roi_match(iou, jnp.array([True]))
    np.testing.assert_array_equal(labels, [1, 0, -1, 1])
    labels, _ = jax.jit(
        functools.partial(
            matcher.match, fg_iou=0.5, bg_iou_low=0.0, bg_iou_high=0.5
        )
    )(iou, jnp.array([False]))
    np.testing.assert_array_equal(labels, [0, 0, 0, 0])
