"""eval_lib.coco_metrics: COCOeval's numbers, -1 where COCO has none."""

import pytest

pytest.importorskip("pycocotools.cocoeval")
pytest.importorskip("tensorflow")

from detector.data import coco_folder  # noqa: E402
from detector.evaluation import eval_lib  # noqa: E402


def _ground_truth():
    """Two 100 x 100 images with small (8 x 8) and medium (40 x 40) boxes."""
    boxes = [(1, [10, 10, 8, 8]), (1, [50, 50, 40, 40]), (2, [5, 5, 8, 8])]
    return coco_folder.build_coco(
        {
            "images": [
                {"id": i, "height": 100, "width": 100, "file_name": f"{i}"}
                for i in (1, 2)
            ],
            "annotations": [
                {
                    "id": n,
                    "image_id": image_id,
                    "category_id": 3,
                    "bbox": bbox,
                    "area": bbox[2] * bbox[3],
                    "iscrowd": 0,
                    "segmentation": [
                        [
                            bbox[0],
                            bbox[1],
                            bbox[0] + bbox[2],
                            bbox[1],
                            bbox[0] + bbox[2],
                            bbox[1] + bbox[3],
                            bbox[0],
                            bbox[1] + bbox[3],
                        ]
                    ],
                }
                for n, (image_id, bbox) in enumerate(boxes, start=1)
            ],
            "categories": [{"id": 3, "name": "c"}],
        }
    )


@pytest.mark.parametrize("iou_type", ["bbox", "segm"])
def test_no_detections_report_minus_one_where_coco_does(iou_type):
    """No large objects: APl and ARl are -1 (undefined), the rest 0."""
    metrics, _ = eval_lib.coco_metrics(_ground_truth(), [], iou_type, [1, 2])
    assert set(metrics) == set(eval_lib.METRIC_NAMES)
    undefined = {"APl", "ARl"}
    for name, value in metrics.items():
        assert value == (-1.0 if name in undefined else 0.0), name


def test_detections_and_no_detections_agree_on_what_is_undefined():
    ground_truth = _ground_truth()
    one = [{"image_id": 2, "category_id": 3, "bbox": [5, 5, 8, 8], "score": 1}]
    with_one, _ = eval_lib.coco_metrics(ground_truth, one, "bbox", [1, 2])
    without, _ = eval_lib.coco_metrics(ground_truth, [], "bbox", [1, 2])
    assert with_one["APl"] == without["APl"] == -1.0
    assert with_one["APs"] > 0 and without["APs"] == 0.0


def test_the_per_category_table_is_printed_and_returned(capsys):
    ground_truth = _ground_truth()
    one = [{"image_id": 2, "category_id": 3, "bbox": [5, 5, 8, 8], "score": 1}]
    metrics, rows = eval_lib.coco_metrics(ground_truth, one, "bbox", [1, 2])
    assert rows == [{"id": 3, "name": "c", "AP": metrics["AP"]}]
    out = capsys.readouterr().out
    assert "COCO bbox AP per category" in out
    assert f"c        {metrics['AP']:.3f}" in out
