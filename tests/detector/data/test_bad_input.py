"""Bad input gets one clear line naming the file, or a logged skip."""

import itertools
import json
import os

import numpy as np
import pytest

from detector.data import coco
from detector.data import pipeline


@pytest.fixture(name="folder")
def folder_fixture(tmp_path, helpers):
    """A colour-coded folder with train (6 images) and val (3 images)."""
    helpers.write_colour_coded(str(tmp_path), "train", 6, 48, 60, seed=2)
    helpers.write_colour_coded(str(tmp_path), "val", 3, 48, 60, seed=3)
    return tmp_path


@pytest.fixture(name="config")
def config_fixture(folder, make_config):
    config = make_config(str(folder))
    config.data.train_split = "train"
    config.data.eval_split = "val"
    return config


def _edit_json(path, edit) -> None:
    with open(path) as f:
        dataset = json.load(f)
    edit(dataset)
    with open(path, "w") as f:
        json.dump(dataset, f)


def test_missing_folder(config, tmp_path):
    config.data.root = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError,
                       match=r"nowhere: data.root folder does not exist"):
        pipeline.train_batches(config)


def test_missing_annotation_file(config):
    with pytest.raises(FileNotFoundError) as error:
        pipeline.eval_split(config, "val2017")
    message = str(error.value)
    assert "instances_val2017.json: annotation file for split 'val2017'" in (
            message)
    assert "present: instances_train.json, instances_val.json" in message


def test_missing_image_folder_and_file(config, folder):
    os.remove(folder / "val" / "0002.png")
    with pytest.raises(FileNotFoundError,
                       match=r"val/0002.png: image listed in .*instances_val"):
        pipeline.eval_split(config)
    # A slice without the missing image is fine.
    assert pipeline.eval_split(config, "val[2:]").image_ids == [3]
    os.rename(folder / "train", folder / "moved")
    with pytest.raises(FileNotFoundError, match=r"train: image folder"):
        pipeline.train_batches(config)


def test_corrupt_image_names_the_file(config, folder):
    (folder / "val" / "0002.png").write_bytes(b"\x89PNG not really")
    split = pipeline.eval_split(config)
    with pytest.raises(ValueError,
                       match=r"val/0002.png: cannot decode image"):
        list(split.batches())
    (folder / "train" / "0003.png").write_bytes(b"")
    with pytest.raises(ValueError,
                       match=r"train/0003.png: cannot decode image"):
        list(itertools.islice(pipeline.train_batches(config), 3))


def test_image_size_differs_from_json(config, folder, helpers):
    image = np.zeros((10, 12, 3), np.uint8)
    helpers.write_folder(str(folder), "tiny", [image], [])
    _edit_json(folder / "annotations" / "instances_tiny.json",
               lambda d: d["images"][0].update(height=11))
    split = pipeline.eval_split(config, "tiny")
    with pytest.raises(ValueError, match=r"tiny/0001.png: image is 12x10 but "
                       r".*instances_tiny.json says 12x11"):
        next(split.batches())


def test_bad_annotations_are_skipped_and_logged(config, folder, caplog):
    path = folder / "annotations" / "instances_train.json"

    def corrupt(dataset):
        anns = dataset["annotations"]
        anns[0]["bbox"][2] = 0  # zero width
        anns[1]["bbox"][3] = -4  # negative height
        anns[2]["segmentation"] = []  # empty
        anns[3]["image_id"] = 999  # unknown image

    _edit_json(path, corrupt)
    with caplog.at_level("WARNING"):
        folder_split = coco.CocoFolder(str(folder), "train", 3)
    text = caplog.text
    assert "instances_train.json: skipping annotation id=1" in text
    assert "zero or negative-size bbox" in text
    assert "id=3 of image 1: empty segmentation" in text
    assert "id=4 of image 999: unknown image_id" in text
    assert "skipped 4 annotations (2 zero or negative-size bbox" in text
    assert len(folder_split.coco().anns) == 18 - 4
    # Image 1 kept none of its three instances; image 2 kept two.
    assert folder_split.load_example(0)[1].shape == (0, 4)
    assert folder_split.load_example(1)[2].tolist() == [2, 3]
    batch = next(pipeline.train_batches(config))
    assert batch["valid"].sum() <= 4 * 3


def test_crowd_regions_are_ground_truth_not_targets(config, folder):
    def crowd(dataset):
        dataset["annotations"][0]["iscrowd"] = 1

    _edit_json(folder / "annotations" / "instances_val.json", crowd)
    split = coco.CocoFolder(str(folder), "val", 3)
    assert split.coco().anns[1]["iscrowd"] == 1
    assert split.load_example(0)[2].tolist() == [2, 3]


def test_json_problems(config, folder):
    path = folder / "annotations" / "instances_val.json"
    _edit_json(path, lambda d: d.pop("categories"))
    with pytest.raises(ValueError, match="instances_val.json: missing the "
                       "'categories' list"):
        pipeline.eval_split(config)
    path.write_text("{ not json")
    with pytest.raises(ValueError, match="instances_val.json: not valid JSON"):
        pipeline.eval_split(config)
    _edit_json(folder / "annotations" / "instances_train.json",
               lambda d: d["images"][0].pop("width"))
    with pytest.raises(ValueError, match="image entry 1 lacks width"):
        pipeline.train_batches(config)


def test_config_problems(config):
    config.data.num_classes = 80
    with pytest.raises(ValueError, match="3 categories but data.num_classes "
                       "is 80"):
        pipeline.eval_split(config)
    config.data.num_classes = 3
    with pytest.raises(ValueError, match=r"split 'val\[:5': expected NAME"):
        pipeline.eval_split(config, "val[:5")
    with pytest.raises(ValueError, match="selects no images"):
        pipeline.eval_split(config, "val[5:]")
    with pytest.raises(ValueError, match="train.batch_size=4 must be a "
                       "positive multiple of the process count 3"):
        pipeline.train_batches(config, process_index=0, process_count=3)
    config.data.source = "csv"
    with pytest.raises(ValueError, match="data.source='csv' is not one of"):
        pipeline.train_batches(config)


def test_slice_bounds():
    assert coco.slice_bounds("val", 10) == (0, 10)
    assert coco.slice_bounds("val[:500]", 10) == (0, 10)
    assert coco.slice_bounds("val[2:5]", 10) == (2, 5)
    assert coco.slice_bounds("val[-3:]", 10) == (7, 10)
    assert coco.slice_bounds("train[:10%]", 200) == (0, 20)
    assert coco.slice_bounds("train[25%:75%]", 10) == (2, 8)
    assert coco.slice_bounds("val[8:2]", 10) == (8, 8)
    assert coco.parse_split("val2017[:500]") == ("val2017", None, "500")


def test_polygon_and_uncompressed_rle_segmentations(tmp_path, helpers):
    """Every COCO segmentation form decodes to the same mask."""
    mask = np.zeros((20, 30), bool)
    mask[4:12, 6:18] = True
    base = helpers.annotation(mask, 1, 1, 1)
    polygon = dict(base, id=2, segmentation=[[6, 4, 18, 4, 18, 12, 6, 12]])
    column_major = mask.T.ravel()  # COCO RLE runs go down the columns
    changes = np.flatnonzero(np.diff(column_major.astype(int))) + 1
    counts = np.diff(np.concatenate([[0], changes, [column_major.size]]))
    uncompressed = dict(base, id=3, segmentation={
            "size": [20, 30], "counts": counts.tolist()})
    helpers.write_folder(str(tmp_path), "forms",
                         [np.zeros((20, 30, 3), np.uint8)],
                         [base, polygon, uncompressed])
    folder = coco.CocoFolder(str(tmp_path), "forms", 3)
    masks = folder.load_example(0)[3]
    assert masks.shape == (3, 20, 30)
    for decoded in masks:
        assert (decoded.astype(bool) == mask).all()
