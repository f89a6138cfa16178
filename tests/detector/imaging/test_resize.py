"""detector/imaging/resize.py: the resize rules by name, and their one check."""

import numpy as np
import pytest

from detector.data import transforms
from detector.imaging import resize


def test_letterbox_sizes_round_half_to_even_in_float32():
    # 3 * 1.5 = 4.5 rounds to 4 and 5 * 1.5 = 7.5 to 8, as in TensorFlow.
    np.testing.assert_allclose(resize.resized_size([3, 5], 1.5), [4, 8])
    # A tiny image never resizes below one pixel.
    np.testing.assert_allclose(resize.resized_size([1, 400], 0.1), [1, 40])


def test_letterbox_fits_the_long_side_and_scales_by_the_jitter():
    scale, size = resize.letterbox((50, 100), (64, 80))
    assert scale == np.float32(0.8)
    np.testing.assert_array_equal(size, [40, 80])
    scale, size = resize.letterbox((50, 100), (64, 80), resize.Options(1.5))
    assert scale == np.float32(0.8) * np.float32(1.5)
    np.testing.assert_array_equal(size, [60, 120])


def test_shortest_edge_floors_and_letterboxes_what_the_canvas_cannot_hold():
    options = resize.Options(min_size=800, max_size=1333)
    scale, size = resize.shortest_edge((333, 500), (1344, 1344), options)
    assert scale == np.float32(800 / 333)
    np.testing.assert_array_equal(size, [800, 1201])
    # 800 x 1201 does not fit 640 x 640: the long side is fitted instead.
    scale, size = resize.shortest_edge((333, 500), (640, 640), options)
    assert scale == np.float32(640) / np.float32(500)
    np.testing.assert_array_equal(size, [426, 640])


def test_every_rule_has_its_training_draws():
    assert set(transforms.GEOMETRIES) == set(resize.RULES)


def test_check_rule_names_the_key_the_value_and_the_rules():
    for name in resize.RULES:
        resize.check_rule(name, "data.resize")
    with pytest.raises(ValueError) as raised:
        resize.check_rule("stretch", "data.resize")
    assert str(raised.value) == (
        "config.data.resize='stretch': must be one of letterbox, shortest_edge"
    )
