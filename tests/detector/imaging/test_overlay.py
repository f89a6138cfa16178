"""imaging/overlay.py: labels that never cover each other or leave the
image, drawn after every box; the rule predict's and eval's drawings share."""

import itertools

import numpy as np
import pytest

from detector.imaging import overlay


def _rects(origins, sizes):
    return [
        (x, y, x + w, y + h)
        for origin, (w, h) in zip(origins, sizes, strict=True)
        if origin is not None
        for x, y in [origin]
    ]


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_labels_of_a_crowded_drawing_never_intersect_or_leave_the_image():
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 180, (40, 2))
    boxes = [(x, y, x + 30, y + 25) for x, y in corners]
    sizes = [(int(rng.integers(30, 70)), 12) for _ in boxes]
    origins = overlay.place_labels(boxes, sizes, (200, 160))
    rects = _rects(origins, sizes)
    assert len(rects) >= 20  # most find a place
    for a, b in itertools.combinations(rects, 2):
        assert not _overlap(a, b), (a, b)
    for x1, y1, x2, y2 in rects:
        assert x1 >= 0 and y1 >= 0 and x2 <= 200 and y2 <= 160


@pytest.mark.parametrize(
    "box, expected",
    [
        ((10, 30, 50, 60), (10, 18)),  # room above: above the box
        ((10, 0, 50, 60), (10, 0)),  # at the top edge: inside the top
        ((95, 30, 100, 60), (60, 18)),  # at the right edge: moved left
        ((-5, -3, 20, 20), (0, 0)),
    ],
)
def test_a_lone_label_sits_above_its_box_inside_the_image(box, expected):
    assert overlay.place_labels([box], [(40, 12)], (100, 100)) == [expected]


def test_a_label_larger_than_the_image_is_left_out():
    assert overlay.place_labels([(0, 0, 5, 5)], [(40, 12)], (30, 30)) == [None]


def test_labels_are_drawn_over_every_box_edge_and_at_the_images_size():
    """Box 2's left edge crosses box 1's label: the label stays whole."""
    image = np.zeros((300, 512, 3), np.uint8)
    first = {"bbox": [40, 40, 60, 60], "category_id": 1, "score": 0.84}
    second = {"bbox": [60, 20, 140, 180], "category_id": 2, "score": 0.9}
    names = {1: "triangle", 2: "square"}
    alone = np.asarray(
        overlay.overlay(image, [first], np.zeros((1, 300, 512), bool), names)
    )
    assert alone.shape == image.shape
    both = np.asarray(
        overlay.overlay(
            image, [first, second], np.zeros((2, 300, 512), bool), names
        )
    )
    rows, cols = np.nonzero((alone[:40] == overlay.PALETTE[1]).all(-1))
    region = (slice(rows.min(), 40), slice(cols.min(), cols.max() + 1))
    assert cols.min() < 60 < cols.max()  # box 2's left edge crosses it
    np.testing.assert_array_equal(both[region], alone[region])
