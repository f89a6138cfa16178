"""The COCOeval backends give pycocotools' 12 numbers (to 1e-9 absolute),
on shapes images with noisy detections and on a COCO-format set with crowd
regions and images without ground truth or detections."""

import contextlib
import copy
import io
import logging

import numpy as np
import pytest

from tests.helpers import requires

requires.module_or_skip("pycocotools", "faster_coco_eval")

from detector.data import coco_folder  # noqa: E402
from detector.data import shapes_writer as shapes  # noqa: E402
from detector.evaluation import coco_backends  # noqa: E402
from detector.imaging import masks, rle  # noqa: E402


def _detection(rng, image_id, category, box, mask, height, width) -> dict:
    """A COCO result: the box (x1, y1, x2, y2) and the mask pasted in it."""
    pasted = masks.centres_crops(mask[None], box[None], height, width)
    x1, y1, x2, y2 = (float(v) for v in box)
    return {
        "image_id": image_id,
        "category_id": int(category),
        "bbox": [x1, y1, x2 - x1, y2 - y1],
        "score": float(rng.random()),
        "segmentation": rle.encode(pasted)[0],
    }


def _shapes_set(count: int = 6, size: int = 256) -> tuple[dict, list[dict]]:
    """Shapes images; each instance found with a shifted box and a blurred
    mask, plus false detections of every size."""
    rng = np.random.default_rng(11)
    images, annotations, detections = [], [], []
    for image_id in range(1, count + 1):
        _, instances = shapes.render_image(rng, size)
        images.append(
            {"id": image_id, "height": size, "width": size, "file_name": ""}
        )
        for category, mask in instances:
            annotation = shapes._annotation(
                mask, category, len(annotations) + 1, image_id
            )
            annotations.append(annotation)
            x, y, w, h = annotation["bbox"]
            box = np.array([x, y, x + w, y + h], float)
            box += rng.normal(0.0, 0.1 * max(w, h), 4)
            crop = mask[y : y + h, x : x + w].astype(np.float32)
            rows = np.linspace(0, h - 1, 28).round().astype(int)
            cols = np.linspace(0, w - 1, 28).round().astype(int)
            soft = crop[np.ix_(rows, cols)] * 0.8 + 0.1
            detections.append(
                _detection(rng, image_id, category, box, soft, size, size)
            )
        for _ in range(5):
            corner = rng.uniform(0, size, 2)
            box = np.concatenate([corner, corner + rng.uniform(2, 60, 2)])
            category = rng.integers(1, len(shapes.CATEGORIES) + 1)
            soft = rng.random((28, 28)).astype(np.float32)
            detections.append(
                _detection(rng, image_id, category, box, soft, size, size)
            )
    dataset = {
        "images": images,
        "annotations": annotations,
        "categories": list(shapes.CATEGORIES),
    }
    return dataset, detections


def _crowd_set() -> tuple[dict, list[dict]]:
    """Three 160 x 200 images: one with people and a crowd region, one with
    a small and a large polygon car, one with nothing (detections on it are
    all false)."""
    rng = np.random.default_rng(5)
    height, width = 160, 200
    crowd = np.zeros((height, width), bool)
    crowd[5:40, 40:78] = True
    crowd_rle = masks.uncompressed_rle(crowd)
    annotations = [
        {
            "id": 1,
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 0,
            "bbox": [2, 3, 20, 30],
            "area": 600,
            "segmentation": [[2, 3, 22, 3, 22, 33, 2, 33]],
        },
        {
            "id": 2,
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 1,
            "bbox": [40, 5, 38, 35],
            "area": int(crowd.sum()),
            "segmentation": crowd_rle,
        },
        {
            "id": 3,
            "image_id": 2,
            "category_id": 2,
            "iscrowd": 0,
            "bbox": [10, 10, 50, 40],
            "area": 1500,
            "segmentation": [[10, 10, 60, 10, 35, 50]],
        },
        {
            "id": 4,
            "image_id": 2,
            "category_id": 2,
            "iscrowd": 0,
            "bbox": [60, 40, 130, 110],
            "area": 14300,
            "segmentation": [[60, 40, 190, 40, 190, 150, 60, 150]],
        },
    ]
    detections = []
    boxes = [
        (1, 1, [2.5, 3.0, 22.0, 34.0]),  # the person
        (1, 1, [45.0, 8.0, 60.0, 30.0]),  # inside the crowd: ignored
        (1, 1, [50.0, 10.0, 75.0, 38.0]),
        (1, 2, [0.0, 0.0, 10.0, 10.0]),  # wrong class
        (2, 2, [11.0, 9.0, 58.0, 49.0]),  # the car
        (2, 1, [11.0, 9.0, 58.0, 49.0]),
        (2, 2, [62.0, 44.0, 185.0, 148.0]),  # the large car
        (3, 1, [5.0, 5.0, 30.0, 30.0]),  # nothing there
        (3, 2, [1.0, 1.0, 4.0, 3.0]),
    ]
    for image_id, category, box in boxes:
        soft = rng.random((28, 28)).astype(np.float32) * 0.5 + 0.3
        detections.append(
            _detection(
                rng, image_id, category, np.array(box), soft, height, width
            )
        )
    dataset = {
        "images": [
            {"id": i, "height": height, "width": width, "file_name": ""}
            for i in (1, 2, 3)
        ],
        "annotations": annotations,
        "categories": [{"id": 1, "name": "person"}, {"id": 2, "name": "car"}],
    }
    return dataset, detections


def _stats(name, dataset, detections, iou_type):
    ground_truth = coco_folder.build_coco(copy.deepcopy(dataset))
    if iou_type == "bbox":
        detections = [
            {k: v for k, v in d.items() if k != "segmentation"}
            for d in detections
        ]
    image_ids = sorted(ground_truth.getImgIds())
    return coco_backends.BACKENDS[name].run(
        ground_truth, copy.deepcopy(detections), iou_type, image_ids
    )


@pytest.mark.parametrize("iou_type", ["bbox", "segm"])
@pytest.mark.parametrize("make", [_shapes_set, _crowd_set])
def test_faster_coco_eval_gives_pycocotools_numbers(make, iou_type):
    dataset, detections = make()
    want = _stats("pycocotools", dataset, detections, iou_type)
    got = _stats("faster_coco_eval", dataset, detections, iou_type)
    assert want.stats.shape == (12,) and (want.stats > 0).any()
    np.testing.assert_allclose(got.stats, want.stats, rtol=0, atol=1e-9)
    assert got.per_category.keys() == want.per_category.keys()
    np.testing.assert_allclose(
        list(got.per_category.values()),
        list(want.per_category.values()),
        rtol=0,
        atol=1e-9,
    )
    for subset in (detections[:1], []):  # one detection, and none
        np.testing.assert_allclose(
            _stats("faster_coco_eval", dataset, subset, iou_type).stats,
            _stats("pycocotools", dataset, subset, iou_type).stats,
            rtol=0,
            atol=1e-9,
        )


@pytest.mark.parametrize("backend", sorted(coco_backends.BACKENDS))
@pytest.mark.parametrize("iou_type", ["bbox", "segm"])
@pytest.mark.parametrize("make", [_shapes_set, _crowd_set])
def test_per_category_ap_is_cocoeval_restricted_to_the_category(
    make, iou_type, backend
):
    """Each category's AP equals the AP of a pycocotools COCOeval whose
    params.catIds is that category alone."""
    from pycocotools.cocoeval import COCOeval

    dataset, detections = make()
    if iou_type == "bbox":
        detections = [
            {k: v for k, v in d.items() if k != "segmentation"}
            for d in detections
        ]
    per_category = _stats(backend, dataset, detections, iou_type).per_category
    assert sorted(per_category) == sorted(
        c["id"] for c in dataset["categories"]
    )
    assert any(ap > 0 for ap in per_category.values())
    for category, ap in per_category.items():
        ground_truth = coco_folder.build_coco(copy.deepcopy(dataset))
        with contextlib.redirect_stdout(io.StringIO()):
            results = ground_truth.loadRes(copy.deepcopy(detections))
            evaluator = COCOeval(ground_truth, results, iou_type)
            evaluator.params.imgIds = sorted(ground_truth.getImgIds())
            evaluator.params.catIds = [category]
            evaluator.evaluate()
            evaluator.accumulate()
            evaluator.summarize()
        assert ap == pytest.approx(evaluator.stats[0], abs=1e-12), category


def test_a_backend_that_does_not_import_gives_way_with_one_line(
    monkeypatch, caplog
):
    missing = coco_backends.Backend("no_such_cocoeval_module", None)
    monkeypatch.setitem(coco_backends.BACKENDS, "faster_coco_eval", missing)
    monkeypatch.setattr(coco_backends, "_MISSING", set())
    dataset, detections = _crowd_set()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            stats = coco_backends.evaluate(
                "faster_coco_eval",
                coco_folder.build_coco(copy.deepcopy(dataset)),
                copy.deepcopy(detections),
                "segm",
                [1, 2, 3],
            )
    np.testing.assert_array_equal(
        stats.stats, _stats("pycocotools", dataset, detections, "segm").stats
    )
    lines = [r.getMessage() for r in caplog.records if "coco_backend" in r.msg]
    assert len(lines) == 1 and "evaluating with pycocotools" in lines[0]
