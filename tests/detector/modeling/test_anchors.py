"""modeling/anchors.py: sizes, ratios, centres and order of static anchors."""

import numpy as np

from detector.modeling import anchors


def test_level_anchors_shapes_sizes_and_order():
    boxes = anchors.level_anchors((64, 32), 3, 4.0, (0.5, 1.0, 2.0))
    assert boxes.shape == (8 * 4 * 3, 4) and boxes.dtype == np.float32
    grid = boxes.reshape(8, 4, 3, 4)  # [H, W, A, 4]
    width = grid[..., 2] - grid[..., 0]
    height = grid[..., 3] - grid[..., 1]
    np.testing.assert_allclose(np.sqrt(width * height), 32.0, rtol=1e-6)
    np.testing.assert_allclose(
        height / width, np.broadcast_to([0.5, 1.0, 2.0], (8, 4, 3)), rtol=1e-6
    )
    centre_x = (grid[..., 0] + grid[..., 2]) / 2
    centre_y = (grid[..., 1] + grid[..., 3]) / 2
    np.testing.assert_allclose(centre_x[2, 1], 1.5 * 8)  # (i + 0.5) * stride
    np.testing.assert_allclose(centre_y[2, 1], 2.5 * 8)


def test_pyramid_anchors_cover_each_level_once():
    levels = anchors.pyramid_anchors((64, 64), 2, 4, 8.0, (1.0,))
    assert [len(x) for x in levels] == [256, 64, 16]
    sides = [x[0, 2] - x[0, 0] for x in levels]
    np.testing.assert_allclose(sides, [32.0, 64.0, 128.0])
    assert (
        levels[0] is anchors.pyramid_anchors((64, 64), 2, 4, 8.0, (1.0,))[0]
    )  # cached


def test_torchvision_anchors_start_at_zero_with_rounded_sizes():
    """torchvision's AnchorGenerator, sizes 32 on stride 4, ratios
    (0.5, 1, 2): base anchors round(+-[w, h] / 2) at i * stride."""
    boxes = anchors.level_anchors(
        (16, 16), 2, 8.0, (0.5, 1.0, 2.0), offset=0.0, round_sizes=True
    )
    np.testing.assert_array_equal(
        boxes[:3],
        [[-23, -11, 23, 11], [-16, -16, 16, 16], [-11, -23, 11, 23]],
    )
    np.testing.assert_array_equal(boxes[3], [-19, -11, 27, 11])  # x + 4
    levels = anchors.pyramid_anchors(
        (16, 16), 2, 3, 8.0, (1.0,), offset=0.0, round_sizes=True
    )
    np.testing.assert_array_equal(levels[1][0], [-32, -32, 32, 32])
