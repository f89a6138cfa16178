"""The categories export.py and predict.py --workdir read: category id 0 is
refused there too, for a run trained before the load refused it."""

import json

import ml_collections
import pytest

from detector.export import categories


def _config(root, num_classes: int) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "data": {
                "source": "coco_json",
                "root": str(root),
                "train_split": "train",
                "num_classes": num_classes,
            }
        }
    )


def _write(root, listed: list[dict], annotations: list[dict]) -> str:
    path = root / "annotations" / "instances_train.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {"images": [], "annotations": annotations, "categories": listed}
        )
    )
    return str(path)


def test_category_id_0_is_refused_before_anything_is_written(tmp_path):
    path = _write(
        tmp_path,
        [{"id": 0, "name": "facade"}, {"id": 1, "name": "window"}],
        [{"category_id": 0}, {"category_id": 1}, {"category_id": 0}],
    )
    with pytest.raises(ValueError) as error:
        categories.categories(_config(tmp_path, 2))
    assert str(error.value) == (
        f"{path}: categories[0] (id=0, name 'facade'): category ids start "
        "at 1 (0 marks an empty detection slot in the model's outputs); "
        "give it an unused id >= 1 and its annotations too (2 use it), or "
        "remove it if none does"
    )


def test_ids_from_1_are_read_in_id_order(tmp_path):
    _write(tmp_path, [{"id": 3, "name": "b"}, {"id": 1, "name": "a"}], [])
    assert categories.categories(_config(tmp_path, 2)) == [
        {"id": 1, "name": "a"},
        {"id": 3, "name": "b"},
    ]
