"""data/lsj.py: large-scale jitter keeps boxes and masks consistent."""

import ml_collections
import numpy as np
import pytest
import tensorflow as tf

from detector.config import data as data_config
from detector.data import augment, lsj, transforms
from tests.detector.data import test_transforms as geometry
from tests.detector.data.test_transforms import CROP

H, W = 64, 80


def _data(**overrides) -> ml_collections.ConfigDict:
    data = geometry._data(True, (1.0, 1.0))
    data.image_size = (H, W)
    data.augment = "lsj"
    data.lsj_min, data.lsj_max = 0.1, 2.0
    data.lsj_min_box_size = 1.0
    data.update(overrides)
    return data


def _example() -> dict:
    """geometry's disc and rectangle, and a diagonal band (a box much
    larger than its mask wherever a crop cuts it)."""
    example = geometry._example()
    ys, xs = np.mgrid[0:40, 0:60] + 0.5
    band = np.abs((xs - 5) - 1.2 * ys) < 3
    masks = example["masks"].numpy()
    masks[2] = band
    example["masks"] = tf.constant(masks)
    return example


def _rendered_box(mask, resized, offset, flip, data):
    """The mask drawn through the image path (bilinear, > 0.5): its tight
    box in input pixels, or None where nothing is visible."""
    image = tf.repeat(tf.constant(mask[..., None] * 255, tf.uint8), 3, -1)
    drawn = transforms.place_image(image, resized, offset, flip, data)
    ys, xs = np.nonzero(drawn.numpy()[..., 0] > 127.5)
    if not len(xs):
        return None
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], float)


@pytest.mark.parametrize("seed", range(12))
def test_boxes_are_the_masks_tight_boxes_after_the_crop(seed):
    data, example = _data(), _example()
    key = tf.constant([seed, 7], tf.int64)
    out = lsj.transform(example, key, data, masks=CROP)
    hw = tf.constant([40.0, 60.0])
    flip, _, resized, offset = lsj.sample_geometry(hw, key, data)
    factor = float(np.max(resized.numpy() / hw.numpy()))
    resized = tf.cast(resized, tf.int32)
    kept = {
        int(c): box
        for c, box, v in zip(
            out["classes"].numpy(),
            out["boxes"].numpy(),
            out["valid"].numpy(),
            strict=True,
        )
        if v
    }
    for index, mask in enumerate(example["masks"].numpy()):
        want = _rendered_box(mask, resized, offset, flip, data)
        cls = index + 1
        if want is None or min(want[2:] - want[:2]) < 2:
            assert cls not in kept or min(kept[cls][2:] - kept[cls][:2]) < 3
            continue
        assert cls in kept, (seed, cls)
        # To the pixel (of the coarser image: an original pixel spans
        # `factor` input pixels): bilinear drawing vs the pixels' box.
        np.testing.assert_allclose(
            kept[cls], want, atol=max(1.0, factor), err_msg=cls
        )
    # Each kept instance's S x S mask crop fills its box edge to edge.
    for crop, valid in zip(
        out["masks"].numpy(), out["valid"].numpy(), strict=True
    ):
        if valid:
            assert crop[0].any() or crop[1].any()
            assert crop[-1].any() or crop[-2].any()
            assert crop[:, 0].any() or crop[:, 1].any()
            assert crop[:, -1].any() or crop[:, -2].any()


@pytest.mark.parametrize(
    "resize",
    [
        {},
        # The eval rule of the LSJ config; training scales by LSJ alone.
        {"resize": "shortest_edge", "min_size": (32,), "max_size": 50},
    ],
)
def test_scales_span_the_lsj_range_and_the_input_is_fixed(resize):
    data, example = _data(**resize), _example()
    hw = tf.constant([40.0, 60.0])
    base = min(H / 40, W / 60)
    scales = [
        float(lsj.sample_geometry(hw, tf.constant([s, 1], tf.int64), data)[1])
        / base
        for s in range(200)
    ]
    assert 0.1 <= min(scales) < 0.2 and 1.9 < max(scales) <= 2.0
    out = lsj.transform(example, tf.constant([3, 1], tf.int64), data, CROP)
    assert out["image"].shape == (H, W, 3)
    assert out["masks"].shape == (4, geometry.S, geometry.S)


@pytest.mark.parametrize("seed", range(6))
def test_gives_the_jitter_paths_keys_and_the_visible_image_size(seed):
    data, example = _data(), _example()
    key = tf.constant([seed, 3], tf.int64)
    out = lsj.transform(example, key, data, masks=CROP)
    jitter = transforms.transform(example, key, data, True, CROP)
    assert set(out) == set(jitter)
    _, _, resized, offset = lsj.sample_geometry(
        tf.constant([40.0, 60.0]), key, data
    )
    visible = np.minimum(resized.numpy().astype(int) - offset.numpy(), (H, W))
    np.testing.assert_array_equal(out["image_size"].numpy(), visible)
    # Past the visible size the input is padding.
    image = out["image"].numpy()
    assert not image[visible[0] :].any() and not image[:, visible[1] :].any()


def test_an_example_left_without_instances_has_none_valid():
    data = _data(lsj_min_box_size=1000.0)
    out = lsj.transform(_example(), tf.constant([0, 1], tf.int64), data, CROP)
    assert not out["valid"].numpy().any()
    assert not out["mask_valid"].numpy().any()


def test_the_augment_registry_names_lsj_and_bad_values_are_one_line():
    assert augment.AUGMENTS["lsj"] is lsj.transform
    # config/data.py names them without importing TensorFlow.
    assert tuple(augment.AUGMENTS) == data_config.AUGMENTS
    config = ml_collections.ConfigDict({"data": data_config.defaults()})
    config.data.augment = "mosaic"
    config.data.num_classes = 3
    with pytest.raises(ValueError, match=r"^config\.data\.augment='mosaic'"):
        data_config.validate(config)
