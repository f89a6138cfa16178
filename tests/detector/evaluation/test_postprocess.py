"""detector/evaluation/postprocess.py and detector/imaging/masks.py: mask
pasting and COCO result dicts."""

import numpy as np
import pytest

# Host post-processing encodes with pycocotools; the pipeline check uses tf.
mask_utils = pytest.importorskip("pycocotools.mask")
tf = pytest.importorskip("tensorflow")

from configs import shapes as shapes_config
from detector.data import gt_masks, transforms
from detector.evaluation import postprocess
from detector.imaging import masks as mask_paste


def test_paste_full_mask_fills_exactly_the_box():
    masks = np.ones((1, 28, 28), np.float32)
    pasted = mask_paste.paste_masks(
        masks, np.array([[2.0, 3.0, 7.0, 9.0]]), 12, 10
    )
    expected = np.zeros((12, 10), bool)
    expected[3:9, 2:7] = True
    np.testing.assert_array_equal(pasted[0], expected)


def test_paste_keeps_mask_layout_and_clips_to_the_image():
    mask = np.zeros((28, 28), np.float32)
    mask[:, :14] = 1.0  # left half
    boxes = np.array([[0.0, 0.0, 8.0, 4.0], [6.0, 6.0, 14.0, 10.0]])
    pasted = mask_paste.paste_masks(np.stack([mask, mask]), boxes, 8, 10)
    np.testing.assert_array_equal(pasted[0, :4, :4], True)
    np.testing.assert_array_equal(pasted[0, :4, 4:], False)
    np.testing.assert_array_equal(pasted[0, 4:], False)
    # Second box runs off the right and bottom edges: only its left half
    # (x in [6, 10)) shows, rows 6 and 7.
    np.testing.assert_array_equal(pasted[1, 6:8, 6:10], True)
    assert pasted[1].sum() == 8


def test_coco_results_undo_scale_skip_padding_and_encode_masks():
    full = np.ones((2, 28, 28), np.float32)
    predictions = {
        "boxes": np.array(
            [
                [[10.0, 20.0, 50.0, 60.0], [0, 0, 0, 0]],
                [[1.0, 1.0, 5.0, 5.0], [0, 0, 0, 0]],
            ]
        ),
        "scores": np.array([[0.9, 0.0], [0.8, 0.0]]),
        "classes": np.array([[2, 0], [1, 0]]),
        "masks": np.stack([full, full]),
        "num_detections": np.array([1, 1]),
    }
    batch = {
        "image_id": np.array([7, 0]),
        "orig_size": np.array([[25, 20], [0, 0]]),
        "scale": np.array([2.0, 1.0]),
        "image_size": np.array([[50, 40], [0, 0]]),
        "image_valid": np.array([True, False]),
    }
    results = postprocess.coco_results(
        predictions, batch, [11, 22], with_masks=True
    )
    assert len(results) == 1
    result = results[0]
    assert result["image_id"] == 7 and result["category_id"] == 22
    # Input box (10, 20, 50, 60) / 2 = (5, 10, 25, 30), clipped to 20 x 25.
    np.testing.assert_allclose(result["bbox"], [5.0, 10.0, 15.0, 15.0])
    assert result["score"] == 0.9
    assert isinstance(result["segmentation"]["counts"], str)
    decoded = mask_utils.decode(result["segmentation"])
    assert decoded.shape == (25, 20)
    assert decoded.sum() == 15 * 15 and decoded[10:25, 5:20].all()
    boxes_only = postprocess.coco_results(
        predictions, batch, [11, 22], with_masks=False
    )
    assert "segmentation" not in boxes_only[0]


def test_boxes_map_back_with_the_pipeline_rounded_resize():
    """A 5 x 47 image resizes to 9 x 80 (not 8.51 x 80): y maps by 9 / 5."""
    data = shapes_config.get_config().data
    data.image_size = (64, 80)
    data.hflip = False
    data.scale_jitter = (1.0, 1.0)
    original = np.array([[3.0, 1.0, 40.0, 5.0]], np.float32)  # x1 y1 x2 y2
    example = {
        "image": tf.zeros([5, 47, 3], tf.uint8),
        "image_id": tf.constant(3, tf.int64),
        "boxes": tf.constant(original),
        "classes": tf.constant([1], tf.int32),
    }
    train = transforms.transform(
        example,
        tf.constant([0, 0], tf.int64),
        data,
        True,
        gt_masks.GtMasks("crop", False),
    )
    batch = {
        key: value.numpy()[None]
        for key, value in transforms.transform(
            example, None, data, False, None
        ).items()
    }
    scale = float(batch["scale"][0])
    np.testing.assert_allclose(
        postprocess.resize_factors([5, 47], batch["image_size"][0]),
        [9 / 5, 80 / 47],
    )
    predictions = {
        "boxes": train["boxes"].numpy()[None, :1],
        "scores": np.array([[0.5]]),
        "classes": np.array([[1]]),
        "masks": np.zeros((1, 1, 28, 28), np.float32),
        "num_detections": np.array([1]),
    }
    (result,) = postprocess.coco_results(
        predictions, batch, [1], with_masks=False
    )
    np.testing.assert_allclose(result["bbox"], [3.0, 1.0, 37.0, 4.0], atol=1e-5)
    # Dividing by the unrounded scale would miss the bottom edge.
    assert abs(train["boxes"].numpy()[0, 3] / scale - 5.0) > 0.2


def test_boxes_in_the_padding_never_become_detections():
    """A 60 x 40 image padded to 64 x 64: boxes below row 40 clip flat."""
    full = np.ones((3, 28, 28), np.float32)
    predictions = {
        "boxes": np.array(
            [
                [
                    [10.0, 41.0, 30.0, 63.0],  # in the bottom padding
                    [61.0, 5.0, 63.0, 20.0],  # in the right padding
                    [10.0, 30.0, 30.0, 50.0],  # half in the image
                ]
            ]
        ),
        "scores": np.array([[0.9, 0.8, 0.7]]),
        "classes": np.array([[1, 1, 1]]),
        "masks": full[None],
        "num_detections": np.array([3]),
    }
    batch = {
        "image_id": np.array([4]),
        "orig_size": np.array([[40, 60]]),
        "scale": np.array([1.0]),
        "image_size": np.array([[40, 60]]),
        "image_valid": np.array([True]),
    }
    for with_masks in (False, True):
        results = postprocess.coco_results(
            predictions, batch, [5], with_masks=with_masks
        )
        assert [r["score"] for r in results] == [0.7]
        np.testing.assert_allclose(results[0]["bbox"], [10, 30, 20, 10])
