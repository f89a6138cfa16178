"""One overlay PNG per image: masks, boxes and labels over the original, with
PIL only (docs/export-and-predict.md)."""

import io
import math
import pathlib

import numpy as np
from PIL import Image, ImageDraw

from detector.predict import output_files

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
# Overlays of smaller images are drawn at a whole multiple of their size.
MIN_DRAWN_SIDE = 512


def upscale_factor(height: int, width: int) -> int:
    """The whole factor an image is drawn at: its long side reaches
    MIN_DRAWN_SIDE, or 1 for images that already do."""
    return max(1, math.ceil(MIN_DRAWN_SIDE / max(height, width, 1)))


def label_origin(
    box: tuple[float, float, float, float],
    label_size: tuple[int, int],
    image_size: tuple[int, int],
) -> tuple[float, float]:
    """Top-left corner of a label of (width, height) `label_size` for the
    (x1, y1, x2, y2) `box`, inside an image of (width, height) `image_size`:
    above the box, or inside its top when the box touches the top edge,
    moved left so that it ends inside the image."""
    x1, y1, _, _ = box
    w, h = label_size
    width, height = image_size
    top = y1 - h if y1 - h >= 0 else y1
    left = min(max(x1, 0.0), max(width - w, 0))
    return left, min(max(top, 0.0), max(height - h, 0))


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
    k = upscale_factor(*image.shape[:2])
    if k > 1:
        drawn = drawn.resize(
            (drawn.width * k, drawn.height * k), Image.Resampling.NEAREST
        )
    pen = ImageDraw.Draw(drawn)
    boxes = [[k * v for v in d["bbox"]] for d in detections]
    for (x, y, w, h), colour in zip(boxes, colours, strict=True):
        pen.rectangle([x, y, x + w, y + h], outline=colour, width=2)
    # Labels after every box, so that no other box's edge crosses one.
    for detection, (x, y, w, h), colour in zip(
        detections, boxes, colours, strict=True
    ):
        label = names.get(
            detection["category_id"], str(detection["category_id"])
        )
        text = f"{label}: {detection['score']:.2f}"
        left, top, right, bottom = pen.textbbox((0, 0), text)
        size = (right - left + 2, bottom - top + 2)
        ox, oy = label_origin((x, y, x + w, y + h), size, drawn.size)
        pen.rectangle([ox, oy, ox + size[0] - 1, oy + size[1] - 1], fill=colour)
        pen.text((ox + 1 - left, oy + 1 - top), text, fill=(255, 255, 255))
    return drawn


def save_overlay(
    path: pathlib.Path,
    image: np.ndarray,
    detections: list[dict],
    masks: np.ndarray,
    names: dict[int, str],
) -> None:
    """Writes `overlay(...)` as a PNG at `path`, replacing it whole (a
    symlink there is replaced, not written through)."""
    png = io.BytesIO()
    overlay(image, detections, masks, names).save(png, format="PNG")
    output_files.write(path, png.getvalue())
