"""visualize.py: the images drawn are those of the lowest ids seen."""

import numpy as np

from detector.evaluation import visualize


def _batch(ids):
    ids = np.asarray(ids)
    batch = {"image_id": ids, "image_valid": ids >= 0, "image": ids * 10.0}
    return batch, {"scores": ids + 0.5}


def test_lowest_ids_keeps_valid_rows_by_id():
    kept = visualize.LowestIds(3)
    for ids in ([4, 6], [7, -1], [2, 5], [1, 9]):
        kept.add(*_batch(ids))
    rows = kept.rows()
    assert [int(b["image_id"][0]) for b, _ in rows] == [1, 2, 4]
    assert [float(o["scores"][0]) for _, o in rows] == [1.5, 2.5, 4.5]
    assert [float(b["image"][0]) for b, _ in rows] == [10.0, 20.0, 40.0]
    nothing = visualize.LowestIds(0)
    nothing.add(*_batch([1, 2]))
    assert nothing.rows() == []


def test_eval_drawings_place_labels_by_predicts_rule(monkeypatch):
    """Crowded detections: the labels drawn by eval's picture are placed by
    imaging.overlay.place_labels, so none covers another."""
    from detector.imaging import overlay

    placed = []
    place = overlay.place_labels

    def recorded(boxes, sizes, image_size):
        origins = place(boxes, sizes, image_size)
        placed.append((origins, sizes))
        return origins

    monkeypatch.setattr(overlay, "place_labels", recorded)
    k = 12
    outputs = {
        "num_valid": np.asarray([k]),
        "scores": np.linspace(0.99, 0.6, k)[None],
        "boxes": np.asarray(
            [[[8 + i, 10 + i, 60 + i, 50 + i] for i in range(k)]], np.float32
        ),
        "category_ids": np.asarray([[1 + i % 2 for i in range(k)]]),
        "masks": np.zeros((1, k, 28, 28), np.float32),
    }
    image = np.zeros((96, 128, 3), np.uint8)
    drawn = visualize.drawn_image(
        image, outputs, 0, {1: "square", 2: "circle"}, 0.5
    )
    assert drawn.size == (128, 96)
    ((origins, sizes),) = placed
    rects = [
        (x, y, x + w, y + h)
        for (x, y), (w, h) in (
            (o, s) for o, s in zip(origins, sizes, strict=True) if o
        )
    ]
    assert len(rects) > 3
    for n, a in enumerate(rects):
        for b in rects[n + 1 :]:
            assert not (
                a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
            )
