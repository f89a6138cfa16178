"""The GT mask layouts a training example's masks take (data/gt_masks.py):
the canvas layout placed as the image is and bit-packed, its shape and
bytes in the config. torchvision's own resize of the masks is compared in
test_gt_masks_torchvision.py."""

import numpy as np
import pytest
import tensorflow as tf

from configs import coco_r50_fpn
from detector.config import data as data_config
from detector.data import gt_masks, lsj, transforms
from tests.detector.data import test_transforms as geometry

CANVAS = gt_masks.GtMasks("canvas", True)


def _nearest(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The module docstring's nearest rule: pixel i reads min(floor(i *
    (n / n')), n - 1), in float32."""
    index = []
    for source, resized in zip(mask.shape, size, strict=True):
        scale = np.float32(source) / np.float32(resized)
        rows = np.floor(np.arange(resized, dtype=np.float32) * scale)
        index.append(np.minimum(rows.astype(int), source - 1))
    return mask[np.ix_(*index)]


def _unpacked(out: dict, width: int) -> np.ndarray:
    return np.unpackbits(out["masks"].numpy(), axis=-1)[..., :width]


def _canvas_of(masks: np.ndarray, size, canvas) -> np.ndarray:
    placed = np.zeros((len(masks), *canvas), np.uint8)
    for i, mask in enumerate(masks):
        placed[i, : size[0], : size[1]] = _nearest(mask, size)
    return placed


@pytest.mark.parametrize("flip", [False, True])
def test_canvas_masks_are_resized_placed_and_packed(flip: bool):
    data = geometry._data(flip, (1.0, 1.0))  # 40 x 60 -> 53 x 80 on 64 x 80
    example = geometry._example()
    masks = example["masks"].numpy()
    for seed in range(16):
        out = transforms.transform(
            example, tf.constant([seed, 1], tf.int64), data, True, CANVAS
        )
        flipped = out["boxes"].numpy()[0, 0] > 40  # the disc is at x 14
        if flipped == flip:
            break
    assert flipped == flip
    size = tuple(out["image_size"].numpy())
    assert size == (53, 80)
    assert out["masks"].shape == (4, 64, 10)
    source = masks[:, :, ::-1] if flip else masks
    expected = _canvas_of(source, size, (64, 80))
    got = _unpacked(out, 80)
    np.testing.assert_array_equal(got[:3], expected)
    np.testing.assert_array_equal(got[3], 0)  # the padding row
    assert out["mask_valid"].numpy().tolist() == [True, True, True, False]


def test_crop_layout_is_unchanged_by_the_canvas_layout():
    data = geometry._data(False, (1.0, 1.0))
    key = tf.constant([0, 1], tf.int64)
    crop = transforms.transform(
        geometry._example(), key, data, True, geometry.CROP
    )
    canvas = transforms.transform(geometry._example(), key, data, True, CANVAS)
    assert crop["masks"].shape == (4, geometry.S, geometry.S)
    for name in ("image", "boxes", "classes", "valid", "mask_valid"):
        np.testing.assert_array_equal(crop[name], canvas[name])


def test_without_source_masks_the_canvas_masks_are_zero():
    data = geometry._data(False, (1.0, 1.0))
    example = dict(geometry._example())
    del example["masks"]
    out = transforms.transform(
        example,
        tf.constant([0, 1], tf.int64),
        data,
        True,
        gt_masks.GtMasks("canvas", False),
    )
    assert out["masks"].shape == (4, 64, 10)
    assert not out["masks"].numpy().any()
    assert not out["mask_valid"].numpy().any()


def test_lsj_crops_the_canvas_masks_with_the_image():
    """Scaled 2x and cropped: every kept mask is non-empty and lies in its
    box (recomputed from the cropped masks), within the nearest rule's
    pixel."""
    data = geometry._data(False, (1.0, 1.0))
    data.lsj_min, data.lsj_max, data.lsj_min_box_size = 2.0, 2.0, 1.0
    out = lsj.transform(
        geometry._example(), tf.constant([5, 1], tf.int64), data, CANVAS
    )
    got = _unpacked(out, 80)
    valid = out["valid"].numpy()
    assert valid.sum() >= 1
    for mask, box in zip(got[valid], out["boxes"].numpy()[valid], strict=True):
        ys, xs = np.nonzero(mask)
        assert len(ys)
        x1, y1, x2, y2 = box
        assert xs.min() >= x1 - 1 and xs.max() + 1 <= x2 + 1
        assert ys.min() >= y1 - 1 and ys.max() + 1 <= y2 + 1


def test_pack_bits_is_numpys_packbits():
    bits = np.random.default_rng(0).integers(0, 2, (3, 5, 24), np.uint8)
    np.testing.assert_array_equal(
        gt_masks.pack_bits(tf.constant(bits)).numpy(),
        np.packbits(bits, axis=-1),
    )


def test_the_config_sizes_each_layout():
    config = coco_r50_fpn.get_config("torchvision")
    data = config.data
    assert data_config.mask_layout(config) == "canvas"
    assert data_config.gt_masks_shape("canvas", data) == (100, 1344, 168)
    assert data_config.gt_masks_shape("canvas", data, (800, 1340)) == (
        100,
        800,
        168,
    )
    assert data_config.gt_masks_shape("crop", data) == (100, 112, 112)
    config.model.loss.mask_target = "crop"
    assert data_config.mask_layout(config) == "crop"
    sizes = {
        key: size
        for key, (size, _) in data_config.largest_tensors(
            coco_r50_fpn.get_config("torchvision")
        ).items()
    }
    batch = config.train.batch_size
    assert sizes["data.max_instances"] == batch * 100 * 1344 * 168


def test_every_mask_target_rule_has_a_layout():
    from detector.modeling import mask_targets

    assert set(data_config.MASK_LAYOUTS) == set(mask_targets.RULES)
    assert set(data_config.MASK_LAYOUTS.values()) == set(gt_masks.LAYOUTS)
