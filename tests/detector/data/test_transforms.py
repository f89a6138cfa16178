"""Exact checks of the per-example geometry: resize, flip, crop, GT masks."""

import ml_collections
import numpy as np
import tensorflow as tf

from detector.data import gt_masks, transforms

# Training targets with GT masks cropped to their boxes.
CROP = gt_masks.GtMasks("crop", True)

S = 16  # GT mask size
BOXES = [[6, 12, 22, 28], [50, 4, 58, 36], [55, 30, 70, 45]]


def _data(
    hflip: bool, jitter: tuple[float, float]
) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "image_size": (64, 80),
            "resize": "letterbox",
            "max_instances": 4,
            "gt_mask_size": S,
            "hflip": hflip,
            "scale_jitter": jitter,
            "pixel_mean": (0.0, 0.0, 0.0),
            "pixel_std": (1.0, 1.0, 1.0),
        }
    )


def _example() -> dict:
    """40x60 image: a disc (r=8 at 14,20), a rectangle at the right and a
    box that runs past the bottom-right corner (as some COCO boxes do)."""
    ys, xs = np.mgrid[0:40, 0:60] + 0.5
    disc = (xs - 14) ** 2 + (ys - 20) ** 2 <= 64
    rectangle = (xs >= 50) & (xs < 58) & (ys >= 4) & (ys < 36)
    image = np.zeros((40, 60, 3), np.uint8)
    image[disc] = 255
    image[rectangle] = 128
    corner = (xs >= 55) & (ys >= 30)
    return {
        "image": tf.constant(image),
        "boxes": tf.constant(BOXES, tf.float32),
        "classes": tf.constant([1, 2, 3], tf.int32),
        "masks": tf.constant(
            np.stack([disc, rectangle, corner]).astype(np.uint8)
        ),
        "image_id": tf.constant(7, tf.int64),
    }


def _disc(size: int) -> np.ndarray:
    """A disc inscribed in an S x S grid, sampled at pixel centres."""
    centres = (np.arange(size) + 0.5) / size - 0.5
    return centres[:, None] ** 2 + centres[None, :] ** 2 <= 0.25


def _expected_boxes(boxes, flip, scale_hw, offset, limit_hw):
    """Numpy statement of the box contract: flip, scale, shift, clip, drop."""
    boxes = np.array(boxes, np.float64)
    if flip:
        boxes[:, [0, 2]] = 60 - boxes[:, [2, 0]]
    boxes *= np.tile(scale_hw[::-1], 2)
    boxes -= np.tile(offset[::-1], 2)
    boxes = np.clip(boxes, 0, np.tile(limit_hw[::-1], 2))
    return boxes[(boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])]


def test_no_augmentation_scales_boxes_and_crops_masks_exactly():
    out = transforms.transform(
        _example(),
        tf.constant([0, 0], tf.int64),
        _data(False, (1.0, 1.0)),
        True,
        CROP,
    )
    scale = 4 / 3  # min(64/40, 80/60); the image becomes 53x80
    assert np.isclose(out["scale"], scale)
    assert out["orig_size"].numpy().tolist() == [40, 60]
    # The box past the corner is clipped to the resized image (80 x 53).
    expected = np.minimum(
        np.array(BOXES) * ([80 / 60, 53 / 40] * 2), [80, 53] * 2
    )
    np.testing.assert_allclose(out["boxes"][:3], expected, rtol=1e-6)
    assert out["valid"].numpy().tolist() == [True, True, True, False]
    masks = out["masks"].numpy()
    assert (masks[1] == 1).all()  # the rectangle fills its box
    assert (masks[0] != _disc(S)).mean() <= 0.03
    assert (masks[2] == 1).all()  # the corner fills its clipped box
    assert (masks[3:] == 0).all() and out["mask_valid"].numpy()[:3].all()
    image = out["image"].numpy()
    assert (image[53:] == 0).all()  # padding rows at the bottom
    assert image[int(20 * 53 / 40), int(14 * scale), 0] == 255  # disc centre


def test_flip_mirrors_boxes_masks_and_pixels():
    data = _data(True, (1.0, 1.0))
    plain = transforms.transform(
        _example(),
        tf.constant([0, 0], tf.int64),
        _data(False, (1.0, 1.0)),
        True,
        CROP,
    )
    flipped = None
    for seed in range(16):
        key = tf.constant([seed, 1], tf.int64)
        if transforms.sample_geometry(
            tf.constant([40.0, 60.0]), key, data, True
        )[0]:
            flipped = transforms.transform(_example(), key, data, True, CROP)
            break
    assert flipped is not None, "no key flipped the example"
    boxes, plain_boxes = flipped["boxes"].numpy(), plain["boxes"].numpy()
    np.testing.assert_allclose(
        boxes[:3, [0, 2]], 80 - plain_boxes[:3, [2, 0]], atol=1e-4
    )
    np.testing.assert_allclose(boxes[:3, [1, 3]], plain_boxes[:3, [1, 3]])
    masks, plain_masks = flipped["masks"].numpy(), plain["masks"].numpy()
    assert (masks[:3] != plain_masks[:3, :, ::-1]).mean() <= 0.01
    np.testing.assert_allclose(
        flipped["image"].numpy()[:53, ::-1],
        plain["image"].numpy()[:53],
        atol=1e-3,
    )


def test_jitter_crops_clips_and_drops_like_the_numpy_statement():
    data = _data(True, (1.5, 2.5))
    dropped = clipped = 0
    for seed in range(12):
        key = tf.constant([seed, 2], tf.int64)
        flip, _, resized, offset = (
            t.numpy()
            for t in transforms.sample_geometry(
                tf.constant([40.0, 60.0]), key, data, True
            )
        )
        out = transforms.transform(_example(), key, data, True, CROP)
        limit = np.minimum(resized - offset, [64, 80])
        expected = _expected_boxes(
            BOXES, flip, resized / [40, 60], offset, limit
        )
        count = len(expected)
        assert out["valid"].numpy().sum() == count
        np.testing.assert_allclose(
            out["boxes"].numpy()[:count], expected, atol=1e-3
        )
        dropped += count < 3
        clipped += bool((expected == 0).any() or (expected[:, 2] == 80).any())
        masks = out["masks"].numpy()[:count]
        # Each kept crop holds shape pixels, and only where the box does.
        assert out["mask_valid"].numpy()[:count].all()
        assert masks.reshape(count, -1).any(axis=1).all()
    assert dropped and clipped, (dropped, clipped)


def test_limit_instances_keeps_the_largest_in_order():
    example = {
        "boxes": tf.constant(
            [[0, 0, 2, 2], [0, 0, 9, 9], [0, 0, 1, 1], [0, 0, 5, 5]], tf.float32
        ),
        "classes": tf.constant([1, 2, 3, 1], tf.int32),
        "image_id": tf.constant(3, tf.int64),
    }
    log = transforms.TruncationLog(2)
    out = transforms.limit_instances(example, log)
    assert out["classes"].numpy().tolist() == [2, 1]
    assert out["boxes"].numpy()[:, 2].tolist() == [9, 5]
    assert log.count == 1
    transforms.limit_instances(out, log)
    assert log.count == 1  # within the limit: nothing logged


def test_eval_transform_has_no_randomness():
    data = _data(True, (0.5, 2.0))
    example = {
        "image": _example()["image"],
        "image_id": tf.constant(7, tf.int64),
    }
    out = transforms.transform(example, None, data, False, None)
    assert set(out) == {
        "image",
        "image_id",
        "orig_size",
        "scale",
        "image_size",
        "image_valid",
    }
    assert np.isclose(out["scale"], 4 / 3)
    assert out["image_size"].numpy().tolist() == [53, 80]


def _shortest_edge(min_size=(800,), max_size=1333, canvas=(1344, 1344)):
    data = _data(hflip=True, jitter=(1.0, 1.0))
    data.image_size = canvas
    data.resize = "shortest_edge"
    data.min_size = min_size
    data.max_size = max_size
    return data


def test_shortest_edge_eval_size_is_torchvisions():
    """640 x 480 -> 1066 x 800, 427 x 640 -> 800 x 1199 (floor, not round):
    torchvision's GeneralizedRCNNTransform at (800, 1333)."""
    data = _shortest_edge()
    for hw, expected in (
        ((480, 640), (800, 1066)),
        ((640, 427), (1199, 800)),
        ((100, 1000), (133, 1333)),
        ((13, 17), (800, 1046)),
    ):
        image = tf.zeros([*hw, 3], tf.uint8)
        out = transforms.transform(
            {"image": image, "image_id": tf.constant(1, tf.int64)},
            None,
            data,
            False,
            None,
        )
        assert tuple(out["image_size"].numpy()) == expected, hw
        assert out["image"].shape == (1344, 1344, 3)


def test_shortest_edge_training_draws_each_min_size():
    data = _shortest_edge(min_size=(640, 672, 704), canvas=(1344, 1344))
    example = _example()  # 40 x 60
    shorts = set()
    for seed in range(40):
        out = transforms.transform(
            example, tf.constant([seed, 1], tf.int64), data, True, CROP
        )
        size = out["image_size"].numpy()
        assert size[1] == np.floor(60 * size[0] / 40 + 1e-6) or size[
            1
        ] == np.floor(60 * (size[0] / 40))
        shorts.add(int(size[0]))
        kept = out["boxes"].numpy()[out["valid"].numpy()]
        assert (kept[:, 2] <= size[1]).all() and (kept[:, 3] <= size[0]).all()
    assert shorts == {640, 672, 704}


def test_shortest_edge_larger_than_the_canvas_is_letterboxed():
    data = _shortest_edge(canvas=(512, 768))
    out = transforms.transform(
        {
            "image": tf.zeros([480, 640, 3], tf.uint8),
            "image_id": tf.constant(1, tf.int64),
        },
        None,
        data,
        False,
        None,
    )
    assert tuple(out["image_size"].numpy()) == (512, 683)
