"""imaging/canvases.py: a config's canvases and the orientation of a size."""

from detector.imaging import canvases


def test_squares_are_landscape_and_taller_images_portrait():
    assert canvases.orientations([(96, 128), (128, 96), (64, 64)]) == [
        canvases.LANDSCAPE,
        canvases.PORTRAIT,
        canvases.LANDSCAPE,
    ]


def test_group_keeps_each_orientations_positions_in_order():
    assert canvases.group([1, 0, 0, 1, 0]) == ([1, 2, 4], [0, 3])
    assert canvases.group([0, 0]) == ([0, 1], [])
