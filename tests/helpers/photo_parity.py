"""Our detections on photo files against torchvision's, per file.

    stats = photo_parity.compare(theirs, ours)  # name -> PhotoStats

`theirs` is tests/make_photo_parity_fixture.py's npz (torchvision's
`model.eval()` on each photo); `ours` maps each photo name to COCO results
in original pixels (predictions.json's lists, or eval's detections of
that image). Each of torchvision's detections, best score first, takes the
unmatched one of ours of the same category with the highest box IoU, if
that IoU is at least MATCH_IOU.
"""

import dataclasses

import numpy as np

from tests.helpers import torchvision_parity

MATCH_IOU = 0.95


@dataclasses.dataclass(frozen=True)
class PhotoStats:
    """One photo: counts, matched share, worst score and mask errors."""

    theirs: int
    ours: int
    matched: float  # share of torchvision's detections matched
    score_error: float  # max |score difference| of the matched
    mask_iou: float  # min mask IoU of the matched (1.0: none matched)


def _xyxy(results: list[dict]) -> np.ndarray:
    boxes = np.asarray([r["bbox"] for r in results], np.float64).reshape(-1, 4)
    boxes[:, 2:] += boxes[:, :2]
    return boxes


def _decode(segmentation: dict) -> np.ndarray:
    from pycocotools import mask as mask_utils

    return mask_utils.decode(segmentation).astype(bool)


def _mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def compare_one(theirs: dict, name: str, ours: list[dict]) -> PhotoStats:
    """PhotoStats of photo `name` (module docstring)."""
    boxes = theirs[f"{name}_boxes"].astype(np.float64)
    labels = theirs[f"{name}_labels"]
    scores = theirs[f"{name}_scores"]
    height, width = theirs[f"{name}_size"]
    masks = np.unpackbits(theirs[f"{name}_masks"], axis=-1)[..., :width]
    our_boxes = _xyxy(ours)
    our_labels = np.asarray([r["category_id"] for r in ours])
    overlap = (
        torchvision_parity.iou(boxes, our_boxes)
        if len(ours) and len(boxes)
        else np.zeros((len(boxes), len(ours)))
    )
    overlap = np.where(labels[:, None] == our_labels[None], overlap, 0.0)
    taken = np.zeros(len(ours), bool)
    matched, score_error, mask_iou = 0, 0.0, 1.0
    for t in np.argsort(-scores, kind="stable"):
        row = np.where(taken, -1.0, overlap[t])
        if not row.size or row.max() < MATCH_IOU:
            continue
        o = int(np.argmax(row))
        taken[o] = True
        matched += 1
        score_error = max(score_error, abs(float(ours[o]["score"] - scores[t])))
        if "segmentation" in ours[o]:
            mask_iou = min(
                mask_iou, _mask_iou(_decode(ours[o]["segmentation"]), masks[t])
            )
    return PhotoStats(
        theirs=len(boxes),
        ours=len(ours),
        matched=matched / max(len(boxes), 1),
        score_error=score_error,
        mask_iou=mask_iou,
    )


def compare(theirs: dict, ours: dict[str, list[dict]]) -> dict:
    """name -> PhotoStats for every photo of `ours`."""
    return {name: compare_one(theirs, name, ours[name]) for name in ours}


def check_results(results: list[dict], height: int, width: int) -> None:
    """Every box has positive area and lies inside the h x w image."""
    boxes = _xyxy(results)
    assert (boxes[:, 2] > boxes[:, 0]).all() and (
        boxes[:, 3] > boxes[:, 1]
    ).all(), "a box of zero or negative area"
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= width).all()
    assert (boxes[:, 3] <= height).all(), "a box outside its image"
