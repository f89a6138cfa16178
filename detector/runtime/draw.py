"""One overlay PNG per image: masks, boxes and labels over the original.

PIL only, so the exported predictor draws without matplotlib; predict.py
draws with it in both of its forms.
"""

import pathlib

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


def overlay(
    image: np.ndarray,
    detections: list[dict],
    masks: np.ndarray,
    names: dict[int, str],
) -> Image.Image:
    """The image with each detection drawn in its category's colour.

    Args:
      image: u8[H, W, 3] the original image.
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
    for detection, colour in zip(detections, colours, strict=True):
        x, y, w, h = detection["bbox"]
        pen.rectangle([x, y, x + w, y + h], outline=colour, width=2)
        label = names.get(
            detection["category_id"], str(detection["category_id"])
        )
        text = f"{label}: {detection['score']:.2f}"
        left, top, right, bottom = pen.textbbox((x, y), text)
        lift = bottom - top + 2
        pen.rectangle([left, top - lift, right + 2, bottom - lift], fill=colour)
        pen.text((x + 1, y - lift), text, fill=(255, 255, 255))
    return drawn


def save_overlay(
    path: pathlib.Path,
    image: np.ndarray,
    detections: list[dict],
    masks: np.ndarray,
    names: dict[int, str],
) -> None:
    """Writes `overlay(...)` as a PNG at `path`."""
    overlay(image, detections, masks, names).save(path, format="PNG")
