"""Bad input gets one clear line naming the file, or a logged skip."""

import contextlib
import io
import itertools
import json
import os

import numpy as np
import pytest
from pycocotools import cocoeval

from detector.data import coco_folder, eval_split, pipeline, splits
from tests.detector.data import helpers


@pytest.fixture(name="folder")
def folder_fixture(tmp_path):
    """A colour-coded folder with train (6 images) and val (3 images)."""
    helpers.write_colour_coded(str(tmp_path), "train", 6, 48, 60, seed=2)
    helpers.write_colour_coded(str(tmp_path), "val", 3, 48, 60, seed=3)
    return tmp_path


@pytest.fixture(name="config")
def config_fixture(folder):
    config = helpers.small_config(str(folder))
    config.data.train_split = "train"
    config.data.eval_split = "val"
    return config


def _edit_json(path, edit) -> None:
    with open(path) as f:
        dataset = json.load(f)
    edit(dataset)
    with open(path, "w") as f:
        json.dump(dataset, f)


def test_an_image_cut_short_is_found_when_the_split_loads(folder):
    """Before anything is written: not at step 1, after the compiles."""
    path = folder / "train" / "0002.png"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError) as info:
        coco_folder.CocoFolder(str(folder), "train", 3)
    assert str(info.value).startswith(f"{path}: cannot decode image (")
    assert "cut short or damaged" in str(info.value)


def test_missing_folder(config, tmp_path):
    config.data.root = str(tmp_path / "nowhere")
    with pytest.raises(
        FileNotFoundError, match=r"nowhere': no such folder; a COCO folder"
    ):
        pipeline.train_batches(config)


def test_missing_annotation_file(config):
    with pytest.raises(FileNotFoundError) as error:
        eval_split.eval_split(config, "val2017")
    assert str(error.value).endswith(
        "holds no annotations/instances_val2017.json (nor "
        "val2017/_annotations.coco.json); splits there: train, val; name "
        "one with --config.data.eval_split=..."
    )


def test_missing_image_folder_and_file(config, folder):
    os.remove(folder / "val" / "0002.png")
    with pytest.raises(
        FileNotFoundError,
        match=r"val/0002.png: image listed in .*instances_val",
    ):
        eval_split.eval_split(config)
    # A slice without the missing image is fine.
    assert eval_split.eval_split(config, "val[2:]").image_ids == [3]
    os.rename(folder / "train", folder / "moved")
    with pytest.raises(FileNotFoundError, match=r"train: image folder"):
        pipeline.train_batches(config)


def test_corrupt_image_names_the_file(config, folder, capfd):
    # Damaged inside, its header and its end intact: found when decoded
    # (a file cut short is found when the folder loads, below).
    path = folder / "val" / "0002.png"
    data = bytearray(path.read_bytes())
    data[60:-20] = b"\xff" * (len(data) - 80)
    path.write_bytes(bytes(data))
    split = eval_split.eval_split(config)
    with pytest.raises(ValueError, match=r"val/0002.png: cannot decode image"):
        list(split.batches())
    # No header at all: found when the folder loads.
    (folder / "train" / "0003.png").write_bytes(b"")
    with pytest.raises(
        ValueError, match=r"train/0003.png: cannot decode image"
    ):
        pipeline.train_batches(config)
    # Our error is the only report: TensorFlow logged no traceback of it.
    assert "Traceback" not in capfd.readouterr().err


def test_image_size_differs_from_json(config, folder):
    image = np.zeros((10, 12, 3), np.uint8)
    helpers.write_folder(str(folder), "tiny", [image], [])
    _edit_json(
        folder / "annotations" / "instances_tiny.json",
        lambda d: d["images"][0].update(height=11),
    )
    # Found when the folder loads, from the header: before anything is
    # compiled or written.
    with pytest.raises(
        ValueError,
        match=r"tiny/0001.png: image is 12x10 but "
        r".*instances_tiny.json says 12x11$",
    ):
        eval_split.eval_split(config, "tiny")


def test_many_image_sizes_differ_named_first_few_in_one_line(config, folder):
    images = [np.zeros((10, 12, 3), np.uint8)] * 5
    helpers.write_folder(str(folder), "tiny", images, [])

    def wrong(dataset):
        for record in dataset["images"]:
            record["height"] = 11

    _edit_json(folder / "annotations" / "instances_tiny.json", wrong)
    with pytest.raises(ValueError) as info:
        eval_split.eval_split(config, "tiny")
    line = str(info.value)
    assert "\n" not in line
    assert "tiny/0001.png: image is 12x10 but " in line
    assert line.endswith(
        "instances_tiny.json says 12x11; 5 images differ from their "
        "records: 0001.png, 0002.png, 0003.png and 2 more; set each "
        "record's width and height to its file's (once turned by its EXIF "
        "orientation)"
    )


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
        folder_split = coco_folder.CocoFolder(str(folder), "train", 3)
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
    # Without augmentation no box is cropped away, so each row keeps its
    # image's usable instances up to max_instances: the 3-instance images
    # are cut to 2, image 1 keeps none.
    config.data.hflip = False
    config.data.scale_jitter = (1.0, 1.0)
    config.data.max_instances = 2
    kept = {1: 0, 2: 2, 3: 3, 4: 3, 5: 3, 6: 3}
    with caplog.at_level("WARNING"):
        batches = list(itertools.islice(pipeline.train_batches(config), 3))
    seen = set()
    for batch in batches:
        for image_id, valid in zip(
            batch["image_id"], batch["valid"], strict=True
        ):
            assert valid.sum() == min(kept[image_id], 2), image_id
            seen.add(int(image_id))
    assert seen == set(kept)
    assert "has 3 instances > data.max_instances=2" in caplog.text


def test_crowd_regions_are_ground_truth_not_targets(config, folder):
    def crowd(dataset):
        dataset["annotations"][0]["iscrowd"] = 1

    _edit_json(folder / "annotations" / "instances_val.json", crowd)
    split = coco_folder.CocoFolder(str(folder), "val", 3)
    assert split.coco().anns[1]["iscrowd"] == 1
    assert split.load_example(0)[2].tolist() == [2, 3]


def test_json_problems(config, folder):
    path = folder / "annotations" / "instances_val.json"
    _edit_json(path, lambda d: d.pop("categories"))
    with pytest.raises(
        ValueError, match="instances_val.json: missing the 'categories' list"
    ):
        eval_split.eval_split(config)
    path.write_text("{ not json")
    with pytest.raises(ValueError, match="instances_val.json: not valid JSON"):
        eval_split.eval_split(config)
    _edit_json(
        folder / "annotations" / "instances_train.json",
        lambda d: d["images"][0].pop("width"),
    )
    with pytest.raises(
        ValueError,
        match=r"instances_train.json: images\[0\] "
        r"\(id=1\) lacks 'width'$",
    ):
        pipeline.train_batches(config)


def test_config_problems(config):
    config.data.num_classes = 80
    with pytest.raises(
        ValueError,
        match=r"3 categories but config.data.num_classes=80; set "
        r"--config.data.num_classes=3, or 0 to take the count from the "
        "annotation file$",
    ):
        eval_split.eval_split(config)
    config.data.num_classes = 3
    with pytest.raises(ValueError, match=r"split 'val\[:5': expected NAME"):
        eval_split.eval_split(config, "val[:5")
    with pytest.raises(ValueError, match="selects no images"):
        eval_split.eval_split(config, "val[5:]")


def test_empty_slice_is_one_error_without_a_mask_warning(config, caplog):
    with (
        caplog.at_level("WARNING"),
        pytest.raises(
            ValueError,
            match=r"instances_val.json: split 'val\[5:2\]' "
            r"selects no images \(of 3\)$",
        ),
    ):
        eval_split.eval_split(config, "val[5:2]")
    assert not caplog.records  # no "no instance segmentations" warning
    with pytest.raises(
        ValueError,
        match="train.batch_size=4 must be a "
        "positive multiple of the process count 3",
    ):
        pipeline.train_batches(config, process_index=0, process_count=3)
    config.data.source = "csv"
    with pytest.raises(ValueError, match="data.source='csv' is not one of"):
        pipeline.train_batches(config)


def test_slice_bounds():
    assert coco_folder.slice_bounds("val", 10) == (0, 10)
    assert coco_folder.slice_bounds("val[:500]", 10) == (0, 10)
    assert coco_folder.slice_bounds("val[2:5]", 10) == (2, 5)
    assert coco_folder.slice_bounds("val[-3:]", 10) == (7, 10)
    assert coco_folder.slice_bounds("train[:10%]", 200) == (0, 20)
    assert coco_folder.slice_bounds("train[25%:75%]", 10) == (2, 8)
    assert coco_folder.slice_bounds("val[8:2]", 10) == (8, 8)
    assert splits.parse_split("val2017[:500]") == ("val2017", None, "500")


def test_polygon_and_uncompressed_rle_segmentations(tmp_path):
    """Every COCO segmentation form decodes to the same mask."""
    mask = np.zeros((20, 30), bool)
    mask[4:12, 6:18] = True
    base = helpers.annotation(mask, 1, 1, 1)
    polygon = dict(base, id=2, segmentation=[[6, 4, 18, 4, 18, 12, 6, 12]])
    column_major = mask.T.ravel()  # COCO RLE runs go down the columns
    changes = np.flatnonzero(np.diff(column_major.astype(int))) + 1
    counts = np.diff(np.concatenate([[0], changes, [column_major.size]]))
    uncompressed = dict(
        base, id=3, segmentation={"size": [20, 30], "counts": counts.tolist()}
    )
    helpers.write_folder(
        str(tmp_path),
        "forms",
        [np.zeros((20, 30, 3), np.uint8)],
        [base, polygon, uncompressed],
    )
    folder = coco_folder.CocoFolder(str(tmp_path), "forms", 3)
    masks = folder.load_example(0)[3]
    assert masks.shape == (3, 20, 30)
    for decoded in masks:
        assert (decoded.astype(bool) == mask).all()


@pytest.mark.parametrize(
    "records, index, key",
    [
        ("categories", 1, "id"),
        ("images", 2, "file_name"),
        ("images", 0, "height"),
        ("annotations", 4, "image_id"),
        ("annotations", 0, "bbox"),
        ("annotations", 8, "category_id"),
    ],
)
def test_missing_keys_name_the_file_record_and_key(folder, records, index, key):
    path = folder / "annotations" / "instances_val.json"
    _edit_json(path, lambda d: d[records][index].pop(key))
    record_id = "None" if key == "id" else index + 1
    with pytest.raises(ValueError) as error:
        coco_folder.CocoFolder(str(folder), "val", 3)
    assert str(error.value) == (
        f"{path}: {records}[{index}] (id={record_id}) lacks '{key}'"
    )


def test_bad_category_ids(folder):
    path = folder / "annotations" / "instances_val.json"
    _edit_json(path, lambda d: d["categories"][2].update(id=1))
    with pytest.raises(
        ValueError,
        match=r"instances_val.json: "
        r"categories\[2\] repeats id 1$",
    ):
        coco_folder.CocoFolder(str(folder), "val", 3)
    _edit_json(path, lambda d: d["categories"][2].update(id="3"))
    with pytest.raises(
        ValueError,
        match=r"categories\[2\] id '3' is not an "
        "integer$",
    ):
        coco_folder.CocoFolder(str(folder), "val", 3)


def _evaluate(ground_truth, iou_type: str) -> float:
    """AP of the ground truth's own boxes/masks scored against it."""
    results = [
        {
            "image_id": a["image_id"],
            "category_id": a["category_id"],
            "bbox": a["bbox"],
            "segmentation": a["segmentation"],
            "score": 1.0,
        }
        for a in ground_truth.anns.values()
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation = cocoeval.COCOeval(
            ground_truth, ground_truth.loadRes(results), iou_type
        )
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return evaluation.stats[0]


def test_missing_iscrowd_and_area_get_defaults(folder, caplog):
    path = folder / "annotations" / "instances_val.json"
    original = json.loads(path.read_text())["annotations"]
    polygon = [[6.0, 4.0, 18.0, 4.0, 18.0, 12.0, 6.0, 12.0]]  # 12 x 8 px

    def strip(dataset):
        anns = dataset["annotations"]
        for ann in anns[:4]:
            ann.pop("iscrowd")
        for ann in anns[2:5]:
            ann.pop("area")
        anns[4]["segmentation"] = polygon

    _edit_json(path, strip)
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "val", 3)
    assert (
        f"{path}: filled defaults for evaluation: iscrowd=0 on 4 "
        "annotations, area (segmentation pixels, else box w*h) on 3"
        in caplog.text
    )
    ground_truth = split.coco()
    anns = ground_truth.anns
    assert [anns[i]["iscrowd"] for i in range(1, 10)] == [0] * 9
    # RLE segmentations: their pixel count; the polygon: its 12 x 8 pixels.
    assert [anns[i]["area"] for i in (3, 4)] == [
        original[2]["area"],
        original[3]["area"],
    ]
    assert anns[5]["area"] == 96
    assert isinstance(anns[3]["area"], float)
    assert _evaluate(ground_truth, "bbox") == pytest.approx(1.0)
    assert _evaluate(ground_truth, "segm") == pytest.approx(1.0)


def test_missing_area_without_segmentation_is_box_area(folder, caplog):
    path = folder / "annotations" / "instances_train.json"

    def strip(dataset):
        for ann in dataset["annotations"]:
            ann.pop("segmentation")
        dataset["annotations"][0].pop("area")

    _edit_json(path, strip)
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "train", 3)
    assert not split.has_masks
    ann = split.coco().anns[1]
    assert ann["area"] == ann["bbox"][2] * ann["bbox"][3]
    assert "iscrowd=0 on 0 annotations, area" in caplog.text
    assert "on 1" in caplog.text


def test_rle_without_or_with_another_size_is_skipped(folder, caplog):
    path = folder / "annotations" / "instances_val.json"

    def corrupt(dataset):
        anns = dataset["annotations"]
        anns[0]["segmentation"]["size"] = [10, 10]
        anns[1]["segmentation"].pop("size")
        anns[5]["iscrowd"] = 1  # crowd regions are checked too
        anns[5]["segmentation"]["size"] = [60, 48]

    _edit_json(path, corrupt)
    with caplog.at_level("WARNING"):
        split = coco_folder.CocoFolder(str(folder), "val", 3)
    text = caplog.text
    assert (
        f"{path}: skipping annotation id=1 of image 1: RLE size differs "
        "from the image: [10, 10] vs [48, 60] (height, width)"
    ) in text
    assert (
        f"{path}: skipping annotation id=2 of image 1: RLE segmentation "
        "without 'size'"
    ) in text
    assert "id=6 of image 2: RLE size differs from the image: [60, 48]" in text
    assert (
        "skipped 3 annotations (2 RLE size differs from the image, "
        "1 RLE segmentation without 'size')"
    ) in text
    assert sorted(split.coco().anns) == [3, 4, 5, 7, 8, 9]
    assert split.load_example(0)[2].tolist() == [3]
    assert split.load_example(0)[3].shape == (1, 48, 60)
