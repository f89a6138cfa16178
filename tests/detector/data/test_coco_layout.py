"""detector/data/coco_layout.py: a COCO folder's splits found in COCO's
layout or a Roboflow export's, and what is missing named in one line."""

import json

import pytest

from detector.data import coco_layout

LAYOUT = coco_layout.LAYOUT


def _write(path, categories=({"id": 1, "name": "a"},)):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"images": [], "annotations": [], "categories": list(categories)}
        )
    )


def test_cocos_layout(tmp_path):
    _write(tmp_path / "annotations" / "instances_train.json")
    (tmp_path / "train").mkdir()
    files = coco_layout.locate(str(tmp_path), "train[:4]", "data.train_split")
    assert files == coco_layout.SplitFiles(
        f"{tmp_path}/annotations/instances_train.json", f"{tmp_path}/train"
    )


def test_a_roboflow_export_is_read_as_it_is(tmp_path):
    for split in ("train", "valid", "test"):
        _write(tmp_path / split / "_annotations.coco.json")
    files = coco_layout.locate(str(tmp_path), "valid", "data.eval_split")
    assert files == coco_layout.SplitFiles(
        f"{tmp_path}/valid/_annotations.coco.json", f"{tmp_path}/valid"
    )
    assert coco_layout.present_splits(str(tmp_path)) == [
        "test",
        "train",
        "valid",
    ]


def test_a_split_not_there_names_those_that_are(tmp_path):
    for split in ("train", "valid"):
        _write(tmp_path / split / "_annotations.coco.json")
    with pytest.raises(FileNotFoundError) as info:
        coco_layout.locate(str(tmp_path), "val", "data.eval_split")
    assert str(info.value) == (
        f"config.data.eval_split='val': {tmp_path} holds no "
        "annotations/instances_val.json (nor val/_annotations.coco.json); "
        "splits there: train, valid; name one with "
        "--config.data.eval_split=..."
    )


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda p: None, "no such folder"),
        (lambda p: p.mkdir(), "an empty folder"),
        (lambda p: p.write_text(""), "a file, not a folder"),
    ],
)
def test_a_root_that_holds_no_data_says_what_to_do(tmp_path, make, reason):
    root = tmp_path / "coco"
    make(root)
    with pytest.raises(OSError) as info:
        coco_layout.locate(str(root), "train2017", "data.train_split")
    assert str(info.value) == f"config.data.root='{root}': {reason}; {LAYOUT}"
    assert LAYOUT.endswith("see docs/coco.md")


def test_an_unset_root_names_the_flag():
    with pytest.raises(ValueError) as info:
        coco_layout.locate("", "train", "data.train_split")
    assert str(info.value) == (
        "config.data.root='': not set; name your dataset folder with "
        f"--config.data.root=DIR: {LAYOUT}"
    )


def test_a_folder_with_other_things_and_no_split(tmp_path):
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(FileNotFoundError) as info:
        coco_layout.locate(str(tmp_path), "train", "data.train_split")
    assert str(info.value).endswith(f"; no split there; {LAYOUT}")


def test_an_annotation_file_without_its_image_folder(tmp_path):
    _write(tmp_path / "annotations" / "instances_val.json")
    with pytest.raises(FileNotFoundError) as info:
        coco_layout.locate(str(tmp_path), "val", "data.eval_split")
    assert str(info.value).startswith(
        f"{tmp_path}/val: image folder of "
        f"{tmp_path}/annotations/instances_val.json does not exist; "
    )
