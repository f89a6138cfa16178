"""COCO files as found: image ids checked, boxes fitted to their image."""

import itertools
import json
import math
import types

import numpy as np
import pytest
import tensorflow as tf

from detector.data import coco_folder, eval_split, gt_boxes, pipeline
from detector.data.sources import tfds as tfds_coco
from detector.evaluation import eval_lib
from tests.detector.data import helpers


@pytest.fixture(name="root")
def root_fixture(tmp_path):
    """A colour-coded 'val' split: 3 images of 48 x 60, 3 instances each."""
    helpers.write_colour_coded(str(tmp_path), "val", 3, 48, 60, seed=4)
    return tmp_path


def _edit(root, edit) -> str:
    path = root / "annotations" / "instances_val.json"
    dataset = json.loads(path.read_text())
    edit(dataset)
    path.write_text(json.dumps(dataset))
    return str(path)


def test_duplicate_image_id_names_both_files(root):
    path = _edit(root, lambda d: d["images"][2].update(id=1))
    with pytest.raises(ValueError) as error:
        coco_folder.CocoFolder(str(root), "val", 3)
    assert str(error.value) == (
        f"{path}: images[2] repeats id 1 of images[0] (file_name "
        "'0001.png' and '0003.png'); image ids must be unique"
    )


@pytest.mark.parametrize(
    "records, index, key",
    [("images", 1, "id"), ("annotations", 4, "image_id")],
)
def test_string_image_id_names_file_key_and_value(root, records, index, key):
    path = _edit(root, lambda d: d[records][index].update({key: "img_3"}))
    config = helpers.small_config(str(root))
    config.data.eval_split = "val"
    with pytest.raises(ValueError) as error:
        eval_split.eval_split(config)
    assert str(error.value) == (
        f"{path}: {records}[{index}] {key} 'img_3' is not an integer"
    )


@pytest.mark.parametrize(
    "records, index, key, value",
    [
        ("images", 1, "id", -2),
        ("annotations", 4, "image_id", -2),
        ("images", 1, "id", 2**64 - 5),  # a 64-bit hash
        ("categories", 0, "id", 2**63),
    ],
)
def test_an_id_outside_int64_or_a_negative_image_id_is_one_line(
    root, records, index, key, value
):
    path = _edit(root, lambda d: d[records][index].update({key: value}))
    with pytest.raises(ValueError) as error:
        coco_folder.CocoFolder(str(root), "val", 3)
    negative = value < 0
    assert str(error.value) == (
        f"{path}: {records}[{index}] {key} {value} is "
        + ("negative" if negative else "over 2**63 - 1")
        + ": ids must be integers in [0, 2**63 - 1] (COCOeval's int64); "
        "renumber them"
    )


def test_tfds_duplicate_image_id_names_both_records():
    example = {
        "height": 10,
        "width": 10,
        "objects": {"bbox": np.zeros((0, 4))},
    }
    examples = [
        dict(example, **{"image/id": 3, "image/filename": b"a.jpg"}),
        dict(example, **{"image/id": 3, "image/filename": b"b.jpg"}),
    ]
    with pytest.raises(ValueError) as error:
        tfds_coco.tfds_ground_truth(examples, ["x"], "tfds coco val")
    assert str(error.value) == (
        "tfds coco val: image/id 3 repeats (image/filename 'a.jpg' and "
        "'b.jpg'); image ids must be unique"
    )


def test_fit_box():
    assert gt_boxes.fit_box([1, 2, 3, 4], 10, 10) == ([1, 2, 3, 4], None)
    assert gt_boxes.fit_box([-2, 5, 6, 9], 10, 10) == ([0, 5, 4, 5], None)
    assert gt_boxes.fit_box([12, 0, 3, 3], 10, 10)[1] == (
        "bbox outside the image: [12, 0, 3, 3] in 10x10 (width x height)"
    )
    for bad in ([math.nan, 0, 2, 2], [0, 0, math.inf, 2]):
        assert gt_boxes.fit_box(bad, 10, 10)[1].startswith("non-finite bbox")


def _perfect_ap(ground_truth) -> float:
    """bbox AP of detections equal to the visible ground-truth boxes.

    The detections are clipped to their image, as predictions are.
    """
    results = []
    for ann in ground_truth.anns.values():
        image = ground_truth.imgs[ann["image_id"]]
        x, y, w, h = ann["bbox"]
        x1, y1 = max(x, 0), max(y, 0)
        x2, y2 = min(x + w, image["width"]), min(y + h, image["height"])
        results.append(
            {
                "image_id": ann["image_id"],
                "category_id": ann["category_id"],
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "score": 1.0,
            }
        )
    image_ids = sorted(ground_truth.getImgIds())
    metrics, _ = eval_lib.coco_metrics(ground_truth, results, "bbox", image_ids)
    return metrics["AP"]


def test_boxes_over_the_edge_are_clipped_alike_in_training_and_gt(root, caplog):
    def corrupt(dataset):
        anns = dataset["annotations"]
        anns[0]["bbox"] = [-30.0, -20.0, 50.0, 40.0]  # over the top left
        anns[1]["bbox"] = [70.0, 10.0, 5.0, 5.0]  # right of the image
        anns[2]["bbox"] = [10.0, 10.0, float("inf"), 5.0]
        anns[3]["bbox"] = [float("nan"), 10.0, 5.0, 5.0]
        anns[4]["bbox"] = [40.0, 30.0, 100.0, 100.0]  # over the bottom right
        for ann in anns:
            ann.pop("segmentation")

    path = _edit(root, corrupt)
    with caplog.at_level("WARNING"):
        folder = coco_folder.CocoFolder(str(root), "val", 3)
    text = caplog.text
    assert (
        f"{path}: annotation id=1 of image 1: bbox [-30.0, -20.0, 50.0, "
        "40.0] runs outside its image; clipped to [0, 0, 20.0, 20.0] for "
        "training and evaluation" in text
    )
    assert "clipped 2 boxes to their image" in text
    assert "id=2 of image 1: bbox outside the image: [70.0" in text
    assert "id=3 of image 1: non-finite bbox: [10.0, 10.0, inf" in text
    assert "id=4 of image 2: non-finite bbox: [nan" in text
    ground_truth = folder.coco()
    assert sorted(ground_truth.anns) == [1, 5, 6, 7, 8, 9]
    assert ground_truth.anns[1]["bbox"] == [0, 0, 20.0, 20.0]
    assert ground_truth.anns[5]["bbox"] == [40.0, 30.0, 20.0, 18.0]
    # The training targets are the same boxes (x1, y1, x2, y2).
    np.testing.assert_array_equal(folder.load_example(0)[1], [[0, 0, 20, 20]])
    np.testing.assert_array_equal(
        folder.load_example(1)[1][0], [40, 30, 60, 48]
    )
    assert _perfect_ap(ground_truth) == pytest.approx(1.0)
    # Every remaining box reaches a training batch, nothing is dropped.
    config = helpers.small_config(str(root))
    config.data.train_split = "val"
    config.data.hflip = False
    config.data.scale_jitter = (1.0, 1.0)
    config.train.batch_size = 3
    batch = next(itertools.islice(pipeline.train_batches(config), 1))
    kept = {1: 1, 2: 2, 3: 3}
    for image_id, valid in zip(batch["image_id"], batch["valid"], strict=True):
        assert valid.sum() == kept[int(image_id)]


def test_tfds_boxes_are_clipped_or_skipped_in_gt_and_training(caplog):
    boxes = np.array(
        [
            [-0.5, -0.5, 0.5, 0.5],  # over the top left: clipped
            [0.2, 1.2, 0.4, 1.5],  # right of the image: skipped
            [0.1, 0.1, np.inf, 0.3],  # non-finite: skipped
            [0.1, 0.1, 0.3, 0.3],
            [0.5, 0.5, 1.00001, 1.00001],  # float rounding: clipped quietly
        ],
        np.float32,
    )  # (ymin, xmin, ymax, xmax)
    objects = {
        "bbox": boxes,
        "label": np.zeros(5, np.int64),
        "is_crowd": np.zeros(5, bool),
        "area": np.ones(5, np.int64),
    }
    example = {"image/id": 1, "height": 20, "width": 10, "objects": objects}
    with caplog.at_level("WARNING"):
        dataset, _ = tfds_coco.tfds_ground_truth([example], ["x"], "tfds t")
    bboxes = [a["bbox"] for a in dataset["annotations"]]
    np.testing.assert_allclose(
        bboxes, [[0, 0, 5, 10], [1, 2, 2, 4], [5, 10, 5, 10]], rtol=1e-5
    )
    assert "clipped 1 boxes to their image" in caplog.text
    assert "non-finite bbox" in caplog.text
    assert "bbox outside the image" in caplog.text
    # Training decoding drops the non-finite box (the transforms clip the
    # others to the image and drop the one outside it).
    record = {
        "image": tf.io.encode_png(np.zeros((20, 10, 3), np.uint8)),
        "image/id": tf.constant(1, tf.int64),
        "objects": {k: tf.constant(v) for k, v in objects.items()},
    }
    builder = types.SimpleNamespace(name="coco/2017")
    with caplog.at_level("WARNING"):
        decoded = tfds_coco.TfdsCoco.decode(builder, record, training=True)
    assert np.isfinite(decoded["boxes"].numpy()).all()
    assert decoded["boxes"].shape[0] == 4
    assert (
        "tfds coco/2017 record image/id=1: 1 non-finite or empty boxes "
        "left out of the training targets" in caplog.text
    )


def test_category_id_0_is_refused_at_load_naming_it(root):
    """A Roboflow export's placeholder class 0 ("facade") once trained,
    evaluated and exported, and predict.py then refused the artifact."""
    path = _edit(
        root,
        lambda d: d["categories"].insert(
            0, {"id": 0, "name": "facade", "supercategory": "none"}
        ),
    )
    with pytest.raises(ValueError) as error:
        coco_folder.CocoFolder(str(root), "val", 4)
    assert str(error.value) == (
        f"{path}: categories[0] (id=0, name 'facade'): category ids start "
        "at 1 (0 marks an empty detection slot in the model's outputs); "
        "give it an unused id >= 1 and its annotations too (0 use it), or "
        "remove it if none does"
    )


def test_one_file_under_two_image_ids_is_refused_naming_both(root):
    """Merged exports: the file would be trained twice per epoch and
    counted twice by COCOeval."""
    path = _edit(root, lambda d: d["images"][2].update(file_name="./0001.png"))
    with pytest.raises(ValueError) as error:
        coco_folder.CocoFolder(str(root), "val", 3)
    assert str(error.value) == (
        f"{path}: images[2] (id=3) file_name './0001.png' is the file of "
        "images[0] (id=1); one file under two image ids would be trained "
        "twice per epoch and counted twice by COCOeval: keep one record "
        "and move the other's annotations to its id"
    )
