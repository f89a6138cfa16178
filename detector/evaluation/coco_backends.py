"""COCOeval backends by name (`eval.coco_backend`): faster-coco-eval's C++
or pycocotools, which evaluates where the named one cannot be imported."""

import contextlib
import dataclasses
import importlib
import io
import weakref
from collections.abc import Callable

import numpy as np
from absl import logging

from ops import names


@dataclasses.dataclass(frozen=True)
class Scores:
    """One COCOeval run's numbers."""

    stats: np.ndarray  # f64[12]: AP, AP50, ..., ARl; -1 where undefined
    # category id -> AP (IoU 0.50:0.95, all areas, 100 detections), -1 for
    # a category with no ground truth on the images evaluated
    per_category: dict[int, float]


@dataclasses.dataclass(frozen=True)
class Backend:
    """A COCOeval implementation.

    `module` is what must import; `run(coco_gt, detections, iou_type,
    image_ids)` returns its `Scores` and prints the summary.
    """

    module: str
    run: Callable[[object, list[dict], str, list[int]], Scores]


def per_category_ap(
    precision: np.ndarray, category_ids: list[int]
) -> dict[int, float]:
    """Each category's AP from COCOeval's accumulated precision
    f64[T, R, K, A, M] (K: `category_ids`, COCOeval's params.catIds): the
    mean over IoU thresholds and recalls of area 'all' at the most
    detections, as COCOeval's summary AP is of every category."""
    aps = {}
    for k, category in enumerate(category_ids):
        values = precision[:, :, k, 0, -1]
        values = values[values > -1]
        aps[int(category)] = float(np.mean(values)) if values.size else -1.0
    return aps


def _scores(evaluator) -> Scores:
    return Scores(
        np.asarray(evaluator.stats[:12], np.float64),
        per_category_ap(
            np.asarray(evaluator.eval["precision"]),
            list(evaluator.params.catIds),
        ),
    )


def _empty_detections(dataset: dict) -> dict:
    """A results dataset with no detections: the images and categories."""
    return {
        "images": list(dataset["images"]),
        "categories": list(dataset["categories"]),
        "annotations": [],
    }


def _pycocotools_run(
    coco_gt, detections: list[dict], iou_type: str, image_ids: list[int]
) -> Scores:
    from pycocotools import coco as coco_lib
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):  # loadRes chatter
        if detections:
            results = coco_gt.loadRes(detections)
        else:  # loadRes refuses an empty list
            results = coco_lib.COCO()
            results.dataset = _empty_detections(coco_gt.dataset)
            results.createIndex()
    evaluator = COCOeval(coco_gt, results, iou_type)
    evaluator.params.imgIds = image_ids
    with contextlib.redirect_stdout(io.StringIO()):  # progress chatter
        evaluator.evaluate()
        evaluator.accumulate()
    evaluator.summarize()
    return _scores(evaluator)


# faster-coco-eval's ground truth, indexed once per pycocotools COCO.
_FASTER_GT = weakref.WeakKeyDictionary()


def _faster_run(
    coco_gt, detections: list[dict], iou_type: str, image_ids: list[int]
) -> Scores:
    import faster_coco_eval

    ground_truth = _FASTER_GT.get(coco_gt)
    if ground_truth is None:
        ground_truth = faster_coco_eval.COCO(coco_gt.dataset)
        _FASTER_GT[coco_gt] = ground_truth
    with contextlib.redirect_stdout(io.StringIO()):  # progress chatter
        results = ground_truth.loadRes(detections)
        evaluator = faster_coco_eval.COCOeval_faster(
            ground_truth, results, iou_type, print_function=print
        )
        evaluator.params.imgIds = image_ids
        evaluator.evaluate()
        evaluator.accumulate()
    evaluator.summarize()
    return _scores(evaluator)


# config.eval.coco_backend: name -> Backend.
BACKENDS = {
    "faster_coco_eval": Backend("faster_coco_eval", _faster_run),
    "pycocotools": Backend("pycocotools", _pycocotools_run),
}
DEFAULT = "faster_coco_eval"
FALLBACK = "pycocotools"
_MISSING = set()  # backends already logged as missing


def check_name(name: str, key: str) -> None:
    """Raises one ValueError line naming config `key` for an unknown
    backend."""
    names.check_known(name, key, BACKENDS, "COCOeval backend")


def available(name: str) -> str:
    """`name`, or FALLBACK where its library does not import (logged once
    per process)."""
    try:
        importlib.import_module(BACKENDS[name].module)
    except ImportError as e:
        if name not in _MISSING:
            _MISSING.add(name)
            logging.warning(
                "eval.coco_backend=%r: %s does not import (%s); "
                "evaluating with %s",
                name,
                BACKENDS[name].module,
                e,
                FALLBACK,
            )
        return FALLBACK
    return name


def evaluate(
    name: str,
    coco_gt,
    detections: list[dict],
    iou_type: str,
    image_ids: list[int],
) -> Scores:
    """The COCO numbers of `detections` (COCO results format; the dicts
    gain COCOeval's keys) against `coco_gt` (a pycocotools COCO) on
    `image_ids`, by the backend `name` (or FALLBACK where it is missing)."""
    return BACKENDS[available(name)].run(
        coco_gt, detections, iou_type, image_ids
    )
