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
