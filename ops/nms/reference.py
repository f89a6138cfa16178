"""The numpy specification of NMS that every backend matches index for
index (docs/architecture.md, "The NMS operator")."""

import numpy as np

_F32 = np.float32


def nonneg_product(a, b):
    """a * b for a, b >= 0, written so it never contracts into an FMA.

    A non-finite box (never a candidate) may give inf * 0 = NaN here, as
    on the device: numpy's warning about it is silenced, not the value.
    """
    with np.errstate(invalid="ignore"):
        return np.maximum(a * b, _F32(0))


def box_areas(boxes: np.ndarray) -> np.ndarray:
    """Areas of f32[..., 4] boxes; inverted boxes have zero area."""
    w = np.maximum(boxes[..., 2] - boxes[..., 0], _F32(0))
    h = np.maximum(boxes[..., 3] - boxes[..., 1], _F32(0))
    return nonneg_product(w, h)


def overlap_exceeds(
    box: np.ndarray,
    area: np.float32,
    boxes: np.ndarray,
    areas: np.ndarray,
    iou_threshold: np.float32,
) -> np.ndarray:
    """Whether IoU(box, boxes[j]) > iou_threshold, as `inter > t * union`."""
    iw = np.maximum(
        np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]),
        _F32(0),
    )
    ih = np.maximum(
        np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]),
        _F32(0),
    )
    inter = nonneg_product(iw, ih)
    union = (area + areas) - inter
    return inter > iou_threshold * union


def is_candidate(boxes, scores, score_threshold: float | None, xp=np):
    """Which boxes may be selected: bool[..., N] for f32[..., N, 4] boxes.

    The one statement of the rule: the score is not NaN and (with a
    threshold) > score_threshold in float32, and all four coordinates are
    finite. `xp` is the array module: numpy here, jax.numpy on the device
    (ops/nms/common.py, topk.py).
    """
    valid = ~xp.isnan(scores) & xp.all(xp.isfinite(boxes), axis=-1)
    if score_threshold is not None:
        valid &= scores > xp.float32(score_threshold)
    return valid


def candidate_order(
    boxes: np.ndarray, scores: np.ndarray, score_threshold: float | None
) -> np.ndarray:
    """Indices of the candidates of one image, in visiting order."""
    candidates = np.flatnonzero(is_candidate(boxes, scores, score_threshold))
    # Stable sort on the negated score: equal scores keep index order
    # (-0.0 and 0.0 compare equal, so they tie as well).
    return candidates[np.argsort(-scores[candidates], kind="stable")]


def nms_single(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray | None,
    *,
    max_output_size: int,
    iou_threshold: float,
    score_threshold: float | None = None,
) -> np.ndarray:
    """Greedy NMS of one image: kept indices int32[K'] in selection order."""
    boxes = np.asarray(boxes, _F32)
    scores = np.asarray(scores, _F32)
    areas = box_areas(boxes)
    threshold = _F32(iou_threshold)
    remaining = candidate_order(boxes, scores, score_threshold)
    keep = []
    while remaining.size and len(keep) < max_output_size:
        i, rest = remaining[0], remaining[1:]
        keep.append(i)
        suppressed = overlap_exceeds(
            boxes[i], areas[i], boxes[rest], areas[rest], threshold
        )
        if classes is not None:
            suppressed &= classes[rest] == classes[i]
        remaining = rest[~suppressed]
    return np.asarray(keep, np.int32)


def nms(
    boxes,
    scores,
    *,
    max_output_size: int,
    iou_threshold: float,
    score_threshold: float | None = None,
    classes=None,
):
    """Batched reference NMS with the public API's outputs.

    Args:
      boxes: f32[..., N, 4] as (x1, y1, x2, y2).
      scores: f32[..., N].
      max_output_size: K, the most boxes kept per image.
      iou_threshold: suppress when IoU > this.
      score_threshold: scores <= this are never selected (None: no bound).
      classes: optional int[..., N]; a box only suppresses its own class.

    Returns:
      indices int32[..., K] in selection order, padded with -1, and
      num_valid int32[...].
    """
    boxes = np.asarray(boxes, _F32)
    scores = np.asarray(scores, _F32)
    batch_shape = scores.shape[:-1]
    indices = np.full(batch_shape + (max_output_size,), -1, np.int32)
    num_valid = np.zeros(batch_shape, np.int32)
    for b in np.ndindex(batch_shape):
        keep = nms_single(
            boxes[b],
            scores[b],
            None if classes is None else np.asarray(classes)[b],
            max_output_size=max_output_size,
            iou_threshold=iou_threshold,
            score_threshold=score_threshold,
        )
        indices[b][: keep.size] = keep
        num_valid[b] = keep.size
    return indices, num_valid
