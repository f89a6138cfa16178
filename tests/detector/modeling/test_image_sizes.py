"""Each image's own size on a shared canvas: anchors past it (rounded up
to the stride) take no part, proposals and detections clip to it, and
boxes left empty are never detections."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import shapes
from detector import factory
from detector.inference import detect
from detector.modeling import anchors as anchors_lib
from detector.modeling import extents, roi_heads, rpn

_WEIGHTS = (1.0, 1.0, 1.0, 1.0)
CANVAS = (128, 128)


def test_cell_origins_follow_the_anchor_order():
    spec = anchors_lib.AnchorSpec(3, 4, 2.0, (0.5, 1.0, 2.0))
    anchors = spec.pyramid(CANVAS)
    origins = spec.cell_origins(CANVAS)
    for level, (boxes, cells) in enumerate(
        zip(anchors, origins, strict=True), start=3
    ):
        assert cells.shape == (len(boxes), 2)
        centres = (boxes[:, :2] + boxes[:, 2:]) / 2  # x, y at cell centres
        np.testing.assert_array_equal(
            cells, np.floor(centres[:, ::-1] / 2**level) * 2**level
        )


def test_extents_round_up_to_the_divisor():
    sizes = jnp.asarray([[800, 1066], [33, 32], [1, 1]])
    np.testing.assert_array_equal(
        rpn.padded_extents(sizes, 32), [[800, 1088], [64, 32], [32, 32]]
    )


def _proposals(logits, image_sizes, spec):
    anchors = spec.pyramid(CANVAS)
    return jax.jit(
        functools.partial(
            rpn.generate_proposals,
            options=rpn.ProposalOptions(
                50, 20, 0.7, 0.0, _WEIGHTS, "while_loop"
            ),
            image_size=CANVAS,
            cell_origins=spec.cell_origins(CANVAS),
            size_divisor=32,
        )
    )(
        logits,
        [jnp.zeros((logits[0].shape[0], len(a), 4)) for a in anchors],
        anchors,
        image_sizes=image_sizes,
    )


def test_anchors_past_the_padded_image_take_no_part():
    """An image 40 x 70 (padded extent 64 x 96): the anchors scored highest
    lie past it, yet every proposal comes from inside, clipped to 40 x 70;
    the canvas-sized image keeps them."""
    spec = anchors_lib.AnchorSpec(3, 3, 4.0, (1.0,))
    (anchors,) = spec.pyramid(CANVAS)
    (cells,) = spec.cell_origins(CANVAS)
    outside = (cells[:, 0] >= 64) | (cells[:, 1] >= 96)
    score = np.where(outside, 10.0, 0.0) + np.linspace(0, 1, len(anchors))
    logits = [jnp.asarray(np.stack([score, score]), jnp.float32)]
    sizes = jnp.asarray([[40, 70], list(CANVAS)], jnp.int32)
    boxes, valid = jax.tree.map(np.asarray, _proposals(logits, sizes, spec))
    first = boxes[0][valid[0]]
    assert len(first) > 0
    assert (first[:, 2] <= 70).all() and (first[:, 3] <= 40).all()
    assert (first[:, 2] > first[:, 0]).all() and (
        first[:, 3] > first[:, 1]
    ).all()
    # Where the anchors past the extent are allowed, they win.
    second = boxes[1][valid[1]]
    assert (second[:, 2] > 96).any() or (second[:, 3] > 64).any()


def test_detections_clip_to_each_image_and_drop_empty_boxes():
    """Two images on a 64 x 64 canvas, 30 x 20 (h x w) and 64 x 64: a box
    in the first's padding is no detection, one across its edge clips."""
    boxes = [[15, 5, 40, 15], [5, 35, 15, 50], [2, 2, 10, 10]]
    proposals = jnp.asarray([boxes, boxes], jnp.float32)
    logits = jnp.asarray(
        [[[0.0, 6.0, 0.0], [0.0, 5.0, 0.0], [0.0, 4.0, 0.0]]] * 2,
        jnp.float32,
    )
    out = jax.jit(
        functools.partial(
            roi_heads.detect,
            image_size=(64, 64),
            options=roi_heads.DetectionOptions(
                _WEIGHTS, 0.3, 6, 4, 0.5, "while_loop"
            ),
        )
    )(
        logits,
        jnp.zeros((2, 3, 2, 4)),
        proposals,
        jnp.ones((2, 3), bool),
        image_sizes=jnp.asarray([[30, 20], [64, 64]]),
    )
    out = jax.tree.map(np.asarray, out)
    assert out.num_detections.tolist() == [2, 3]
    np.testing.assert_allclose(
        out.boxes[0, :2], [[15, 5, 20, 15], [2, 2, 10, 10]]
    )
    np.testing.assert_allclose(out.boxes[1, :3], boxes)


def test_serving_drops_boxes_empty_in_original_pixels():
    """Slots 0 and 2 are empty boxes: the rest move up, in order."""
    outputs = {
        "boxes": jnp.asarray(
            [
                [
                    [5, 5, 5, 9],
                    [1, 1, 4, 4],
                    [2, 7, 6, 7],
                    [0, 0, 3, 2],
                    [0, 0, 9, 9],
                ]
            ],
            jnp.float32,
        ),
        "scores": jnp.asarray([[0.9, 0.8, 0.7, 0.6, 0.5]]),
        "category_ids": jnp.asarray([[1, 2, 3, 4, 5]]),
        "masks": jnp.arange(5.0).reshape(1, 5, 1, 1),
        "num_valid": jnp.asarray([4]),  # slot 4 is past the detections
    }
    out = jax.tree.map(np.asarray, jax.jit(detect.drop_empty)(outputs))
    assert out["num_valid"].tolist() == [2]
    np.testing.assert_array_equal(
        out["boxes"][0], [[1, 1, 4, 4], [0, 0, 3, 2]] + [[0] * 4] * 3
    )
    np.testing.assert_allclose(out["scores"][0], [0.8, 0.6, 0, 0, 0])
    assert out["category_ids"][0].tolist() == [2, 4, 0, 0, 0]
    assert out["masks"][0, :, 0, 0].tolist() == [1, 3, 0, 0, 0]


def test_masked_zeroes_past_the_extent_at_each_stride():
    x = jnp.ones((2, 8, 16, 3))  # stride 4 of a 32 x 64 canvas
    padded = jnp.asarray([[12, 40], [32, 64]])
    assert extents.masked(x) is x  # outside a block: unchanged
    with extents.zero_outside(padded, (32, 64)):
        out = np.asarray(extents.masked(x))
    assert out[0, :3, :10].all() and not out[0, 3:].any()
    assert not out[0, :, 10:].any() and out[1].all()


@pytest.mark.slow
def test_an_image_predicts_alike_on_any_larger_canvas():
    """A 64 x 96 image alone (its size a multiple of the backbone's stride
    32: its own extent, so ROIAlign clamps at its last row and column) and
    on a 128 x 192 canvas with its size given: the same detections, to
    float32 error on CPU. (Frozen BatchNorm, as torchvision's weights: a
    GroupNorm's statistics span the whole canvas.)"""
    config = shapes.get_config()
    config.model.norm = "frozen_batch"
    config.model.detection.score_threshold = 0.0
    model = factory.build_model(config, rngs=nnx.Rngs(0))
    model.eval()
    rng = np.random.default_rng(0)
    picture = rng.normal(size=(64, 96, 3)).astype(np.float32)

    def predict(canvas):
        images = np.zeros((1, *canvas, 3), np.float32)
        images[0, :64, :96] = picture
        return jax.device_get(
            nnx.jit(lambda m, x, s: m.predict(x, s))(
                model, jnp.asarray(images), jnp.asarray([[64, 96]])
            )
        )

    alone, placed = predict((64, 96)), predict((128, 192))
    count = int(alone["num_detections"][0])
    assert count == int(placed["num_detections"][0]) > 0
    np.testing.assert_allclose(
        placed["boxes"][0, :count], alone["boxes"][0, :count], atol=1e-3
    )
    np.testing.assert_allclose(
        placed["scores"][0, :count], alone["scores"][0, :count], atol=1e-5
    )
    boxes = placed["boxes"][0, :count]
    assert (boxes[:, 2] <= 96).all() and (boxes[:, 3] <= 64).all()
    assert (boxes[:, 2] == 96).any() and (boxes[:, 3] == 64).any()
