"""Ground-truth boxes checked and clipped to their image: one box for the
training targets and the COCOeval ground truth (docs/architecture.md)."""

import math

from absl import logging

# Clips of at most this many pixels (float rounding) are not logged.
_SILENT_CLIP_PX = 1e-3
# Individually logged clipped boxes per file; the rest are counted.
_MAX_LOGGED_CLIPS = 5


def box_problem(bbox) -> str | None:
    """Why a COCO [x, y, w, h] box is unusable, or None when it is fine."""
    if not (
        isinstance(bbox, list)
        and len(bbox) == 4
        and all(
            isinstance(v, (int, float)) and not isinstance(v, bool)
            for v in bbox
        )
    ):
        return f"bbox is not [x, y, w, h]: {bbox!r}"
    if not all(math.isfinite(v) for v in bbox):
        return f"non-finite bbox: {bbox}"
    if not (bbox[2] > 0 and bbox[3] > 0):
        return f"zero or negative-size bbox: {bbox}"
    return None


def fit_box(
    bbox, width: int, height: int
) -> tuple[list[float] | None, str | None]:
    """The box's part inside a width x height image, or why there is none.

    Returns (box, None), the box itself when it lies inside, or (None,
    reason) for a box to skip.
    """
    problem = box_problem(bbox)
    if problem:
        return None, problem
    x1, y1 = max(bbox[0], 0), max(bbox[1], 0)
    x2 = min(bbox[0] + bbox[2], width)
    y2 = min(bbox[1] + bbox[3], height)
    if not (x2 > x1 and y2 > y1):
        return None, (
            f"bbox outside the image: {bbox} in {width}x{height} (width x "
            "height)"
        )
    if [x1, y1, x2, y2] == [
        bbox[0],
        bbox[1],
        bbox[0] + bbox[2],
        bbox[1] + bbox[3],
    ]:
        return bbox, None
    return [x1, y1, x2 - x1, y2 - y1], None


class ClipLog:
    """Logs boxes clipped to their image: the first few, then a count."""

    def __init__(self, source: str):
        self.source = source
        self.count = 0

    def clip(self, annotation: dict, clipped: list[float]) -> None:
        """Logs that `annotation`'s bbox became `clipped` (tiny fixes: not).

        A box that overshoots its image by float rounding only (normalised
        TFDS coordinates times the image size) is clipped silently.
        """
        corners = [
            (b[0], b[1], b[0] + b[2], b[1] + b[3])
            for b in (annotation["bbox"], clipped)
        ]
        moved = max(abs(a - b) for a, b in zip(*corners, strict=True))
        if moved <= _SILENT_CLIP_PX:
            return
        self.count += 1
        if self.count <= _MAX_LOGGED_CLIPS:
            logging.warning(
                "%s: annotation id=%s of image %s: bbox %s runs outside its "
                "image; clipped to %s for training and evaluation",
                self.source,
                annotation.get("id"),
                annotation.get("image_id"),
                annotation.get("bbox"),
                clipped,
            )

    def summarize(self) -> None:
        if self.count:
            logging.warning(
                "%s: clipped %d boxes to their image (training and "
                "evaluation alike)",
                self.source,
                self.count,
            )
