"""Mask pasting and COCO RLE: the uncompressed RLE (no pycocotools)
decodes to the mask it encodes, and the crop-based pasting and encoding
equal the float64 reference bit for bit."""

import numpy as np
import pytest

from detector.imaging import masks, rle
from tests.detector.imaging import reference_masks


@pytest.mark.parametrize("first", [False, True])
def test_uncompressed_rle_round_trips_through_pycocotools(first):
    mask_utils = pytest.importorskip("pycocotools.mask")
    mask = np.random.default_rng(int(first)).random((7, 5)) > 0.5
    mask[0, 0] = first
    rle = masks.uncompressed_rle(mask)
    assert rle["size"] == [7, 5] and sum(rle["counts"]) == 35
    assert (rle["counts"][0] == 0) == first
    decoded = mask_utils.decode(mask_utils.frPyObjects(rle, 7, 5))
    np.testing.assert_array_equal(decoded, mask)
    compressed = masks.encode_rle(mask)
    np.testing.assert_array_equal(mask_utils.decode(compressed), mask)


# The crop-based pasting and RLE against the float64, one-box-at-a-time
# implementation they replace (reference_masks.py): equal bit for bit.
_PASTERS = (
    (masks.centres_crops, reference_masks.paste_masks),
    (masks.torchvision_crops, reference_masks.paste_masks_torchvision),
)


def _random_boxes(rng, count, height, width):
    """Boxes of every kind: sub-pixel to larger than the image, over the
    edges, 0-area (x1 == x2 or y1 == y2) and reversed."""
    corner = rng.uniform(-0.3, 1.1, (count, 2)) * [width, height]
    side = rng.choice([0.0, 0.3, 0.8, 2.0, 9.0, 40.0, 150.0], (count, 1))
    size = side * rng.uniform(0.2, 1.5, (count, 2))
    boxes = np.concatenate([corner, corner + size], axis=1)
    boxes[::7, 2] = boxes[::7, 0]  # 0 wide
    boxes[3::7, 3] = boxes[3::7, 1]  # 0 tall
    boxes[5::11, [0, 2]] = boxes[5::11, [2, 0]]  # reversed
    boxes[6::9, [1, 3]] = [-2.5, height + 3.0]  # the image's whole height
    return boxes


def _random_masks(rng, count, kind):
    size = 28
    if kind == "uniform":
        return rng.random((count, size, size)).astype(np.float32)
    if kind == "binary":  # 0 and 1: values of exactly 0.5 between them
        return (rng.random((count, size, size)) > 0.5).astype(np.float32)
    if kind == "half":  # every value near 0.5: the float64 paths
        return np.full((count, size, size), 0.5, np.float32)
    grid = np.linspace(-1.0, 1.0, size)  # smooth, as a model's
    logits = 4.0 * (0.6 - np.hypot(grid[:, None], grid[None]))
    noise = rng.normal(0.0, 1.0, (count, size, size))
    return (1.0 / (1.0 + np.exp(-(logits + noise)))).astype(np.float32)


@pytest.mark.parametrize("kind", ["uniform", "binary", "half", "smooth"])
@pytest.mark.parametrize("rule", [0, 1], ids=["centres", "torchvision"])
def test_crop_pasting_equals_the_float64_reference(kind, rule):
    new, old = _PASTERS[rule]
    rng = np.random.default_rng([rule, len(kind)])
    for height, width in ((48, 64), (37, 5), (1, 1)):
        boxes = _random_boxes(rng, 60, height, width)
        mask_values = _random_masks(rng, 60, kind)
        pasted = new(mask_values, boxes, height, width)
        want = old(mask_values, boxes, height, width)
        np.testing.assert_array_equal(pasted.full(), want)
        # float64 masks and boxes read as they are
        np.testing.assert_array_equal(
            new(mask_values.astype(np.float64), boxes, height, width).full(),
            want,
        )
        for d in range(len(pasted)):
            top, bottom, left, right = pasted.spans[d]
            assert not want[d, :top].any() and not want[d, bottom:].any()
            assert not want[d, :, :left].any()
            assert not want[d, :, right:].any()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN boxes, as before
@pytest.mark.parametrize("rule", [0, 1], ids=["centres", "torchvision"])
def test_crop_pasting_of_odd_inputs_equals_the_reference(rule):
    new, old = _PASTERS[rule]
    mask_values = np.random.default_rng(3).random((4, 28, 28))
    mask_values = mask_values.astype(np.float32)
    boxes = np.array(
        [
            [2.0, 3.0, np.inf, 9.0],  # stretched to the image's edge
            [1.0, -np.inf, 4.0, 5.0],
            [np.nan, 1.0, 4.0, 5.0],
            [1.0, 1.0, 1e-9 + 1.0, 7.0],  # far below a pixel
            [-1500.0, -1500.0, 1500.0, 1500.0],  # far larger than the image
        ]
    )
    for box in boxes:
        try:
            want = old(mask_values[:1], box[None], 20, 30)
        except (ValueError, IndexError) as e:  # fails as the reference does
            with pytest.raises(type(e)):
                new(mask_values[:1], box[None], 20, 30)
        else:
            got = new(mask_values[:1], box[None], 20, 30).full()
            np.testing.assert_array_equal(got, want)
    with_nan = mask_values.copy()
    with_nan[1, 3, 4] = np.nan
    finite_boxes = np.array([[1.0, 1.0, 9.0, 9.0]] * 4)
    np.testing.assert_array_equal(
        new(with_nan, finite_boxes, 12, 12).full(),
        old(with_nan, finite_boxes, 12, 12),
    )
    empty = new(np.zeros((0, 28, 28), np.float32), np.zeros((0, 4)), 5, 6)
    assert empty.full().shape == (0, 5, 6) and rle.encode(empty) == []


@pytest.mark.parametrize("compressed", [True, False])
def test_rle_from_crops_equals_the_full_mask_encoding(compressed, monkeypatch):
    if compressed:
        pytest.importorskip("pycocotools.mask")
        encode = reference_masks.encode_rle
    else:
        monkeypatch.setattr(rle, "_coco_mask", None)
        encode = reference_masks.uncompressed_rle
    rng = np.random.default_rng(7)
    for height, width in ((48, 64), (9, 3), (1, 1)):
        boxes = _random_boxes(rng, 50, height, width)
        boxes[:5] = [0.0, 0.0, width, height]  # the whole image
        mask_values = _random_masks(rng, 50, "binary")
        mask_values[0] = 1.0  # every pixel: no boundary but the image's end
        for new, _ in _PASTERS:
            pasted = new(mask_values, boxes, height, width)
            got = rle.encode(pasted)
            assert got == [encode(mask) for mask in pasted.full()]
