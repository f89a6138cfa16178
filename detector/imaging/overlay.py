"""Detections drawn over an image at its own size: masks, boxes, then labels
placed so that none covers another or leaves the image (PIL only): the one
drawing rule of predict.py's overlays and evaluation's pictures."""

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

# Matplotlib's tab10 palette, as 8-bit RGB.
PALETTE = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)
MASK_ALPHA = 0.45

Box = tuple[float, float, float, float]  # (x1, y1, x2, y2)
Rect = tuple[int, int, int, int]


def _overlaps(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _rows(
    box: Box, w: int, h: int, left: int, height: int, placed: list[Rect]
) -> list[int]:
    """Label tops to try for `box`, best first: above it (inside its top
    at the top edge), below it, inside its bottom, then the rows nearest
    the first where a free run of rows can begin or end (next to the image's
    edges or a placed label in its columns: the nearest free row is one of
    them), nearest first."""
    _, y1, _, y2 = box
    first = y1 - h if y1 - h >= 0 else y1
    preferred = [min(max(int(round(y)), 0), height - h) for y in (first, y2)]
    if 0 <= y2 - h <= height - h:
        preferred.append(int(round(y2 - h)))
    edges = {0, height - h}
    for x1, top, x2, bottom in placed:
        if x1 < left + w and left < x2:
            edges.update((bottom, top - h))
    rest = sorted(
        (y for y in edges if 0 <= y <= height - h),
        key=lambda y: (abs(y - preferred[0]), y),
    )
    return list(dict.fromkeys(preferred + rest))


def place_labels(
    boxes: Sequence[Box],
    sizes: Sequence[tuple[int, int]],
    image_size: tuple[int, int],
) -> list[tuple[int, int] | None]:
    """Top-left corner of each label, of (width, height) `sizes`, for its
    (x1, y1, x2, y2) box in a (width, height) image, in order: above the
    box (inside its top at the top edge, moved left at the right edge),
    else the nearest row where it covers no label placed before it; None
    where none is free or the label is larger than the image."""
    width, height = image_size
    placed: list[Rect] = []
    origins: list[tuple[int, int] | None] = []
    for box, (w, h) in zip(boxes, sizes, strict=True):
        origin = None
        if w <= width and h <= height:
            left = int(round(min(max(box[0], 0.0), width - w)))
            for top in _rows(box, w, h, left, height, placed):
                rect = (left, top, left + w, top + h)
                if not any(_overlaps(rect, other) for other in placed):
                    origin = (left, top)
                    placed.append(rect)
                    break
        origins.append(origin)
    return origins


def overlay(
    image: np.ndarray,
    detections: list[dict],
    masks: np.ndarray,
    names: dict[int, str],
) -> Image.Image:
    """The image, at its own size, with each detection drawn in its
    category's colour; labels (name and score) placed by `place_labels`,
    highest score first, after every box so no box edge crosses one.

    Args:
      image: u8[H, W, 3] the image.
      detections: COCO results of the image (bbox [x, y, w, h],
        category_id, score), in the order of `masks`.
      masks: bool[D, H, W] pasted masks.
      names: category id -> name.
    """
    canvas = image.astype(np.float32)
    colours = [PALETTE[d["category_id"] % len(PALETTE)] for d in detections]
    for mask, colour in zip(masks, colours, strict=True):
        canvas[mask] = (1 - MASK_ALPHA) * canvas[
            mask
        ] + MASK_ALPHA * np.asarray(colour, np.float32)
    drawn = Image.fromarray(np.clip(np.round(canvas), 0, 255).astype(np.uint8))
    pen = ImageDraw.Draw(drawn)
    boxes = [
        (x, y, x + w, y + h) for x, y, w, h in (d["bbox"] for d in detections)
    ]
    for box, colour in zip(boxes, colours, strict=True):
        pen.rectangle(box, outline=colour, width=2)
    order = sorted(
        range(len(detections)), key=lambda d: -detections[d]["score"]
    )
    texts, extents = {}, {}
    for d in order:
        detection = detections[d]
        label = names.get(
            detection["category_id"], str(detection["category_id"])
        )
        texts[d] = f"{label}: {detection['score']:.2f}"
        extents[d] = pen.textbbox((0, 0), texts[d])
    sizes = [
        (extents[d][2] - extents[d][0] + 2, extents[d][3] - extents[d][1] + 2)
        for d in order
    ]
    origins = place_labels([boxes[d] for d in order], sizes, drawn.size)
    for d, size, origin in zip(order, sizes, origins, strict=True):
        if origin is None:
            continue
        ox, oy = origin
        pen.rectangle(
            [ox, oy, ox + size[0] - 1, oy + size[1] - 1], fill=colours[d]
        )
        left, top = extents[d][:2]
        pen.text((ox + 1 - left, oy + 1 - top), texts[d], fill=(255, 255, 255))
    return drawn
