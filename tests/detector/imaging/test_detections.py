"""detector/imaging/detections.py (the one host formatter), the map back
to original pixels of detector/inference/detect.py, and mask pasting."""

import jax.numpy as jnp
import numpy as np
import pytest

# The RLE is checked by decoding it with pycocotools.
mask_utils = pytest.importorskip("pycocotools.mask")

from detector.imaging import detections, images
from detector.imaging import masks as mask_paste
from detector.inference import detect


def test_paste_full_mask_fills_exactly_the_box():
    masks = np.ones((1, 28, 28), np.float32)
    pasted = mask_paste.centres_crops(
        masks, np.array([[2.0, 3.0, 7.0, 9.0]]), 12, 10
    ).full()
    expected = np.zeros((12, 10), bool)
    expected[3:9, 2:7] = True
    np.testing.assert_array_equal(pasted[0], expected)


def test_paste_keeps_mask_layout_and_clips_to_the_image():
    mask = np.zeros((28, 28), np.float32)
    mask[:, :14] = 1.0  # left half
    boxes = np.array([[0.0, 0.0, 8.0, 4.0], [6.0, 6.0, 14.0, 10.0]])
    pasted = mask_paste.centres_crops(
        np.stack([mask, mask]), boxes, 8, 10
    ).full()
    np.testing.assert_array_equal(pasted[0, :4, :4], True)
    np.testing.assert_array_equal(pasted[0, :4, 4:], False)
    np.testing.assert_array_equal(pasted[0, 4:], False)
    # Second box runs off the right and bottom edges: only its left half
    # (x in [6, 10)) shows, rows 6 and 7.
    np.testing.assert_array_equal(pasted[1, 6:8, 6:10], True)
    assert pasted[1].sum() == 8


def _outputs() -> dict[str, np.ndarray]:
    return {
        "boxes": np.array([[[5.0, 10.0, 20.0, 25.0], [0, 0, 0, 0]]]),
        "scores": np.array([[0.9, 0.0]], np.float32),
        "category_ids": np.array([[22, 0]], np.int32),
        "masks": np.ones((1, 2, 28, 28), np.float32),
        "num_valid": np.array([1], np.int32),
    }


def test_image_results_are_coco_results_of_the_valid_slots():
    (result,), pasted = detections.image_results(_outputs(), 0, 25, 20)
    assert list(result) == ["bbox", "score", "category_id", "segmentation"]
    assert result["category_id"] == 22
    np.testing.assert_allclose(result["bbox"], [5.0, 10.0, 15.0, 15.0])
    assert result["score"] == pytest.approx(0.9)
    assert isinstance(result["segmentation"]["counts"], str)
    decoded = mask_utils.decode(result["segmentation"])
    assert decoded.shape == (25, 20)
    assert decoded.sum() == 15 * 15 and decoded[10:25, 5:20].all()
    np.testing.assert_array_equal(pasted.full()[0], decoded.astype(bool))


def test_image_results_without_masks_paste_nothing():
    (result,), pasted = detections.image_results(_outputs(), 0, 25, 20, None)
    assert pasted is None and "segmentation" not in result


def test_boxes_map_back_with_the_rounded_resize():
    """A 5 x 47 image resizes to 9 x 80 (not 8.51 x 80): y maps by 5 / 9."""
    rule = images.Resize("letterbox")
    resized = images.fitted_size((5, 47), rule, (64, 80))
    assert resized == (9, 80)
    boxes = jnp.asarray([[[3.0 * 80 / 47, 9 / 5, 40.0 * 80 / 47, 9.0]]])
    back = detect.to_original(
        boxes, jnp.asarray([resized]), jnp.asarray([[5, 47]])
    )
    np.testing.assert_allclose(back[0, 0], [3.0, 1.0, 40.0, 5.0], rtol=1e-6)


def test_boxes_in_the_padding_never_become_detections():
    """A 60 x 40 image on a 64 x 64 canvas: boxes below row 40 clip flat."""
    outputs = {
        "boxes": jnp.asarray(
            [
                [
                    [10.0, 41.0, 30.0, 63.0],  # in the bottom padding
                    [61.0, 5.0, 63.0, 20.0],  # in the right padding
                    [10.0, 30.0, 30.0, 50.0],  # half in the image
                ]
            ]
        ),
        "scores": jnp.asarray([[0.9, 0.8, 0.7]]),
        "num_valid": jnp.asarray([3], jnp.int32),
    }
    sizes = jnp.asarray([[40, 60]], jnp.int32)
    outputs["boxes"] = detect.to_original(outputs["boxes"], sizes, sizes)
    kept = detect.drop_empty(outputs)
    assert int(kept["num_valid"][0]) == 1
    assert float(kept["scores"][0, 0]) == pytest.approx(0.7)
    np.testing.assert_allclose(kept["boxes"][0, 0], [10, 30, 30, 40])
