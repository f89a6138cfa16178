"""detector/modeling/losses.py against numpy, and zero-instance behaviour."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from detector.modeling import losses


def _np_bce(x, t):
    p = 1.0 / (1.0 + np.exp(-x))
    return -(t * np.log(p) + (1 - t) * np.log(1 - p))


def _np_smooth_l1(d, beta):
    a = np.abs(d)
    return np.where(a < beta, 0.5 * a**2 / beta, a - 0.5 * beta)


def test_elementwise_losses_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3)) * 4
    t = rng.integers(0, 2, (5, 3)).astype(np.float64)
    np.testing.assert_allclose(
        jax.jit(losses.sigmoid_bce)(x, t), _np_bce(x, t), rtol=1e-5
    )
    np.testing.assert_allclose(
        jax.jit(losses.smooth_l1, static_argnums=1)(x, 1.0 / 9),
        _np_smooth_l1(x, 1.0 / 9),
        rtol=1e-5,
    )
    labels = rng.integers(0, 3, 5)
    log_p = x - np.log(np.exp(x).sum(-1, keepdims=True))
    np.testing.assert_allclose(
        jax.jit(losses.softmax_cross_entropy)(x, labels),
        -log_p[np.arange(5), labels],
        rtol=1e-5,
    )


def test_rpn_and_box_losses_mask_invalid_entries():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 4))
    deltas = rng.normal(size=(2, 4, 4))
    targets = rng.normal(size=(2, 4, 4))
    positive = np.array([[True, False, False, False], [False] * 4])
    valid = np.array([[True, True, False, False], [True, False, False, False]])
    out = jax.jit(functools.partial(losses.rpn_losses, beta=0.5))(
        logits, deltas, positive, valid, targets
    )
    expected_cls = (_np_bce(logits, positive)[valid].sum()) / 8
    expected_box = _np_smooth_l1(deltas - targets, 0.5)[positive].sum() / 8
    np.testing.assert_allclose(out["rpn_cls"], expected_cls, rtol=1e-5)
    np.testing.assert_allclose(out["rpn_box"], expected_box, rtol=1e-5)

    class_logits = rng.normal(size=(1, 3, 3))
    class_deltas = rng.normal(size=(1, 3, 2, 4))
    classes = np.array([[2, 0, 1]])
    roi_valid = np.array([[True, True, False]])
    out = jax.jit(functools.partial(losses.box_head_losses, beta=1.0))(
        class_logits, class_deltas, classes, targets[:1, :3], roi_valid
    )
    log_p = class_logits - np.log(np.exp(class_logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(
        out["cls"], -(log_p[0, 0, 2] + log_p[0, 1, 0]) / 2, rtol=1e-5
    )
    np.testing.assert_allclose(  # only roi 0 is valid foreground (class 2)
        out["box"],
        _np_smooth_l1(class_deltas[0, 0, 1] - targets[0, 0], 1.0).sum() / 2,
        rtol=1e-5,
    )


def test_absent_terms_are_zero_not_nan():
    zeros = jnp.zeros
    out = jax.jit(functools.partial(losses.box_head_losses, beta=1.0))(
        zeros((1, 2, 4)),
        zeros((1, 2, 3, 4)),
        zeros((1, 2), jnp.int32),
        zeros((1, 2, 4)),
        zeros((1, 2), bool),
    )
    assert float(out["cls"]) == 0.0 and float(out["box"]) == 0.0
    mask, grad = jax.jit(
        jax.value_and_grad(
            lambda x: losses.mask_loss(
                x, zeros((1, 2, 4, 4)), zeros((1, 2), bool)
            )
        )
    )(zeros((1, 2, 4, 4)))
    assert float(mask) == 0.0 and np.all(np.asarray(grad) == 0.0)


def test_mask_loss_averages_pixels_and_valid_rois():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(1, 3, 2, 2))
    targets = rng.integers(0, 2, (1, 3, 2, 2)).astype(np.float64)
    valid = np.array([[True, False, True]])
    out = jax.jit(losses.mask_loss)(logits, targets, valid)
    per_roi = _np_bce(logits, targets).mean(axis=(-2, -1))
    np.testing.assert_allclose(out, per_roi[valid].mean(), rtol=1e-5)
    terms = {
        name: jnp.float32(i + 1) for i, name in enumerate(losses.TERM_NAMES)
    }
    weights = dict(
        zip(losses.TERM_NAMES, (1.0, 2.0, 0.0, 1.0, 0.5), strict=True)
    )
    total = losses.total_loss(terms, weights)["total"]
    np.testing.assert_allclose(total, 1 + 4 + 0 + 4 + 2.5)
