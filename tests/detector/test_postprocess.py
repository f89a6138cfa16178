"""detector/postprocess.py: mask pasting and COCO result dicts."""

import numpy as np
from pycocotools import mask as mask_utils

from detector import postprocess


def test_paste_full_mask_fills_exactly_the_box():
    masks = np.ones((1, 28, 28), np.float32)
    pasted = postprocess.paste_masks(masks, np.array([[2.0, 3.0, 7.0, 9.0]]),
                                     12, 10)
    expected = np.zeros((12, 10), bool)
    expected[3:9, 2:7] = True
    np.testing.assert_array_equal(pasted[0], expected)


def test_paste_keeps_mask_layout_and_clips_to_the_image():
    mask = np.zeros((28, 28), np.float32)
    mask[:, :14] = 1.0  # left half
    boxes = np.array([[0.0, 0.0, 8.0, 4.0], [6.0, 6.0, 14.0, 10.0]])
    pasted = postprocess.paste_masks(np.stack([mask, mask]), boxes, 8, 10)
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
        "boxes": np.array([[[10.0, 20.0, 50.0, 60.0], [0, 0, 0, 0]],
                           [[1.0, 1.0, 5.0, 5.0], [0, 0, 0, 0]]]),
        "scores": np.array([[0.9, 0.0], [0.8, 0.0]]),
        "classes": np.array([[2, 0], [1, 0]]),
        "masks": np.stack([full, full]),
        "num_detections": np.array([1, 1]),
    }
    batch = {"image_id": np.array([7, 0]),
             "orig_size": np.array([[25, 20], [0, 0]]),
             "scale": np.array([2.0, 1.0]),
             "image_valid": np.array([True, False])}
    results = postprocess.coco_results(predictions, batch, [11, 22],
                                       with_masks=True)
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
    boxes_only = postprocess.coco_results(predictions, batch, [11, 22],
                                          with_masks=False)
    assert "segmentation" not in boxes_only[0]
