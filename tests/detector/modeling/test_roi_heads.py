"""modeling/roi_heads.py and mask_head.py: roi sampling, mask targets,
detections, heads."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from detector.modeling import box_head, mask_head, mask_targets, roi_heads
from tests.detector import helpers

_WEIGHTS = (10.0, 10.0, 5.0, 5.0)


def test_head_shapes():
    box = nnx.eval_shape(
        lambda: box_head.TwoFCHead(
            box_head.BoxHeadOptions("2fc", 8, 7, 32, 0, "none", 1),
            3,
            dtype=jnp.float32,
            rngs=nnx.Rngs(0),
        )
    )
    mask = nnx.eval_shape(
        lambda: mask_head.MaskHead(
            mask_head.MaskHeadOptions(8, 14, 16, 2, "group", 4, 28),
            3,
            dtype=jnp.float32,
            rngs=nnx.Rngs(0),
        )
    )

    def apply(module, x):
        graphdef, state = nnx.split(module)
        return jax.eval_shape(
            lambda s, x: nnx.merge(graphdef, s)(x),
            state,
            jax.ShapeDtypeStruct(x, jnp.float32),
        )

    logits, deltas = apply(box, (2, 5, 7, 7, 8))
    assert logits.shape == (2, 5, 4) and deltas.shape == (2, 5, 3, 4)
    assert apply(mask, (2, 5, 14, 14, 8)).shape == (2, 5, 28, 28, 3)


def test_deconv_scatters_each_pixel_into_its_2x2_window():
    layer = mask_head.Deconv2x(
        3, 4, dtype=jnp.float32, rngs=helpers.fast_init_rngs()
    )
    layer.bias[...] = jnp.arange(4.0)
    x = np.random.default_rng(0).normal(size=(2, 3, 5, 3))
    kernel = np.asarray(layer.kernel[...])
    # Transposed conv, stride 2, kernel 2 (PyTorch ConvTranspose2d form):
    # out[2i + a, 2j + b] = x[i, j] @ kernel[a, b] + bias.
    expected = np.zeros((2, 6, 10, 4)) + np.arange(4.0)
    for i in range(3):
        for j in range(5):
            for a in range(2):
                for b in range(2):
                    expected[:, 2 * i + a, 2 * j + b] += (
                        x[:, i, j] @ kernel[a, b]
                    )
    # Full f32 products: a GPU's default f32 matmul is TF32 (10-bit
    # mantissa); on CPU this changes nothing.
    with jax.default_matmul_precision("highest"):
        got = jax.jit(lambda x: layer(x))(x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _sample(proposals, proposal_valid, gt, classes, gt_valid, num_rois=8):
    fn = jax.jit(
        functools.partial(
            roi_heads.sample_rois,
            sampling=roi_heads.RoiSampling(
                num_rois=num_rois,
                fg_fraction=0.5,
                fg_iou=0.5,
                bg_iou_low=0.0,
                bg_iou_high=0.5,
                weights=_WEIGHTS,
            ),
        )
    )
    return jax.tree.map(
        np.asarray,
        fn(
            jnp.asarray(proposals, jnp.float32),
            jnp.asarray(proposal_valid),
            jnp.asarray(gt, jnp.float32),
            jnp.asarray(classes, jnp.int32),
            jnp.asarray(gt_valid),
            jax.random.key(0),
        ),
    )


def test_sample_rois_appends_gt_and_labels_classes():
    proposals = [
        [[0, 0, 10, 10], [40, 40, 60, 60], [1, 0, 11, 10], [0, 0, 0, 0]]
    ]
    valid = [[True, True, True, False]]
    gt = [[[0, 0, 10, 10], [0, 0, 0, 0]]]
    targets = _sample(proposals, valid, gt, [[2, 0]], [[True, False]])
    fg = targets.classes[0] > 0
    # Foreground: proposals 0 and 2 and the appended GT (capped at 4 = 8/2);
    # background: proposal 1 only. The invalid proposal and padded GT row
    # are never sampled.
    assert fg.sum() == 3 and targets.is_valid[0].sum() == 4
    assert (targets.classes[0][fg] == 2).all()
    assert fg[:3].all()  # foreground first
    exact = np.all(targets.rois[0] == [0, 0, 10, 10], axis=-1) & fg
    np.testing.assert_allclose(targets.box_targets[0][exact], 0.0, atol=1e-6)
    assert not np.any(
        np.all(targets.rois[0][targets.is_valid[0]] == 0, axis=-1)
    )


def test_sample_rois_without_gt_is_all_background():
    targets = _sample(
        [[[0, 0, 10, 10], [5, 5, 20, 20]]],
        [[True, True]],
        np.zeros((1, 2, 4)),
        [[0, 0]],
        [[False, False]],
    )
    assert targets.is_valid[0].sum() == 2
    assert (targets.classes[0] == 0).all()


def test_mask_targets_resample_the_gt_crop():
    size = 8
    gt_mask = np.zeros((size, size), np.uint8)
    gt_mask[:, : size // 2] = 1  # left half of the box is the object
    gt_boxes = jnp.array([[[10.0, 20.0, 30.0, 60.0]]])
    rois = jnp.array(
        [
            [
                [10.0, 20.0, 30.0, 60.0],  # the GT box itself
                [10.0, 20.0, 20.0, 60.0],  # its left half
                [20.0, 20.0, 30.0, 60.0],
            ]
        ]
    )  # its right half
    targets = jax.jit(
        functools.partial(
            mask_targets.crop_targets, mask_size=4, sampling_ratio=2
        )
    )(
        rois,
        jnp.zeros((1, 3), jnp.int32),
        gt_boxes,
        jnp.asarray(gt_mask[None, None]),
        None,
    )
    np.testing.assert_array_equal(targets[0, 0], [[1, 1, 0, 0]] * 4)
    np.testing.assert_array_equal(targets[0, 1], 1.0)
    np.testing.assert_array_equal(targets[0, 2], 0.0)


def test_mask_targets_are_zero_outside_the_gt_box():
    # GT 1: box 16x16 px at (16, 16), a 4x4 crop (one crop pixel = 4 px)
    # whose left half is the object. GT 0 (all ones) must not be read.
    masks = np.zeros((1, 2, 4, 4), np.uint8)
    masks[0, 0] = 1
    masks[0, 1, :, :2] = 1
    gt_boxes = jnp.array([[[0.0, 0.0, 64.0, 64.0], [16.0, 16.0, 32.0, 32.0]]])
    # The roi adds 2 crop pixels (8 px) on every side; one target pixel is
    # one image pixel, so the box spans target pixels 8..23.
    rois = jnp.array([[[8.0, 8.0, 40.0, 40.0]]])
    targets = np.asarray(
        jax.jit(
            functools.partial(
                mask_targets.crop_targets, mask_size=32, sampling_ratio=2
            )
        )(
            rois,
            jnp.ones((1, 1), jnp.int32),
            gt_boxes,
            jnp.asarray(masks),
            None,
        )[0, 0]
    )
    outside = np.ones((32, 32), bool)
    outside[8:24, 8:24] = False
    # Includes the band within half a crop pixel (2 px) of the box, where
    # the crop's edge value would otherwise be copied.
    assert targets[outside].max() == 0.0
    assert targets[:, 6:8].max() == 0.0 and targets[6:8, 8:16].max() == 0.0
    # At least one crop pixel inside the box: the mask, left half object.
    inner = targets[12:20, 12:20]
    np.testing.assert_array_equal(inner[:, :4], 1.0)
    np.testing.assert_array_equal(inner[:, 4:], 0.0)


def _detect(class_logits, deltas, proposals, valid, **kwargs):
    params = dict(
        weights=_WEIGHTS,
        score_threshold=0.3,
        pre_nms_top_k=6,
        max_detections=4,
        nms_iou=0.5,
        backend="while_loop",
    )
    params.update(kwargs)
    fn = jax.jit(
        functools.partial(
            roi_heads.detect,
            image_size=(64, 64),
            options=roi_heads.DetectionOptions(**params),
        )
    )
    return jax.tree.map(
        np.asarray,
        fn(
            jnp.asarray(class_logits, jnp.float32),
            jnp.asarray(deltas, jnp.float32),
            jnp.asarray(proposals, jnp.float32),
            jnp.asarray(valid),
        ),
    )


def test_detect_is_class_aware_thresholded_and_padded():
    big = 6.0
    # Rois 0 and 1 overlap (IoU 0.82) and both say class 1; roi 2 overlaps
    # them but says class 2, a little less sure than roi 0 (equal logits
    # would tie their scores, and the order of a tie follows the last bit
    # of each platform's softmax); roi 3 is confident but invalid.
    class_logits = [
        [[0, big, 0], [0, big - 1, 0], [0, 0, big - 0.5], [0, big, 0]]
    ]
    proposals = [
        [[0, 0, 20, 20], [1, 1, 21, 21], [0, 0, 20, 21], [40, 40, 60, 60]]
    ]
    out = _detect(
        class_logits,
        np.zeros((1, 4, 2, 4)),
        proposals,
        [[True, True, True, False]],
    )
    assert out.num_detections.tolist() == [2]
    np.testing.assert_array_equal(out.classes[0], [1, 2, 0, 0])
    np.testing.assert_allclose(
        out.boxes[0, :2], [[0, 0, 20, 20], [0, 0, 20, 21]]
    )
    assert out.scores[0, 0] > 0.9 and (out.scores[0, 2:] == 0).all()
    np.testing.assert_array_equal(out.boxes[0, 2:], 0.0)


def test_detect_applies_class_deltas_and_clips():
    deltas = np.zeros((1, 1, 2, 4))
    deltas[0, 0, 1] = [10.0 * 0.5, 0.0, 0.0, 0.0]  # class 2: +half a width
    out = _detect([[[0.0, 0.0, 8.0]]], deltas, [[[50, 0, 70, 20]]], [[True]])
    np.testing.assert_allclose(out.boxes[0, 0], [60, 0, 64, 20])
    assert out.classes[0, 0] == 2
