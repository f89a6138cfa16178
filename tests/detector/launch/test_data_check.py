"""detector/launch/data_check.py: the data a config names, checked before
JAX starts; data.num_classes=0 taken from the annotation file."""

import json

import pytest

from detector import config as config_lib
from detector.launch import data_check


def _folder(root, categories):
    for split in ("train", "val"):
        (root / split).mkdir(parents=True)
        (root / "annotations").mkdir(exist_ok=True)
        (root / "annotations" / f"instances_{split}.json").write_text(
            json.dumps(
                {
                    "images": [],
                    "annotations": [],
                    "categories": [
                        {"id": i + 1, "name": n}
                        for i, n in enumerate(categories)
                    ],
                }
            )
        )


def _config(root, num_classes):
    config = config_lib.base_config()
    config.data.root = str(root)
    config.data.train_split, config.data.eval_split = "train", "val"
    config.data.num_classes = num_classes
    return config


def test_num_classes_0_is_the_annotation_files_count(tmp_path):
    _folder(tmp_path, ["cat", "dog", "bird"])
    config = _config(tmp_path, 0)
    config.lock()
    data_check.check(config)
    assert config.data.num_classes == 3


def test_a_set_num_classes_is_kept(tmp_path):
    _folder(tmp_path, ["cat", "dog", "bird"])
    config = _config(tmp_path, 5)  # the folder's own check names the clash
    data_check.check(config)
    assert config.data.num_classes == 5


def test_a_missing_eval_split_fails_before_jax(tmp_path):
    _folder(tmp_path, ["cat"])
    config = _config(tmp_path, 0)
    config.data.eval_split = "val2017"
    with pytest.raises(FileNotFoundError, match=r"eval_split='val2017'"):
        data_check.check(config)
    data_check.check(config, {"data.eval_split": "val"})  # eval.py --split


def test_num_classes_0_without_a_coco_folder_is_refused():
    config = config_lib.base_config()
    config.data.source = "tfds"
    config.data.num_classes = 0
    with pytest.raises(ValueError) as info:
        data_check.check(config)
    assert str(info.value) == (
        "config.data.num_classes=0: takes the count from a COCO folder's "
        "annotation file, and config.data.source='tfds' reads none; set "
        "--config.data.num_classes"
    )


def test_an_annotation_file_without_categories(tmp_path):
    _folder(tmp_path, [])
    with pytest.raises(ValueError, match=r"lists no categories"):
        data_check.check(_config(tmp_path, 0))


def test_a_shapes_count_the_disk_cannot_hold_is_one_line(tmp_path):
    """A typo's count is refused before JAX starts, before any PNG is
    written: the count times the bytes per image against the free space."""
    config = config_lib.base_config()
    config.data.source = "shapes"
    config.data.root = str(tmp_path / "shapes")
    config.data.num_classes = 3
    config.data.shapes.num_train = 1_000_000_000
    with pytest.raises(ValueError) as info:
        data_check.check(config)
    assert str(info.value).startswith(
        "config.data.shapes.num_train=1000000000: writing 1000000200 shapes "
        "images of 128 x 128 takes about 12397.8 GiB, more than the "
    )
    assert str(info.value).endswith(f" GiB free at {tmp_path}; lower the count")
    assert not (tmp_path / "shapes").exists()
    config.data.shapes.num_train = 16
    data_check.check(config)  # 16 images fit
